import Superopt.Proofs.RuleLemmas
import Superopt.Proofs.Validate
import Superopt.Derive.Enumerator

/-!
# The soundness theorems the rule ids name, and `Superopt.derive_sound`

`superopt.rules.RULES` (Python) names one theorem per rule, `Superopt.<rule id>_sound`; a
derivation's certificate is the list of those of its steps, then `Superopt.derive_sound`.

* The algebraic rules rewrite the graph (`stabilize_softmax`, `factor_row_scale`,
  `exp_to_exp2`, `distribute_matmul`, and the enabling `distribute_bias`, `commute_row_scale`,
  `move_contracted_scale`). Their theorems are the checked patterns of `Superopt.Validate`: a root that the step checker accepts denotes what the rewritten node
  denoted, given only that the earlier nodes the witness relates do (which the checker's
  induction supplies, `validRewrite_sound`; nothing is assumed about unchanged nodes).
* The schedule rules change how kernels compute, not the graph. Their theorems are the pieces
  of the plan semantics (`Superopt.PlanSem`) each rule relies on; `planWF_sound` combines them
  for every plan the checker accepts.
* `derive_sound`: every derivation `deriveAll` returns has a verified plan that denotes what
  the graph denotes, for every tile configuration and input, over every model of the laws.

Over any `[ScalarLaws α]`: ℝ (with `x / 0 = 0` and the `log2eBits` constant read as `log₂ e`)
is a model; `Bool` as 𝔽₂ is another (`LeanTests/RulesTest.lean`). Floating point is not
modelled: the runner measures it.
-/

namespace Superopt

open Superopt.Semantics Superopt.Rules Superopt.PlanSem Superopt.Validate Superopt.Checks

section Sound

variable {α β : Type} [ScalarLaws α]

/-- **`stabilize_softmax`.** If the step checker accepts new node `j` as the stabilised
softmax `exp (s' − max s') / Σ exp (s' − max s')` replacing old node `i = exp s / Σ exp s`
(`stabCheck`, with the same axes), and the earlier nodes the correspondence `c` relates denote
the same (the scores), then `j` denotes what `i` denotes. -/
theorem stabilize_softmax_sound {g g' : Graph} {c : NodeId → Option NodeId}
    {env : String → Index → α} {j i : NodeId} (hax : g'.axes = g.axes)
    (ih : ∀ j', j' < j → ∀ i', c j' = some i' → ∀ ix, denote g' env j' ix = denote g env i' ix)
    (h : stabCheck g g' c j i = true) (idx : Index) :
    denote g' env j idx = denote g env i idx :=
  stab_root_sound hax ih h idx

/-- **`factor_row_scale`** (FlashNorm), every form the enumerator produces: `(x·s) @ w`,
`(s·x) @ w`, `(x/s) @ w`, and the same with the second operand scaled, become
`(x @ w) · s` (or `/ s`) when the checker accepts the root (`factorCheck`), which includes that
`s` does not depend on the contracted axis (`indep`). -/
theorem factor_row_scale_sound {g g' : Graph} {c : NodeId → Option NodeId}
    {env : String → Index → α} {j i : NodeId} (hax : g'.axes = g.axes)
    (ih : ∀ j', j' < j → ∀ i', c j' = some i' → ∀ ix, denote g' env j' ix = denote g env i' ix)
    (h : factorCheck g g' c j i = true) (idx : Index) :
    denote g' env j idx = denote g env i idx :=
  factor_root_sound hax ih h idx

/-- **`exp_to_exp2`.** A root `exp2 (x' · c)`, `c` the constant of bits `log2eBits`, that the
checker accepts (`exp2Check`) denotes what `exp x` denotes when `x'` denotes what `x` does. The
law used is `exp2 (x · c) = exp x` for that constant (`ScalarLaws.exp2_mul_log2e`); that the
binary64 `c` is `log₂ e` rounded is outside the model. -/
theorem exp_to_exp2_sound {g g' : Graph} {c : NodeId → Option NodeId}
    {env : String → Index → α} {j i : NodeId}
    (ih : ∀ j', j' < j → ∀ i', c j' = some i' → ∀ ix, denote g' env j' ix = denote g env i' ix)
    (h : exp2Check g g' c j i = true) (idx : Index) :
    denote g' env j idx = denote g env i idx :=
  exp2_root_sound ih h idx

/-- **`distribute_matmul`** (LayerNorm's mean folded past the GEMM). If the step checker accepts
new node `j` as `(x' @ w') ± v' · Σ_k w''` (or `(w' @ x') ± (Σ_k w'') · v'`) replacing old node
`i = (x ± v) @ w` (or `w @ (x ± v)`, `x ± v` one of `x + v`, `v + x`, `x − v`), with `v`
independent of the contracted axis (`indep`) and the column sum over an axis of the
contracted size (`distCheck`), and the earlier related nodes denote the same, then `j`
denotes what `i` denotes (`Rules.distribute_matmul`). -/
theorem distribute_matmul_sound {g g' : Graph} {c : NodeId → Option NodeId}
    {env : String → Index → α} {j i : NodeId} (hax : g'.axes = g.axes)
    (ih : ∀ j', j' < j → ∀ i', c j' = some i' → ∀ ix, denote g' env j' ix = denote g env i' ix)
    (h : distCheck g g' c j i = true) (idx : Index) :
    denote g' env j idx = denote g env i idx :=
  dist_root_sound hax ih h idx

/-- **`distribute_bias`.** A root `(x' @ w') ± (v' @ w'')` (either operand, every form) that the
checker accepts (`biasCheck`) denotes what `(x ± v) @ w` denotes, `v` a bias along the
contracted axis (`Rules.distribute_bias`, `Rules.distribute_bias_sub`). -/
theorem distribute_bias_sound {g g' : Graph} {c : NodeId → Option NodeId}
    {env : String → Index → α} {j i : NodeId} (hax : g'.axes = g.axes)
    (ih : ∀ j', j' < j → ∀ i', c j' = some i' → ∀ ix, denote g' env j' ix = denote g env i' ix)
    (h : biasCheck g g' c j i = true) (idx : Index) :
    denote g' env j idx = denote g env i idx :=
  bias_root_sound hax ih h idx

/-- **`commute_row_scale`.** A root `((x' · c') ⋆ s') @ w'` (`⋆` is `·` or `/`, either order of
the gain, either operand) that the checker accepts (`commCheck`) denotes what
`((x ⋆ s) · c) @ w` denotes: the operands agree pointwise (`Rules.commute_row_scale`,
`Rules.commute_row_scale_div`). -/
theorem commute_row_scale_sound {g g' : Graph} {c : NodeId → Option NodeId}
    {env : String → Index → α} {j i : NodeId} (hax : g'.axes = g.axes)
    (ih : ∀ j', j' < j → ∀ i', c j' = some i' → ∀ ix, denote g' env j' ix = denote g env i' ix)
    (h : commCheck g g' c j i = true) (idx : Index) :
    denote g' env j idx = denote g env i idx :=
  comm_root_sound hax ih h idx

/-- **`move_contracted_scale`.** A root `a' @ (w' · c')` (or `(w' · c') @ a'`) that the checker
accepts (`moveCheck`, one contracted name on both sides) denotes what `(a · c) @ w` denotes
(`Rules.move_contracted_scale`). -/
theorem move_contracted_scale_sound {g g' : Graph} {c : NodeId → Option NodeId}
    {env : String → Index → α} {j i : NodeId} (hax : g'.axes = g.axes)
    (ih : ∀ j', j' < j → ∀ i', c j' = some i' → ∀ ix, denote g' env j' ix = denote g env i' ix)
    (h : moveCheck g g' c j i = true) (idx : Index) :
    denote g' env j idx = denote g env i idx :=
  move_root_sound hax ih h idx

/-- **`online_softmax`** (Flash Attention 2), in both forms: for the kernel's exponential `ex`
(`exp`, or `x ↦ exp2 (x · c)`, equal to `exp` by the law), the recurrence over the tiles of a
row — running max of the scores seen, accumulators rescaled by `ex (m − m')` — ends with
`l = Σⱼ e^(sⱼ − M)` and `acc = Σⱼ e^(sⱼ − M) vⱼ`, `M` the row max: what the graph's `Σ_r E`
and `E @_r V` denote. -/
theorem online_softmax_sound (ex : α → α) (hex : ∀ z, ex z = ScalarOps.exp z) (s v : Nat → α)
    (n T : Nat) :
    (onlineLoop ex s v (rowInit ((List.range n).map s))
        ⟨rowInit ((List.range n).map s), ScalarOps.zero, ScalarOps.zero⟩
        (valueTiles n T (fun i => i))).l =
      sumList ((List.range n).map
        (fun j => ScalarOps.exp (s j - maxList ((List.range n).map s)))) ∧
    (onlineLoop ex s v (rowInit ((List.range n).map s))
        ⟨rowInit ((List.range n).map s), ScalarOps.zero, ScalarOps.zero⟩
        (valueTiles n T (fun i => i))).acc =
      sumList ((List.range n).map
        (fun j => ScalarOps.exp (s j - maxList ((List.range n).map s)) * v j)) :=
  ⟨onlineLoop_l ex hex s v n T, onlineLoop_acc ex hex s v n T⟩

/-- **`share_operand_load`.** One pass with a pair accumulator (each tile of the shared operand
loaded once) computes any two sums over the same index, e.g. two GEMMs, or a sum (`Σ exp`, `Σ x²`)
beside a GEMM. This is a list identity, not a statement about plans: `planDenote` does not read
`Kernel.shared` (a shared load is modelled as reading the same values as separate loads), so
for plans the rule is covered by `PlanSem.planWF_sound` like any other schedule step. -/
theorem share_operand_load_sound (f g : β → α) (ks : List β) :
    pairSum f g ks = (sumList (ks.map f), sumList (ks.map g)) :=
  share_operand_load f g ks

/-- **`fuse_prologue`.** A kernel that passes `kernelOk` — its nodes read each other inline and
everything else from memory — computes every one of its nodes' denotation, whichever
elementwise producers it computes on its loaded tiles.

This is `kernelVal_eq` restated under the rule's name, as are `fuse_epilogue_sound`,
`fuse_rows_sound`, `fuse_elementwise_sound`, `fuse_gemm_chain_sound` and
`fuse_contraction_sound`: the plan semantics has no separate notion of a prologue, an
epilogue, a row-fused, a chain or a contraction kernel, so a fusion step is sound because the
kernel it makes passes `kernelOk`, which `planWF` checks; the content is
`PlanSem.planWF_sound`, not a per-rule fact. -/
theorem fuse_prologue_sound {g : Graph} {T : Axis → Nat} {K : Kernel}
    {env : String → Index → α} {ran : List Kernel} {mem : Mem α}
    (hmem : ∀ j, doneB g ran j = true → ∀ ix, mem j ix = denote g env j ix)
    (hK : kernelOk g ran K = true) :
    ∀ (fuel i : Nat) (idx : Index), i < fuel → K.has i = true →
      kernelVal g T K env mem fuel i idx = denote g env i idx :=
  kernelVal_eq hmem hK

/-- **`fuse_epilogue`.** The same theorem read for consumers: an elementwise node computed in
its producers' kernel, on their accumulators after the streamed loop, has its denotation
(`kernelVal_eq` restated; see `fuse_prologue_sound`). -/
theorem fuse_epilogue_sound {g : Graph} {T : Axis → Nat} {K : Kernel}
    {env : String → Index → α} {ran : List Kernel} {mem : Mem α}
    (hmem : ∀ j, doneB g ran j = true → ∀ ix, mem j ix = denote g env j ix)
    (hK : kernelOk g ran K = true) :
    ∀ (fuel i : Nat) (idx : Index), i < fuel → K.has i = true →
      kernelVal g T K env mem fuel i idx = denote g env i idx :=
  kernelVal_eq hmem hK

/-- **`split_kernel`.** Kernels run in launch order, each reading what earlier kernels wrote:
after kernels that pass `kernelsOk`, memory holds every node they computed (and every leaf) at
its denotation, so a node materialised by one kernel and read back by the next is what
computing it inline gives. -/
theorem split_kernel_sound {g : Graph} {T : Axis → Nat} {env : String → Index → α}
    (ks ran : List Kernel) (mem : Mem α)
    (hmem : ∀ j, doneB g ran j = true → ∀ ix, mem j ix = denote g env j ix)
    (hks : kernelsOk g ran ks = true) :
    ∀ j, doneB g (finalDone ran ks) j = true → ∀ ix,
      runKernels g T env mem ks j ix = denote g env j ix :=
  runKernels_ok ks ran mem hmem hks

/-- **`fuse_rows`.** A row-fused kernel streams an axis of its own domain: per row its
reductions over that axis, each reading the final values of the ones it depends on, then its
outputs over the row. It passes `kernelOk` like any other kernel, so every node it computes —
a per-row reduction read by the row's outputs included — has its denotation
(`kernelVal_eq` restated; see `fuse_prologue_sound`). -/
theorem fuse_rows_sound {g : Graph} {T : Axis → Nat} {K : Kernel}
    {env : String → Index → α} {ran : List Kernel} {mem : Mem α}
    (hmem : ∀ j, doneB g ran j = true → ∀ ix, mem j ix = denote g env j ix)
    (hK : kernelOk g ran K = true) :
    ∀ (fuel i : Nat) (idx : Index), i < fuel → K.has i = true →
      kernelVal g T K env mem fuel i idx = denote g env i idx :=
  kernelVal_eq hmem hK

/-- **`fuse_elementwise`.** A kernel holding a whole elementwise region (a chain of any depth,
its stages reading each other inline on each grid tile) passes `kernelOk` like any other
kernel, so every node it computes has its denotation (`kernelVal_eq` restated; see
`fuse_prologue_sound`). -/
theorem fuse_elementwise_sound {g : Graph} {T : Axis → Nat} {K : Kernel}
    {env : String → Index → α} {ran : List Kernel} {mem : Mem α}
    (hmem : ∀ j, doneB g ran j = true → ∀ ix, mem j ix = denote g env j ix)
    (hK : kernelOk g ran K = true) :
    ∀ (fuel i : Nat) (idx : Index), i < fuel → K.has i = true →
      kernelVal g T K env mem fuel i idx = denote g env i idx :=
  kernelVal_eq hmem hK

/-- **`fuse_gemm_chain`.** A chain kernel streaming the intermediate axis `h`: the first
matmul (over `k`, not streamed) is computed inline for every `h` position the second matmul's
streamed sum reads, so the intermediate never leaves the kernel. It passes `kernelOk`, so
every node it computes — the second contraction included — has its denotation
(`kernelVal_eq` restated; see `fuse_prologue_sound`). -/
theorem fuse_gemm_chain_sound {g : Graph} {T : Axis → Nat} {K : Kernel}
    {env : String → Index → α} {ran : List Kernel} {mem : Mem α}
    (hmem : ∀ j, doneB g ran j = true → ∀ ix, mem j ix = denote g env j ix)
    (hK : kernelOk g ran K = true) :
    ∀ (fuel i : Nat) (idx : Index), i < fuel → K.has i = true →
      kernelVal g T K env mem fuel i idx = denote g env i idx :=
  kernelVal_eq hmem hK

/-- **`fuse_contraction`.** A contraction kernel streaming the batch axis `h` of a sum over
`h` of a matmul over `e` (`Σ_h Σ_e O[.., h, .., e] · W[h, e, ..]`, a multi-head output
projection), or of a sum over `h` of sums of such a matmul over further head axes (`Σ_g Σ_r`
over grouped-query heads, one step per sum): the matmul (over `e`, not streamed) and the inner
sums are computed inline for every `h` position the streamed sum over `h` reads, so the
per-head products are never written. It passes `kernelOk`, so every node it computes — the
sum over `h` included — has its denotation (`kernelVal_eq` restated; see
`fuse_prologue_sound`). -/
theorem fuse_contraction_sound {g : Graph} {T : Axis → Nat} {K : Kernel}
    {env : String → Index → α} {ran : List Kernel} {mem : Mem α}
    (hmem : ∀ j, doneB g ran j = true → ∀ ix, mem j ix = denote g env j ix)
    (hK : kernelOk g ran K = true) :
    ∀ (fuel i : Nat) (idx : Index), i < fuel → K.has i = true →
      kernelVal g T K env mem fuel i idx = denote g env i idx :=
  kernelVal_eq hmem hK

/-- **`tile_parallel`.** Tiling a parallel axis of size `n` by `T` (a grid of `⌈n / T⌉` blocks,
the last one masked) computes every element once, in order, and the block `idx[a] / T[a]` at
offset `idx[a] % T[a]` is the element at `idx`. The second half is trivial on purpose: the plan
semantics models grid tiling as the identity on indices (`gridIndex`), so what a grid does to
memory (one block per tile, the edge tile masked) is the first half's list identity, outside
`planDenote`. -/
theorem tile_parallel_sound (f : Nat → β) (T n : Nat) (K : Kernel) (Tg : Axis → Nat)
    (idx : Index) :
    (List.range n).map f =
        concatTiles ((List.range (n / T)).map (tileOf f T)) ++
          (List.range (n % T)).map (fun i => f (n / T * T + i)) ∧
      gridIndex K Tg idx = idx :=
  ⟨tile_parallel_div f T n, gridIndex_eq K Tg idx⟩

/-- **`stream_reduction`**, sum and max. A sum streamed over the tiles of an axis of size `n`
(`n / T` full tiles, then the edge tile) is the sum; a running max over the tiles from the row's
first element is the max. -/
theorem stream_reduction_sound (n T : Nat) (f : Nat → α) :
    streamSum (valueTiles n T f) = sumList ((List.range n).map f) ∧
      streamMax (valueTiles n T f) (rowInit ((List.range n).map f)) =
        maxList ((List.range n).map f) :=
  ⟨streamSum_valueTiles n T f, streamMax_eq n T f⟩

end Sound

/-- **Verified derivations end to end.** Every derivation that `Derive.deriveAll g` returns
(`deriveAllVerified`, the same list) has a plan `q` that the step checker verified
(`Verify.verify g d.steps = some q`), and that plan denotes what `g` denotes — for every tile
configuration `T`, every input `env`, over every model `α` of `ScalarLaws`:
`planDenote T q env = denoteOutputs g env`.

What it does and does not say: the list is the enumerator's output filtered by the checker
(`keepVerified`), so membership carries the checker's verdict; the plan `q` is the one the
checker rebuilds from `d.steps`, not the enumerator's own plan value. That the filter drops no
derivation of the registered graphs, and that `q` equals the enumerator's plan (and Python's,
byte for byte), is checked by `lake test` (`checkVerified`), not proved. The content is
`PlanSem.planWF_sound` and `Validate.validRewrite_sound`, whose only premises are the checker's
`true`: no caller supplies a hypothesis about unchanged nodes. -/
theorem derive_sound (g : Graph) (maxDepth maxPlans : Nat) :
    ∀ d ∈ Derive.deriveAllVerified g maxDepth maxPlans,
      ∃ q : Verify.VerifiedPlan g, Verify.verify g d.steps = some q ∧
        ∀ {α : Type} [ScalarLaws α] (T : Axis → Nat) (env : String → Index → α),
          planDenote T q.1 env = denoteOutputs g env :=
  Verify.keepVerified_sound g _

end Superopt

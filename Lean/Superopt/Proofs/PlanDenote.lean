import Superopt.Proofs.PlanSemantics

/-!
# `planDenote` and the theorem that well-formed plans denote their graph

The kernel and plan semantics described in `Superopt.Proofs.PlanSemantics` (whose tile and
online-recurrence lemmas this module uses), and the one theorem behind every schedule rule:

* `Superopt.PlanSem.planWF_sound`: `planWF p = true → planDenote T p env = denoteOutputs
  p.graph env`, for every tile configuration `T`, every input `env`, over any
  `[ScalarLaws α]`.

## Main definitions

* `ExpView`, `ExpOk`: the shape `E = exp (S − M)` or `E = exp2 ((S − M) · c)`, `M = max_r S`,
  of an online-softmax numerator, decided.
* `kernelNode`: how kernel `K` computes one node (streamed, online or plain); `kernelVal`: the
  values of `K`'s nodes over memory `mem`; `runKernel`, `runKernels`; `mem0`, the leaves;
  `planDenote`.
* `kernelOk`, `kernelsOk`, `planWF`: the checks.

## Implementation notes

`kernelVal` recurses on fuel like `Superopt.Semantics.denoteAux` (node `i` with fuel `i + 1`);
arguments not smaller than the node read `0`, as in `denote`. The proof is one induction over
the fuel (`kernelVal_eq`) with one case per kind of node (`kernelNode_eq`), then one induction
over the kernels in launch order (`runKernels_ok`).
-/

namespace Superopt.PlanSem

open Superopt Superopt.Semantics Superopt.Rules Superopt.Checks

/-! ## Online-softmax numerators -/

/-- The nodes of an online-softmax numerator `e`: `e = exp d` (`base2 = false`) or
`e = exp2 y`, `y = d · c` (`base2 = true`), with `d = s − m`. -/
structure ExpView where
  /-- The scores. -/
  s : NodeId
  /-- The max of the scores along the streamed axis. -/
  m : NodeId
  /-- `s − m`. -/
  d : NodeId
  /-- Whether the numerator is in the base-2 form. -/
  base2 : Bool
  /-- `d · c` (base-2 form; `d` otherwise). -/
  y : NodeId
  /-- The constant `c` (base-2 form; `d` otherwise). -/
  c : NodeId
  deriving Repr, Inhabited

/-- The nodes of `e` read as an online-softmax numerator, if it has that form (not checked:
`ExpOk` is the check). -/
def expView? (g : Graph) (e : NodeId) : Option ExpView :=
  match g.nodes[e]? with
  | some (.unary .exp d) =>
    match g.nodes[d]? with
    | some (.binary .sub s m) => some { s := s, m := m, d := d, base2 := false, y := d, c := d }
    | _ => none
  | some (.unary .exp2 y) =>
    match g.nodes[y]? with
    | some (.binary .mul d c) =>
      match g.nodes[d]? with
      | some (.binary .sub s m) => some { s := s, m := m, d := d, base2 := true, y := y, c := c }
      | _ => none
    | _ => none
  | _ => none

/-- `e` is `exp (s − m)` or `exp2 ((s − m) · c)` with `c` the constant of bits `log2eBits`, and
`m = max_r s`, every argument naming an earlier node. -/
structure ExpOk (g : Graph) (r : Axis) (e : NodeId) (v : ExpView) : Prop where
  /-- `e = exp d`, or `e = exp2 y` with `y = d · c`, `c = const log2eBits`. -/
  form : (v.base2 = false ∧ g.nodes[e]? = some (.unary .exp v.d) ∧ v.d < e) ∨
    (v.base2 = true ∧ g.nodes[e]? = some (.unary .exp2 v.y) ∧ v.y < e ∧
      g.nodes[v.y]? = some (.binary .mul v.d v.c) ∧ v.d < v.y ∧ v.c < v.y ∧
      g.nodes[v.c]? = some (.const log2eBits))
  /-- `d = s − m`. -/
  hd : g.nodes[v.d]? = some (.binary .sub v.s v.m)
  /-- `s < d`. -/
  hsd : v.s < v.d
  /-- `m < d`. -/
  hmd : v.m < v.d
  /-- `m = max_r s`. -/
  hm : g.nodes[v.m]? = some (.reduce .max r v.s)
  /-- `s < m`. -/
  hsm : v.s < v.m

/-- `ExpOk` is decided by its fields. -/
instance (g : Graph) (r : Axis) (e : NodeId) (v : ExpView) : Decidable (ExpOk g r e v) :=
  decidable_of_iff
    (((v.base2 = false ∧ g.nodes[e]? = some (.unary .exp v.d) ∧ v.d < e) ∨
      (v.base2 = true ∧ g.nodes[e]? = some (.unary .exp2 v.y) ∧ v.y < e ∧
        g.nodes[v.y]? = some (.binary .mul v.d v.c) ∧ v.d < v.y ∧ v.c < v.y ∧
        g.nodes[v.c]? = some (.const log2eBits))) ∧
      g.nodes[v.d]? = some (.binary .sub v.s v.m) ∧ v.s < v.d ∧ v.m < v.d ∧
      g.nodes[v.m]? = some (.reduce .max r v.s) ∧ v.s < v.m)
    ⟨fun ⟨a, b, c, d, e', f⟩ => ⟨a, b, c, d, e', f⟩,
      fun h => ⟨h.form, h.hd, h.hsd, h.hmd, h.hm, h.hsm⟩⟩

/-- The numerator `e` of node `i` of an online kernel streaming `r`, when it has the online
form, with the facts that make the online recurrence compute it (`guard`: an extra condition
of the caller, `axisB = axisA` for a `matmul`). -/
def onlineView (g : Graph) (K : Kernel) (r : Axis) (i e : NodeId) (guard : Bool) :
    Option { v : ExpView // ExpOk g r e v ∧ e < i ∧ guard = true } :=
  if hg : guard = true then
    if K.online then
      if he : e < i then
        match expView? g e with
        | some v => if h : ExpOk g r e v then some ⟨v, h, he, hg⟩ else none
        | none => none
      else none
    else none
  else none

/-- The exponential the kernel computes for a numerator: `exp`, or `x ↦ exp2 (x · c)`. -/
def ExpView.ex {α : Type} [ScalarOps α] (v : ExpView) : α → α :=
  if v.base2 then fun z => ScalarOps.exp2 (z * ScalarOps.ofBits log2eBits) else ScalarOps.exp

section ExpLaws

variable {α : Type} [ScalarLaws α]

/-- Both exponentials are `exp` in the model (`exp2_mul_log2e`). -/
theorem ExpView.ex_eq (v : ExpView) (z : α) : v.ex z = ScalarOps.exp z := by
  unfold ExpView.ex
  cases v.base2 with
  | false => rfl
  | true => exact ScalarLaws.exp2_mul_log2e z

/-- A numerator in the online form denotes `exp (s − m)`. -/
theorem ExpOk.denote_e {g : Graph} {r : Axis} {e : NodeId} {v : ExpView} (h : ExpOk g r e v)
    (env : String → Index → α) (ix : Index) :
    denote g env e ix = ScalarOps.exp (denote g env v.s ix - denote g env v.m ix) := by
  have hd := denote_binary h.hd h.hsd h.hmd ix (env := env)
  cases h.form with
  | inl h1 =>
    rw [denote_unary h1.2.1 h1.2.2 ix, hd]
    rfl
  | inr h2 =>
    rw [denote_unary h2.2.1 h2.2.2.1 ix,
      denote_binary h2.2.2.2.1 h2.2.2.2.2.1 h2.2.2.2.2.2.1 ix,
      denote_const h2.2.2.2.2.2.2 ix, hd]
    exact ScalarLaws.exp2_mul_log2e _

/-- The max node of a numerator in the online form denotes the row max of the scores. -/
theorem ExpOk.denote_m {g : Graph} {r : Axis} {e : NodeId} {v : ExpView} (h : ExpOk g r e v)
    (env : String → Index → α) (ix : Index) :
    denote g env v.m ix =
      maxList ((List.range (axisSize g.axes r)).map
        (fun j => denote g env v.s (Index.set ix r j))) :=
  denote_reduce h.hm h.hsm ix

/-- The max node does not depend on the position along `r`. -/
theorem ExpOk.m_inv {g : Graph} {r : Axis} {e : NodeId} {v : ExpView} (h : ExpOk g r e v)
    (env : String → Index → α) (ix : Index) (k : Nat) :
    denote g env v.m (Index.set ix r k) = denote g env v.m ix :=
  denote_reduce_invariant h.hm h.hsm ix k

/-- The scores name a node before the numerator. -/
theorem ExpOk.s_lt {g : Graph} {r : Axis} {e : NodeId} {v : ExpView} (h : ExpOk g r e v) :
    v.s < e := by
  cases h.form with
  | inl h1 => exact Nat.lt_trans h.hsd h1.2.2
  | inr h2 => exact Nat.lt_trans h.hsd (Nat.lt_trans h2.2.2.2.2.1 h2.2.2.1)

end ExpLaws

/-! ## Kernels and plans -/

section Defs

variable {α : Type} [ScalarOps α]

/-- How kernel `K` computes node `i` (`node`), given `arg j ix`, the value of node `j` as `K`
sees it (computed by `K`, or read from memory):

* a `reduce sum` over the streamed axis `r`: the online recurrence's `l` if `K` is online and
  the operand has the online form, else an accumulator over the tiles of `r`;
* a `matmul` contracting the streamed axis: likewise, with the recurrence's `acc`;
* a `reduce max` over the streamed axis: a running max over the tiles;
* anything else: `evalNode`. -/
def kernelNode (g : Graph) (T : Axis → Nat) (K : Kernel) (env : String → Index → α)
    (i : NodeId) (arg : NodeId → Index → α) : Node → Index → α
  | .reduce .sum axis x, idx =>
    if K.stream = some axis then
      match onlineView g K axis i x true with
      | some w =>
        (onlineLoop w.1.ex (fun j => arg w.1.s (Index.set idx axis j)) (fun _ => ScalarOps.zero)
          (rowInit ((List.range (axisSize g.axes axis)).map
            (fun j => arg w.1.s (Index.set idx axis j))))
          ⟨rowInit ((List.range (axisSize g.axes axis)).map
            (fun j => arg w.1.s (Index.set idx axis j))), ScalarOps.zero, ScalarOps.zero⟩
          (valueTiles (axisSize g.axes axis) (T axis) (fun j => j))).l
      | none =>
        streamSum (valueTiles (axisSize g.axes axis) (T axis)
          (fun k => arg x (Index.set idx axis k)))
    else evalNode g env arg (.reduce .sum axis x) idx
  | .reduce .max axis x, idx =>
    if K.stream = some axis then
      streamMax (valueTiles (axisSize g.axes axis) (T axis) (fun k => arg x (Index.set idx axis k)))
        (rowInit ((List.range (axisSize g.axes axis)).map (fun k => arg x (Index.set idx axis k))))
    else evalNode g env arg (.reduce .max axis x) idx
  | .matmul a b axisA axisB, idx =>
    if K.stream = some axisA then
      match onlineView g K axisA i a (decide (axisB = axisA)) with
      | some w =>
        (onlineLoop w.1.ex (fun j => arg w.1.s (Index.set idx axisA j))
          (fun j => arg b (Index.set idx axisA j))
          (rowInit ((List.range (axisSize g.axes axisA)).map
            (fun j => arg w.1.s (Index.set idx axisA j))))
          ⟨rowInit ((List.range (axisSize g.axes axisA)).map
            (fun j => arg w.1.s (Index.set idx axisA j))), ScalarOps.zero, ScalarOps.zero⟩
          (valueTiles (axisSize g.axes axisA) (T axisA) (fun j => j))).acc
      | none =>
        streamSum (valueTiles (axisSize g.axes axisA) (T axisA)
          (fun k => arg a (Index.set idx axisA k) * arg b (Index.set idx axisB k)))
    else evalNode g env arg (.matmul a b axisA axisB) idx
  | node, idx => evalNode g env arg node idx

/-- Node `i` of `g` as kernel `K` computes it, given how it reads other nodes (`0` if `i`
names no node). -/
def kstep (g : Graph) (T : Axis → Nat) (K : Kernel) (env : String → Index → α) (i : NodeId)
    (arg : NodeId → Index → α) (idx : Index) : α :=
  match g.nodes[i]? with
  | none => ScalarOps.zero
  | some node => kernelNode g T K env i arg node idx

/-- The values of kernel `K`'s nodes over memory `mem`, with fuel: an argument `j` of node `i`
is `K`'s own value if `K` computes `j`, else `mem j` (`0` unless `j < i`). -/
def kernelVal (g : Graph) (T : Axis → Nat) (K : Kernel) (env : String → Index → α)
    (mem : Mem α) : Nat → NodeId → Index → α
  | 0, _, _ => ScalarOps.zero
  | fuel + 1, i, idx =>
    kstep g T K env i (fun j ix =>
      if j < i then (if K.has j then kernelVal g T K env mem fuel j ix else mem j ix)
      else ScalarOps.zero) idx

/-- `kernelVal` unfolds one step (definitionally). -/
theorem kernelVal_succ (g : Graph) (T : Axis → Nat) (K : Kernel) (env : String → Index → α)
    (mem : Mem α) (fuel : Nat) (i : NodeId) (idx : Index) :
    kernelVal g T K env mem (fuel + 1) i idx =
      kstep g T K env i (fun j ix =>
        if j < i then (if K.has j then kernelVal g T K env mem fuel j ix else mem j ix)
        else ScalarOps.zero) idx :=
  rfl

/-- The memory after kernel `K`: every node of `K` written, the element at `idx` by the grid
block that owns it. -/
def runKernel (g : Graph) (T : Axis → Nat) (env : String → Index → α) (mem : Mem α)
    (K : Kernel) (j : NodeId) (ix : Index) : α :=
  if K.has j then kernelVal g T K env mem (j + 1) j (gridIndex K T ix) else mem j ix

/-- The memory after the kernels, in launch order. -/
def runKernels (g : Graph) (T : Axis → Nat) (env : String → Index → α) :
    Mem α → List Kernel → Mem α
  | mem, [] => mem
  | mem, K :: ks => runKernels g T env (runKernel g T env mem K) ks

/-- The memory before any kernel: the leaves' values (inputs from `env`, the scalars and the
band mask), `0` elsewhere. -/
def mem0 (g : Graph) (env : String → Index → α) (j : NodeId) (ix : Index) : α :=
  match g.nodes[j]? with
  | some node =>
    if node.isLeaf then evalNode g env (fun _ _ => ScalarOps.zero) node ix else ScalarOps.zero
  | none => ScalarOps.zero

/-- **The semantics of a plan**: its graph's outputs read from the memory after its kernels
ran, with tile sizes `T` and inputs `env`. -/
def planDenote (T : Axis → Nat) (p : Plan) (env : String → Index → α) : List (Index → α) :=
  p.graph.outputs.map (runKernels p.graph T env (mem0 p.graph env) p.kernels.toList)

end Defs

/-! ## The checks -/

/-- Whether node `j` is a leaf of `g`. -/
def leafB (g : Graph) (j : NodeId) : Bool :=
  match g.nodes[j]? with
  | some node => node.isLeaf
  | none => false

/-- Whether some kernel of `ks` computes `j`. -/
def anyHas : List Kernel → NodeId → Bool
  | [], _ => false
  | K :: ks, j => K.has j || anyHas ks j

/-- Whether node `j` is in memory once the kernels `ran` ran: a leaf or computed by one. -/
def doneB (g : Graph) (ran : List Kernel) (j : NodeId) : Bool := leafB g j || anyHas ran j

/-- Whether kernel `K` may read node `j`: it computes `j`, or `j` is in memory. -/
def readOk (g : Graph) (ran : List Kernel) (K : Kernel) (j : NodeId) : Bool :=
  K.has j || doneB g ran j

/-- The nodes beyond its arguments that `K` reads to compute `node` (node `i`): the scores of
an online numerator. -/
def onlineReads (g : Graph) (K : Kernel) (i : NodeId) : Node → List NodeId
  | .reduce .sum axis x =>
    if K.stream = some axis then
      match onlineView g K axis i x true with
      | some w => [w.1.s]
      | none => []
    else []
  | .matmul a _ axisA axisB =>
    if K.stream = some axisA then
      match onlineView g K axisA i a (decide (axisB = axisA)) with
      | some w => [w.1.s]
      | none => []
    else []
  | _ => []

/-- Whether everything node `i` reads in kernel `K` is computed by `K` or in memory. -/
def nodeReadsOk (g : Graph) (ran : List Kernel) (K : Kernel) (i : NodeId) : Bool :=
  match g.nodes[i]? with
  | some node => allB (readOk g ran K) node.args && allB (readOk g ran K) (onlineReads g K i node)
  | none => true

/-- The check of kernel `K` run after the kernels `ran`. -/
def kernelOk (g : Graph) (ran : List Kernel) (K : Kernel) : Bool :=
  allB (nodeReadsOk g ran K) K.nodes.toList

/-- The check of the kernels `ks` run after the kernels `ran`, in launch order. -/
def kernelsOk (g : Graph) : List Kernel → List Kernel → Bool
  | _, [] => true
  | ran, K :: ks => kernelOk g ran K && kernelsOk g (K :: ran) ks

/-- The kernels that ran once `ks` ran after `ran` (most recent first). -/
def finalDone : List Kernel → List Kernel → List Kernel
  | ran, [] => ran
  | ran, K :: ks => finalDone (K :: ran) ks

/-- **The plan check**: every kernel reads only what it computes or what is in memory (leaves,
earlier kernels), and every output is computed. -/
def planWF (p : Plan) : Bool :=
  kernelsOk p.graph [] p.kernels.toList &&
    allB (doneB p.graph (finalDone [] p.kernels.toList)) p.graph.outputs

/-! ## The proofs -/

section Proofs

variable {α : Type}

/-- Node `j` as node `i` of `g` reads it: `denote` if `j < i`, else `0`. -/
def guardD [ScalarOps α] (g : Graph) (env : String → Index → α) (i j : NodeId) (ix : Index) : α :=
  if j < i then denote g env j ix else ScalarOps.zero

/-- A node denotes its op applied to its arguments as it reads them. -/
theorem denote_some [ScalarOps α] {g : Graph} {env : String → Index → α} {i : NodeId}
    {node : Node} (hn : g.nodes[i]? = some node) (idx : Index) :
    denote g env i idx = evalNode g env (guardD g env i) node idx := by
  rw [denote_eq_step]
  simp only [step, hn]
  try rfl

/-- `evalNode` reads a node's arguments only. -/
theorem evalNode_congr [ScalarOps α] (g : Graph) (env : String → Index → α)
    {arg arg' : NodeId → Index → α} :
    ∀ (node : Node), (∀ j, j ∈ node.args → ∀ ix, arg j ix = arg' j ix) → ∀ idx : Index,
      evalNode g env arg node idx = evalNode g env arg' node idx := by
  intro node h idx
  cases node with
  | input name axes => rfl
  | size axis => rfl
  | eps b => rfl
  | const b => rfl
  | band a b lo hi => rfl
  | unary op x =>
    have hx : arg x = arg' x := funext (h x (List.Mem.head _))
    show evalUnOp op (arg x idx) = evalUnOp op (arg' x idx)
    rw [hx]
  | binary op x y =>
    have hx : arg x = arg' x := funext (h x (List.Mem.head _))
    have hy : arg y = arg' y := funext (h y (List.Mem.tail _ (List.Mem.head _)))
    show evalBinOp op (arg x idx) (arg y idx) = evalBinOp op (arg' x idx) (arg' y idx)
    rw [hx, hy]
  | select c x y =>
    have hc : arg c = arg' c := funext (h c (List.Mem.head _))
    have hx : arg x = arg' x := funext (h x (List.Mem.tail _ (List.Mem.head _)))
    have hy : arg y = arg' y :=
      funext (h y (List.Mem.tail _ (List.Mem.tail _ (List.Mem.head _))))
    show ScalarOps.select (arg c idx) (arg x idx) (arg y idx) =
      ScalarOps.select (arg' c idx) (arg' x idx) (arg' y idx)
    rw [hc, hx, hy]
  | reduce fn axis x =>
    have hx : arg x = arg' x := funext (h x (List.Mem.head _))
    show evalRed fn ((List.range (axisSize g.axes axis)).map
        (fun k => arg x (Index.set idx axis k))) =
      evalRed fn ((List.range (axisSize g.axes axis)).map
        (fun k => arg' x (Index.set idx axis k)))
    rw [hx]
  | matmul a b axisA axisB =>
    have ha : arg a = arg' a := funext (h a (List.Mem.head _))
    have hb : arg b = arg' b := funext (h b (List.Mem.tail _ (List.Mem.head _)))
    show sumList ((List.range (axisSize g.axes axisA)).map
        (fun k => arg a (Index.set idx axisA k) * arg b (Index.set idx axisB k))) =
      sumList ((List.range (axisSize g.axes axisA)).map
        (fun k => arg' a (Index.set idx axisA k) * arg' b (Index.set idx axisB k)))
    rw [ha, hb]

/-- A leaf has no arguments. -/
theorem args_of_isLeaf : ∀ {node : Node}, node.isLeaf = true → node.args = []
  | .input _ _, _ => rfl
  | .size _, _ => rfl
  | .eps _, _ => rfl
  | .const _, _ => rfl
  | .band _ _ _ _, _ => rfl
  | .unary _ _, h => absurd (show false = true from h) (by decide)
  | .binary _ _ _, h => absurd (show false = true from h) (by decide)
  | .reduce _ _ _, h => absurd (show false = true from h) (by decide)
  | .matmul _ _ _ _, h => absurd (show false = true from h) (by decide)
  | .select _ _ _, h => absurd (show false = true from h) (by decide)

variable [ScalarLaws α]

/-- **One node of a kernel.** However kernel `K` computes node `i` — plainly, as a streamed
accumulator, as a streamed max, or by the online recurrence — it computes what `evalNode`
gives, provided it reads every node it reads (`ok`) as `denote` does. -/
theorem kernelNode_eq {g : Graph} {T : Axis → Nat} {K : Kernel} {env : String → Index → α}
    {i : NodeId} {arg : NodeId → Index → α} {ok : NodeId → Bool}
    (hgood : ∀ j, ok j = true → ∀ ix, arg j ix = guardD g env i j ix) (node : Node)
    (hargs : allB ok node.args = true) (hextra : allB ok (onlineReads g K i node) = true)
    (idx : Index) :
    kernelNode g T K env i arg node idx = evalNode g env (guardD g env i) node idx := by
  have hcongr : ∀ j, j ∈ node.args → ∀ ix, arg j ix = guardD g env i j ix :=
    fun j hj ix => hgood j (allB_mem hargs hj) ix
  cases node with
  | reduce fn axis x =>
    have hx : arg x = guardD g env i x := funext (hcongr x (List.Mem.head _))
    cases fn with
    | sum =>
      by_cases hs : K.stream = some axis
      · cases hv : onlineView g K axis i x true with
        | none =>
          have e1 : kernelNode g T K env i arg (.reduce .sum axis x) idx =
              streamSum (valueTiles (axisSize g.axes axis) (T axis)
                (fun k => arg x (Index.set idx axis k))) := by
            simp only [kernelNode, if_pos hs, hv]
          rw [e1, streamSum_valueTiles]
          show _ = sumList ((List.range (axisSize g.axes axis)).map
            (fun k => guardD g env i x (Index.set idx axis k)))
          rw [hx]
        | some w =>
          have hr : onlineReads g K i (.reduce .sum axis x) = [w.1.s] := by
            simp only [onlineReads, if_pos hs, hv]
          rw [hr] at hextra
          have hextra' : (ok w.1.s && allB ok []) = true := hextra
          have hxlt : x < i := w.2.2.1
          have hslt : w.1.s < i := Nat.lt_trans (ExpOk.s_lt w.2.1) hxlt
          have hs' : ∀ ix, arg w.1.s ix = denote g env w.1.s ix := fun ix => by
            rw [hgood w.1.s (band_elim hextra').1 ix]
            show (if w.1.s < i then denote g env w.1.s ix else ScalarOps.zero) = _
            rw [if_pos hslt]
          have e1 : kernelNode g T K env i arg (.reduce .sum axis x) idx =
              (onlineLoop w.1.ex (fun j => arg w.1.s (Index.set idx axis j))
                (fun _ => ScalarOps.zero)
                (rowInit ((List.range (axisSize g.axes axis)).map
                  (fun j => arg w.1.s (Index.set idx axis j))))
                ⟨rowInit ((List.range (axisSize g.axes axis)).map
                  (fun j => arg w.1.s (Index.set idx axis j))), ScalarOps.zero, ScalarOps.zero⟩
                (valueTiles (axisSize g.axes axis) (T axis) (fun j => j))).l := by
            simp only [kernelNode, if_pos hs, hv]
          rw [e1, onlineLoop_l w.1.ex (ExpView.ex_eq w.1)
            (fun j => arg w.1.s (Index.set idx axis j)) (fun _ => ScalarOps.zero)
            (axisSize g.axes axis) (T axis)]
          show _ = sumList ((List.range (axisSize g.axes axis)).map
            (fun k => guardD g env i x (Index.set idx axis k)))
          simp only [hs', guardD, if_pos hxlt, ExpOk.denote_e w.2.1 env,
            ExpOk.denote_m w.2.1 env, Index.set_set]
      · have e1 : kernelNode g T K env i arg (.reduce .sum axis x) idx =
            evalNode g env arg (.reduce .sum axis x) idx := by
          simp only [kernelNode, if_neg hs]
        rw [e1]
        exact evalNode_congr g env _ hcongr idx
    | max =>
      by_cases hs : K.stream = some axis
      · have e1 : kernelNode g T K env i arg (.reduce .max axis x) idx =
            streamMax (valueTiles (axisSize g.axes axis) (T axis)
                (fun k => arg x (Index.set idx axis k)))
              (rowInit ((List.range (axisSize g.axes axis)).map
                (fun k => arg x (Index.set idx axis k)))) := by
          simp only [kernelNode, if_pos hs]
        rw [e1, streamMax_eq]
        show _ = maxList ((List.range (axisSize g.axes axis)).map
          (fun k => guardD g env i x (Index.set idx axis k)))
        rw [hx]
      · have e1 : kernelNode g T K env i arg (.reduce .max axis x) idx =
            evalNode g env arg (.reduce .max axis x) idx := by
          simp only [kernelNode, if_neg hs]
        rw [e1]
        exact evalNode_congr g env _ hcongr idx
  | matmul a b axisA axisB =>
    have ha : arg a = guardD g env i a := funext (hcongr a (List.Mem.head _))
    have hb : arg b = guardD g env i b := funext (hcongr b (List.Mem.tail _ (List.Mem.head _)))
    by_cases hs : K.stream = some axisA
    · cases hv : onlineView g K axisA i a (decide (axisB = axisA)) with
      | none =>
        have e1 : kernelNode g T K env i arg (.matmul a b axisA axisB) idx =
            streamSum (valueTiles (axisSize g.axes axisA) (T axisA)
              (fun k => arg a (Index.set idx axisA k) * arg b (Index.set idx axisB k))) := by
          simp only [kernelNode, if_pos hs, hv]
        rw [e1, streamSum_valueTiles]
        show _ = sumList ((List.range (axisSize g.axes axisA)).map
          (fun k => guardD g env i a (Index.set idx axisA k) *
            guardD g env i b (Index.set idx axisB k)))
        rw [ha, hb]
      | some w =>
        have hr : onlineReads g K i (.matmul a b axisA axisB) = [w.1.s] := by
          simp only [onlineReads, if_pos hs, hv]
        rw [hr] at hextra
        have hextra' : (ok w.1.s && allB ok []) = true := hextra
        have hab : axisB = axisA := of_decide_eq_true w.2.2.2
        have halt : a < i := w.2.2.1
        have hslt : w.1.s < i := Nat.lt_trans (ExpOk.s_lt w.2.1) halt
        have hs' : ∀ ix, arg w.1.s ix = denote g env w.1.s ix := fun ix => by
          rw [hgood w.1.s (band_elim hextra').1 ix]
          show (if w.1.s < i then denote g env w.1.s ix else ScalarOps.zero) = _
          rw [if_pos hslt]
        have e1 : kernelNode g T K env i arg (.matmul a b axisA axisB) idx =
            (onlineLoop w.1.ex (fun j => arg w.1.s (Index.set idx axisA j))
              (fun j => arg b (Index.set idx axisA j))
              (rowInit ((List.range (axisSize g.axes axisA)).map
                (fun j => arg w.1.s (Index.set idx axisA j))))
              ⟨rowInit ((List.range (axisSize g.axes axisA)).map
                (fun j => arg w.1.s (Index.set idx axisA j))), ScalarOps.zero, ScalarOps.zero⟩
              (valueTiles (axisSize g.axes axisA) (T axisA) (fun j => j))).acc := by
          simp only [kernelNode, if_pos hs, hv]
        rw [e1, onlineLoop_acc w.1.ex (ExpView.ex_eq w.1)
          (fun j => arg w.1.s (Index.set idx axisA j)) (fun j => arg b (Index.set idx axisA j))
          (axisSize g.axes axisA) (T axisA)]
        show _ = sumList ((List.range (axisSize g.axes axisA)).map
          (fun k => guardD g env i a (Index.set idx axisA k) *
            guardD g env i b (Index.set idx axisB k)))
        rw [hab, hb]
        simp only [hs', guardD, if_pos halt, ExpOk.denote_e w.2.1 env,
          ExpOk.denote_m w.2.1 env, Index.set_set]
    · have e1 : kernelNode g T K env i arg (.matmul a b axisA axisB) idx =
          evalNode g env arg (.matmul a b axisA axisB) idx := by
        simp only [kernelNode, if_neg hs]
      rw [e1]
      exact evalNode_congr g env _ hcongr idx
  | input name axes => exact evalNode_congr g env _ hcongr idx
  | size axis => exact evalNode_congr g env _ hcongr idx
  | eps bits => exact evalNode_congr g env _ hcongr idx
  | const bits => exact evalNode_congr g env _ hcongr idx
  | band axisA axisB lo hi => exact evalNode_congr g env _ hcongr idx
  | unary op x => exact evalNode_congr g env _ hcongr idx
  | binary op x y => exact evalNode_congr g env _ hcongr idx
  | select c x y => exact evalNode_congr g env _ hcongr idx

/-- **One kernel.** Over a memory that holds every node of `ran` and every leaf at its
denotation, a kernel that passes `kernelOk` computes each of its nodes' denotation. -/
theorem kernelVal_eq {g : Graph} {T : Axis → Nat} {K : Kernel} {env : String → Index → α}
    {ran : List Kernel} {mem : Mem α}
    (hmem : ∀ j, doneB g ran j = true → ∀ ix, mem j ix = denote g env j ix)
    (hK : kernelOk g ran K = true) :
    ∀ (fuel i : Nat) (idx : Index), i < fuel → K.has i = true →
      kernelVal g T K env mem fuel i idx = denote g env i idx := by
  intro fuel
  induction fuel with
  | zero => intro i idx hi _; exact absurd hi (Nat.not_lt_zero i)
  | succ fuel ih =>
    intro i idx hi hKi
    have hK' : allB (nodeReadsOk g ran K) K.nodes.toList = true := hK
    have hKi' : memB i K.nodes.toList = true := hKi
    have hr : nodeReadsOk g ran K i = true := allB_memB hK' hKi'
    cases hn : g.nodes[i]? with
    | none =>
      have e1 : kernelVal g T K env mem (fuel + 1) i idx = ScalarOps.zero := by
        rw [kernelVal_succ]
        simp only [kstep, hn]
      rw [e1, denote_eq_step]
      simp only [step, hn]
    | some node =>
      have hr' : (allB (readOk g ran K) node.args &&
          allB (readOk g ran K) (onlineReads g K i node)) = true := by
        simp only [nodeReadsOk, hn] at hr
        exact hr
      have hgood : ∀ j, readOk g ran K j = true → ∀ ix,
          (if j < i then (if K.has j then kernelVal g T K env mem fuel j ix else mem j ix)
            else ScalarOps.zero) = guardD g env i j ix := by
        intro j hj ix
        have hj' : (K.has j || doneB g ran j) = true := hj
        show _ = (if j < i then denote g env j ix else ScalarOps.zero)
        by_cases hji : j < i
        · rw [if_pos hji, if_pos hji]
          by_cases hkj : K.has j = true
          · rw [if_pos hkj]
            exact ih j ix (by omega) hkj
          · rw [if_neg hkj]
            cases bor_elim hj' with
            | inl h1 => exact absurd h1 hkj
            | inr h2 => exact hmem j h2 ix
        · rw [if_neg hji, if_neg hji]
      have e1 : kernelVal g T K env mem (fuel + 1) i idx =
          kernelNode g T K env i (fun j ix =>
            if j < i then (if K.has j then kernelVal g T K env mem fuel j ix else mem j ix)
            else ScalarOps.zero) node idx := by
        rw [kernelVal_succ]
        simp only [kstep, hn]
      rw [e1, kernelNode_eq hgood node (band_elim hr').1 (band_elim hr').2 idx, denote_some hn]

/-- **One kernel, written.** The memory after a kernel that passes `kernelOk` holds every node
of it and of `ran`, and every leaf, at its denotation. -/
theorem runKernel_ok {g : Graph} {T : Axis → Nat} {env : String → Index → α}
    {ran : List Kernel} {mem : Mem α} {K : Kernel}
    (hmem : ∀ j, doneB g ran j = true → ∀ ix, mem j ix = denote g env j ix)
    (hK : kernelOk g ran K = true) :
    ∀ j, doneB g (K :: ran) j = true → ∀ ix, runKernel g T env mem K j ix = denote g env j ix := by
  intro j hj ix
  show (if K.has j then kernelVal g T K env mem (j + 1) j (gridIndex K T ix) else mem j ix) =
    denote g env j ix
  by_cases hkj : K.has j = true
  · rw [if_pos hkj, gridIndex_eq]
    exact kernelVal_eq hmem hK (j + 1) j ix (Nat.lt_succ_self j) hkj
  · rw [if_neg hkj]
    apply hmem j
    have hj' : (leafB g j || (K.has j || anyHas ran j)) = true := hj
    show (leafB g j || anyHas ran j) = true
    cases bor_elim hj' with
    | inl hl => exact bor_intro_left hl
    | inr h2 =>
      cases bor_elim h2 with
      | inl hk => exact absurd hk hkj
      | inr ha => exact bor_intro_right ha

/-- **The kernels, in launch order.** -/
theorem runKernels_ok {g : Graph} {T : Axis → Nat} {env : String → Index → α} :
    ∀ (ks ran : List Kernel) (mem : Mem α),
      (∀ j, doneB g ran j = true → ∀ ix, mem j ix = denote g env j ix) →
      kernelsOk g ran ks = true →
      ∀ j, doneB g (finalDone ran ks) j = true → ∀ ix,
        runKernels g T env mem ks j ix = denote g env j ix
  | [], _, _, hmem, _ => hmem
  | K :: ks, ran, mem, hmem, hks => by
    have hks' : (kernelOk g ran K && kernelsOk g (K :: ran) ks) = true := hks
    exact runKernels_ok ks (K :: ran) (runKernel g T env mem K)
      (runKernel_ok hmem (band_elim hks').1) (band_elim hks').2

/-- The memory before any kernel holds every leaf at its denotation. -/
theorem mem0_ok (g : Graph) (env : String → Index → α) :
    ∀ j, doneB g [] j = true → ∀ ix, mem0 g env j ix = denote g env j ix := by
  intro j hj ix
  have hj' : (leafB g j || false) = true := hj
  have hl : leafB g j = true := by
    cases bor_elim hj' with
    | inl h => exact h
    | inr h => exact absurd h (by decide)
  cases hn : g.nodes[j]? with
  | none =>
    have hf : leafB g j = false := by simp only [leafB, hn]
    rw [hf] at hl
    exact absurd hl (by decide)
  | some node =>
    have hl' : node.isLeaf = true := by
      have e : leafB g j = node.isLeaf := by simp only [leafB, hn]
      rw [← e]
      exact hl
    have e1 : mem0 g env j ix = evalNode g env (fun _ _ => ScalarOps.zero) node ix := by
      simp only [mem0, hn, if_pos hl']
    rw [e1, denote_some hn]
    apply evalNode_congr
    intro k hk
    rw [args_of_isLeaf hl'] at hk
    cases hk

/-- **Well-formed plans denote their graph** (every schedule rule at once): for every tile
configuration `T` and inputs `env`, over any model of `ScalarLaws`, a plan that passes
`planWF` computes its graph's outputs. -/
theorem planWF_sound {p : Plan} (h : planWF p = true) (T : Axis → Nat)
    (env : String → Index → α) : planDenote T p env = denoteOutputs p.graph env := by
  have h' : (kernelsOk p.graph [] p.kernels.toList &&
      allB (doneB p.graph (finalDone [] p.kernels.toList)) p.graph.outputs) = true := h
  have hrun := runKernels_ok (T := T) p.kernels.toList [] (mem0 p.graph env)
    (mem0_ok p.graph env) (band_elim h').1
  unfold planDenote denoteOutputs
  exact map_eq_of_allB (fun o ho => funext (hrun o ho)) (band_elim h').2

end Proofs

end Superopt.PlanSem

import Superopt.Proofs.RuleLemmas
import Superopt.Proofs.Bools
import Superopt.Derive.Plan

/-!
# The semantics of kernel plans

A plan runs its kernels in launch order over a global memory (`Mem`: one buffer per node).
The memory starts with the leaves (inputs, `size`, `eps`, `const`, `band`); each kernel computes
its nodes and writes them. Inside kernel `K` a node reads its arguments from `K` itself when `K`
computes them (values that never leave the kernel: fused prologues and epilogues) and from
memory otherwise (materialised buffers). The kernel's annotations change *how* it computes:

* `grid` (`tile_parallel`): the element at `idx` is computed by the block `idx[a] / T[a]` of
  each tiled axis `a`, at offset `idx[a] % T[a]` (`gridIndex`);
* `stream = some r` (`stream_reduction`): a `reduce sum` or a `matmul` contracting `r` is an
  accumulator over the tiles of `r` (`n / T` full tiles, then the edge tile, `valueTiles`);
  a `reduce max` over `r` is a running max over the tiles (`streamMax`), started from the
  row's first element;
* `online` (`online_softmax`): in a streamed kernel, a sum or a `matmul` over `r` of
  `E = exp (S − M)` (or `exp2 ((S − M) · c)`, `c` the `log2eBits` constant) with
  `M = max_r S` is computed by the Flash-Attention-2 recurrence (`onlineLoop`): a running max of
  the scores seen so far, the accumulators rescaled by `exp (m_old − m_new)` at each tile;
* `shared` (`share_operand_load`): one load of a shared operand tile feeds every reader, which
  reads the same values as separate loads; it has no effect on the values
  (`Rules.share_operand_load` is the pair-accumulator identity).

`T : Axis → Nat` (the tile configuration) is a parameter: every statement holds for every `T`.

## Main definitions

* `Superopt.PlanSem.kernelNode`, `kernelVal`, `runKernel`, `runKernels`, `planDenote`.
* `Superopt.PlanSem.planWF`: the decidable well-formedness the checker runs on the final plan
  of every derivation: every node a kernel reads that it does not compute is a leaf or computed
  by an earlier kernel, and every output is computed.

## Main statements

* `Superopt.PlanSem.planWF_sound`: a well-formed plan denotes what its graph denotes, for every
  tile configuration: `planDenote T p env = denoteOutputs p.graph env`. This one theorem covers
  every schedule rule (`tile_parallel`, `stream_reduction`, `fuse_prologue`, `fuse_epilogue`,
  `split_kernel`, `share_operand_load`, `online_softmax` in both forms).

## Implementation notes

What the model leaves out: a streamed max starts from the row's first score (a kernel starts
from `-∞`; `max (-∞, x) = x` holds in IEEE arithmetic, not in the law class); a node inside a
streamed loop that reads a streamed accumulator is given the accumulator's final value (the
online recurrence is the case where a kernel really reads running values, and it is modelled as
such); floating-point rounding.
-/

namespace Superopt.PlanSem

open Superopt Superopt.Semantics Superopt.Rules Superopt.Checks

/-- Global memory: the buffer of each node. -/
abbrev Mem (α : Type) := NodeId → Index → α

/-- Whether kernel `K` computes node `j`. -/
def _root_.Superopt.Kernel.has (K : Kernel) (j : NodeId) : Bool := memB j K.nodes.toList

/-! ## Tiles -/

section TileDefs

variable {α : Type}

/-- The values `f 0 … f (n - 1)` in tiles of `T`: `n / T` full tiles, then the edge tile of
`n % T` values. -/
def valueTiles (n T : Nat) (f : Nat → α) : List (List α) :=
  (List.range (n / T)).map (tileOf f T) ++ [(List.range (n % T)).map (fun i => f (n / T * T + i))]

/-- The tiles of `valueTiles` concatenate to the values in order (`tile_parallel`). -/
theorem concatTiles_valueTiles (n T : Nat) (f : Nat → α) :
    concatTiles (valueTiles n T f) = (List.range n).map f := by
  rw [tile_parallel_div f T n, valueTiles, concatTiles_append]
  simp only [concatTiles, List.append_nil]

/-- The block-and-offset position of `idx` along each grid axis of `K`: the element at `idx`
is computed by block `idx[a] / T[a]` at offset `idx[a] % T[a]`. -/
def gridIndex (K : Kernel) (T : Axis → Nat) (idx : Index) : Index := fun a =>
  if K.grid.contains a then idx a % T a + T a * (idx a / T a) else idx a

/-- Every grid block computes its own elements (`tile_parallel`): block and offset name `idx`
again. -/
theorem gridIndex_eq (K : Kernel) (T : Axis → Nat) (idx : Index) : gridIndex K T idx = idx := by
  funext a
  show (if K.grid.contains a then idx a % T a + T a * (idx a / T a) else idx a) = idx a
  by_cases hc : K.grid.contains a = true
  · rw [if_pos hc]
    exact Nat.mod_add_div (idx a) (T a)
  · rw [if_neg hc]

end TileDefs

section StreamDefs

variable {α : Type} [ScalarOps α]

/-- The first element of a row, `-∞` for an empty row: where a streamed max starts. -/
def rowInit (xs : List α) : α := xs.headD ScalarOps.negInf

/-- A running max over tiles from `x0`: the max of the per-tile maxima. -/
def streamMax (tiles : List (List α)) (x0 : α) : α := maxFold x0 (tiles.map (maxFold x0))

/-- One online-softmax tile update with exponential `ex` (`exp`, or `x ↦ exp2 (x * c)`): the
new running max `m'`, the accumulators rescaled by `ex (m − m')` plus the tile's terms. -/
def rescaleWith (ex : α → α) (s v : Nat → α) (st : OnlineState α) (m' : α) (tile : List Nat) :
    OnlineState α :=
  { m := m'
    l := ex (st.m - m') * st.l + sumList (tile.map (fun j => ex (s j - m')))
    acc := ex (st.m - m') * st.acc + sumList (tile.map (fun j => ex (s j - m') * v j)) }

/-- The online-softmax loop over index tiles: the running max is the max of the scores seen so
far (from `x0`), then `rescaleWith`. -/
def onlineLoop (ex : α → α) (s v : Nat → α) (x0 : α) :
    OnlineState α → List (List Nat) → OnlineState α
  | st, [] => st
  | st, t :: ts =>
    onlineLoop ex s v x0 (rescaleWith ex s v st (ScalarOps.max st.m (maxFold x0 (t.map s))) t) ts

end StreamDefs

section StreamLaws

variable {α : Type} [ScalarLaws α]

/-- A streamed sum over `valueTiles` is the sum (`stream_reduction`). -/
theorem streamSum_valueTiles (n T : Nat) (f : Nat → α) :
    streamSum (valueTiles n T f) = sumList ((List.range n).map f) := by
  rw [streamSum_eq, concatTiles_valueTiles]

/-- The running max of a row from its first element is the row's max. -/
theorem maxFold_rowInit : ∀ xs : List α, maxFold (rowInit xs) xs = maxList xs
  | [] => rfl
  | a :: rest => (maxList_cons_eq_maxFold a rest).symm

/-- A streamed max over `valueTiles` from the row's first element is the max
(`stream_reduction` for `max`). -/
theorem streamMax_eq (n T : Nat) (f : Nat → α) :
    streamMax (valueTiles n T f) (rowInit ((List.range n).map f)) =
      maxList ((List.range n).map f) := by
  unfold streamMax
  rw [← maxFold_concatTiles, concatTiles_valueTiles, maxFold_rowInit]

/-- `a · eᵐ = b · eᵐ` gives `a = b`. -/
theorem mul_exp_cancel {a b m : α} (h : a * ScalarOps.exp m = b * ScalarOps.exp m) : a = b :=
  calc a = a * ScalarOps.exp m / ScalarOps.exp m :=
        (ScalarLaws.mul_div_cancel_right a _ (ScalarLaws.exp_ne_zero m)).symm
    _ = b * ScalarOps.exp m / ScalarOps.exp m := by rw [h]
    _ = b := ScalarLaws.mul_div_cancel_right b _ (ScalarLaws.exp_ne_zero m)

/-- The loop's invariants, whatever the tiles: the running max is the max of the scores seen,
`l · eᵐ` and `acc · eᵐ` grow by the tile's `Σ eˢ` and `Σ eˢ v`. -/
theorem onlineLoop_inv (s v : Nat → α) (x0 : α) : ∀ (tiles : List (List Nat))
    (st : OnlineState α) (P : List α), st.m = maxFold x0 P →
    (onlineLoop ScalarOps.exp s v x0 st tiles).m = maxFold x0 (P ++ (concatTiles tiles).map s) ∧
    (onlineLoop ScalarOps.exp s v x0 st tiles).l *
        ScalarOps.exp (onlineLoop ScalarOps.exp s v x0 st tiles).m =
      st.l * ScalarOps.exp st.m +
        sumList ((concatTiles tiles).map (fun j => ScalarOps.exp (s j))) ∧
    (onlineLoop ScalarOps.exp s v x0 st tiles).acc *
        ScalarOps.exp (onlineLoop ScalarOps.exp s v x0 st tiles).m =
      st.acc * ScalarOps.exp st.m +
        sumList ((concatTiles tiles).map (fun j => ScalarOps.exp (s j) * v j))
  | [], st, P, hP => by
    refine ⟨?_, ?_, ?_⟩
    · show st.m = maxFold x0 (P ++ [])
      rw [List.append_nil]
      exact hP
    · exact (ScalarLaws.add_zero _).symm
    · exact (ScalarLaws.add_zero _).symm
  | t :: ts, st, P, hP => by
    have hm' : (rescaleWith ScalarOps.exp s v st
        (ScalarOps.max st.m (maxFold x0 (t.map s))) t).m = maxFold x0 (P ++ t.map s) := by
      show ScalarOps.max st.m (maxFold x0 (t.map s)) = maxFold x0 (P ++ t.map s)
      rw [hP, maxFold_append]
    have ih := onlineLoop_inv s v x0 ts (rescaleWith ScalarOps.exp s v st
      (ScalarOps.max st.m (maxFold x0 (t.map s))) t) (P ++ t.map s) hm'
    have hl : (rescaleWith ScalarOps.exp s v st
          (ScalarOps.max st.m (maxFold x0 (t.map s))) t).l *
        ScalarOps.exp (rescaleWith ScalarOps.exp s v st
          (ScalarOps.max st.m (maxFold x0 (t.map s))) t).m =
        st.l * ScalarOps.exp st.m + sumList (t.map (fun j => ScalarOps.exp (s j))) :=
      rescaleStep_l s v st (ScalarOps.max st.m (maxFold x0 (t.map s))) t
    have ha : (rescaleWith ScalarOps.exp s v st
          (ScalarOps.max st.m (maxFold x0 (t.map s))) t).acc *
        ScalarOps.exp (rescaleWith ScalarOps.exp s v st
          (ScalarOps.max st.m (maxFold x0 (t.map s))) t).m =
        st.acc * ScalarOps.exp st.m + sumList (t.map (fun j => ScalarOps.exp (s j) * v j)) :=
      rescaleStep_acc s v st (ScalarOps.max st.m (maxFold x0 (t.map s))) t
    have e : onlineLoop ScalarOps.exp s v x0 st (t :: ts) =
        onlineLoop ScalarOps.exp s v x0 (rescaleWith ScalarOps.exp s v st
          (ScalarOps.max st.m (maxFold x0 (t.map s))) t) ts := rfl
    have ec : concatTiles (t :: ts) = t ++ concatTiles ts := rfl
    rw [e, ec]
    refine ⟨?_, ?_, ?_⟩
    · rw [ih.1, List.map_append, List.append_assoc]
    · rw [ih.2.1, hl, List.map_append, sumList_append, ScalarLaws.add_assoc]
    · rw [ih.2.2, ha, List.map_append, sumList_append, ScalarLaws.add_assoc]

/-- The loop over the tiles of a row of `n` scores, from the row's first score and
`l = acc = 0`: its final running max is the row max `M`, and `l · e^M = Σ eˢ`,
`acc · e^M = Σ eˢ v`. -/
theorem onlineLoop_final (s v : Nat → α) (n T : Nat) :
    (onlineLoop ScalarOps.exp s v (rowInit ((List.range n).map s))
        ⟨rowInit ((List.range n).map s), ScalarOps.zero, ScalarOps.zero⟩
        (valueTiles n T (fun i => i))).m = maxList ((List.range n).map s) ∧
    (onlineLoop ScalarOps.exp s v (rowInit ((List.range n).map s))
        ⟨rowInit ((List.range n).map s), ScalarOps.zero, ScalarOps.zero⟩
        (valueTiles n T (fun i => i))).l * ScalarOps.exp (maxList ((List.range n).map s)) =
      sumList ((List.range n).map (fun j => ScalarOps.exp (s j))) ∧
    (onlineLoop ScalarOps.exp s v (rowInit ((List.range n).map s))
        ⟨rowInit ((List.range n).map s), ScalarOps.zero, ScalarOps.zero⟩
        (valueTiles n T (fun i => i))).acc * ScalarOps.exp (maxList ((List.range n).map s)) =
      sumList ((List.range n).map (fun j => ScalarOps.exp (s j) * v j)) := by
  have hc : concatTiles (valueTiles n T (fun i => i)) = List.range n := by
    rw [concatTiles_valueTiles, map_id_self]
  have h := onlineLoop_inv s v (rowInit ((List.range n).map s)) (valueTiles n T (fun i => i))
    ⟨rowInit ((List.range n).map s), ScalarOps.zero, ScalarOps.zero⟩ [] rfl
  rw [hc] at h
  have hm : (onlineLoop ScalarOps.exp s v (rowInit ((List.range n).map s))
        ⟨rowInit ((List.range n).map s), ScalarOps.zero, ScalarOps.zero⟩
        (valueTiles n T (fun i => i))).m = maxList ((List.range n).map s) := by
    rw [h.1, List.nil_append, maxFold_rowInit]
  have hl := h.2.1
  have ha := h.2.2
  rw [hm] at hl ha
  refine ⟨hm, ?_, ?_⟩
  · rw [hl]
    show ScalarOps.zero * ScalarOps.exp (rowInit ((List.range n).map s)) + _ = _
    rw [ScalarLaws.zero_mul, ScalarLaws.zero_add]
  · rw [ha]
    show ScalarOps.zero * ScalarOps.exp (rowInit ((List.range n).map s)) + _ = _
    rw [ScalarLaws.zero_mul, ScalarLaws.zero_add]

/-- `(Σⱼ e^(sⱼ − M)) · e^M = Σⱼ e^(sⱼ)`. -/
theorem sum_exp_sub_mul (s : Nat → α) (M : α) (xs : List Nat) :
    sumList (xs.map (fun j => ScalarOps.exp (s j - M))) * ScalarOps.exp M =
      sumList (xs.map (fun j => ScalarOps.exp (s j))) := by
  rw [← sumList_map_mul_right (fun j => ScalarOps.exp (s j - M)) (ScalarOps.exp M) xs]
  simp only [ScalarLaws.exp_sub_mul_exp]

/-- `(Σⱼ e^(sⱼ − M) vⱼ) · e^M = Σⱼ e^(sⱼ) vⱼ`. -/
theorem sum_exp_sub_mul_v (s v : Nat → α) (M : α) (xs : List Nat) :
    sumList (xs.map (fun j => ScalarOps.exp (s j - M) * v j)) * ScalarOps.exp M =
      sumList (xs.map (fun j => ScalarOps.exp (s j) * v j)) := by
  rw [← sumList_map_mul_right (fun j => ScalarOps.exp (s j - M) * v j) (ScalarOps.exp M) xs]
  simp only [exp_sub_mul_mul_exp]

/-- **`online_softmax`** (denominator): with any exponential equal to `exp` (`exp` itself, or
`x ↦ exp2 (x * c)` by `exp2_mul_log2e`), the loop's `l` is `Σⱼ e^(sⱼ − M)`, `M` the row max. -/
theorem onlineLoop_l (ex : α → α) (hex : ∀ z, ex z = ScalarOps.exp z) (s v : Nat → α)
    (n T : Nat) :
    (onlineLoop ex s v (rowInit ((List.range n).map s))
        ⟨rowInit ((List.range n).map s), ScalarOps.zero, ScalarOps.zero⟩
        (valueTiles n T (fun i => i))).l =
      sumList ((List.range n).map
        (fun j => ScalarOps.exp (s j - maxList ((List.range n).map s)))) := by
  have hfun : ex = ScalarOps.exp := funext hex
  subst hfun
  have h := onlineLoop_final s v n T
  exact mul_exp_cancel
    (h.2.1.trans (sum_exp_sub_mul s (maxList ((List.range n).map s)) (List.range n)).symm)

/-- **`online_softmax`** (output): the loop's `acc` is `Σⱼ e^(sⱼ − M) vⱼ`, `M` the row max. -/
theorem onlineLoop_acc (ex : α → α) (hex : ∀ z, ex z = ScalarOps.exp z) (s v : Nat → α)
    (n T : Nat) :
    (onlineLoop ex s v (rowInit ((List.range n).map s))
        ⟨rowInit ((List.range n).map s), ScalarOps.zero, ScalarOps.zero⟩
        (valueTiles n T (fun i => i))).acc =
      sumList ((List.range n).map
        (fun j => ScalarOps.exp (s j - maxList ((List.range n).map s)) * v j)) := by
  have hfun : ex = ScalarOps.exp := funext hex
  subst hfun
  have h := onlineLoop_final s v n T
  exact mul_exp_cancel
    (h.2.2.trans (sum_exp_sub_mul_v s v (maxList ((List.range n).map s)) (List.range n)).symm)

end StreamLaws

end Superopt.PlanSem

import Superopt.IR.Semantics

/-!
# The lemmas behind the rewrite rules

Every rule id of the derivation engine (`superopt.rules.RULES`, Python) names a theorem
`Superopt.<rule id>_sound`, stated in `Superopt.Proofs.Soundness`; the lemmas of `Superopt.Rules`
prove them. A rule is sound when the program it produces denotes the same function as the
program it rewrites, in exact arithmetic: every statement is over an arbitrary `[ScalarLaws α]`
(`Superopt.Laws`), of which ℝ is a model. Floating-point error is measured, not proved.

| rule id              | theorem (`Superopt.`)      | main lemmas (`Superopt.Rules.`)            |
|----------------------|----------------------------|--------------------------------------------|
| `stabilize_softmax`  | `stabilize_softmax_sound`  | `stabilize_softmax`,                       |
|                      |                            | `denote_stabilize_softmax`                 |
| `factor_row_scale`   | `factor_row_scale_sound`   | `factor_row_scale`,                        |
|                      |                            | `denote_factor_row_scale`                  |
| `exp_to_exp2`        | `exp_to_exp2_sound`        | `exp_to_exp2`, `exp_sub_to_exp2`           |
| `distribute_matmul`  | `distribute_matmul_sound`  | `distribute_matmul`                        |
| `distribute_bias`    | `distribute_bias_sound`    | `distribute_bias`, `distribute_bias_sub`   |
| `commute_row_scale`  | `commute_row_scale_sound`  | `commute_row_scale`,                       |
|                      |                            | `commute_row_scale_div`                    |
| `move_contracted_scale` | `move_contracted_scale_sound` | `move_contracted_scale`              |
| `online_softmax`     | `online_softmax_sound`     | `online_softmax`, `flash_attention`        |
| `share_operand_load` | `share_operand_load_sound` | `share_operand_load`                       |
| `fuse_prologue`      | `fuse_prologue_sound`      | (`denote_matmul`, `denote_binary`)         |
| `fuse_epilogue`      | `fuse_epilogue_sound`      | `fuse_epilogue`, `fuse_epilogue_binary`    |
| `split_kernel`       | `split_kernel_sound`       | `materialize_read`, `split_kernel`         |
| `fuse_rows`, `fuse_elementwise`, `fuse_gemm_chain`, | `<rule>_sound` | (the plan semantics) |
| `fuse_contraction`   |                            |                                            |
| `tile_parallel`      | `tile_parallel_sound`      | `tile_parallel`, `tile_parallel_div`       |
| `stream_reduction`   | `stream_reduction_sound`   | `stream_reduction_sum`, `streamSum_eq`,    |
|                      |                            | `stream_reduction_max`                     |

`softmax_exp2` combines `stabilize_softmax` and `exp_to_exp2` (the base-2 form kernels use).

## Main definitions

* `tileOf f T t`: the values `f (t*T + i)` of tile `t` (size `T`) of a parallel or reduced axis.
* `streamSum`: a reduction streamed tile by tile into one accumulator.
* `OnlineState`, `onlineStep`, `onlineSoftmax`: the Flash-Attention-2 recurrence over tiles
  of the key axis, with running max `m`, running denominator `l` and running output `acc`.
* `pairSum`: two sums computed in one pass over a shared index list (two GEMMs, one A tile).

## Main statements

See the table. The `denote_*` theorems state a rule on graphs: under the hypotheses that the
nodes of the rewritten pattern are where the rule found them, the rewritten graph denotes
the same values as the original.

## Implementation notes

Tiles are stated as `q` full tiles of size `T` plus an edge tile of size `r` (`n = q*T + r`);
with `q = n / T`, `r = n % T` (`tile_parallel_div`) the edge tile is exactly the in-bounds part
of the last, masked tile of a `⌈n / T⌉`-tile grid. The online-softmax invariant is proved for
*any* choice of the running maximum: stabilisation is a floating-point matter, not an
algebraic one.
-/

namespace Superopt.Rules

open Superopt.Semantics

/-! ## `tile_parallel`: tiling an axis does not change the values computed -/

section Tiles

variable {β : Type}

/-- `List.range (n + 1) = List.range n ++ [n]` (core's `List.range_succ`). -/
theorem range_succ' (n : Nat) : List.range (n + 1) = List.range n ++ [n] :=
  List.range_succ ..

/-- A range split into a prefix of length `a` and a block of length `b` at offset `a`. -/
theorem map_range_add (f : Nat → β) (a b : Nat) :
    (List.range (a + b)).map f =
      (List.range a).map f ++ (List.range b).map (fun i => f (a + i)) := by
  induction b with
  | zero => rw [Nat.add_zero, List.range_zero, List.map_nil, List.append_nil]
  | succ b ih =>
    rw [← Nat.add_assoc a b 1, range_succ' (a + b), range_succ' b, List.map_append,
      List.map_append, ih, List.append_assoc] <;> rfl

/-- The values of tile `t` of size `T`: `[f (t*T), …, f (t*T + T - 1)]`.

Example: `tileOf id 4 2 = [8, 9, 10, 11]`. -/
def tileOf (f : Nat → β) (T t : Nat) : List β :=
  (List.range T).map (fun i => f (t * T + i))

/-- `q` full tiles of size `T` enumerate `0 … q*T - 1` in order. -/
theorem map_range_mul (f : Nat → β) (T q : Nat) :
    (List.range (q * T)).map f = concatTiles ((List.range q).map (tileOf f T)) := by
  induction q with
  | zero => simp only [Nat.zero_mul, List.range_zero, List.map_nil, concatTiles]
  | succ q ih =>
    rw [Nat.add_mul q 1 T, Nat.one_mul T, map_range_add f (q * T) T, ih, range_succ' q,
      List.map_append, concatTiles_append]
    simp only [List.map_cons, List.map_nil, concatTiles, List.append_nil, tileOf]

/-- **`tile_parallel`.** Evaluating `f` over a parallel axis of size `q*T + r` is the same as
evaluating it tile by tile: `q` full tiles of size `T`, then an edge tile of size `r`. Each
output element is computed by exactly one tile, at the same position, so the tiling of a
parallel axis (one thread block per tile) does not change any value. -/
theorem tile_parallel (f : Nat → β) (T q r : Nat) :
    (List.range (q * T + r)).map f =
      concatTiles ((List.range q).map (tileOf f T)) ++
        (List.range r).map (fun i => f (q * T + i)) := by
  rw [map_range_add f (q * T) r, map_range_mul f T q]

/-- `tile_parallel` for any decomposition `n = q*T + r`. -/
theorem tile_parallel_of_eq (f : Nat → β) (T q r n : Nat) (h : q * T + r = n) :
    (List.range n).map f =
      concatTiles ((List.range q).map (tileOf f T)) ++
        (List.range r).map (fun i => f (q * T + i)) := by
  subst h
  exact tile_parallel f T q r

/-- `tile_parallel` with `n / T` full tiles and an edge tile of `n % T` elements: the edge tile
is the in-bounds part of the last tile of the `⌈n / T⌉`-block grid that kernels launch. -/
theorem tile_parallel_div (f : Nat → β) (T n : Nat) :
    (List.range n).map f =
      concatTiles ((List.range (n / T)).map (tileOf f T)) ++
        (List.range (n % T)).map (fun i => f (n / T * T + i)) :=
  tile_parallel_of_eq f T (n / T) (n % T) n (by
    rw [Nat.mul_comm (n / T) T, Nat.add_comm (T * (n / T)) (n % T)]
    exact Nat.mod_add_div n T)

end Tiles

/-! ## `stream_reduction`: a reduction streamed over tiles -/

/-- A sum streamed tile by tile into one accumulator, as a kernel's main loop does:
`acc := acc + Σ tile` for each tile, from `acc = 0`. -/
def streamSum {α : Type} [ScalarOps α] (tiles : List (List α)) : α :=
  tiles.foldl (fun acc t => acc + sumList t) ScalarOps.zero

section Stream

variable {α : Type} [ScalarLaws α]

/-- Streaming from any accumulator adds the sum of all the tiles to it. -/
theorem foldl_add_sumList (tiles : List (List α)) (acc : α) :
    tiles.foldl (fun a t => a + sumList t) acc = acc + sumList (concatTiles tiles) := by
  induction tiles generalizing acc with
  | nil => exact (ScalarLaws.add_zero acc).symm
  | cons t ts ih =>
    show ts.foldl (fun a u => a + sumList u) (acc + sumList t) =
      acc + sumList (t ++ concatTiles ts)
    rw [ih, sumList_append, ScalarLaws.add_assoc acc (sumList t) (sumList (concatTiles ts))]

/-- **`stream_reduction`** (accumulator form): streaming a sum over tiles computes the sum of
the concatenated tiles. -/
theorem streamSum_eq (tiles : List (List α)) : streamSum tiles = sumList (concatTiles tiles) := by
  rw [streamSum, foldl_add_sumList, ScalarLaws.zero_add]

/-- **`stream_reduction`** (sum). A sum over an axis of size `q*T + r` is the sum of the `q`
full-tile sums plus the edge-tile sum. -/
theorem stream_reduction_sum (f : Nat → α) (T q r : Nat) :
    sumList ((List.range (q * T + r)).map f) =
      sumList (((List.range q).map (tileOf f T)).map sumList) +
        sumList ((List.range r).map (fun i => f (q * T + i))) := by
  rw [tile_parallel f T q r, sumList_append, sumList_concatTiles]

/-- **`stream_reduction`** (max). A running max over an axis of size `q*T + r` is the running
max of the per-tile maxima and of the edge tile, from any initial value `init` (`-∞` in a
kernel; see `maxList_cons_eq_maxFold` to start from an element of the row). -/
theorem stream_reduction_max (f : Nat → α) (T q r : Nat) (init : α) :
    maxFold init ((List.range (q * T + r)).map f) =
      ScalarOps.max (maxFold init (((List.range q).map (tileOf f T)).map (maxFold init)))
        (maxFold init ((List.range r).map (fun i => f (q * T + i)))) := by
  rw [tile_parallel f T q r, maxFold_append, maxFold_concatTiles]

/-- **`stream_reduction`** on a graph: a `reduce sum` node over an axis of size `q*T + r`
denotes the sum of its per-tile partial sums. -/
theorem denote_reduce_sum_tiled {g : Graph} {env : String → Index → α} {i x : NodeId}
    {axis : Axis} (h : g.nodes[i]? = some (.reduce .sum axis x)) (hx : x < i) (T q r : Nat)
    (hsize : axisSize g.axes axis = q * T + r) (idx : Index) :
    denote g env i idx =
      sumList (((List.range q).map
          (tileOf (fun k => denote g env x (Index.set idx axis k)) T)).map sumList) +
        sumList ((List.range r).map
          (fun k => denote g env x (Index.set idx axis (q * T + k)))) := by
  rw [denote_reduce h hx idx, hsize]
  exact stream_reduction_sum (fun k => denote g env x (Index.set idx axis k)) T q r

end Stream

/-! ## `fuse_epilogue`: an elementwise consumer computed in its producer's epilogue -/

section Fuse

variable {α : Type} [ScalarLaws α]

/-- **`fuse_epilogue`** (lists). Applying `g` after materialising `f`'s results equals
applying `g ∘ f` in one pass. -/
theorem fuse_epilogue_map {β γ δ : Type} (f : β → γ) (g : γ → δ) (xs : List β) :
    (xs.map f).map g = xs.map (fun x => g (f x)) := by
  induction xs with
  | nil => rfl
  | cons x xs ih =>
    show g (f x) :: (xs.map f).map g = g (f x) :: xs.map (fun x => g (f x))
    rw [ih]

/-- **`fuse_epilogue`** (graphs, unary consumer). A unary node denotes its op applied pointwise
to its producer's values, so the op can be applied to the producer's accumulator before the
store (epilogue) instead of after a round trip through memory. -/
theorem fuse_epilogue {g : Graph} {env : String → Index → α} {i x : NodeId} {op : UnOp}
    (h : g.nodes[i]? = some (.unary op x)) (hx : x < i) :
    denote g env i = fun idx => evalUnOp op (denote g env x idx) :=
  funext (denote_unary h hx)

/-- **`fuse_epilogue`** (graphs, binary consumer): the same with two producers, e.g. the
`silu(gate) * up` epilogue of SwiGLU. -/
theorem fuse_epilogue_binary {g : Graph} {env : String → Index → α} {i x y : NodeId}
    {op : BinOp} (h : g.nodes[i]? = some (.binary op x y)) (hx : x < i) (hy : y < i) :
    denote g env i = fun idx => evalBinOp op (denote g env x idx) (denote g env y idx) :=
  funext (denote_binary h hx hy)

end Fuse

/-! ## `split_kernel`: materialise an intermediate and read it back -/

section Split

variable {α : Type} [ScalarLaws α]

/-- **`split_kernel`** (read-back). If the second kernel's graph `g'` reads node `x` of `g`
through an input `name` whose buffer holds `x`'s values along the input's axes
(`env' name (ix.restrict axes) = denote g env x ix`), reading the buffer gives the same values
as recomputing `x` inline. -/
theorem materialize_read {g g' : Graph} {env env' : String → Index → α} {x buf : NodeId}
    {name : String} {axes : List Axis} (hbuf : g'.nodes[buf]? = some (.input name axes))
    (henv : ∀ ix, env' name (Index.restrict axes ix) = denote g env x ix) (idx : Index) :
    denote g' env' buf idx = denote g env x idx := by
  rw [denote_input hbuf idx, henv idx]

/-- **`split_kernel`** (consumer). A unary consumer of `x` in `g` and the same consumer of the
materialised buffer in `g'` denote the same values. -/
theorem split_kernel {g g' : Graph} {env env' : String → Index → α} {x j j' buf : NodeId}
    {op : UnOp} {name : String} {axes : List Axis}
    (hj : g.nodes[j]? = some (.unary op x)) (hxj : x < j)
    (hj' : g'.nodes[j']? = some (.unary op buf)) (hbj : buf < j')
    (hbuf : g'.nodes[buf]? = some (.input name axes))
    (henv : ∀ ix, env' name (Index.restrict axes ix) = denote g env x ix) (idx : Index) :
    denote g' env' j' idx = denote g env j idx := by
  rw [denote_unary hj' hbj idx, materialize_read hbuf henv idx, denote_unary hj hxj idx]

end Split

/-! ## `exp_to_exp2`: `eˣ = 2^(x log₂ e)` -/

section Exp2

variable {α : Type} [ScalarLaws α]

/-- **`exp_to_exp2`.** `eˣ = 2^(x · log₂ e)` (the hardware has `exp2`, not `exp`). -/
theorem exp_to_exp2 (x : α) :
    ScalarOps.exp x = ScalarOps.exp2 (x * ScalarOps.ofBits log2eBits) :=
  (ScalarLaws.exp2_mul_log2e x).symm

/-- **`exp_to_exp2`** inside softmax: `e^(s - m) = 2^(s log₂ e - m log₂ e)`, so the scale
`log₂ e` folds into the score tile and into the running max. -/
theorem exp_sub_to_exp2 (s m : α) :
    ScalarOps.exp (s - m) =
      ScalarOps.exp2 (s * ScalarOps.ofBits log2eBits - m * ScalarOps.ofBits log2eBits) := by
  rw [← ScalarLaws.sub_mul s m (ScalarOps.ofBits log2eBits), ScalarLaws.exp2_mul_log2e (s - m)]

/-- **`exp_to_exp2`** on a graph: an `exp` node denotes `exp2` of its argument times `log₂ e`. -/
theorem denote_exp_to_exp2 {g : Graph} {env : String → Index → α} {i x : NodeId}
    (h : g.nodes[i]? = some (.unary .exp x)) (hx : x < i) (idx : Index) :
    denote g env i idx =
      ScalarOps.exp2 (denote g env x idx * ScalarOps.ofBits log2eBits) := by
  rw [denote_unary h hx idx]
  exact exp_to_exp2 (denote g env x idx)

end Exp2

/-! ## `stabilize_softmax`: subtract any shift before `exp` -/

section Stabilize

variable {α β : Type} [ScalarLaws α]

/-- **`stabilize_softmax`.** Softmax is invariant under subtracting any `m` from every score:
`e^(a - m) / Σⱼ e^(f j - m) = eᵃ / Σⱼ e^(f j)`. With `m` the row max no `exp` overflows. -/
theorem stabilize_softmax (f : β → α) (xs : List β) (a m : α) :
    ScalarOps.exp (a - m) / sumList (xs.map (fun j => ScalarOps.exp (f j - m))) =
      ScalarOps.exp a / sumList (xs.map (fun j => ScalarOps.exp (f j))) := by
  simp only [ScalarLaws.exp_sub_eq_mul]
  rw [sumList_map_mul_right (fun j => ScalarOps.exp (f j)) (ScalarOps.exp (-m)) xs]
  exact ScalarLaws.mul_div_mul_right _ _ _ (ScalarLaws.exp_ne_zero (-m))

/-- **`stabilize_softmax` + `exp_to_exp2`**: the base-2 form that kernels compute,
`eᵃ / Σⱼ e^(f j) = 2^(a log₂ e - m log₂ e) / Σⱼ 2^(f j log₂ e - m log₂ e)` for any `m`. -/
theorem softmax_exp2 (f : β → α) (xs : List β) (a m : α) :
    ScalarOps.exp a / sumList (xs.map (fun j => ScalarOps.exp (f j))) =
      ScalarOps.exp2 (a * ScalarOps.ofBits log2eBits - m * ScalarOps.ofBits log2eBits) /
        sumList (xs.map (fun j =>
          ScalarOps.exp2
            (f j * ScalarOps.ofBits log2eBits - m * ScalarOps.ofBits log2eBits))) := by
  rw [← stabilize_softmax f xs a m]
  simp only [exp_sub_to_exp2]

/-- **`stabilize_softmax`** on graphs. In `g` the literal softmax `p = e / z`, `e = exp s`,
`z = sum_axis e`; in `g'` the stabilised one `p' = e' / z'`, `e' = exp d`, `z' = sum_axis e'`,
`d = s' - m`, where `s'` denotes the same scores as `s` and `m` is any node whose value does
not depend on the position along `axis` (the row max: `stabilize_softmax_sound`). Then
`p'` denotes the same values as `p`. -/
theorem denote_stabilize_softmax {g g' : Graph} {env : String → Index → α} {axis : Axis}
    {s e z p s' m d e' z' p' : NodeId}
    (he : g.nodes[e]? = some (.unary .exp s)) (hse : s < e)
    (hz : g.nodes[z]? = some (.reduce .sum axis e)) (hez : e < z)
    (hp : g.nodes[p]? = some (.binary .div e z)) (hep : e < p) (hzp : z < p)
    (hd : g'.nodes[d]? = some (.binary .sub s' m)) (hsd : s' < d) (hmd : m < d)
    (he' : g'.nodes[e']? = some (.unary .exp d)) (hde : d < e')
    (hz' : g'.nodes[z']? = some (.reduce .sum axis e')) (hez' : e' < z')
    (hp' : g'.nodes[p']? = some (.binary .div e' z')) (hep' : e' < p') (hzp' : z' < p')
    (hs : ∀ ix, denote g' env s' ix = denote g env s ix)
    (hm : ∀ ix k, denote g' env m (Index.set ix axis k) = denote g' env m ix)
    (hsize : axisSize g'.axes axis = axisSize g.axes axis) (idx : Index) :
    denote g' env p' idx = denote g env p idx := by
  simp only [denote_binary hp' hep' hzp', denote_binary hp hep hzp, denote_reduce hz' hez',
    denote_reduce hz hez, denote_unary he' hde, denote_unary he hse, denote_binary hd hsd hmd,
    hs, hm, hsize, evalBinOp, evalUnOp, evalRed]
  exact stabilize_softmax (fun k => denote g env s (Index.set idx axis k))
    (List.range (axisSize g.axes axis)) (denote g env s idx) (denote g' env m idx)

end Stabilize

/-! ## `online_softmax`: the Flash-Attention-2 recurrence -/

/-- The state carried across key tiles by an online-softmax kernel, for one query row and one
output column: running max `m`, running denominator `l`, running (unnormalised) output `acc`. -/
structure OnlineState (α : Type) where
  /-- The running maximum of the scores seen so far (any value is sound; see `online_softmax`). -/
  m : α
  /-- `Σ_seen e^(s_j - m)`. -/
  l : α
  /-- `Σ_seen e^(s_j - m) · v_j`. -/
  acc : α

section Online

variable {α β : Type} [ScalarOps α]

/-- The final output of an online-softmax kernel: `acc / l`. -/
def OnlineState.out (st : OnlineState α) : α := st.acc / st.l

/-- One tile update with new running max `m'`: rescale the old `l` and `acc` by `e^(m - m')` and
add the tile's `Σ e^(s_j - m')` and `Σ e^(s_j - m') v_j`. -/
def rescaleStep (s v : β → α) (st : OnlineState α) (m' : α) (tile : List β) : OnlineState α :=
  { m := m'
    l := ScalarOps.exp (st.m - m') * st.l +
      sumList (tile.map (fun j => ScalarOps.exp (s j - m')))
    acc := ScalarOps.exp (st.m - m') * st.acc +
      sumList (tile.map (fun j => ScalarOps.exp (s j - m') * v j)) }

/-- The Flash-Attention-2 tile update: `m' = max(m, rowmax(tile))`, then `rescaleStep`. -/
def onlineStep (s v : β → α) (st : OnlineState α) (tile : List β) : OnlineState α :=
  rescaleStep s v st (maxFold st.m (tile.map s)) tile

/-- The online-softmax loop over the key tiles, from state `st`. -/
def onlineSoftmax (s v : β → α) : OnlineState α → List (List β) → OnlineState α
  | st, [] => st
  | st, t :: ts => onlineSoftmax s v (onlineStep s v st t) ts

end Online

section OnlineLaws

variable {α β : Type} [ScalarLaws α]

/-- `e^(m - m') · x · e^(m') = x · eᵐ`: rescaling by `e^(m - m')` then by `e^(m')`. -/
theorem rescale_mul_exp (m m' x : α) :
    ScalarOps.exp (m - m') * x * ScalarOps.exp m' = x * ScalarOps.exp m := by
  rw [ScalarLaws.mul_comm (ScalarOps.exp (m - m')) x, ScalarLaws.mul_assoc x _ _,
    ScalarLaws.exp_sub_mul_exp m m']

/-- `e^(a - b) · x · eᵇ = eᵃ · x`. -/
theorem exp_sub_mul_mul_exp (a b x : α) :
    ScalarOps.exp (a - b) * x * ScalarOps.exp b = ScalarOps.exp a * x := by
  rw [rescale_mul_exp a b x, ScalarLaws.mul_comm x (ScalarOps.exp a)]

/-- The denominator invariant survives one step, whatever the new max:
`l' · e^(m') = l · eᵐ + Σ_tile e^(s_j)`. -/
theorem rescaleStep_l (s v : β → α) (st : OnlineState α) (m' : α) (tile : List β) :
    (rescaleStep s v st m' tile).l * ScalarOps.exp m' =
      st.l * ScalarOps.exp st.m + sumList (tile.map (fun j => ScalarOps.exp (s j))) := by
  show (ScalarOps.exp (st.m - m') * st.l +
      sumList (tile.map (fun j => ScalarOps.exp (s j - m')))) * ScalarOps.exp m' = _
  rw [ScalarLaws.right_distrib, rescale_mul_exp st.m m' st.l,
    ← sumList_map_mul_right (fun j => ScalarOps.exp (s j - m')) (ScalarOps.exp m') tile]
  simp only [ScalarLaws.exp_sub_mul_exp]

/-- The output invariant survives one step, whatever the new max:
`acc' · e^(m') = acc · eᵐ + Σ_tile e^(s_j) v_j`. -/
theorem rescaleStep_acc (s v : β → α) (st : OnlineState α) (m' : α) (tile : List β) :
    (rescaleStep s v st m' tile).acc * ScalarOps.exp m' =
      st.acc * ScalarOps.exp st.m + sumList (tile.map (fun j => ScalarOps.exp (s j) * v j)) := by
  show (ScalarOps.exp (st.m - m') * st.acc +
      sumList (tile.map (fun j => ScalarOps.exp (s j - m') * v j))) * ScalarOps.exp m' = _
  rw [ScalarLaws.right_distrib, rescale_mul_exp st.m m' st.acc,
    ← sumList_map_mul_right (fun j => ScalarOps.exp (s j - m') * v j) (ScalarOps.exp m') tile]
  simp only [exp_sub_mul_mul_exp]

/-- `rescaleStep_l` for the Flash-Attention-2 step. -/
theorem onlineStep_l (s v : β → α) (st : OnlineState α) (tile : List β) :
    (onlineStep s v st tile).l * ScalarOps.exp (onlineStep s v st tile).m =
      st.l * ScalarOps.exp st.m + sumList (tile.map (fun j => ScalarOps.exp (s j))) :=
  rescaleStep_l s v st (maxFold st.m (tile.map s)) tile

/-- `rescaleStep_acc` for the Flash-Attention-2 step. -/
theorem onlineStep_acc (s v : β → α) (st : OnlineState α) (tile : List β) :
    (onlineStep s v st tile).acc * ScalarOps.exp (onlineStep s v st tile).m =
      st.acc * ScalarOps.exp st.m + sumList (tile.map (fun j => ScalarOps.exp (s j) * v j)) :=
  rescaleStep_acc s v st (maxFold st.m (tile.map s)) tile

/-- The denominator invariant over all tiles: `l · eᵐ = l₀ · e^(m₀) + Σ_{all j} e^(s_j)`. -/
theorem onlineSoftmax_l (s v : β → α) (tiles : List (List β)) (st : OnlineState α) :
    (onlineSoftmax s v st tiles).l * ScalarOps.exp (onlineSoftmax s v st tiles).m =
      st.l * ScalarOps.exp st.m +
        sumList ((concatTiles tiles).map (fun j => ScalarOps.exp (s j))) := by
  induction tiles generalizing st with
  | nil => exact (ScalarLaws.add_zero _).symm
  | cons t ts ih =>
    show (onlineSoftmax s v (onlineStep s v st t) ts).l *
        ScalarOps.exp (onlineSoftmax s v (onlineStep s v st t) ts).m =
      st.l * ScalarOps.exp st.m +
        sumList ((t ++ concatTiles ts).map (fun j => ScalarOps.exp (s j)))
    rw [ih, onlineStep_l, List.map_append, sumList_append, ScalarLaws.add_assoc]

/-- The output invariant over all tiles: `acc · eᵐ = acc₀ · e^(m₀) + Σ_{all j} e^(s_j) v_j`. -/
theorem onlineSoftmax_acc (s v : β → α) (tiles : List (List β)) (st : OnlineState α) :
    (onlineSoftmax s v st tiles).acc * ScalarOps.exp (onlineSoftmax s v st tiles).m =
      st.acc * ScalarOps.exp st.m +
        sumList ((concatTiles tiles).map (fun j => ScalarOps.exp (s j) * v j)) := by
  induction tiles generalizing st with
  | nil => exact (ScalarLaws.add_zero _).symm
  | cons t ts ih =>
    show (onlineSoftmax s v (onlineStep s v st t) ts).acc *
        ScalarOps.exp (onlineSoftmax s v (onlineStep s v st t) ts).m =
      st.acc * ScalarOps.exp st.m +
        sumList ((t ++ concatTiles ts).map (fun j => ScalarOps.exp (s j) * v j))
    rw [ih, onlineStep_acc, List.map_append, sumList_append, ScalarLaws.add_assoc]

/-- A state satisfying both invariants outputs `A / L`. -/
theorem OnlineState.out_eq_of_invariant (st : OnlineState α) (A L : α)
    (hl : st.l * ScalarOps.exp st.m = L) (ha : st.acc * ScalarOps.exp st.m = A) :
    st.out = A / L := by
  subst hl
  subst ha
  exact (ScalarLaws.mul_div_mul_right st.acc st.l (ScalarOps.exp st.m)
    (ScalarLaws.exp_ne_zero st.m)).symm

/-- **`online_softmax`.** Started from `l = acc = 0` and *any* running max `m₀` (`-∞` in a
kernel), the online recurrence over the key tiles outputs
`Σⱼ e^(s_j) v_j / Σⱼ e^(s_j)` over all keys. -/
theorem online_softmax (s v : β → α) (m₀ : α) (tiles : List (List β)) :
    (onlineSoftmax s v ⟨m₀, ScalarOps.zero, ScalarOps.zero⟩ tiles).out =
      sumList ((concatTiles tiles).map (fun j => ScalarOps.exp (s j) * v j)) /
        sumList ((concatTiles tiles).map (fun j => ScalarOps.exp (s j))) := by
  apply OnlineState.out_eq_of_invariant
  · rw [onlineSoftmax_l]
    show ScalarOps.zero * ScalarOps.exp m₀ + _ = _
    rw [ScalarLaws.zero_mul, ScalarLaws.zero_add]
  · rw [onlineSoftmax_acc]
    show ScalarOps.zero * ScalarOps.exp m₀ + _ = _
    rw [ScalarLaws.zero_mul, ScalarLaws.zero_add]

/-- The literal attention row, `Σⱼ softmax(s)ⱼ · vⱼ`, is `Σⱼ e^(s_j) v_j / Σⱼ e^(s_j)`. -/
theorem softmax_weighted_sum (s v : β → α) (xs : List β) :
    sumList (xs.map (fun j =>
        ScalarOps.exp (s j) / sumList (xs.map (fun k => ScalarOps.exp (s k))) * v j)) =
      sumList (xs.map (fun j => ScalarOps.exp (s j) * v j)) /
        sumList (xs.map (fun k => ScalarOps.exp (s k))) := by
  simp only [ScalarLaws.div_mul_eq_mul_div]
  exact sumList_map_div (fun j => ScalarOps.exp (s j) * v j) _ xs

/-- **`online_softmax`**, end to end (Flash Attention 2): the online recurrence over key tiles
computes the literal `P @ V` row, `Σⱼ softmax(s)ⱼ · vⱼ`, over the concatenated tiles. -/
theorem flash_attention (s v : β → α) (m₀ : α) (tiles : List (List β)) :
    (onlineSoftmax s v ⟨m₀, ScalarOps.zero, ScalarOps.zero⟩ tiles).out =
      sumList ((concatTiles tiles).map (fun j =>
        ScalarOps.exp (s j) / sumList ((concatTiles tiles).map (fun k => ScalarOps.exp (s k))) *
          v j)) := by
  rw [online_softmax s v m₀ tiles, softmax_weighted_sum s v (concatTiles tiles)]

end OnlineLaws

/-! ## `factor_row_scale`: move a per-row scale past a contraction (FlashNorm) -/

section RowScale

variable {α β : Type} [ScalarLaws α]

/-- **`factor_row_scale`.** A scale that does not depend on the contracted index comes out of
the contraction: `Σₖ (x k · s) · w k = s · Σₖ x k · w k`. For RMSNorm → matmul, the GEMM runs
on un-normalised `X` and the per-row `rsqrt(mean(X²) + ε)` is applied in the epilogue. -/
theorem factor_row_scale (x w : β → α) (s : α) (ks : List β) :
    sumList (ks.map (fun k => x k * s * w k)) = s * sumList (ks.map (fun k => x k * w k)) := by
  have h : ∀ k, x k * s * w k = x k * w k * s := fun k => ScalarLaws.mul_right_comm _ _ _
  simp only [h]
  rw [sumList_map_mul_right (fun k => x k * w k) s ks,
    ScalarLaws.mul_comm (sumList (ks.map (fun k => x k * w k))) s]

/-- **`factor_row_scale`** on graphs: `o = matmul(y, w)` with `y = x * r` and `r` constant along
the contracted axis of `y` denotes `r · matmul(x, w)`. -/
theorem denote_factor_row_scale {g : Graph} {env : String → Index → α}
    {o y x r w : NodeId} {axisA axisB : Axis}
    (ho : g.nodes[o]? = some (.matmul y w axisA axisB)) (hyo : y < o) (hwo : w < o)
    (hy : g.nodes[y]? = some (.binary .mul x r)) (hxy : x < y) (hry : r < y)
    (hr : ∀ ix k, denote g env r (Index.set ix axisA k) = denote g env r ix) (idx : Index) :
    denote g env o idx =
      denote g env r idx * sumList ((List.range (axisSize g.axes axisA)).map
        (fun k => denote g env x (Index.set idx axisA k) *
          denote g env w (Index.set idx axisB k))) := by
  simp only [denote_matmul ho hyo hwo, denote_binary hy hxy hry, hr, evalBinOp]
  exact factor_row_scale (fun k => denote g env x (Index.set idx axisA k))
    (fun k => denote g env w (Index.set idx axisB k)) (denote g env r idx)
    (List.range (axisSize g.axes axisA))

end RowScale

/-! ## What models contain: offsets, biases and gains around a contraction -/

section Models

variable {α β : Type} [ScalarLaws α]

/-- **`distribute_matmul`.** An offset `v` that does not depend on the contracted index leaves
the contraction as a rank-one term: `Σₖ (x k − v) · w k = Σₖ x k · w k − v · Σₖ w k`
(LayerNorm's mean folded past the GEMM: the GEMM runs on `X`, the epilogue subtracts
`μ · colsum W`). -/
theorem distribute_matmul (x w : β → α) (v : α) (ks : List β) :
    sumList (ks.map (fun k => (x k - v) * w k)) =
      sumList (ks.map (fun k => x k * w k)) - v * sumList (ks.map w) := by
  have h : ∀ k, (x k - v) * w k = x k * w k - v * w k :=
    fun k => ScalarLaws.sub_mul (x k) v (w k)
  rw [sumList_map_congr h ks, sumList_map_sub (fun k => x k * w k) (fun k => v * w k) ks,
    sumList_map_mul_left v w ks]

/-- **`distribute_bias`.** A bias along the contracted index splits off as its own
contraction: `Σₖ (x k + v k) · w k = Σₖ x k · w k + Σₖ v k · w k`. -/
theorem distribute_bias (x v w : β → α) (ks : List β) :
    sumList (ks.map (fun k => (x k + v k) * w k)) =
      sumList (ks.map (fun k => x k * w k)) + sumList (ks.map (fun k => v k * w k)) := by
  have h : ∀ k, (x k + v k) * w k = x k * w k + v k * w k :=
    fun k => ScalarLaws.right_distrib (x k) (v k) (w k)
  rw [sumList_map_congr h ks]
  exact sumList_map_add (fun k => x k * w k) (fun k => v k * w k) ks

/-- `distribute_bias` for a subtracted bias: `Σₖ (x k − v k) · w k = Σₖ x k · w k −
Σₖ v k · w k`. -/
theorem distribute_bias_sub (x v w : β → α) (ks : List β) :
    sumList (ks.map (fun k => (x k - v k) * w k)) =
      sumList (ks.map (fun k => x k * w k)) - sumList (ks.map (fun k => v k * w k)) := by
  have h : ∀ k, (x k - v k) * w k = x k * w k - v k * w k :=
    fun k => ScalarLaws.sub_mul (x k) (v k) (w k)
  rw [sumList_map_congr h ks]
  exact sumList_map_sub (fun k => x k * w k) (fun k => v k * w k) ks

/-- **`commute_row_scale`.** A gain moves inside a row scale: `(x · s) · c = (x · c) · s`, so
that `factor_row_scale` can take `s` out of the contraction past the gain `c`. -/
theorem commute_row_scale (x s c : α) : x * s * c = x * c * s :=
  ScalarLaws.mul_right_comm x s c

/-- **`commute_row_scale`** for a divided row scale: `(x / s) · c = (x · c) / s`. -/
theorem commute_row_scale_div (x s c : α) : x / s * c = x * c / s :=
  ScalarLaws.div_mul_eq_mul_div x s c

/-- **`move_contracted_scale`.** A scale along the contracted index moves from one operand onto
the other: `Σₖ (a k · c k) · w k = Σₖ a k · (w k · c k)` (a norm's gain onto the weight). -/
theorem move_contracted_scale (a c w : β → α) (ks : List β) :
    sumList (ks.map (fun k => a k * c k * w k)) =
      sumList (ks.map (fun k => a k * (w k * c k))) := by
  have h : ∀ k, a k * c k * w k = a k * (w k * c k) := fun k => by
    rw [ScalarLaws.mul_assoc (a k) (c k) (w k), ScalarLaws.mul_comm (c k) (w k)]
  exact sumList_map_congr h ks

end Models

/-! ## `share_operand_load`: two contractions over one operand tile -/

section Share

variable {α β : Type}

/-- Two sums computed in one pass over `ks`, with a pair accumulator: what a kernel does when
it loads each tile of the shared operand once and feeds both GEMMs. -/
def pairSum [ScalarOps α] (f g : β → α) (ks : List β) : α × α :=
  ks.foldr (fun k acc => (f k + acc.1, g k + acc.2)) (ScalarOps.zero, ScalarOps.zero)

variable [ScalarLaws α]

/-- **`share_operand_load`.** One fused pass computes the same pair as two separate sums. -/
theorem share_operand_load (f g : β → α) (ks : List β) :
    pairSum f g ks = (sumList (ks.map f), sumList (ks.map g)) := by
  induction ks with
  | nil => rfl
  | cons k ks ih =>
    show (f k + (pairSum f g ks).1, g k + (pairSum f g ks).2) =
      (sumList ((k :: ks).map f), sumList ((k :: ks).map g))
    rw [ih]
    rfl

end Share

end Superopt.Rules

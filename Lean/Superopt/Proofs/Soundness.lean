import Superopt.Proofs.RuleLemmas

/-!
# The soundness theorems the rule ids name

`superopt.rules.RULES` (Python) names one theorem per rule, `Superopt.<rule id>_sound`; this
module states them, proved from the lemmas of `Superopt.Rules` (`Superopt.Proofs.RuleLemmas`).
-/

/-! ## The theorems the rule ids name

`superopt.rules.RULES` (Python) names one theorem per rule, `Superopt.<rule id>_sound`. Each is
stated here for the rewrite that the Python rule performs; the proofs are the lemmas above.
Algebraic rules (`stabilize_softmax`, `factor_row_scale`, `exp_to_exp2`) rewrite the graph, so
their theorems compare the denotations of the two graphs. Schedule rules change how kernels
compute a graph, not the graph, so their theorems state the identity the kernel relies on.
-/

namespace Superopt

open Superopt.Semantics Superopt.Rules

section Sound

variable {α β : Type} [ScalarLaws α]

/-- **`stabilize_softmax`.** The rule rewrites `p = exp s / sum_axis (exp s)` of `g` into
`p' = exp (s' - m) / sum_axis (exp (s' - m))` with `m = max_axis s'` in `g'`, where `s'` is
`s` carried over. Then `p'` denotes what `p` denotes. -/
theorem stabilize_softmax_sound {g g' : Graph} {env : String → Index → α} {axis : Axis}
    {s e z p s' m d e' z' p' : NodeId}
    (he : g.nodes[e]? = some (.unary .exp s)) (hse : s < e)
    (hz : g.nodes[z]? = some (.reduce .sum axis e)) (hez : e < z)
    (hp : g.nodes[p]? = some (.binary .div e z)) (hep : e < p) (hzp : z < p)
    (hmax : g'.nodes[m]? = some (.reduce .max axis s')) (hsm : s' < m)
    (hd : g'.nodes[d]? = some (.binary .sub s' m)) (hsd : s' < d) (hmd : m < d)
    (he' : g'.nodes[e']? = some (.unary .exp d)) (hde : d < e')
    (hz' : g'.nodes[z']? = some (.reduce .sum axis e')) (hez' : e' < z')
    (hp' : g'.nodes[p']? = some (.binary .div e' z')) (hep' : e' < p') (hzp' : z' < p')
    (hs : ∀ ix, denote g' env s' ix = denote g env s ix)
    (hsize : axisSize g'.axes axis = axisSize g.axes axis) (idx : Index) :
    denote g' env p' idx = denote g env p idx :=
  denote_stabilize_softmax he hse hz hez hp hep hzp hd hsd hmd he' hde hz' hez' hp' hep' hzp' hs
    (fun ix k => denote_reduce_invariant hmax hsm ix k) hsize idx

/-- **`factor_row_scale`** (FlashNorm). The rule rewrites `o = (x * r) @ w` of `g`, with the
row scale `r` constant along the contracted axis, into `o' = (x' @ w') * r'` in `g'`, where
`x'`, `w'`, `r'` are `x`, `w`, `r` carried over. Then `o'` denotes what `o` denotes. (The
rule's other forms, `r * x` and `x / r`, and a scaled second operand, follow the same way
from `factor_row_scale`, `ScalarLaws.mul_comm` and `sumList_map_div`.) -/
theorem factor_row_scale_sound {g g' : Graph} {env : String → Index → α}
    {o y x r w o' mm x' r' w' : NodeId} {axisA axisB : Axis}
    (ho : g.nodes[o]? = some (.matmul y w axisA axisB)) (hyo : y < o) (hwo : w < o)
    (hy : g.nodes[y]? = some (.binary .mul x r)) (hxy : x < y) (hry : r < y)
    (hr : ∀ ix k, denote g env r (Index.set ix axisA k) = denote g env r ix)
    (hmm : g'.nodes[mm]? = some (.matmul x' w' axisA axisB)) (hxm : x' < mm) (hwm : w' < mm)
    (ho' : g'.nodes[o']? = some (.binary .mul mm r')) (hmo : mm < o') (hro : r' < o')
    (hx : ∀ ix, denote g' env x' ix = denote g env x ix)
    (hw : ∀ ix, denote g' env w' ix = denote g env w ix)
    (hr' : ∀ ix, denote g' env r' ix = denote g env r ix)
    (hsize : axisSize g'.axes axisA = axisSize g.axes axisA) (idx : Index) :
    denote g' env o' idx = denote g env o idx := by
  rw [denote_factor_row_scale ho hyo hwo hy hxy hry hr idx]
  simp only [denote_binary ho' hmo hro, denote_matmul hmm hxm hwm, hx, hw, hr', hsize, evalBinOp]
  exact ScalarLaws.mul_comm _ _

/-- **`exp_to_exp2`.** The rule rewrites `e = exp x` of `g` into `e' = exp2 (x' * c)` in `g'`,
with `c = const v` and `x'` the carried-over `x`. If `v` denotes `log₂ e` (`hv`: exact in the
model; for `Float` the constant is `log₂ e` rounded to binary64), `e'` denotes what `e` does. -/
theorem exp_to_exp2_sound {g g' : Graph} {env : String → Index → α} {e x e' y x' c : NodeId}
    {v : Float}
    (he : g.nodes[e]? = some (.unary .exp x)) (hxe : x < e)
    (he' : g'.nodes[e']? = some (.unary .exp2 y)) (hye : y < e')
    (hy : g'.nodes[y]? = some (.binary .mul x' c)) (hxy : x' < y) (hcy : c < y)
    (hc : g'.nodes[c]? = some (.const v)) (hv : ScalarOps.ofFloat v = (ScalarOps.log2e : α))
    (hx : ∀ ix, denote g' env x' ix = denote g env x ix) (idx : Index) :
    denote g' env e' idx = denote g env e idx := by
  simp only [denote_unary he' hye, denote_binary hy hxy hcy, denote_const hc, hv, hx,
    denote_unary he hxe, evalUnOp, evalBinOp]
  exact ScalarLaws.exp2_mul_log2e _

/-- **`online_softmax`** (Flash Attention 2). The kernel's recurrence over key tiles, started
from `l = acc = 0` and any running max (`-∞`), outputs the literal attention row
`Σⱼ softmax(s)ⱼ · vⱼ` over all keys. -/
theorem online_softmax_sound (s v : β → α) (m₀ : α) (tiles : List (List β)) :
    (onlineSoftmax s v ⟨m₀, ScalarOps.zero, ScalarOps.zero⟩ tiles).out =
      sumList ((concatTiles tiles).map (fun j =>
        ScalarOps.exp (s j) / sumList ((concatTiles tiles).map (fun k => ScalarOps.exp (s k))) *
          v j)) :=
  flash_attention s v m₀ tiles

/-- **`share_operand_load`.** Two `matmul` nodes contracting the same operand `a` along the same
axes denote the pair that one fused pass over the shared tiles of `a` computes. -/
theorem share_operand_load_sound {g : Graph} {env : String → Index → α}
    {o₁ o₂ a w₁ w₂ : NodeId} {axisA axisB : Axis}
    (h₁ : g.nodes[o₁]? = some (.matmul a w₁ axisA axisB)) (ha₁ : a < o₁) (hw₁ : w₁ < o₁)
    (h₂ : g.nodes[o₂]? = some (.matmul a w₂ axisA axisB)) (ha₂ : a < o₂) (hw₂ : w₂ < o₂)
    (idx : Index) :
    (denote g env o₁ idx, denote g env o₂ idx) =
      pairSum
        (fun k => denote g env a (Index.set idx axisA k) * denote g env w₁ (Index.set idx axisB k))
        (fun k => denote g env a (Index.set idx axisA k) * denote g env w₂ (Index.set idx axisB k))
        (List.range (axisSize g.axes axisA)) := by
  rw [share_operand_load, denote_matmul h₁ ha₁ hw₁ idx, denote_matmul h₂ ha₂ hw₂ idx]

/-- **`fuse_prologue`.** A `matmul` whose first operand is an elementwise node `y = op x z`
denotes the contraction of `op` applied to the loaded tiles of `x` and `z`: the elementwise
kernel can run on the consumer's tiles instead of materialising `y`. -/
theorem fuse_prologue_sound {g : Graph} {env : String → Index → α} {o y x z w : NodeId}
    {op : BinOp} {axisA axisB : Axis}
    (ho : g.nodes[o]? = some (.matmul y w axisA axisB)) (hyo : y < o) (hwo : w < o)
    (hy : g.nodes[y]? = some (.binary op x z)) (hxy : x < y) (hzy : z < y) (idx : Index) :
    denote g env o idx =
      sumList ((List.range (axisSize g.axes axisA)).map (fun k =>
        evalBinOp op (denote g env x (Index.set idx axisA k))
            (denote g env z (Index.set idx axisA k)) *
          denote g env w (Index.set idx axisB k))) := by
  simp only [denote_matmul ho hyo hwo, denote_binary hy hxy hzy]

/-- **`fuse_epilogue`.** An elementwise node denotes its op applied pointwise to its producers'
values, so it can run in the producers' epilogue on their accumulator fragments. -/
theorem fuse_epilogue_sound {g : Graph} {env : String → Index → α} {i x y : NodeId}
    {op : BinOp} (h : g.nodes[i]? = some (.binary op x y)) (hx : x < i) (hy : y < i) :
    denote g env i = fun idx => evalBinOp op (denote g env x idx) (denote g env y idx) :=
  fuse_epilogue_binary h hx hy

/-- **`split_kernel`.** A kernel that reads node `x` back from a buffer holding `x`'s values
(an input `name` of its graph `g'` with `env' name = denote g env x`) sees the values that
recomputing `x` inline would give. -/
theorem split_kernel_sound {g g' : Graph} {env env' : String → Index → α} {x buf : NodeId}
    {name : String} {axes : List Axis} (hbuf : g'.nodes[buf]? = some (.input name axes))
    (henv : env' name = denote g env x) (idx : Index) :
    denote g' env' buf idx = denote g env x idx :=
  materialize_read hbuf henv idx

/-- **`tile_parallel`.** Tiling a parallel axis of size `n` by `T` (a grid of `⌈n / T⌉` blocks,
the last one masked) computes every element once, in order. -/
theorem tile_parallel_sound (f : Nat → β) (T n : Nat) :
    (List.range n).map f =
      concatTiles ((List.range (n / T)).map (tileOf f T)) ++
        (List.range (n % T)).map (fun i => f (n / T * T + i)) :=
  tile_parallel_div f T n

/-- **`stream_reduction`.** Streaming a sum over an axis of size `n` in tiles of `T` (the last
one partial) computes the sum. -/
theorem stream_reduction_sound (f : Nat → α) (T n : Nat) :
    sumList ((List.range n).map f) =
      sumList (((List.range (n / T)).map (tileOf f T)).map sumList) +
        sumList ((List.range (n % T)).map (fun i => f (n / T * T + i))) := by
  rw [tile_parallel_div f T n, sumList_append, sumList_concatTiles]

end Sound

end Superopt

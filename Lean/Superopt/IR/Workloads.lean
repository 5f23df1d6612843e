import Superopt.IR.Dsl

/-!
# The reference workloads

| workload      | graph                                         | reference case        |
|---------------|-----------------------------------------------|-----------------------|
| `attention`   | `P = exp(Q @_{d_h} K) / sum_{t_kv} (same); P @ V` | h=16 t_q=t_kv=4096 d_h=128 |
| `swiglu`      | `silu(X @_d W_gate) * (X @_d W_up)`           | m=1024 n=2048 d=2048  |
| `matmul`      | `X @_d W`                                     | m=1024 d=4096 n=4096  |
| `rmsnorm`     | `Y = X * rsqrt(sum_d X^2 / size(d) + eps); Y @_d W` | m=1024 n=4096 d=4096 |
| `rmsnorm_mlp` | `Y` as above; `(Y @_d W_up) * (Y @_d W_gate)` | m=1024 n=1024 d=1024  |
| `llama3_attention` | `softmax_{t_kv}(select(band, (Q @ K)/√d_h, −∞)) @ V`, GQA | b=1 g=8 r=4 t_q=t_kv=4096 d_h=128 |
| `residual_rmsnorm` | `H = X + R`; `Z = rmsnorm(H) * gamma`; outputs `H, Z` | m=4096 d=4096 |

## Main definitions

* `Superopt.attentionGraph` ... `Superopt.rmsnormMlpGraph`, `Superopt.llama3AttentionGraph`,
  `Superopt.residualRmsnormGraph`: the graphs, with the sizes as parameters defaulting to the
  reference case. The registry of names is `Superopt.IR.Registry`.

## Implementation notes

Mirrors `python/superopt/workloads.py` node for node (the golden vectors
`tests/golden/<workload>.graph.msgpack` pin the order), and the axis declaration orders:
attention `h, t_q, t_kv, d_h`; swiglu `m, n, d`; matmul `m, d, n`; rmsnorm and rmsnorm_mlp
`m, n, d`.
-/

namespace Superopt

open Superopt.Dsl

/-- The RMSNorm epsilon of the spec. -/
def rmsEps : Float := 1e-5

/-- Attention without the `1/sqrt(d)` scale:
`Q: [h, t_q, d_h], K: [h, t_kv, d_h], V: [h, t_kv, d_h] → O: [h, t_q, d_h]`, 8 nodes
(`Q K V`, `S = matmul Q K`, `exp`, `reduce.sum[t_kv]`, `div`, `O = matmul P V`). -/
def attentionGraph (h : Nat := 16) (tQ : Nat := 4096) (tKv : Nat := 4096) (dH : Nat := 128) :
    Except GraphError Graph :=
  buildGraphWithOutput "attention" [("h", h), ("t_q", tQ), ("t_kv", tKv), ("d_h", dH)] do
    let q ← input "Q" ["h", "t_q", "d_h"]
    let k ← input "K" ["h", "t_kv", "d_h"]
    let v ← input "V" ["h", "t_kv", "d_h"]
    let s ← matmul q k "d_h" "d_h"
    let p ← softmaxSubdag s "t_kv"
    matmul p v "t_kv" "t_kv"

/-- SwiGLU: `X: [m, d], W_gate: [d, n], W_up: [d, n] → O: [m, n]`, 7 nodes. -/
def swigluGraph (m : Nat := 1024) (n : Nat := 2048) (d : Nat := 2048) :
    Except GraphError Graph :=
  buildGraphWithOutput "swiglu" [("m", m), ("n", n), ("d", d)] do
    let x ← input "X" ["m", "d"]
    let wg ← input "W_gate" ["d", "n"]
    let wu ← input "W_up" ["d", "n"]
    let g ← matmul x wg "d" "d"
    let a ← silu g
    let u ← matmul x wu "d" "d"
    mul a u

/-- A plain GEMM: `X: [m, d], W: [d, n] → O: [m, n]`, 3 nodes. -/
def matmulGraph (m : Nat := 1024) (d : Nat := 4096) (n : Nat := 4096) :
    Except GraphError Graph :=
  buildGraphWithOutput "matmul" [("m", m), ("d", d), ("n", n)] do
    let x ← input "X" ["m", "d"]
    let w ← input "W" ["d", "n"]
    matmul x w "d" "d"

/-- RMSNorm then a GEMM: `X: [m, d], W: [d, n] → O: [m, n]`, eps `1e-5`, 11 nodes. -/
def rmsnormGraph (m : Nat := 1024) (n : Nat := 4096) (d : Nat := 4096) :
    Except GraphError Graph :=
  buildGraphWithOutput "rmsnorm" [("m", m), ("n", n), ("d", d)] do
    let x ← input "X" ["m", "d"]
    let w ← input "W" ["d", "n"]
    let y ← rmsNormSubdag x "d" rmsEps
    matmul y w "d" "d"

/-- RMSNorm then a gated MLP without activation:
`X: [m, d], W_up: [d, n], W_gate: [d, n] → O: [m, n]`, 14 nodes. -/
def rmsnormMlpGraph (m : Nat := 1024) (n : Nat := 1024) (d : Nat := 1024) :
    Except GraphError Graph :=
  buildGraphWithOutput "rmsnorm_mlp" [("m", m), ("n", n), ("d", d)] do
    let x ← input "X" ["m", "d"]
    let wu ← input "W_up" ["d", "n"]
    let wg ← input "W_gate" ["d", "n"]
    let y ← rmsNormSubdag x "d" rmsEps
    let u ← matmul y wu "d" "d"
    let g ← matmul y wg "d" "d"
    mul u g

/-- `-∞` as a binary64 float (the masked-out score of causal attention). -/
def negInfFloat : Float := -(1.0 / 0.0)

/-- LLaMA-3-8B prefill attention (GQA, causal), with the `1/√d_h` scale:
`Q: [b, g, r, t_q, d_h], K: [b, g, t_kv, d_h], V: [b, g, t_kv, d_h] → O: [b, g, r, t_q, d_h]`
(`g` key/value heads, `r` query heads per key head), 13 nodes: `Q K V`, `S = matmul Q K`,
`c = const (1/√d_h)`, `T = S · c`, `M = band t_q t_kv (t_q − t_kv) none`, `N = const (−∞)`,
`X = select M T N`, the softmax over `t_kv` (`exp`, `reduce.sum`, `div`), `O = matmul P V`. -/
def llama3AttentionGraph (b : Nat := 1) (g : Nat := 8) (r : Nat := 4) (tQ : Nat := 4096)
    (tKv : Nat := 4096) (dH : Nat := 128) : Except GraphError Graph :=
  buildGraphWithOutput "llama3_attention"
      [("b", b), ("g", g), ("r", r), ("t_q", tQ), ("t_kv", tKv), ("d_h", dH)] do
    let q ← input "Q" ["b", "g", "r", "t_q", "d_h"]
    let k ← input "K" ["b", "g", "t_kv", "d_h"]
    let v ← input "V" ["b", "g", "t_kv", "d_h"]
    let s ← matmul q k "d_h" "d_h"
    let c ← const (1.0 / Float.sqrt (Float.ofNat dH))
    let t ← mul s c
    let m ← band "t_q" "t_kv" (some (Int.ofNat tQ - Int.ofNat tKv)) none
    let n ← const negInfFloat
    let x ← select m t n
    let p ← softmaxSubdag x "t_kv"
    matmul p v "t_kv" "t_kv"

/-- A residual add, then RMSNorm with a learned gain; two outputs, the residual stream `H` and
the normalised `Z`: `X: [m, d], R: [m, d], gamma: [d] → H: [m, d], Z: [m, d]`, eps `1e-5`,
13 nodes (`X R gamma`, `H = X + R`, the eight RMSNorm nodes, `Z = Y · gamma`). -/
def residualRmsnormGraph (m : Nat := 4096) (d : Nat := 4096) : Except GraphError Graph :=
  buildGraph "residual_rmsnorm" [("m", m), ("d", d)] do
    let x ← input "X" ["m", "d"]
    let r ← input "R" ["m", "d"]
    let gamma ← input "gamma" ["d"]
    let h ← add x r
    let y ← rmsNormSubdag h "d" rmsEps
    let z ← mul y gamma
    let _ ← output h
    let _ ← output z
    pure ()

/-- The number of nodes of a graph builder's result, `0` if it fails (for `#guard`s). -/
def nodeCount (g : Except GraphError Graph) : Nat :=
  match g with
  | .ok g => g.nodes.size
  | .error _ => 0

/-- The output axes of a graph builder's result, `[]` if it fails (for `#guard`s). -/
def outputAxesOf (g : Except GraphError Graph) : List Axis :=
  match g with
  | .ok g =>
    match g.outputAxes with
    | .ok axes => axes
    | .error _ => []
  | .error _ => []

/-! ## Examples, checked when the module is built -/

#guard nodeCount attentionGraph == 8
#guard nodeCount swigluGraph == 7
#guard nodeCount matmulGraph == 3
#guard nodeCount rmsnormGraph == 11
#guard nodeCount rmsnormMlpGraph == 14
#guard outputAxesOf attentionGraph == ["h", "t_q", "d_h"]
#guard outputAxesOf swigluGraph == ["m", "n"]
#guard outputAxesOf (matmulGraph 2 3 4) == ["m", "n"]
#guard outputAxesOf rmsnormMlpGraph == ["m", "n"]
#guard nodeCount llama3AttentionGraph == 13
#guard nodeCount residualRmsnormGraph == 13
#guard outputAxesOf llama3AttentionGraph == ["b", "g", "r", "t_q", "d_h"]
#guard (match residualRmsnormGraph with
  | .ok g => g.outputs == [3, 12]
  | .error _ => false)
-- a bad contraction fails at the node that builds it
#guard
  match buildGraphWithOutput "bad" [("m", 2), ("d", 3)] (do
      let x ← input "X" ["m", "d"]
      matmul x x "m" "d") with
  | .error e => e.kind == .sizeMismatch && e.path == "nodes[1]"
  | .ok _ => false

end Superopt

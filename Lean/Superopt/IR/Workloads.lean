import Superopt.IR.Dsl

/-!
# The five reference workloads

| workload      | graph                                         | reference case        |
|---------------|-----------------------------------------------|-----------------------|
| `attention`   | `P = exp(Q @_{d_h} K) / sum_{t_kv} (same); P @ V` | h=16 t_q=t_kv=4096 d_h=128 |
| `swiglu`      | `silu(X @_d W_gate) * (X @_d W_up)`           | m=1024 n=2048 d=2048  |
| `matmul`      | `X @_d W`                                     | m=1024 d=4096 n=4096  |
| `rmsnorm`     | `Y = X * rsqrt(sum_d X^2 / size(d) + eps); Y @_d W` | m=1024 n=4096 d=4096 |
| `rmsnorm_mlp` | `Y` as above; `(Y @_d W_up) * (Y @_d W_gate)` | m=1024 n=1024 d=1024  |

## Main definitions

* `Superopt.attentionGraph` ... `Superopt.rmsnormMlpGraph`: the graphs, with the sizes as
  parameters defaulting to the reference case.
* `Superopt.Workload`, `Superopt.workloads`, `Superopt.workloadByName?`: the registry the CLI
  uses, with `Workload.graphWithCase` applying `--case` overrides.

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

/-- A named workload: its reference case (axes in declaration order) and its graph builder,
which takes the full case. -/
structure Workload where
  /-- The workload's name, e.g. `"attention"`. -/
  name : String
  /-- The reference case: every axis with its size, in declaration order. -/
  referenceCase : List (Axis × Nat)
  /-- The graph at a full case (every axis of `referenceCase`, any order). -/
  build : List (Axis × Nat) → Except GraphError Graph

/-- The size of `axis` in `sizes`, or `fallback` when absent. -/
def caseSize (sizes : List (Axis × Nat)) (axis : Axis) (fallback : Nat) : Nat :=
  (lookupSize sizes axis).getD fallback

/-- The five workloads, in the order of Python's `WORKLOADS`. -/
def workloads : List Workload := [
  { name := "attention",
    referenceCase := [("h", 16), ("t_q", 4096), ("t_kv", 4096), ("d_h", 128)],
    build := fun c => attentionGraph (caseSize c "h" 16) (caseSize c "t_q" 4096)
      (caseSize c "t_kv" 4096) (caseSize c "d_h" 128) },
  { name := "swiglu",
    referenceCase := [("m", 1024), ("n", 2048), ("d", 2048)],
    build := fun c => swigluGraph (caseSize c "m" 1024) (caseSize c "n" 2048)
      (caseSize c "d" 2048) },
  { name := "matmul",
    referenceCase := [("m", 1024), ("d", 4096), ("n", 4096)],
    build := fun c => matmulGraph (caseSize c "m" 1024) (caseSize c "d" 4096)
      (caseSize c "n" 4096) },
  { name := "rmsnorm",
    referenceCase := [("m", 1024), ("n", 4096), ("d", 4096)],
    build := fun c => rmsnormGraph (caseSize c "m" 1024) (caseSize c "n" 4096)
      (caseSize c "d" 4096) },
  { name := "rmsnorm_mlp",
    referenceCase := [("m", 1024), ("n", 1024), ("d", 1024)],
    build := fun c => rmsnormMlpGraph (caseSize c "m" 1024) (caseSize c "n" 1024)
      (caseSize c "d" 1024) }
]

/-- The names of the workloads, in registry order. -/
def workloadNames : List String := workloads.map (·.name)

/-- The workload called `name`, if any (Python: `get_workload`). -/
def workloadByName? (name : String) : Option Workload := workloads.find? (·.name == name)

/-- The graph of `w` at its reference case with `overrides` rebinding some axes
(Python: `Workload.graph`).

Errors (a message for the `case` error kind, as Python's `CaseError` at `--case`): an axis the
workload lacks, a size of 0; or the graph's own `GraphError`, rendered. -/
def Workload.graphWithCase (w : Workload) (overrides : List (Axis × Nat)) :
    Except String Graph := do
  let known := ", ".intercalate (w.referenceCase.map (·.1))
  for (axis, size) in overrides do
    if (lookupSize w.referenceCase axis).isNone then
      throw s!"workload '{w.name}' has no axis '{axis}'; its axes are {known}"
    if size < 1 then
      throw s!"axis '{axis}' must be a positive integer, got {size}"
  let sizes := w.referenceCase.map fun (axis, size) => (axis, caseSize overrides axis size)
  match w.build sizes with
  | .ok g => pure g
  | .error e => throw (toString e)

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
#guard workloadNames == ["attention", "swiglu", "matmul", "rmsnorm", "rmsnorm_mlp"]
#guard (workloadByName? "conv").isNone
-- a bad contraction fails at the node that builds it
#guard
  match buildGraphWithOutput "bad" [("m", 2), ("d", 3)] (do
      let x ← input "X" ["m", "d"]
      matmul x x "m" "d") with
  | .error e => e.kind == .sizeMismatch && e.path == "nodes[1]"
  | .ok _ => false

end Superopt

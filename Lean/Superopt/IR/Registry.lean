import Superopt.IR.Workloads

/-!
# The registry of named graphs

A plain list: one `Workload` entry per graph (its name, its reference case as
`List (Axis × Nat)` in declaration order, and a builder from a full case to
`Except GraphError Graph`). `lake exe superopt NAME` accepts any name listed here; the Python
registry lists the same names with the same cases.

| name | reference case |
|---|---|
| `attention` | h=16 t_q=4096 t_kv=4096 d_h=128 |
| `swiglu` | m=1024 n=2048 d=2048 |
| `matmul` | m=1024 d=4096 n=4096 |
| `rmsnorm` | m=1024 n=4096 d=4096 |
| `rmsnorm_mlp` | m=1024 n=1024 d=1024 |
| `llama3_attention` | b=1 g=8 r=4 t_q=4096 t_kv=4096 d_h=128 |
| `residual_rmsnorm` | m=4096 d=4096 |

## Main definitions

* `Superopt.Workload`, `Superopt.workloads`, `Superopt.workloadByName?`, `Superopt.workloadNames`;
* `Superopt.Workload.graphWithCase`: the graph with `--case` overrides.

No attributes or environment extensions: registering a graph is adding a line to `workloads`.
-/

namespace Superopt

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

/-- The registered graphs, in the order of Python's registry: one entry per graph, its name,
its reference case and its builder. A user's graph is registered the same way. -/
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
      (caseSize c "d" 1024) },
  { name := "llama3_attention",
    referenceCase :=
      [("b", 1), ("g", 8), ("r", 4), ("t_q", 4096), ("t_kv", 4096), ("d_h", 128)],
    build := fun c => llama3AttentionGraph (caseSize c "b" 1) (caseSize c "g" 8)
      (caseSize c "r" 4) (caseSize c "t_q" 4096) (caseSize c "t_kv" 4096)
      (caseSize c "d_h" 128) },
  { name := "residual_rmsnorm",
    referenceCase := [("m", 4096), ("d", 4096)],
    build := fun c => residualRmsnormGraph (caseSize c "m" 4096) (caseSize c "d" 4096) }
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

/-! ## Examples, checked when the module is built -/

#guard workloadNames ==
  ["attention", "swiglu", "matmul", "rmsnorm", "rmsnorm_mlp", "llama3_attention",
    "residual_rmsnorm"]
#guard (workloadByName? "conv").isNone

end Superopt

import Superopt.IR.Dag

/-!
# The graph-building DSL

`DagM` is a state monad over the nodes built so far: each call (`input`, `matmul`, `exp`, `add`,
`red` ...) appends one node, runs shape inference on it at once and returns its `NodeId`, so a
bad node fails at the line that builds it with a `GraphError` naming `nodes[i]`.

```
def body : DagM NodeId := do
  let x ← input "X" ["m", "d"]
  let w ← input "W" ["d", "n"]
  matmul x w "d" "d"

buildGraphWithOutput "matmul" [("m", 4), ("d", 8), ("n", 2)] body
```

## Main definitions

* `Superopt.Dsl.DagM`, `Superopt.Dsl.buildGraphWithOutput`, `Superopt.Dsl.buildGraph`.
* One builder per op; `maxN` for the elementwise maximum (so that `max` stays `Max.max`);
  `select`, `band`, and `mean` (sugar: `red .sum`, `sizeConst`, `div`).
* `output` marks an output; called several times, it appends (a graph with several outputs).
* `Superopt.Dsl.softmaxSubdag`, `Superopt.Dsl.rmsNormSubdag`: the sub-DAGs the workloads share.

## Implementation notes

A line-for-line mirror of `python/superopt/dsl.py` (`DagBuilder`): the node order is part of the
wire format (golden vectors), so both DSLs build the five workloads' nodes in the same order.
The builders live in the namespace `Superopt.Dsl` (not `Superopt`) so that opening `Superopt`
does not shadow `exp`, `sqrt` or `max` in other modules.
-/

namespace Superopt.Dsl

open Superopt

/-- The builder's state: the declared axes, the nodes so far with their inferred axes, and the
outputs marked so far. -/
structure DagState where
  /-- Declared axes with their sizes, in declaration order. -/
  axes : List (Axis × Nat)
  /-- The nodes built so far. -/
  nodes : Array Node := #[]
  /-- The inferred output axes of each node built so far. -/
  nodeAxes : Array (List Axis) := #[]
  /-- The outputs marked so far, in order. -/
  outputs : List NodeId := []
  deriving Inhabited

/-- The graph-building monad: state over the nodes, failing with a `GraphError`. -/
abbrev DagM := StateT DagState (Except GraphError)

/-- Append `node` after checking that its arguments name earlier nodes (`danglingNode`) and
running shape inference on it; returns its id. -/
def addNode (node : Node) : DagM NodeId := do
  let s ← get
  let i := s.nodes.size
  let path := s!"nodes[{i}]"
  let mut j := 0
  for a in node.args do
    if a ≥ i then
      StateT.lift <| GraphError.throw .danglingNode path
        s!"argument {j} is {a}, which names no earlier node"
    j := j + 1
  let axes ← StateT.lift <| node.inferAxes s.axes path s.nodeAxes
  set { s with nodes := s.nodes.push node, nodeAxes := s.nodeAxes.push axes }
  return i

/-- A tensor argument `name` with the given named axes, e.g. `input "X" ["m", "d"]`. -/
def input (name : String) (axes : List Axis) : DagM NodeId := addNode (.input name axes)

/-- The size of `axis` as a scalar (Python: `size_const`). -/
def sizeConst (axis : Axis) : DagM NodeId := addNode (.size axis)

/-- The scalar epsilon (Python: `eps_const`); stored by its binary64 bits. -/
def epsConst (value : Float) : DagM NodeId := addNode (.eps value.toBits)

/-- A scalar constant (e.g. `1/√d`, `-∞`, or `log2(e)` introduced by a rule); stored by its
binary64 bits. -/
def const (value : Float) : DagM NodeId := addNode (.const value.toBits)

/-- The 0/1 band mask over `[axisA, axisB]`: one where `lo ≤ i_a − i_b ≤ hi` (`none`:
unbounded). Causal attention over `t_q` queries and `t_kv` keys is
`band "t_q" "t_kv" (some (t_q − t_kv)) none`. -/
def band (axisA axisB : Axis) (lo hi : Option Int) : DagM NodeId :=
  addNode (.band axisA axisB lo hi)

/-- An elementwise unary op on `x`. -/
def unary (op : UnOp) (x : NodeId) : DagM NodeId := addNode (.unary op x)

/-- An elementwise binary op; axes: `x`'s, then `y`'s that `x` lacks. -/
def binary (op : BinOp) (x y : NodeId) : DagM NodeId := addNode (.binary op x y)

/-- `e^x`, elementwise. -/
def exp (x : NodeId) : DagM NodeId := unary .exp x
/-- `2^x`, elementwise. -/
def exp2 (x : NodeId) : DagM NodeId := unary .exp2 x
/-- `x * sigmoid(x)`, elementwise. -/
def silu (x : NodeId) : DagM NodeId := unary .silu x
/-- `x^2`, elementwise. -/
def square (x : NodeId) : DagM NodeId := unary .square x
/-- `1 / sqrt(x)`, elementwise. -/
def rsqrt (x : NodeId) : DagM NodeId := unary .rsqrt x
/-- `sqrt(x)`, elementwise. -/
def sqrt (x : NodeId) : DagM NodeId := unary .sqrt x
/-- `-x`, elementwise. -/
def neg (x : NodeId) : DagM NodeId := unary .neg x
/-- `1 / x`, elementwise. -/
def recip (x : NodeId) : DagM NodeId := unary .recip x
/-- `tanh x`, elementwise. -/
def tanh (x : NodeId) : DagM NodeId := unary .tanh x
/-- `1 / (1 + e^(-x))`, elementwise. -/
def sigmoid (x : NodeId) : DagM NodeId := unary .sigmoid x
/-- `max(x, 0)`, elementwise. -/
def relu (x : NodeId) : DagM NodeId := unary .relu x
/-- The natural logarithm, elementwise. -/
def log (x : NodeId) : DagM NodeId := unary .log x
/-- GELU (erf form, `x · Φ(x)`), elementwise. -/
def gelu (x : NodeId) : DagM NodeId := unary .gelu x
/-- GELU (tanh approximation), elementwise. -/
def geluTanh (x : NodeId) : DagM NodeId := unary .geluTanh x

/-- `x + y`, elementwise with broadcasting. -/
def add (x y : NodeId) : DagM NodeId := binary .add x y
/-- `x - y`, elementwise with broadcasting. -/
def sub (x y : NodeId) : DagM NodeId := binary .sub x y
/-- `x * y`, elementwise with broadcasting. -/
def mul (x y : NodeId) : DagM NodeId := binary .mul x y
/-- `x / y`, elementwise with broadcasting. -/
def div (x y : NodeId) : DagM NodeId := binary .div x y
/-- `max(x, y)`, elementwise with broadcasting (Python: `max`). -/
def maxN (x y : NodeId) : DagM NodeId := binary .max x y

/-- `x` where `c ≠ 0`, else `y`, elementwise with broadcasting over all three. -/
def select (c x y : NodeId) : DagM NodeId := addNode (.select c x y)

/-- Reduce `x` over `axis` with `fn` (`red .sum "t_kv" e`). -/
def red (fn : RedFn) (axis : Axis) (x : NodeId) : DagM NodeId := addNode (.reduce fn axis x)

/-- The mean of `x` over `axis`: three nodes `reduce.sum`, `size`, `div`. -/
def mean (axis : Axis) (x : NodeId) : DagM NodeId := do
  let s ← red .sum axis x
  let n ← sizeConst axis
  div s n

/-- Contract `axisA` of `a` with `axisB` of `b`; shared names are batch axes
(`matmul x w "d" "d"`). -/
def matmul (a b : NodeId) (axisA axisB : Axis) : DagM NodeId := addNode (.matmul a b axisA axisB)

/-- Mark `x` as an output (appended after the outputs marked so far); fails with
`danglingNode` at `outputs[i]` if `x` names no node. -/
def output (x : NodeId) : DagM NodeId := do
  let s ← get
  if x ≥ s.nodes.size then
    StateT.lift <| GraphError.throw .danglingNode s!"outputs[{s.outputs.length}]"
      s!"output {x} names no node"
  set { s with outputs := s.outputs ++ [x] }
  return x

/-- Run `body` over the declared `axes` and return the checked graph; `body` must call `output`
at least once.

Errors: the axis table's (`checkAxisTable`), the first bad node's, `missingOutput` (no output),
`graph` at `outputs[i]` (an output marked twice). -/
def buildGraph (name : String) (axes : List (Axis × Nat)) (body : DagM Unit) :
    Except GraphError Graph := do
  checkAxisTable axes
  let (_, s) ← body.run { axes := axes }
  let g : Graph := { name := name, axes := axes, nodes := s.nodes, outputs := s.outputs }
  g.check
  pure g

/-- Run `body` over the declared `axes` and make its result the one output
(Python: `build_graph_with_output`).

Examples: `buildGraphWithOutput "matmul" [("m", 4), ("d", 8), ("n", 2)] body` has 3 nodes when
`body` builds `X`, `W` and their matmul. -/
def buildGraphWithOutput (name : String) (axes : List (Axis × Nat)) (body : DagM NodeId) :
    Except GraphError Graph :=
  buildGraph name axes do
    let x ← body
    let _ ← output x
    pure ()

/-- `exp(S) / sum_axis exp(S)`, the literal (unstabilised) softmax: three nodes `exp`,
`reduce.sum`, `div`. -/
def softmaxSubdag (s : NodeId) (axis : Axis) : DagM NodeId := do
  let e ← exp s
  let z ← red .sum axis e
  div e z

/-- `X * rsqrt(sum_axis(X^2) / size(axis) + eps)`: eight nodes `square`, `reduce.sum`, `size`,
`div`, `eps`, `add`, `rsqrt`, `mul`. -/
def rmsNormSubdag (x : NodeId) (axis : Axis) (eps : Float) : DagM NodeId := do
  let sq ← square x
  let ss ← red .sum axis sq
  let n ← sizeConst axis
  let ms ← div ss n
  let ep ← epsConst eps
  let ad ← add ms ep
  let r ← rsqrt ad
  mul x r

end Superopt.Dsl

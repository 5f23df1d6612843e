/-!
# Tensor DAGs over named axes

The IR that Lean and Python share: a `Graph` is a topologically ordered array of `Node`s over
*named axes* whose sizes are bound per case (`[("m", 1024), ("d", 4096)]`).

Semantics of the ops (the float64 ground truth is `superopt.semantics` on the Python side and
`Superopt.Semantics` here):

* `input name axes`: a tensor argument.
* `size axis`: the scalar size of an axis; `eps bits` and `const bits`: scalars given by the
  IEEE-754 binary64 bits of their value (`eps` is the RMSNorm epsilon of the spec, finite and
  `≥ 0`; `const` is what rules introduce, e.g. `log2(e)`, finite or `±∞`; NaN is refused).
* `band axisA axisB lo hi`: the 0/1 mask over `[axisA, axisB]` that is one where
  `lo ≤ i_a − i_b ≤ hi` (`none` = unbounded); a causal or sliding-window attention mask.
* `unary op x`: elementwise, axes unchanged.
* `binary op x y`: elementwise with named-axis broadcasting. The output axes are `x`'s axes
  followed by `y`'s axes that `x` lacks.
* `select c x y`: `x` where `c ≠ 0`, else `y`, elementwise; output axes `x`'s, then `y`'s that
  `x` lacks, then `c`'s that neither has.
* `reduce fn axis x`: removes `axis`.
* `matmul a b axisA axisB`: contracts `axisA` of `a` with `axisB` of `b` (equal sizes); axes
  with the same name in both are batch axes, as in einsum. Output axes: `a`'s axes without
  `axisA`, then `b`'s axes without `axisB` that `a` lacks.
  E.g. `Q[h,t_q,d_h] @_{d_h} K[h,t_kv,d_h] : [h,t_q,t_kv]`.

## Main definitions

* `Superopt.Node`, `Superopt.Graph`: the IR.
* `Superopt.GraphError`: a typed error with the wire `kind`, a message and a `path`
  (`nodes[5]`, `axes[0]`, `outputs[1]`).
* `Superopt.Node.inferAxes`: shape inference for one node.
* `Superopt.Graph.axesOf`, `Superopt.Graph.check`: shape inference and well-formedness of a
  whole graph.

## Implementation notes

Mirrors `python/superopt/dag.py` (`infer_axes`, `Graph.__post_init__`): the same rules, checked
in the same order, raising the same error kinds. Error messages follow the Python text, with
Python's `repr` of strings (`'d_h'`) and lists (`['h', 't_q']`).
-/

namespace Superopt

/-- A named tensor axis, e.g. `"t_kv"`. -/
abbrev Axis := String

/-- The index of a node in `Graph.nodes`. -/
abbrev NodeId := Nat

/-- Elementwise unary operations. -/
inductive UnOp where
  /-- `e^x`. -/
  | exp
  /-- `2^x`. -/
  | exp2
  /-- `x * sigmoid(x)`. -/
  | silu
  /-- `x^2`. -/
  | square
  /-- `1 / sqrt(x)`. -/
  | rsqrt
  /-- `sqrt(x)`. -/
  | sqrt
  /-- `-x`. -/
  | neg
  /-- `1 / x`. -/
  | recip
  /-- `tanh x`. -/
  | tanh
  /-- `1 / (1 + e^(-x))`. -/
  | sigmoid
  /-- `max(x, 0)`. -/
  | relu
  /-- The natural logarithm. -/
  | log
  /-- GELU, erf form: `x · Φ(x)`. -/
  | gelu
  /-- GELU, tanh approximation: `0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³)))`. -/
  | geluTanh
  deriving Repr, BEq, DecidableEq, Inhabited

/-- Elementwise binary operations (with named-axis broadcasting). -/
inductive BinOp where
  /-- `x + y`. -/
  | add
  /-- `x - y`. -/
  | sub
  /-- `x * y`. -/
  | mul
  /-- `x / y`. -/
  | div
  /-- `max(x, y)`. -/
  | max
  deriving Repr, BEq, DecidableEq, Inhabited

/-- Reduction functions. -/
inductive RedFn where
  /-- Sum over the axis. -/
  | sum
  /-- Maximum over the axis. -/
  | max
  deriving Repr, BEq, DecidableEq, Inhabited

/-- One operation of a graph; arguments name earlier nodes by `NodeId`. -/
inductive Node where
  /-- A tensor argument called `name` with the given named axes. -/
  | input (name : String) (axes : List Axis)
  /-- The size of `axis` as a scalar. -/
  | size (axis : Axis)
  /-- The RMSNorm epsilon, a scalar, by the IEEE-754 binary64 bits of its value. -/
  | eps (bits : UInt64)
  /-- A scalar constant (introduced by rules, e.g. `log2(e)`), by its binary64 bits. -/
  | const (bits : UInt64)
  /-- The 0/1 band mask over `[axisA, axisB]`: one where `lo ≤ i_a − i_b ≤ hi` (`none`:
  unbounded), zero elsewhere. A leaf. -/
  | band (axisA axisB : Axis) (lo hi : Option Int)
  /-- An elementwise unary operation; axes unchanged. -/
  | unary (op : UnOp) (x : NodeId)
  /-- An elementwise binary operation; axes: `x`'s, then `y`'s that `x` lacks. -/
  | binary (op : BinOp) (x y : NodeId)
  /-- Reduce `x` over `axis` with `fn`; removes `axis`. -/
  | reduce (fn : RedFn) (axis : Axis) (x : NodeId)
  /-- Contract `axisA` of `a` with `axisB` of `b`; shared names are batch axes. -/
  | matmul (a b : NodeId) (axisA axisB : Axis)
  /-- `x` where `c ≠ 0`, else `y`, elementwise with broadcasting over all three. -/
  | select (c x y : NodeId)
  deriving Repr, BEq, DecidableEq, Inhabited

/-- A DAG over named axes with one or more outputs.

* `axes`: declared axes with their sizes, in declaration order, e.g.
  `[("h", 16), ("t_q", 4096), ("t_kv", 4096), ("d_h", 128)]`.
* `nodes`: topologically ordered; a node's arguments name earlier nodes only.
* `outputs`: the ids of the output nodes (non-empty, distinct).

A value of this type is not necessarily well formed: `Graph.check` decides that. -/
structure Graph where
  /-- The workload name (`attention`) or a user's name for the graph. -/
  name : String
  /-- Declared axes with their sizes, in declaration order. -/
  axes : List (Axis × Nat)
  /-- The nodes, topologically ordered. -/
  nodes : Array Node
  /-- The ids of the output nodes, in order. -/
  outputs : List NodeId
  deriving Repr, BEq, DecidableEq, Inhabited

/-- The IEEE-754 binary64 bits of the constant `log₂ e ≈ 1.4426950408889634` that
`exp_to_exp2` writes (Python: `LOG2E = 1 / math.log(2.0)`). -/
def log2eBits : UInt64 := 0x3FF71547652B82FE

/-! ## Wire names of the operations -/

/-- The wire name of a unary op, e.g. `"exp2"`. -/
def UnOp.name : UnOp → String
  | .exp => "exp"
  | .exp2 => "exp2"
  | .silu => "silu"
  | .square => "square"
  | .rsqrt => "rsqrt"
  | .sqrt => "sqrt"
  | .neg => "neg"
  | .recip => "recip"
  | .tanh => "tanh"
  | .sigmoid => "sigmoid"
  | .relu => "relu"
  | .log => "log"
  | .gelu => "gelu"
  | .geluTanh => "gelu_tanh"

/-- Every unary op, in the order of Python's `UNARY_OPS`. -/
def UnOp.all : List UnOp :=
  [.exp, .exp2, .silu, .square, .rsqrt, .sqrt, .neg, .recip, .tanh, .sigmoid, .relu, .log, .gelu,
    .geluTanh]

/-- The unary op with wire name `s`, if any. -/
def UnOp.ofName? (s : String) : Option UnOp := UnOp.all.find? (fun op => op.name == s)

/-- The wire name of a binary op, e.g. `"div"`. -/
def BinOp.name : BinOp → String
  | .add => "add"
  | .sub => "sub"
  | .mul => "mul"
  | .div => "div"
  | .max => "max"

/-- Every binary op, in the order of Python's `BINARY_OPS`. -/
def BinOp.all : List BinOp := [.add, .sub, .mul, .div, .max]

/-- The binary op with wire name `s`, if any. -/
def BinOp.ofName? (s : String) : Option BinOp := BinOp.all.find? (fun op => op.name == s)

/-- The wire name of a reduction function: `"sum"` or `"max"`. -/
def RedFn.name : RedFn → String
  | .sum => "sum"
  | .max => "max"

/-- The reduction function with wire name `s`, if any. -/
def RedFn.ofName? (s : String) : Option RedFn :=
  if s == "sum" then some .sum else if s == "max" then some .max else none

/-- The node's arguments, in order (`[x]`, `[x, y]`, `[a, b]`, `[c, x, y]`, or `[]` for
leaves). -/
def Node.args : Node → List NodeId
  | .input _ _ => []
  | .size _ => []
  | .eps _ => []
  | .const _ => []
  | .band _ _ _ _ => []
  | .unary _ x => [x]
  | .binary _ x y => [x, y]
  | .reduce _ _ x => [x]
  | .matmul a b _ _ => [a, b]
  | .select c x y => [c, x, y]

/-- The wire name of the node's op: `input`, `size`, `eps`, `const`, `band`, a unary or binary
op's name, `reduce`, `matmul` or `select`. -/
def Node.opName : Node → String
  | .input _ _ => "input"
  | .size _ => "size"
  | .eps _ => "eps"
  | .const _ => "const"
  | .band _ _ _ _ => "band"
  | .unary op _ => op.name
  | .binary op _ _ => op.name
  | .reduce _ _ _ => "reduce"
  | .matmul _ _ _ _ => "matmul"
  | .select _ _ _ => "select"

/-! ## Errors -/

/-- The kinds of graph errors, one per Python `GraphError` subclass. -/
inductive GraphErrorKind where
  /-- A malformed graph not covered by a more specific kind (`graph`). -/
  | graph
  /-- An axis name not declared by the graph (`unknown_axis`). -/
  | unknownAxis
  /-- One axis name, two sizes; or contracted axes of different sizes (`size_mismatch`). -/
  | sizeMismatch
  /-- Contracting an axis an operand lacks (`contraction`). -/
  | contraction
  /-- Reducing an axis the operand lacks (`reduce_axis`). -/
  | reduceAxis
  /-- An argument id that names no node (`dangling_node`). -/
  | danglingNode
  /-- A node that reads itself or a later node (`cycle`). -/
  | cycle
  /-- A graph without an output (`missing_output`). -/
  | missingOutput
  deriving Repr, BEq, DecidableEq, Inhabited

/-- The wire name of an error kind (`error.kind` of a wire error response), e.g.
`"unknown_axis"`. -/
def GraphErrorKind.wireName : GraphErrorKind → String
  | .graph => "graph"
  | .unknownAxis => "unknown_axis"
  | .sizeMismatch => "size_mismatch"
  | .contraction => "contraction"
  | .reduceAxis => "reduce_axis"
  | .danglingNode => "dangling_node"
  | .cycle => "cycle"
  | .missingOutput => "missing_output"

/-- A graph that is not well formed: the kind, a message, and where (`nodes[5]`, `axes[0]`,
`outputs[1]`). -/
structure GraphError where
  /-- What went wrong. -/
  kind : GraphErrorKind
  /-- A human-readable message naming the axes involved. -/
  message : String
  /-- Where: `nodes[i]`, `axes[i]`, `outputs` or `outputs[i]`. -/
  path : String
  deriving Repr, Inhabited

instance : ToString GraphError where
  toString e := s!"{e.kind.wireName} at {e.path}: {e.message}"

/-- Fail with a `GraphError` of the given kind at `path`. -/
def GraphError.throw {α : Type} (kind : GraphErrorKind) (path message : String) :
    Except GraphError α :=
  Except.error { kind := kind, message := message, path := path }

/-! ## Helpers over axis lists -/

/-- Python's `repr` of a string, as used in error messages: `'d_h'`. -/
def quoteAxis (s : String) : String := "'" ++ s ++ "'"

/-- Python's `repr` of a list of axis names, as used in error messages: `['h', 't_q']`. -/
def showAxes (axes : List Axis) : String :=
  "[" ++ ", ".intercalate (axes.map quoteAxis) ++ "]"

/-- The size bound to `axis` by a declaration table, if declared. -/
def lookupSize (table : List (Axis × Nat)) (axis : Axis) : Option Nat :=
  match table.find? (fun p => p.1 == axis) with
  | some p => some p.2
  | none => none

/-- Whether a list of axis names repeats a name. -/
def hasDupAxis : List Axis → Bool
  | [] => false
  | a :: rest => rest.contains a || hasDupAxis rest

/-- Broadcast axes of a binary op: `x`'s axes, then `y`'s axes that `x` lacks. -/
def broadcastAxes (x y : List Axis) : List Axis :=
  x ++ y.filter (fun a => !x.contains a)

/-! ## Shape inference -/

/-- The output axes of `node`, given the declaration table and the inferred axes of the nodes
before it (`prev[j]` for node `j`). `path` locates the node in errors (`nodes[i]`).

The arguments must already be known to name earlier nodes (see `Graph.inferAll`).

Errors: `unknownAxis` (input, size or band over an undeclared axis), `graph` (empty input
name, repeated input axis, a band over one axis twice, an `eps` that is not finite and `≥ 0`, a
NaN `const`), `reduceAxis`, `contraction`, `sizeMismatch` (contracted axes of different
sizes). -/
def Node.inferAxes (declared : List (Axis × Nat)) (path : String) (prev : Array (List Axis)) :
    Node → Except GraphError (List Axis)
  | .input name axes => do
    if name.isEmpty then
      GraphError.throw .graph path "input needs a non-empty name"
    for a in axes do
      if (lookupSize declared a).isNone then
        GraphError.throw .unknownAxis path
          s!"input {quoteAxis name} uses undeclared axis {quoteAxis a}"
    if hasDupAxis axes then
      GraphError.throw .graph path s!"input {quoteAxis name} repeats an axis: {showAxes axes}"
    pure axes
  | .size axis => do
    if (lookupSize declared axis).isNone then
      GraphError.throw .unknownAxis path s!"size of undeclared axis {quoteAxis axis}"
    pure []
  | .eps bits => do
    let v := Float.ofBits bits
    if v.isNaN || v.isInf || decide (v < 0) then
      GraphError.throw .graph path s!"eps must be finite and >= 0, got {v}"
    pure []
  | .const bits => do
    if (Float.ofBits bits).isNaN then
      GraphError.throw .graph path "const must not be NaN"
    pure []
  | .band axisA axisB _ _ => do
    for a in [axisA, axisB] do
      if (lookupSize declared a).isNone then
        GraphError.throw .unknownAxis path s!"band over undeclared axis {quoteAxis a}"
    if axisA == axisB then
      GraphError.throw .graph path s!"band needs two distinct axes, got {quoteAxis axisA} twice"
    pure [axisA, axisB]
  | .unary _ x => pure (prev.getD x [])
  | .binary _ x y => pure (broadcastAxes (prev.getD x []) (prev.getD y []))
  | .select c x y =>
    pure (broadcastAxes (broadcastAxes (prev.getD x []) (prev.getD y [])) (prev.getD c []))
  | .reduce fn axis x => do
    let xs := prev.getD x []
    if !xs.contains axis then
      GraphError.throw .reduceAxis path
        s!"reduce.{fn.name} over {quoteAxis axis}, but the operand has axes {showAxes xs}"
    pure (xs.filter (fun a => a != axis))
  | .matmul a b axisA axisB => do
    let aAxes := prev.getD a []
    let bAxes := prev.getD b []
    if !aAxes.contains axisA then
      GraphError.throw .contraction path
        (s!"matmul contracts {quoteAxis axisA} of its first operand, which has axes " ++
          showAxes aAxes)
    if !bAxes.contains axisB then
      GraphError.throw .contraction path
        (s!"matmul contracts {quoteAxis axisB} of its second operand, which has axes " ++
          showAxes bAxes)
    let sizeA := (lookupSize declared axisA).getD 0
    let sizeB := (lookupSize declared axisB).getD 0
    if sizeA != sizeB then
      GraphError.throw .sizeMismatch path
        (s!"matmul contracts {quoteAxis axisA} (size {sizeA}) with {quoteAxis axisB} " ++
          s!"(size {sizeB})")
    let aKeep := aAxes.filter (fun x => x != axisA)
    let bKeep := bAxes.filter (fun x => x != axisB)
    if axisA != axisB && (bKeep.contains axisA || aKeep.contains axisB) then
      GraphError.throw .contraction path
        (s!"matmul contracts {quoteAxis axisA} with {quoteAxis axisB} but one of them is also " ++
          "a batch axis of the other operand")
    pure (aKeep ++ bKeep.filter (fun x => !aKeep.contains x))

/-- Check a declaration table from its entry `i` on (`seen` holds the entries before it):
names must be non-empty and an axis declared twice must have one size (`axes[i]` in errors). -/
def checkAxisTableFrom :
    List (Axis × Nat) → Nat → List (Axis × Nat) → Except GraphError Unit
  | [], _, _ => pure ()
  | (a, s) :: rest, i, seen => do
    if a.isEmpty then
      GraphError.throw .graph s!"axes[{i}]" "axis name must be a non-empty string, got ''"
    match lookupSize seen a with
    | some s' =>
      if s' != s then
        GraphError.throw .sizeMismatch s!"axes[{i}]"
          s!"axis {quoteAxis a} declared with sizes {s'} and {s}"
      else pure ()
    | none => pure ()
    checkAxisTableFrom rest (i + 1) ((a, s) :: seen)

/-- Check a declaration table: non-empty names, one size per name.

Errors: `graph` (empty name), `sizeMismatch` (two sizes), at `axes[i]`. -/
def checkAxisTable (table : List (Axis × Nat)) : Except GraphError Unit :=
  checkAxisTableFrom table 0 []

/-- Check the arguments of node `i` (from argument `j` on) of a graph of `total` nodes: each
must name a node (`danglingNode`) computed before node `i` (`cycle`). -/
def checkArgsFrom (total i : Nat) (path : String) : List NodeId → Nat → Except GraphError Unit
  | [], _ => pure ()
  | arg :: rest, j => do
    if arg ≥ total then
      GraphError.throw .danglingNode path
        s!"argument {j} is {arg}, which names no node (the graph has {total})"
    if arg ≥ i then
      GraphError.throw .cycle path
        (s!"argument {j} is node {arg}, which is not computed before node {i}: the graph has " ++
          "a cycle or is not topologically ordered")
    checkArgsFrom total i path rest (j + 1)

/-- The inferred output axes of every node, in node order, after checking the declaration
table and every node's arguments (as Python's `Graph.__post_init__` does, minus the output).

Errors: any `GraphError` kind but `missingOutput`; `graph` for an input name declared twice. -/
def Graph.inferAll (g : Graph) : Except GraphError (Array (List Axis)) := do
  checkAxisTable g.axes
  let total := g.nodes.size
  let mut out : Array (List Axis) := #[]
  -- the input names seen so far, each with its node (one name, one tensor)
  let mut inputs : List (Axis × Nat) := []
  for node in g.nodes do
    let i := out.size
    let path := s!"nodes[{i}]"
    match node with
    | .input name _ =>
      match lookupSize inputs name with
      | some j =>
        GraphError.throw .graph path
          (s!"input {quoteAxis name} is declared twice (nodes[{j}] and nodes[{i}]); give " ++
            "each input its own name, or read one input node twice")
      | none => inputs := (name, i) :: inputs
    | _ => pure ()
    checkArgsFrom total i path node.args 0
    let axes ← node.inferAxes g.axes path out
    out := out.push axes
  return out

/-- The inferred output axes of node `i` of `g`.

Errors: any error of `Graph.inferAll`; `danglingNode` if `i` names no node.

Examples: the output of `attentionGraph` has axes `["h", "t_q", "d_h"]`. -/
def Graph.axesOf (g : Graph) (i : NodeId) : Except GraphError (List Axis) := do
  let all ← g.inferAll
  match all[i]? with
  | some axes => pure axes
  | none =>
    GraphError.throw .danglingNode s!"nodes[{i}]"
      s!"node {i} names no node (the graph has {g.nodes.size})"

/-- Check the output list from entry `i` on (`seen` holds the entries before it): each must
name a node (`danglingNode`) and appear once (`graph`), at `outputs[i]`. -/
def checkOutputsFrom (total : Nat) : List NodeId → Nat → List NodeId → Except GraphError Unit
  | [], _, _ => pure ()
  | o :: rest, i, seen => do
    if o ≥ total then
      GraphError.throw .danglingNode s!"outputs[{i}]" s!"output {o} names no node"
    if seen.contains o then
      GraphError.throw .graph s!"outputs[{i}]" s!"output {o} is listed twice"
    checkOutputsFrom total rest (i + 1) (o :: seen)

/-- Check that `g` is well formed: the declaration table, every node (arguments and shape
inference), and the outputs.

Errors: any `GraphError` kind; `missingOutput` at `outputs` for an empty output list;
`danglingNode` at `outputs[i]` for an output naming no node; `graph` at `outputs[i]` for an
output listed twice. -/
def Graph.check (g : Graph) : Except GraphError Unit := do
  let _ ← g.inferAll
  if g.outputs.isEmpty then
    GraphError.throw .missingOutput "outputs" "the graph has no output"
  checkOutputsFrom g.nodes.size g.outputs 0 []

/-- The first output of a graph (`0` for a graph without outputs, which `Graph.check`
refuses). -/
def Graph.output (g : Graph) : NodeId := g.outputs.headD 0

/-- The output axes of a well-formed graph's outputs, in order (see `Graph.axesOf`). -/
def Graph.outputsAxes (g : Graph) : Except GraphError (List (List Axis)) := do
  g.check
  g.outputs.mapM g.axesOf

/-- The output axes of a well-formed graph's first output (see `Graph.axesOf`). -/
def Graph.outputAxes (g : Graph) : Except GraphError (List Axis) := do
  g.check
  g.axesOf g.output

/-- The size bound to `axis` by the graph's declaration table, if declared. -/
def Graph.axisSize? (g : Graph) (axis : Axis) : Option Nat := lookupSize g.axes axis

end Superopt

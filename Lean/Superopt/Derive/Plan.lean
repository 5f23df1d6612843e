import Superopt.IR.Dag

/-!
# Kernel plans: the state a derivation acts on

A `Plan` is a graph (possibly rewritten by the algebraic rules) and a partition of its computed
nodes into `Kernel`s, in launch order. Per kernel:

* `nodes`: the graph nodes it computes, sorted (leaves — inputs, `size`, `eps`, `const`,
  `band` — belong to no kernel: inputs live in global memory, the scalar leaves and the band
  mask are index expressions folded into the kernel code);
* `grid`: the parallel axes tiled onto the grid (rule `tile_parallel`);
* `stream`: the reduction axis streamed in tiles through a pipelined loop (`stream_reduction`);
* `online`: the accumulators are rescaled when a streamed max grows (`online_softmax`);
* `shared`: the reduction nodes that read one operand tile once (`share_operand_load`).

## Main definitions

* `Superopt.Kernel`, `Superopt.Plan`, `Superopt.initialPlan`.
* `Plan.outputs`, `Plan.externalArgs`, `Plan.domain`, `Plan.reductionAxis`,
  `Plan.isUnscheduled`, `Plan.owner`.
* `Superopt.PlanKey` and `Plan.canonical`: the canonical form two plans are compared by (the
  information of Python's `Plan.canonical()`), with derived `BEq` and `DecidableEq` and a
  `Hashable` instance; `Superopt.KeySet`, a small hash set of keys.

## Implementation notes

Mirrors `python/superopt/plan.py` definition for definition. Nodes of `Superopt.Graph` do not
carry their inferred axes, so a plan caches them (`Plan.nodeAxes`) and the consumers of every
node (`Plan.consumerTable`); both depend on the graph only, and `Plan.make` computes them. The
schedule rules change `kernels` only (`{ p with kernels := … }` keeps the caches valid); a
rewritten graph always goes through `initialPlan`, hence `Plan.make`.
-/

namespace Superopt

/-! ## Small helpers over lists of ids and axes -/

/-- Insert `x` into the list `ys`, sorted by `lt`, before the first element it is less than
(duplicates kept). -/
def insertSortedBy {α : Type} (lt : α → α → Bool) (x : α) : List α → List α
  | [] => [x]
  | y :: ys => if lt x y then x :: y :: ys else y :: insertSortedBy lt x ys

/-- Sort by `lt` (insertion sort; duplicates kept). -/
def sortBy {α : Type} (lt : α → α → Bool) (xs : List α) : List α :=
  xs.foldl (fun acc x => insertSortedBy lt x acc) []

/-- Insert `x` into the sorted, duplicate-free list `ys` unless it is already there. -/
def insertSortedUniq {α : Type} [BEq α] (lt : α → α → Bool) (x : α) : List α → List α
  | [] => [x]
  | y :: ys =>
    if x == y then y :: ys
    else if lt x y then x :: y :: ys
    else y :: insertSortedUniq lt x ys

/-- The distinct elements of `xs`, sorted by `lt` (Python: `sorted(set(xs))`). -/
def sortUniq {α : Type} [BEq α] (lt : α → α → Bool) (xs : List α) : List α :=
  xs.foldl (fun acc x => insertSortedUniq lt x acc) []

/-- The distinct node ids of `xs`, ascending. -/
def sortNats (xs : List Nat) : List Nat := sortUniq (fun a b => decide (a < b)) xs

/-- Axis names sorted by code points (Python's `sorted` on strings); duplicates kept. -/
def sortAxes (xs : List Axis) : List Axis := sortBy (fun a b => decide (a < b)) xs

/-- `n` copies of `v`, as an array. -/
def arrayOf {α : Type} (n : Nat) (v : α) : Array α := (List.replicate n v).toArray

/-! ## Node helpers -/

/-- Leaves: `input`, `size`, `eps`, `const`, `band` (Python's `LEAF_OPS`). -/
def Node.isLeaf : Node → Bool
  | .input _ _ => true
  | .size _ => true
  | .eps _ => true
  | .const _ => true
  | .band _ _ _ _ => true
  | _ => false

/-- Scalar leaves: `size`, `eps`, `const`, and the `band` mask (index expressions, never read
from global memory). -/
def Node.isScalarLeaf : Node → Bool
  | .size _ => true
  | .eps _ => true
  | .const _ => true
  | .band _ _ _ _ => true
  | _ => false

/-- Whether the node is an input. -/
def Node.isInput : Node → Bool
  | .input _ _ => true
  | _ => false

/-- Elementwise nodes: the unary and binary ops and `select` (Python's `ELEMENTWISE_OPS`). -/
def Node.isElementwise : Node → Bool
  | .unary _ _ => true
  | .binary _ _ _ => true
  | .select _ _ _ => true
  | _ => false

/-- The node with its arguments renamed by `f`. -/
def Node.mapArgs (f : NodeId → NodeId) : Node → Node
  | .unary op x => .unary op (f x)
  | .binary op x y => .binary op (f x) (f y)
  | .reduce fn axis x => .reduce fn axis (f x)
  | .matmul a b axisA axisB => .matmul (f a) (f b) axisA axisB
  | .select c x y => .select (f c) (f x) (f y)
  | n => n

/-- The node `i` of `g` (an `input` with an empty name when `i` names no node). -/
def Graph.node (g : Graph) (i : NodeId) : Node := g.nodes.getD i default

/-- The inferred axes of every node, in node order (`[]` for a node whose inference fails,
which a well-formed graph never has). -/
def Graph.nodeAxes (g : Graph) : Array (List Axis) := Id.run do
  let mut out : Array (List Axis) := #[]
  for node in g.nodes do
    let axes : List Axis := match Node.inferAxes g.axes "" out node with
      | .ok a => a
      | .error _ => []
    out := out.push axes
  return out

/-- For every node, the nodes that read it, ascending, each once (Python: `Graph.consumers`). -/
def Graph.consumerTable (g : Graph) : Array (List NodeId) := Id.run do
  let n := g.nodes.size
  let mut table : Array (Array NodeId) := arrayOf n #[]
  for i in [0:n] do
    for a in (g.node i).args do
      let row := table.getD a #[]
      if decide (a < n) && !row.contains i then
        table := table.set! a (row.push i)
  return table.map (·.toList)

/-- Which nodes some output depends on (Python: `Graph.live_nodes`), as a flag per node. -/
def Graph.liveFlags (g : Graph) : Array Bool := Id.run do
  let n := g.nodes.size
  let mut live : Array Bool := arrayOf n false
  for o in g.outputs do
    if o < n then
      live := live.set! o true
  -- args name earlier nodes: one pass from the last node down reaches every ancestor
  for j in [0:n] do
    let i := n - 1 - j
    if live.getD i false then
      for a in (g.node i).args do
        if a < n then
          live := live.set! a true
  return live

/-! ## Kernels and plans -/

/-- One kernel of a plan (see the module docstring). `nodes` is sorted. -/
structure Kernel where
  /-- The graph nodes the kernel computes, ascending. -/
  nodes : Array NodeId
  /-- The parallel axes tiled onto the grid, in domain order. -/
  grid : Array Axis := #[]
  /-- The reduction axis streamed in tiles, if any. -/
  stream : Option Axis := none
  /-- Whether the streamed accumulators are rescaled online (Flash Attention 2). -/
  online : Bool := false
  /-- The reduction nodes that read one operand tile from shared memory once, ascending. -/
  shared : Array NodeId := #[]
  deriving Repr, BEq, Inhabited

/-- A graph and its kernels in launch order, with caches derived from the graph. -/
structure Plan where
  /-- The (possibly rewritten) graph. -/
  graph : Graph
  /-- The kernels, in launch order. -/
  kernels : Array Kernel
  /-- Cache: the inferred axes of every node of `graph` (`Graph.nodeAxes`). -/
  nodeAxes : Array (List Axis)
  /-- Cache: the consumers of every node of `graph` (`Graph.consumerTable`). -/
  consumerTable : Array (List NodeId)
  deriving Repr, Inhabited

/-- The plan of `g` with kernels `ks`, its caches computed. -/
def Plan.make (g : Graph) (ks : Array Kernel) : Plan :=
  { graph := g, kernels := ks, nodeAxes := g.nodeAxes, consumerTable := g.consumerTable }

/-- One kernel per live computed node, in node order, nothing tiled or streamed. -/
def initialKernels (g : Graph) : Array Kernel := Id.run do
  let live := g.liveFlags
  let mut ks : Array Kernel := #[]
  for i in [0:g.nodes.size] do
    if live.getD i false && !(g.node i).isLeaf then
      ks := ks.push { nodes := #[i] }
  return ks

/-- The plan of `g` with `initialKernels` (Python: `initial_plan`); its graph is `g`. -/
def initialPlan (g : Graph) : Plan := Plan.make g (initialKernels g)

namespace Plan

/-- Node `i` of the plan's graph. -/
def node (p : Plan) (i : NodeId) : Node := p.graph.node i

/-- The inferred axes of node `i`. -/
def axesOf (p : Plan) (i : NodeId) : List Axis := p.nodeAxes.getD i []

/-- The nodes that read node `i`, ascending. -/
def consumers (p : Plan) (i : NodeId) : List NodeId := p.consumerTable.getD i []

/-- Kernel `k` (an empty kernel when `k` is out of range). -/
def kernel (p : Plan) (k : Nat) : Kernel := p.kernels.getD k default

/-- The index of the kernel computing `node` (`none` for leaves). As Python's owner map, the
last kernel listing it wins (kernels partition the nodes, so there is one). -/
def owner (p : Plan) (node : NodeId) : Option Nat := Id.run do
  let mut o : Option Nat := none
  for k in [0:p.kernels.size] do
    if (p.kernel k).nodes.contains node then
      o := some k
  return o

/-- Nodes of kernel `k` materialised in global memory: read by a node outside the kernel, or
one of the graph's outputs. In kernel order. -/
def outputs (p : Plan) (k : Nat) : Array NodeId :=
  let kern := (p.kernel k).nodes
  kern.filter fun n =>
    p.graph.outputs.contains n || (p.consumers n).any (fun c => !kern.contains c)

/-- The iteration domain of kernel `k`: the axes of its widest output, ties to the later node
(Python: `max(outs, key=lambda n: (len(axes), n))`); `[]` for a kernel without outputs. -/
def domain (p : Plan) (k : Nat) : List Axis := Id.run do
  let mut best : Option (Nat × NodeId) := none
  for n in p.outputs k do
    let len := (p.axesOf n).length
    match best with
    | none => best := some (len, n)
    | some (bl, bn) =>
      if decide (len > bl) || (len == bl && decide (n > bn)) then
        best := some (len, n)
  match best with
  | some (_, n) => return p.axesOf n
  | none => return []

/-- Non-scalar nodes kernel `k` reads from outside (inputs or earlier kernels), ascending. -/
def externalArgs (p : Plan) (k : Nat) : Array NodeId := Id.run do
  let kern := (p.kernel k).nodes
  let mut seen : Array NodeId := #[]
  for n in kern do
    for a in (p.node n).args do
      if !kern.contains a && !(p.node a).isScalarLeaf && !seen.contains a then
        seen := seen.push a
  return (sortNats seen.toList).toArray

/-- The axis kernel `k` reduces: among its reduce axes and matmul contracted (first-operand)
axes that its domain lacks, the last in node order; `none` if there is none. -/
def reductionAxis (p : Plan) (k : Nat) : Option Axis := Id.run do
  let dom := p.domain k
  let mut last : Option Axis := none
  for n in (p.kernel k).nodes do
    match p.node n with
    | .reduce _ axis _ =>
      if !dom.contains axis then
        last := some axis
    | .matmul _ _ axisA _ =>
      if !dom.contains axisA then
        last := some axisA
    | _ => pure ()
  return last

/-- Every kernel is one node with no tiling and no stream: the only state the algebraic rules
act on. -/
def isUnscheduled (p : Plan) : Bool :=
  p.kernels.all fun k => k.nodes.size == 1 && k.grid.isEmpty && k.stream.isNone

end Plan

/-! ## Canonical form -/

/-- A node as Python's `Plan.canonical()` sees it: `(op, args, name, axis, axis_b, fn, value,
lo, hi)` (an input's axes are not part of it; a float is compared by its bits). -/
structure NodeKey where
  /-- The wire name of the op. -/
  op : String
  /-- The arguments. -/
  args : List NodeId
  /-- An input's name. -/
  name : Option String
  /-- `size`'s axis, `reduce`'s axis, or `matmul`'s contracted axis of `a`. -/
  axis : Option Axis
  /-- `matmul`'s contracted axis of `b`. -/
  axisB : Option Axis
  /-- `reduce`'s function (`sum` or `max`). -/
  fn : Option String
  /-- The IEEE-754 bits of an `eps` or `const` value. -/
  value : Option UInt64
  /-- A band's lower bound (`none`: unbounded, or not a band). -/
  lo : Option Int := none
  /-- A band's upper bound. -/
  hi : Option Int := none
  deriving Repr, BEq, DecidableEq, Inhabited

/-- A kernel as Python's `Plan.canonical()` sees it: `(nodes, sorted(grid), stream, online,
shared)`. -/
structure KernelKey where
  /-- The nodes, ascending. -/
  nodes : Array NodeId
  /-- The grid axes, sorted by code points. -/
  grid : List Axis
  /-- The streamed axis. -/
  stream : Option Axis
  /-- Online rescaling. -/
  online : Bool
  /-- The shared-load anchors. -/
  shared : Array NodeId
  deriving Repr, BEq, DecidableEq, Inhabited

/-- The canonical form of a plan: equal for plans that are the same program (Python:
`Plan.canonical()`: graph axes, nodes, outputs, kernels; not the graph's name). -/
structure PlanKey where
  /-- The declared axes with their sizes. -/
  axes : List (Axis × Nat)
  /-- The nodes. -/
  nodes : Array NodeKey
  /-- The output nodes. -/
  outputs : List NodeId
  /-- The kernels, in launch order. -/
  kernels : Array KernelKey
  deriving Repr, BEq, DecidableEq, Inhabited

/-- The canonical form of a node. -/
def Node.key : Node → NodeKey
  | .input name _ =>
    { op := "input", args := [], name := some name, axis := none, axisB := none, fn := none,
      value := none }
  | .size axis =>
    { op := "size", args := [], name := none, axis := some axis, axisB := none, fn := none,
      value := none }
  | .eps bits =>
    { op := "eps", args := [], name := none, axis := none, axisB := none, fn := none,
      value := some bits }
  | .const bits =>
    { op := "const", args := [], name := none, axis := none, axisB := none, fn := none,
      value := some bits }
  | .band axisA axisB lo hi =>
    { op := "band", args := [], name := none, axis := some axisA, axisB := some axisB,
      fn := none, value := none, lo := lo, hi := hi }
  | .select c x y =>
    { op := "select", args := [c, x, y], name := none, axis := none, axisB := none, fn := none,
      value := none }
  | .unary op x =>
    { op := op.name, args := [x], name := none, axis := none, axisB := none, fn := none,
      value := none }
  | .binary op x y =>
    { op := op.name, args := [x, y], name := none, axis := none, axisB := none, fn := none,
      value := none }
  | .reduce fn axis x =>
    { op := "reduce", args := [x], name := none, axis := some axis, axisB := none,
      fn := some fn.name, value := none }
  | .matmul a b axisA axisB =>
    { op := "matmul", args := [a, b], name := none, axis := some axisA, axisB := some axisB,
      fn := none, value := none }

/-- The canonical form of a kernel (its grid sorted). -/
def Kernel.key (k : Kernel) : KernelKey :=
  { nodes := k.nodes, grid := sortAxes k.grid.toList, stream := k.stream, online := k.online,
    shared := k.shared }

/-- The canonical form of a plan. -/
def Plan.canonical (p : Plan) : PlanKey :=
  { axes := p.graph.axes, nodes := p.graph.nodes.map Node.key, outputs := p.graph.outputs,
    kernels := p.kernels.map Kernel.key }

/-- Plans are equal when their canonical forms are. -/
instance : BEq Plan := ⟨fun a b => a.canonical == b.canonical⟩

/-! ## Hashing canonical forms -/

/-- Mix a string into a hash. -/
def mixStr (h : UInt64) (s : String) : UInt64 := mixHash h (hash s)

/-- Mix a natural number into a hash. -/
def mixNat (h : UInt64) (n : Nat) : UInt64 := mixHash h (hash n)

/-- Mix an optional integer into a hash. -/
def mixOptInt (h : UInt64) : Option Int → UInt64
  | none => mixHash h 11
  | some i => mixHash (mixHash h (hash i)) 13

/-- Mix an optional string into a hash. -/
def mixOptStr (h : UInt64) : Option String → UInt64
  | none => mixHash h 11
  | some s => mixHash (mixStr h s) 13

/-- Mix a node key into a hash. -/
def NodeKey.mixInto (h : UInt64) (n : NodeKey) : UInt64 :=
  let h := mixStr h n.op
  let h := n.args.foldl mixNat (mixHash h 17)
  let h := mixOptStr (mixOptStr (mixOptStr (mixOptStr h n.name) n.axis) n.axisB) n.fn
  let h := mixOptInt (mixOptInt h n.lo) n.hi
  match n.value with
  | none => mixHash h 11
  | some v => mixHash (mixHash h v) 13

/-- Mix a kernel key into a hash. -/
def KernelKey.mixInto (h : UInt64) (k : KernelKey) : UInt64 :=
  let h := k.nodes.foldl mixNat (mixHash h 19)
  let h := k.grid.foldl mixStr (mixHash h 23)
  let h := mixOptStr h k.stream
  let h := mixHash h (if k.online then 29 else 31)
  k.shared.foldl mixNat (mixHash h 37)

/-- A hash of the whole canonical form (equal keys have equal hashes). -/
def PlanKey.hash (p : PlanKey) : UInt64 :=
  let h := p.axes.foldl (fun acc a => mixNat (mixStr acc a.1) a.2) (7 : UInt64)
  let h := p.nodes.foldl NodeKey.mixInto (mixHash h 41)
  let h := p.outputs.foldl mixNat (mixHash h 47)
  p.kernels.foldl KernelKey.mixInto (mixHash h 43)

instance : Hashable PlanKey := ⟨PlanKey.hash⟩

/-- A set of canonical forms: a fixed number of buckets indexed by the hash. -/
structure KeySet where
  /-- The buckets. -/
  buckets : Array (Array PlanKey)

/-- The number of buckets of a `KeySet`. -/
def KeySet.bucketCount : Nat := 4096

/-- The empty set. -/
def KeySet.empty : KeySet := ⟨arrayOf KeySet.bucketCount #[]⟩

/-- The bucket of `k`. -/
def KeySet.index (k : PlanKey) : Nat := (hash k).toNat % KeySet.bucketCount

/-- Whether `k` is in the set. -/
def KeySet.contains (s : KeySet) (k : PlanKey) : Bool :=
  (s.buckets.getD (KeySet.index k) #[]).contains k

/-- The set with `k` added (no check for presence: call `contains` first). -/
def KeySet.insert (s : KeySet) (k : PlanKey) : KeySet :=
  let i := KeySet.index k
  ⟨s.buckets.set! i ((s.buckets.getD i #[]).push k)⟩

end Superopt

import Superopt.IR.Dag
import Superopt.Derive.Plan
import Superopt.Wire.Msgpack

/-!
# The wire messages: graphs, derivations, requests and responses

Maps the IR to `MsgValue`s with keys in the order `docs/wire.md` section 4 lists (so that the
canonical bytes equal Python's, checked against `tests/golden/*.msgpack`), and checks decoded
values against the schemas, reporting the first violation with the wire's error kind and the
path of the field (`graph.nodes[3].axis`).

## Main definitions

* `Superopt.Graph.toMsg`, `Superopt.Graph.ofMsg?`: graph maps (4.1); decoding reruns shape
  inference (`Graph.check`).
* `Superopt.Derivation` with `toMsg` / `ofMsg?` (4.2).
* `Superopt.Wire.pingRequest`, `deriveRequest`, `lowerRequest`, `tuneRequest`,
  `replayRequest` (4.3).
* `Superopt.Plan.toMsg`: the plan map a `replay` response carries (4.3), so that Lean compares
  Python's plan with its own byte for byte.
* `Superopt.Results` with `toMsg` / `ofMsg?` (4.4; `certificate` is the chain of Lean theorem
  names of the top-1's derivation), `Superopt.Response.ofMsg?` for any response, error
  responses (4.5) included.

## Implementation notes

Mirrors `python/superopt/wire.py` (`graph_to_wire`, `graph_from_wire`, `derivation_to_wire`,
`derivation_from_wire`, `tune_request`, `results_from_wire`, `error_response`). The order of
checks is the one of docs/wire.md: `v`, `kind`, missing keys in the listed order, extra keys,
then each field in order.
-/

namespace Superopt

/-- A message that is not what the wire allows: the wire error kind (`decode`, `version`,
`unknown_kind`, `schema`, or a graph kind such as `dangling_node`), a message and the path of
the offending field (`""` for the whole message). -/
structure WireError where
  /-- The wire error kind (docs/wire.md section 5). -/
  kind : String
  /-- A message for humans. -/
  message : String
  /-- The path of the field, e.g. `graph.nodes[3].axis`. -/
  path : String
  deriving Repr, Inhabited

instance : ToString WireError where
  toString e := s!"[{e.kind}] at {e.path}: {e.message}"

/-- Decoding and schema checking: `Except WireError`. -/
abbrev WireM := Except WireError

namespace Wire

/-- The protocol version this side speaks. -/
def version : Nat := 2

/-- Exclusive upper bound of sizes, node ids and counts on the wire (`2^31`). -/
def int31 : Int := 2147483648

/-- `path.key`, or `key` at the top level. -/
def joinPath (path key : String) : String := if path.isEmpty then key else path ++ "." ++ key

/-- `path[i]`. -/
def indexPath (path : String) (i : Nat) : String := s!"{path}[{i}]"

/-- Fail with a `schema` error at `path`. -/
def schemaError {α : Type} (path message : String) : WireM α :=
  .error { kind := "schema", message := message, path := path }

/-- The wire type name of a value, for messages (`"map"`, `"int"` ...). -/
def typeName : MsgValue → String
  | .nil => "nil"
  | .bool _ => "bool"
  | .int _ => "int"
  | .float _ => "float"
  | .str _ => "str"
  | .bin _ => "bin"
  | .arr _ => "array"
  | .map _ => "map"

/-- A natural number as a wire integer. -/
def nat (n : Nat) : MsgValue := .int (Int.ofNat n)

/-- An optional string, `nil` when absent. -/
def optStr : Option String → MsgValue
  | some s => .str s
  | none => .nil

/-- An optional integer, `nil` when absent. -/
def optInt : Option Int → MsgValue
  | some i => .int i
  | none => .nil

/-- An optional float, `nil` when absent. -/
def optFloat : Option Float → MsgValue
  | some f => .float f
  | none => .nil

/-- The entries of a map, else a `schema` error at `path`. -/
def asMap (v : MsgValue) (path : String) : WireM (List (String × MsgValue)) :=
  match v with
  | .map entries => pure entries
  | other => schemaError path s!"expected a map, got {typeName other}"

/-- The items of an array, else a `schema` error at `path`. -/
def asArr (v : MsgValue) (path : String) : WireM (List MsgValue) :=
  match v with
  | .arr items => pure items
  | other => schemaError path s!"expected an array, got {typeName other}"

/-- A string, else a `schema` error at `path`. -/
def asStr (v : MsgValue) (path : String) : WireM String :=
  match v with
  | .str s => pure s
  | other => schemaError path s!"expected a str, got {typeName other}"

/-- An integer in `[lo, hi)`, else a `schema` error at `path` (booleans and floats are not
integers). -/
def asIntIn (v : MsgValue) (path : String) (lo hi : Int) : WireM Int :=
  match v with
  | .int i =>
    if lo ≤ i ∧ i < hi then pure i
    else schemaError path s!"{i} is out of range [{lo}, {hi})"
  | other => schemaError path s!"expected an int, got {typeName other}"

/-- A `count`/`size`/`id`: an integer in `[0, 2^31)`. -/
def asCount (v : MsgValue) (path : String) : WireM Nat := do
  let i ← asIntIn v path 0 int31
  pure i.toNat

/-- An `i64`. -/
def asI64 (v : MsgValue) (path : String) : WireM Int :=
  asIntIn v path (-9223372036854775808) 9223372036854775808

/-- A float (an integer is not a float); NaN rejected unless `allowNaN`. -/
def asF64 (v : MsgValue) (path : String) (allowNaN : Bool := true) : WireM Float :=
  match v with
  | .float f =>
    if !allowNaN && f.isNaN then schemaError path "NaN is not allowed here" else pure f
  | other => schemaError path s!"expected a float, got {typeName other}"

/-- `nil`, or a float. -/
def asOptF64 (v : MsgValue) (path : String) : WireM (Option Float) :=
  match v with
  | .nil => pure none
  | other => do return some (← asF64 other path)

/-- `nil`, or an `i64`. -/
def asOptI64 (v : MsgValue) (path : String) : WireM (Option Int) :=
  match v with
  | .nil => pure none
  | other => do return some (← asI64 other path)

/-- `nil`, or a string. -/
def asOptStr (v : MsgValue) (path : String) : WireM (Option String) :=
  match v with
  | .nil => pure none
  | other => do return some (← asStr other path)

/-- A string among `allowed`, else a `schema` error naming them. -/
def asEnum (v : MsgValue) (path : String) (allowed : List String) (what : String) :
    WireM String := do
  let s ← asStr v path
  let known := ", ".intercalate allowed
  if allowed.contains s then pure s
  else schemaError path s!"unknown {what} '{s}'; expected one of {known}"

/-- The value of an option, else a `schema` error at `path`. -/
def require {α : Type} (o : Option α) (path message : String) : WireM α :=
  match o with
  | some a => pure a
  | none => schemaError path message

/-- `nil`, or a count. -/
def asOptCount (v : MsgValue) (path : String) : WireM (Option Nat) :=
  match v with
  | .nil => pure none
  | other => do return some (← asCount other path)

/-- The value under `key` (`nil` when absent: call after `checkKeys`). -/
def field (entries : List (String × MsgValue)) (key : String) : MsgValue :=
  (MsgValue.lookup entries key).getD .nil

/-- Check that a map has exactly `keys`: the first missing key (in `keys` order), then the
first extra key (in map order), are `schema` errors. -/
def checkKeys (entries : List (String × MsgValue)) (keys : List String) (path : String) :
    WireM Unit := do
  for k in keys do
    if (MsgValue.lookup entries k).isNone then
      schemaError (joinPath path k) s!"missing key '{k}'"
  let expected := ", ".intercalate keys
  for (k, _) in entries do
    if !keys.contains k then
      schemaError (joinPath path k) s!"unexpected key '{k}'; expected exactly {expected}"

/-- Check `v` (the integer `version`, 2) at `path.v`: a `version` error otherwise. -/
def checkVersion (entries : List (String × MsgValue)) (path : String) : WireM Unit := do
  let where_ := joinPath path "v"
  match MsgValue.lookup entries "v" with
  | none =>
    .error { kind := "version", path := where_,
             message := s!"missing protocol version 'v'; this side speaks v={version}" }
  | some other =>
    let isOurs : Bool := match other with
      | .int i => i == Int.ofNat version
      | _ => false
    if isOurs then pure ()
    else
      .error { kind := "version", path := where_,
               message := s!"unsupported protocol version {other.render} ({typeName other}); " ++
                 s!"this side speaks v={version}" }

/-- A versioned map of the given `kind` with exactly `keys`: checks the map, `v`, `kind`,
then the keys. -/
def versionedMap (v : MsgValue) (kind : String) (keys : List String) (path : String) :
    WireM (List (String × MsgValue)) := do
  let entries ← asMap v path
  checkVersion entries path
  let k ← require (MsgValue.lookup entries "kind") (joinPath path "kind") "missing key 'kind'"
  let s ← asStr k (joinPath path "kind")
  if s != kind then
    schemaError (joinPath path "kind") s!"kind must be '{kind}', got '{s}'"
  checkKeys entries keys path
  pure entries

/-- Decode the items of an array with `f`, passing each item's path `path[i]`. -/
def mapItems {α : Type} (items : List MsgValue) (path : String)
    (f : MsgValue → String → WireM α) : WireM (List α) := do
  let mut out : Array α := #[]
  let mut i := 0
  for item in items do
    out := out.push (← f item (indexPath path i))
    i := i + 1
  return out.toList

end Wire

open Wire

/-! ## Graphs (docs/wire.md 4.1) -/

/-- The node map of `n`, keys in wire order. -/
def Node.toMsg : Node → MsgValue
  | .input name axes =>
    .map [("op", .str "input"), ("name", .str name), ("axes", .arr (axes.map MsgValue.str))]
  | .size axis => .map [("op", .str "size"), ("axis", .str axis)]
  | .eps bits => .map [("op", .str "eps"), ("value", .float (Float.ofBits bits))]
  | .const bits => .map [("op", .str "const"), ("value", .float (Float.ofBits bits))]
  | .band axisA axisB lo hi =>
    .map [("op", .str "band"), ("axis_a", .str axisA), ("axis_b", .str axisB),
      ("lo", optInt lo), ("hi", optInt hi)]
  | .unary op x => .map [("op", .str op.name), ("x", nat x)]
  | .binary op x y => .map [("op", .str op.name), ("x", nat x), ("y", nat y)]
  | .reduce fn axis x =>
    .map [("op", .str "reduce"), ("fn", .str fn.name), ("axis", .str axis), ("x", nat x)]
  | .matmul a b axisA axisB =>
    .map [("op", .str "matmul"), ("a", nat a), ("b", nat b), ("axis_a", .str axisA),
      ("axis_b", .str axisB)]
  | .select c x y => .map [("op", .str "select"), ("c", nat c), ("x", nat x), ("y", nat y)]

/-- The graph map of `g` (inferred axes are not on the wire). -/
def Graph.toMsg (g : Graph) : MsgValue :=
  .map [("v", nat version), ("kind", .str "graph"), ("name", .str g.name),
    ("axes", .arr (g.axes.map fun p => MsgValue.arr [MsgValue.str p.1, nat p.2])),
    ("nodes", .arr (g.nodes.toList.map Node.toMsg)),
    ("outputs", .arr (g.outputs.map nat))]

/-- The canonical bytes of `g`'s graph map. -/
def Graph.encode (g : Graph) : ByteArray := g.toMsg.encode

/-- The wire keys of each op's node map, in order; `none` for an unknown op. -/
def nodeKeys? (op : String) : Option (List String) :=
  if op == "input" then some ["op", "name", "axes"]
  else if op == "size" then some ["op", "axis"]
  else if op == "eps" || op == "const" then some ["op", "value"]
  else if op == "band" then some ["op", "axis_a", "axis_b", "lo", "hi"]
  else if op == "select" then some ["op", "c", "x", "y"]
  else if (UnOp.ofName? op).isSome then some ["op", "x"]
  else if (BinOp.ofName? op).isSome then some ["op", "x", "y"]
  else if op == "reduce" then some ["op", "fn", "axis", "x"]
  else if op == "matmul" then some ["op", "a", "b", "axis_a", "axis_b"]
  else none

/-- Every op with a wire form, in the order of Python's `NODE_KEYS`. -/
def wireOps : List String :=
  ["input", "size", "eps", "const", "band"] ++ UnOp.all.map UnOp.name ++
    BinOp.all.map BinOp.name ++ ["reduce", "matmul", "select"]

/-- The id under `key` of node `index` (of `total`): a count naming an earlier node
(`dangling_node` / `cycle` errors at `path.key` otherwise). -/
def nodeIdAt (entries : List (String × MsgValue)) (key path : String) (index total : Nat) :
    WireM NodeId := do
  let p := joinPath path key
  let i ← asCount (field entries key) p
  if i ≥ total then
    .error { kind := "dangling_node", path := p,
             message := s!"{key} is {i}, which names no node (the graph has {total})" }
  else if i ≥ index then
    .error { kind := "cycle", path := p,
             message := s!"{key} is node {i}, which is not computed before node {index}: " ++
               "the graph has a cycle or is not topologically ordered" }
  else pure i

/-- Decode node `index` (of `total`) at `path`. -/
def Node.ofMsg? (v : MsgValue) (path : String) (index total : Nat) : WireM Node := do
  let entries ← asMap v path
  let opV ← require (MsgValue.lookup entries "op") (joinPath path "op") "missing key 'op'"
  let op ← asStr opV (joinPath path "op")
  let known := ", ".intercalate wireOps
  let keys ← require (nodeKeys? op) (joinPath path "op") s!"unknown op '{op}'; known ops: {known}"
  checkKeys entries keys path
  if op == "input" then
    let name ← asStr (field entries "name") (joinPath path "name")
    let axesPath := joinPath path "axes"
    let axes ← mapItems (← asArr (field entries "axes") axesPath) axesPath asStr
    return .input name axes
  else if op == "size" then
    return .size (← asStr (field entries "axis") (joinPath path "axis"))
  else if op == "eps" then
    let vp := joinPath path "value"
    let v ← asF64 (field entries "value") vp (allowNaN := false)
    if v.isInf || decide (v < 0) then schemaError vp s!"eps must be finite and >= 0, got {v}"
    return .eps v.toBits
  else if op == "const" then
    let v ← asF64 (field entries "value") (joinPath path "value") (allowNaN := false)
    return .const v.toBits
  else if op == "band" then
    let axisA ← asStr (field entries "axis_a") (joinPath path "axis_a")
    let axisB ← asStr (field entries "axis_b") (joinPath path "axis_b")
    let lo ← asOptI64 (field entries "lo") (joinPath path "lo")
    let hi ← asOptI64 (field entries "hi") (joinPath path "hi")
    return .band axisA axisB lo hi
  else if op == "select" then
    let c ← nodeIdAt entries "c" path index total
    let x ← nodeIdAt entries "x" path index total
    let y ← nodeIdAt entries "y" path index total
    return .select c x y
  else if op == "reduce" then
    let fnName ← asEnum (field entries "fn") (joinPath path "fn") ["sum", "max"] "reduce fn"
    let axis ← asStr (field entries "axis") (joinPath path "axis")
    let x ← nodeIdAt entries "x" path index total
    return .reduce (if fnName == "max" then .max else .sum) axis x
  else if op == "matmul" then
    let a ← nodeIdAt entries "a" path index total
    let b ← nodeIdAt entries "b" path index total
    let axisA ← asStr (field entries "axis_a") (joinPath path "axis_a")
    let axisB ← asStr (field entries "axis_b") (joinPath path "axis_b")
    return .matmul a b axisA axisB
  else
    match UnOp.ofName? op, BinOp.ofName? op with
    | some u, _ => return .unary u (← nodeIdAt entries "x" path index total)
    | none, some bop =>
      let x ← nodeIdAt entries "x" path index total
      let y ← nodeIdAt entries "y" path index total
      return .binary bop x y
    | none, none => schemaError (joinPath path "op") s!"unknown op '{op}'"

/-- A graph error as a wire error, its path under the graph's `path`. -/
def GraphError.toWire (e : GraphError) (path : String) : WireError :=
  { kind := e.kind.wireName, message := e.message, path := joinPath path e.path }

/-- Decode and check a graph map at `path` (`"graph"` inside a request, `""` for a graph
file).

Errors: `version`, `schema` (missing/extra key, wrong type, out-of-range int, unknown op or
reduce fn, NaN constant, an `eps` that is not finite and `≥ 0`) at the field's path; the graph
kinds at `path.nodes[i]` (or `path.nodes[i].x` for an id naming no earlier node),
`path.axes[i]`, `path.outputs` (`missing_output` for an empty list), `path.outputs[i]`
(`dangling_node`, or `graph` for an output listed twice). -/
def Graph.ofMsg? (v : MsgValue) (path : String := "graph") : WireM Graph := do
  let entries ← versionedMap v "graph" ["v", "kind", "name", "axes", "nodes", "outputs"] path
  let name ← asStr (field entries "name") (joinPath path "name")
  let axesPath := joinPath path "axes"
  -- `(α := …)`: the item type is known before the `do` block below is elaborated
  let axes ← mapItems (α := Axis × Nat) (← asArr (field entries "axes") axesPath) axesPath fun item p => do
    let pair ← asArr item p
    match pair with
    | [a, s] => return (← asStr a (indexPath p 0), ← asCount s (indexPath p 1))
    | _ => schemaError p s!"an axis entry is [name, size], got {pair.length} item(s)"
  let nodesPath := joinPath path "nodes"
  let raw ← asArr (field entries "nodes") nodesPath
  let total := raw.length
  let mut nodes : Array Node := #[]
  for item in raw do
    let i := nodes.size
    nodes := nodes.push (← Node.ofMsg? item (indexPath nodesPath i) i total)
  let outputsPath := joinPath path "outputs"
  let outputs ← mapItems (← asArr (field entries "outputs") outputsPath) outputsPath asCount
  let g : Graph := { name := name, axes := axes, nodes := nodes, outputs := outputs }
  match g.check with
  | .error e => throw (e.toWire path)
  | .ok _ => pure g

/-- Decode and check a graph from its bytes (a `.graph.msgpack` file). -/
def Graph.decode? (bytes : ByteArray) : WireM Graph := do
  match Msgpack.decode bytes with
  | .error msg => throw ({ kind := "decode", message := msg, path := "" } : WireError)
  | .ok v => Graph.ofMsg? v ""

/-! ## Derivations (docs/wire.md 4.2) -/

/-- One element of a step's site: a node id or an axis name. -/
inductive SiteElem where
  /-- A node id (an `i64` on the wire). -/
  | node (i : Int)
  /-- An axis name. -/
  | axis (a : String)
  deriving Repr, BEq, Inhabited

/-- A step parameter or tile-configuration value. -/
inductive ParamValue where
  /-- An `i64`. -/
  | int (i : Int)
  /-- A float64 (step parameters only; not in tile configurations). -/
  | float (f : Float)
  /-- A string. -/
  | str (s : String)
  /-- A boolean. -/
  | bool (b : Bool)
  deriving Repr, Inhabited

/-- One rewrite step: the Lean theorem `rule` applied at `site` with `params`. -/
structure Step where
  /-- The rule id, e.g. `online_softmax` (names a theorem of `Superopt.Rules`). -/
  rule : String
  /-- Where the rule applies (node ids and axis names, fixed per rule). -/
  site : List SiteElem := []
  /-- Parameters by name (sorted by key on the wire). -/
  params : List (String × ParamValue) := []
  deriving Repr, Inhabited

/-- A derivation of `workload`: steps applied in order to its literal graph; `id` names it in
results (`candidate.derivation`). -/
structure Derivation where
  /-- The workload name, e.g. `attention`. -/
  workload : String
  /-- The derivation's id, e.g. `d3`. -/
  id : String
  /-- The steps, in order. -/
  steps : List Step := []
  deriving Repr, Inhabited

/-- Insert a keyed entry into a list sorted by key (ascending code points = UTF-8 bytes). -/
def insertByKey {α : Type} (kv : String × α) : List (String × α) → List (String × α)
  | [] => [kv]
  | e :: rest => if kv.1 < e.1 then kv :: e :: rest else e :: insertByKey kv rest

/-- Sort keyed entries by key (the wire's "sorted" maps). -/
def sortByKey {α : Type} (entries : List (String × α)) : List (String × α) :=
  entries.foldl (fun acc kv => insertByKey kv acc) []

/-- The wire value of a parameter. -/
def ParamValue.toMsg : ParamValue → MsgValue
  | .int i => .int i
  | .float f => .float f
  | .str s => .str s
  | .bool b => .bool b

/-- A sorted map of parameters. -/
def paramsToMsg (params : List (String × ParamValue)) : MsgValue :=
  .map ((sortByKey params).map fun kv => (kv.1, kv.2.toMsg))

/-- The step map: `rule`, `site`, `params` (sorted). -/
def Step.toMsg (s : Step) : MsgValue :=
  .map [("rule", .str s.rule),
    ("site", .arr (s.site.map fun e => match e with
      | .node i => MsgValue.int i
      | .axis a => MsgValue.str a)),
    ("params", paramsToMsg s.params)]

/-- The derivation map (docs/wire.md 4.2). -/
def Derivation.toMsg (d : Derivation) : MsgValue :=
  .map [("v", nat version), ("kind", .str "derivation"), ("workload", .str d.workload),
    ("id", .str d.id), ("steps", .arr (d.steps.map Step.toMsg))]

/-- A parameter value: `i64 | str | bool`, or also `f64` when `allowFloat`. -/
def paramOfMsg? (x : MsgValue) (p : String) (allowFloat : Bool) : WireM ParamValue :=
  let what := if allowFloat then "an int, float, str or bool" else "an int, str or bool"
  match x with
  | .bool b => pure (ParamValue.bool b)
  | .str s => pure (ParamValue.str s)
  | .int _ => do return ParamValue.int (← asI64 x p)
  | .float f =>
    if allowFloat then pure (ParamValue.float f)
    else schemaError p s!"expected {what}, got float"
  | other => schemaError p s!"expected {what}, got {typeName other}"

/-- A map `str → i64 | str | bool (| f64 when allowFloat)`, returned sorted by key. -/
def paramsOfMsg? (v : MsgValue) (path : String) (allowFloat : Bool) :
    WireM (List (String × ParamValue)) := do
  let entries ← asMap v path
  let mut out : Array (String × ParamValue) := #[]
  for (k, x) in sortByKey entries do
    let pv ← paramOfMsg? x (joinPath path k) allowFloat
    out := out.push (k, pv)
  return out.toList

/-- A site element: an `i64` node id or a string axis name. -/
def siteElemOfMsg? (e : MsgValue) (ep : String) : WireM SiteElem :=
  match e with
  | .str a => pure (SiteElem.axis a)
  | .int _ => do return SiteElem.node (← asI64 e ep)
  | other => schemaError ep s!"expected an int or a str, got {typeName other}"

/-- Decode a derivation map at `path` (`"derivation"`, `"derivations[i]"`).

Errors: `version`, `schema` with the field's path, e.g. `derivation.steps[2].rule`. -/
def Derivation.ofMsg? (v : MsgValue) (path : String := "derivation") : WireM Derivation := do
  let entries ← versionedMap v "derivation" ["v", "kind", "workload", "id", "steps"] path
  let workload ← asStr (field entries "workload") (joinPath path "workload")
  let ident ← asStr (field entries "id") (joinPath path "id")
  let stepsPath := joinPath path "steps"
  let steps ← mapItems (← asArr (field entries "steps") stepsPath) stepsPath fun item p => do
    let s ← asMap item p
    checkKeys s ["rule", "site", "params"] p
    let rule ← asStr (field s "rule") (joinPath p "rule")
    if rule.isEmpty then schemaError (joinPath p "rule") "expected a non-empty str"
    let sitePath := joinPath p "site"
    let site ← mapItems (← asArr (field s "site") sitePath) sitePath siteElemOfMsg?
    let params ← paramsOfMsg? (field s "params") (joinPath p "params") true
    return { rule := rule, site := site, params := params : Step }
  return { workload := workload, id := ident, steps := steps }

/-! ## Requests (docs/wire.md 4.3) -/

namespace Wire

/-- `{"v": 2, "kind": "ping"}`. -/
def pingRequest : MsgValue := .map [("v", nat version), ("kind", .str "ping")]

/-- A `derive` request: the derivations of `g` up to `maxDepth` steps. -/
def deriveRequest (g : Graph) (maxDepth : Nat) : MsgValue :=
  .map [("v", nat version), ("kind", .str "derive"), ("graph", g.toMsg),
    ("max_depth", nat maxDepth)]

/-- A `lower` request: the TileLang source of `d` applied to `g` at tile configuration
`config` (sorted on the wire), in `dtype` (`"float16"` or `"bfloat16"`). -/
def lowerRequest (g : Graph) (d : Derivation) (config : List (String × ParamValue))
    (dtype : String := "float16") : MsgValue :=
  .map [("v", nat version), ("kind", .str "lower"), ("graph", g.toMsg),
    ("derivation", d.toMsg), ("config", paramsToMsg config), ("dtype", .str dtype)]

/-- A `replay` request: Python replays each derivation of `ds` on `g` and answers with the
plan of each (a `plans` response), in order. -/
def replayRequest (g : Graph) (ds : List Derivation) : MsgValue :=
  .map [("v", nat version), ("kind", .str "replay"), ("graph", g.toMsg),
    ("derivations", .arr (ds.map Derivation.toMsg))]

/-- A `tune` request: compile, check and time `ds` on `g` in `dtype` (`"float16"` or
`"bfloat16"`) within `candidates` candidates and `seconds` seconds, writing artifacts under
`outDir` when given. -/
def tuneRequest (g : Graph) (ds : List Derivation) (dtype : String) (candidates : Nat)
    (seconds : Float) (outDir : Option String) : MsgValue :=
  .map [("v", nat version), ("kind", .str "tune"), ("graph", g.toMsg),
    ("derivations", .arr (ds.map Derivation.toMsg)), ("dtype", .str dtype),
    ("budget", .map [("candidates", nat candidates), ("seconds", .float seconds)]),
    ("out_dir", optStr outDir)]

end Wire

/-! ## Plans (the `replay` response) -/

/-- The kernel map: `nodes` and `shared` ascending, `grid` in the kernel's order. -/
def Kernel.toMsg (k : Kernel) : MsgValue :=
  .map [("nodes", .arr ((sortNats k.nodes.toList).map nat)),
    ("grid", .arr (k.grid.toList.map MsgValue.str)), ("stream", optStr k.stream),
    ("online", .bool k.online), ("shared", .arr ((sortNats k.shared.toList).map nat))]

/-- The plan map `{"v": 2, "kind": "plan", "graph": G, "kernels": [K, ...]}`: the plan's
(possibly rewritten) graph and its kernels in launch order. -/
def Plan.toMsg (p : Plan) : MsgValue :=
  .map [("v", nat version), ("kind", .str "plan"), ("graph", p.graph.toMsg),
    ("kernels", .arr (p.kernels.toList.map Kernel.toMsg))]

/-! ## Results and other responses (docs/wire.md 4.4, 4.5) -/

/-- The statuses of a candidate or peer. -/
def statuses : List String :=
  ["ok", "wrong", "nan", "compile_error", "launch_error", "crash", "timeout", "skipped"]

/-- The statuses of a peer: a status, or `absent` (the peer's library is not installed; Python:
`PEER_STATUSES`). -/
def peerStatuses : List String := statuses ++ ["absent"]

/-- One timed candidate (a derivation at a tile configuration). Times in µs. -/
structure Candidate where
  /-- The candidate's id, unique in the results. -/
  id : String
  /-- The `id` of its derivation. -/
  derivation : String
  /-- Its tile configuration (sorted by key). -/
  config : List (String × ParamValue)
  /-- One of `statuses`. -/
  status : String
  /-- Median time per call from the host, launch included, µs. -/
  callUs : Option Float := none
  /-- Median time per call under CUDA-graph replay, µs. -/
  graphUs : Option Float := none
  /-- `‖out − ref‖ / ‖ref‖`. -/
  relerr : Option Float := none
  /-- The content hash of its TileLang source. -/
  sourceHash : Option String := none
  /-- Why it failed, when `status` is not `ok`. -/
  error : Option String := none
  deriving Repr, Inhabited

/-- One peer timed on the same inputs (eager PyTorch, `torch.compile`, cuBLAS, SDPA ...). -/
structure Peer where
  /-- The peer's name, e.g. `torch.compile`. -/
  name : String
  /-- Median time per call from the host, µs. -/
  callUs : Option Float := none
  /-- Median time per call under CUDA-graph replay, µs. -/
  graphUs : Option Float := none
  /-- `‖out − ref‖ / ‖ref‖`. -/
  relerr : Option Float := none
  /-- One of `peerStatuses`. -/
  status : String
  deriving Repr, Inhabited

/-- The response to `tune`: every candidate, the peers, the roofline floor and the fastest
correct candidate. -/
structure Results where
  /-- The workload name. -/
  workload : String
  /-- The GPU, e.g. `NVIDIA H200`. -/
  device : String
  /-- Every candidate, ranked as the backend ranked them. -/
  candidates : List Candidate
  /-- The peers. -/
  peers : List Peer
  /-- The roofline floor, µs. -/
  floorUs : Option Float := none
  /-- The id of the fastest correct candidate. -/
  top1 : Option String := none
  /-- The Lean theorem names justifying the top-1's derivation: the `<rule>_sound` theorem of
  each step, in step order, then `Superopt.derive_sound`; empty without a top-1. -/
  certificate : List String := []
  deriving Repr, Inhabited

/-- The candidate map, keys in wire order. -/
def Candidate.toMsg (c : Candidate) : MsgValue :=
  .map [("id", .str c.id), ("derivation", .str c.derivation), ("config", paramsToMsg c.config),
    ("status", .str c.status), ("call_us", optFloat c.callUs), ("graph_us", optFloat c.graphUs),
    ("relerr", optFloat c.relerr), ("source_hash", optStr c.sourceHash),
    ("error", optStr c.error)]

/-- The peer map, keys in wire order. -/
def Peer.toMsg (p : Peer) : MsgValue :=
  .map [("name", .str p.name), ("call_us", optFloat p.callUs), ("graph_us", optFloat p.graphUs),
    ("relerr", optFloat p.relerr), ("status", .str p.status)]

/-- The results map (docs/wire.md 4.4). -/
def Results.toMsg (r : Results) : MsgValue :=
  .map [("v", nat version), ("kind", .str "results"), ("workload", .str r.workload),
    ("device", .str r.device), ("candidates", .arr (r.candidates.map Candidate.toMsg)),
    ("peers", .arr (r.peers.map Peer.toMsg)), ("floor_us", optFloat r.floorUs),
    ("top1", optStr r.top1), ("certificate", .arr (r.certificate.map MsgValue.str))]

/-- Decode a candidate map at `path`. -/
def Candidate.ofMsg? (v : MsgValue) (path : String) : WireM Candidate := do
  let c ← asMap v path
  checkKeys c ["id", "derivation", "config", "status", "call_us", "graph_us", "relerr",
    "source_hash", "error"] path
  let id ← asStr (field c "id") (joinPath path "id")
  let derivation ← asStr (field c "derivation") (joinPath path "derivation")
  let config ← paramsOfMsg? (field c "config") (joinPath path "config") false
  let status ← asEnum (field c "status") (joinPath path "status") statuses "status"
  let callUs ← asOptF64 (field c "call_us") (joinPath path "call_us")
  let graphUs ← asOptF64 (field c "graph_us") (joinPath path "graph_us")
  let relerr ← asOptF64 (field c "relerr") (joinPath path "relerr")
  let sourceHash ← asOptStr (field c "source_hash") (joinPath path "source_hash")
  let error ← asOptStr (field c "error") (joinPath path "error")
  return { id := id, derivation := derivation, config := config, status := status,
           callUs := callUs, graphUs := graphUs, relerr := relerr, sourceHash := sourceHash,
           error := error }

/-- Decode a peer map at `path`. -/
def Peer.ofMsg? (v : MsgValue) (path : String) : WireM Peer := do
  let q ← asMap v path
  checkKeys q ["name", "call_us", "graph_us", "relerr", "status"] path
  let name ← asStr (field q "name") (joinPath path "name")
  let callUs ← asOptF64 (field q "call_us") (joinPath path "call_us")
  let graphUs ← asOptF64 (field q "graph_us") (joinPath path "graph_us")
  let relerr ← asOptF64 (field q "relerr") (joinPath path "relerr")
  let status ← asEnum (field q "status") (joinPath path "status") peerStatuses "status"
  return { name := name, callUs := callUs, graphUs := graphUs, relerr := relerr,
           status := status }

/-- Decode a `results` map (Python: `results_from_wire`). -/
def Results.ofMsg? (v : MsgValue) (path : String := "") : WireM Results := do
  let x ← versionedMap v "results"
    ["v", "kind", "workload", "device", "candidates", "peers", "floor_us", "top1", "certificate"]
    path
  let workload ← asStr (field x "workload") (joinPath path "workload")
  let device ← asStr (field x "device") (joinPath path "device")
  let cp := joinPath path "candidates"
  let candidates ← mapItems (← asArr (field x "candidates") cp) cp Candidate.ofMsg?
  let pp := joinPath path "peers"
  let peers ← mapItems (← asArr (field x "peers") pp) pp Peer.ofMsg?
  let floorUs ← asOptF64 (field x "floor_us") (joinPath path "floor_us")
  let top1 ← asOptStr (field x "top1") (joinPath path "top1")
  let certPath := joinPath path "certificate"
  let certificate ← mapItems (← asArr (field x "certificate") certPath) certPath asStr
  return { workload := workload, device := device, candidates := candidates, peers := peers,
           floorUs := floorUs, top1 := top1, certificate := certificate }

/-- A decoded response of the backend. -/
inductive Response where
  /-- `pong`, with the Python package version. -/
  | pong (version : String)
  /-- `derivations`. -/
  | derivations (ds : List Derivation)
  /-- `lowered`: the TileLang source and its hash. -/
  | lowered (source sourceHash : String)
  /-- `results` of a `tune` request. -/
  | results (r : Results)
  /-- `plans` of a `replay` request: one plan map per derivation, in order (kept as values, to
  be compared byte for byte with Lean's own `Plan.toMsg`). -/
  | plans (ps : List MsgValue)
  /-- An error response: the wire error kind, message and path in the request. -/
  | error (e : WireError)
  deriving Inhabited

/-- The error response map of `e` (docs/wire.md 4.5). -/
def WireError.toMsg (e : WireError) : MsgValue :=
  .map [("v", nat version), ("kind", .str "error"),
    ("error", .map [("kind", .str e.kind), ("message", .str e.message), ("path", .str e.path)])]

/-- Decode any response (docs/wire.md 4.3–4.5), an error response included. -/
def Response.ofMsg? (v : MsgValue) : WireM Response := do
  let entries ← asMap v ""
  checkVersion entries ""
  let kindV ← require (MsgValue.lookup entries "kind") "kind" "missing key 'kind'"
  let kind ← asStr kindV "kind"
  if kind == "pong" then
    checkKeys entries ["v", "kind", "version"] ""
    return .pong (← asStr (field entries "version") "version")
  else if kind == "derivations" then
    checkKeys entries ["v", "kind", "derivations"] ""
    let items ← asArr (field entries "derivations") "derivations"
    return .derivations (← mapItems items "derivations" fun d p => Derivation.ofMsg? d p)
  else if kind == "lowered" then
    checkKeys entries ["v", "kind", "source", "source_hash"] ""
    let source ← asStr (field entries "source") "source"
    return .lowered source (← asStr (field entries "source_hash") "source_hash")
  else if kind == "results" then
    return .results (← Results.ofMsg? v "")
  else if kind == "plans" then
    checkKeys entries ["v", "kind", "plans"] ""
    let items ← asArr (field entries "plans") "plans"
    let plans ← mapItems (α := MsgValue) items "plans" fun item p => do
      let _ ← versionedMap item "plan" ["v", "kind", "graph", "kernels"] p
      pure item
    return .plans plans
  else if kind == "error" then
    checkKeys entries ["v", "kind", "error"] ""
    let e ← asMap (field entries "error") "error"
    checkKeys e ["kind", "message", "path"] "error"
    let ek ← asStr (field e "kind") "error.kind"
    let em ← asStr (field e "message") "error.message"
    let ep ← asStr (field e "path") "error.path"
    return .error { kind := ek, message := em, path := ep }
  else
    .error { kind := "unknown_kind", path := "kind",
             message := s!"unknown response kind '{kind}'; known kinds: derivations, error, " ++
               "lowered, plans, pong, results" }

/-- Decode the bytes of a response. -/
def Response.decode? (bytes : ByteArray) : WireM Response :=
  match Msgpack.decode bytes with
  | .error msg => .error { kind := "decode", message := msg, path := "" }
  | .ok v => Response.ofMsg? v

/-! ## Examples, checked when the module is built -/

#guard Msgpack.hex Wire.pingRequest.encode == "82a17602a46b696e64a470696e67"
#guard (sortByKey [("b", 1), ("a", 2), ("block_m", 3)]).map (·.1) == ["a", "b", "block_m"]

end Superopt

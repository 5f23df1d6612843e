import Superopt.Derive.Plan
import Superopt.Wire.Messages

/-!
# The rewrite rules: sites and applications

The eighteen rules of the derivation engine as executable code: where each applies on a plan and
what it rewrites the plan into (the proofs are in `Superopt.Proofs`, the search in
`Superopt.Derive.Enumerator`).

## Main definitions

* `Superopt.Derive.rewriteGraph`, `Superopt.Derive.deadCodeEliminate`: graph rewriting with the
  canonical renumbering (inputs first, then the post-order of a depth-first walk from the output
  visiting arguments left to right).
* `Superopt.Derive.Rule` and the eighteen rules (`stabilizeSoftmax` … `streamReduction`), each with
  `sites : Plan → Array Site` (in Python's order) and `applyFn : Plan → Site → Option Plan`;
  `Rule.apply` checks the site first (Python: `Rule.apply`).
* `Superopt.Derive.rules` (Python's `RULES` order), `Superopt.Derive.searchRules`
  (`SEARCH_RULES`), `Superopt.Derive.ruleById?`.

## Implementation notes

Mirrors `python/superopt/derive/{algebra,fusion,online,schedule,rewrite,rules}.py` function for
function (`stabilize_softmax_sites` ↔ `stabilizeSites`, `offset_parts` ↔ `offsetParts`,
`_row_fusion_axis` ↔ `rowFusionAxis`, …). Python sets become sorted, duplicate-free lists (`sortNats`); Python's
depth-first searches over arguments become one pass over the node ids from the highest down
(arguments name earlier nodes), which reaches the same nodes. Sites are `List SiteElem`
(Wire's type): kernel indices and node ids are `.node i`, axes `.axis a`. The canonical DFS
is bounded by the node count.
-/

namespace Superopt.Derive

open Superopt

/-- Where a rule applies: node ids / kernel indices (`.node i`) and axis names (`.axis a`),
as a step's `site` on the wire. -/
abbrev Site := List SiteElem

/-- A site element naming node or kernel `i`. -/
def siteN (i : Nat) : SiteElem := .node (Int.ofNat i)

/-- The natural number of a site element, if it is a non-negative integer. -/
def siteNat? : SiteElem → Option Nat
  | .node i => if i ≥ 0 then some i.toNat else none
  | .axis _ => none

/-- Python's `1 / math.log(2.0)`, `log2(e)`: the constant `exp_to_exp2` introduces, as a
`Float`. Its bits are `Superopt.log2eBits = 0x3FF71547652B82FE` (checked below); the rule writes
the node `.const log2eBits`. -/
def log2e : Float := 1.4426950408889634

/-! ## Graph rewriting -/

/-- The state of a rewrite: the new nodes so far and the new id of every old node before the
rewritten one (Python: `_Emitter`). -/
structure Emitter where
  /-- The new nodes, in order. -/
  nodes : Array Node := #[]
  /-- `remap[i]`: the new id of old node `i`. -/
  remap : Array NodeId := #[]

/-- The new id of old node `i`. -/
def Emitter.old (em : Emitter) (i : NodeId) : NodeId := em.remap.getD i 0

/-- Append a node; returns the emitter and the node's new id. -/
def Emitter.add (em : Emitter) (n : Node) : Emitter × NodeId :=
  ({ em with nodes := em.nodes.push n }, em.nodes.size)

/-- The post-order of a depth-first walk from node `i`, arguments left to right, skipping
placed nodes (`fuel` bounds the depth: the node count suffices, arguments name earlier
nodes). -/
def dfsPost (g : Graph) :
    Nat → NodeId → Array Bool × Array NodeId → Array Bool × Array NodeId
  | 0, _, st => st
  | fuel + 1, i, st =>
    if st.1.getD i true then st
    else
      let st' := (g.node i).args.foldl (fun acc a => dfsPost g fuel a acc) st
      (st'.1.set! i true, st'.2.push i)

/-- Dead-code elimination with its renumbering: the new graph, `order` (new id → old id) and
`remap` (old id → new id; `0` for a dropped node). Inputs first (in their order), then the
post-order of a depth-first walk from each output in list order, arguments left to right,
skipping placed nodes (Python: `dead_code_eliminate`). -/
def dceWith (g : Graph) : Graph × Array NodeId × Array NodeId := Id.run do
  let n := g.nodes.size
  let mut placed : Array Bool := arrayOf n false
  let mut order : Array NodeId := #[]
  for i in [0:n] do
    if (g.node i).isInput then
      placed := placed.set! i true
      order := order.push i
  let walked := g.outputs.foldl (fun st o => dfsPost g (n + 1) o st) (placed, order)
  let finalOrder := walked.2
  let mut remap : Array NodeId := arrayOf n 0
  for j in [0:finalOrder.size] do
    remap := remap.set! (finalOrder.getD j 0) j
  let newNodes := finalOrder.map fun i => (g.node i).mapArgs (fun a => remap.getD a 0)
  return ({ g with nodes := newNodes, outputs := g.outputs.map (fun o => remap.getD o 0) },
    finalOrder, remap)

/-- Drop dead nodes and renumber canonically (see `dceWith`; Python: `dead_code_eliminate`). -/
def deadCodeEliminate (g : Graph) : Graph := (dceWith g).1

/-- What a rewrite says about its result, for the step checker to verify (never trusted):
`origin[j]` is the node of the old graph that new node `j` copies (`none` for a node the rule
emitted), `root` is the new node that replaces the rewritten node `target` of the old graph. -/
structure RewriteWitness where
  /-- Per new node, the old node it copies, if any. -/
  origin : List (Option NodeId)
  /-- The new node replacing the rewritten one. -/
  root : NodeId
  /-- The rewritten node of the old graph. -/
  target : NodeId
  deriving Repr, Inhabited

/-- `rewriteGraph` with its witness (see `RewriteWitness`). -/
def rewriteGraphW (g : Graph) (target : NodeId) (emit : Emitter → Emitter × NodeId) :
    Graph × RewriteWitness := Id.run do
  let mut em : Emitter := {}
  let mut origin : Array (Option NodeId) := #[]
  let mut rootPre : NodeId := 0
  for i in [0:g.nodes.size] do
    if i == target then
      let r := emit em
      origin := origin ++ arrayOf (r.1.nodes.size - em.nodes.size) none
      rootPre := r.2
      em := { r.1 with remap := r.1.remap.push r.2 }
    else
      let node := (g.node i).mapArgs (fun a => em.remap.getD a 0)
      origin := origin.push (some i)
      em := { em with nodes := em.nodes.push node, remap := em.remap.push em.nodes.size }
  let (g', order, remap) :=
    dceWith { g with nodes := em.nodes, outputs := g.outputs.map (fun o => em.remap.getD o 0) }
  return (g', { origin := order.toList.map (fun pre => origin.getD pre none),
                root := remap.getD rootPre 0, target := target })

/-- Rebuild `g` with node `target` replaced by what `emit` builds (it receives the emitter
holding the new ids of the nodes before `target` and returns the new id replacing it), then
drop dead nodes (Python: `rewrite_graph`). -/
def rewriteGraph (g : Graph) (target : NodeId) (emit : Emitter → Emitter × NodeId) : Graph :=
  (rewriteGraphW g target emit).1

/-! ## Algebraic rules -/

/-- Whether `x` is already `S − max_axis S` (Python: `_is_stabilized`). -/
def isStabilized (p : Plan) (x : NodeId) (axis : Axis) : Bool :=
  match p.node x with
  | .binary .sub s m =>
    match p.node m with
    | .reduce .max ax y => ax == axis && y == s
    | _ => false
  | _ => false

/-- Sites of `stabilize_softmax`: `[P]` for `P = E / Z`, `E = exp S`, `Z = Σ_a E`, `S` not
yet stabilised; on an unscheduled plan only. -/
def stabilizeSites (p : Plan) : Array Site := Id.run do
  if !p.isUnscheduled then return #[]
  let mut out : Array Site := #[]
  for i in [0:p.graph.nodes.size] do
    match p.node i with
    | .binary .div e z =>
      match p.node e, p.node z with
      | .unary .exp s, .reduce .sum axis y =>
        if y == e && !isStabilized p s axis then
          out := out.push [siteN i]
      | _, _ => pure ()
    | _ => pure ()
  return out

/-- `exp S / Σ exp S → exp(S − M) / Σ exp(S − M)` with `M = max_a S`, at site `[P]`: the new
graph and its witness. -/
def stabilizeRewrite (p : Plan) (site : Site) : Option (Graph × RewriteWitness) :=
  match site with
  | [e0] => do
    let pi ← siteNat? e0
    match p.node pi with
    | .binary _ e z =>
      let s := ((p.node e).args.headD 0)
      match p.node z with
      | .reduce _ axis _ =>
        some (rewriteGraphW p.graph pi fun em =>
          let s' := em.old s
          let (em, m) := em.add (.reduce .max axis s')
          let (em, d) := em.add (.binary .sub s' m)
          let (em, e2) := em.add (.unary .exp d)
          let (em, z2) := em.add (.reduce .sum axis e2)
          em.add (.binary .div e2 z2))
      | _ => none
    | _ => none
  | _ => none

/-- `stabilize_softmax` at site `[P]` (the plan of `stabilizeRewrite`'s graph). -/
def stabilizeApply (p : Plan) (site : Site) : Option Plan :=
  (stabilizeRewrite p site).map (fun r => initialPlan r.1)

/-- If node `y` is `X·s`, `s·X` or `X/s` with `s` a row scale free of `contracted` (its axes a
strict subset of `X`'s), the op, `X` and `s` (Python: `_row_scale_parts`). -/
def rowScaleParts (p : Plan) (y : NodeId) (contracted : Axis) :
    Option (BinOp × NodeId × NodeId) :=
  let check (op : BinOp) (x s : NodeId) : Option (BinOp × NodeId × NodeId) :=
    let sa := p.axesOf s
    let xa := p.axesOf x
    if !sa.contains contracted && sa.all (fun a => xa.contains a) &&
        decide (sa.length < xa.length) then
      some (op, x, s)
    else none
  match p.node y with
  | .binary op a b =>
    if op == BinOp.mul then
      match check op a b with
      | some r => some r
      | none => check op b a
    else if op == BinOp.div then check op a b
    else none
  | _ => none

/-- Sites of `factor_row_scale`: `[O, i]` for operand `i` of matmul `O` a row-scaled tensor;
on an unscheduled plan only. -/
def factorSites (p : Plan) : Array Site := Id.run do
  if !p.isUnscheduled then return #[]
  let mut out : Array Site := #[]
  for i in [0:p.graph.nodes.size] do
    match p.node i with
    | .matmul a b axisA axisB =>
      if (rowScaleParts p a axisA).isSome then
        out := out.push [siteN i, siteN 0]
      if (rowScaleParts p b axisB).isSome then
        out := out.push [siteN i, siteN 1]
    | _ => pure ()
  return out

/-- `(X·s) @ W → (X @ W)·s` (FlashNorm), at site `[O, i]`: the new graph and its witness. -/
def factorRewrite (p : Plan) (site : Site) : Option (Graph × RewriteWitness) :=
  match site with
  | [e0, e1] => do
    let o ← siteNat? e0
    let idx ← siteNat? e1
    match p.node o with
    | .matmul a b axisA axisB =>
      if idx > 1 then none
      else
        let arg := if idx == 0 then a else b
        let ax := if idx == 0 then axisA else axisB
        match rowScaleParts p arg ax with
        | some (op, x, s) =>
          some (rewriteGraphW p.graph o fun em =>
            let a' := if idx == 0 then em.old x else em.old a
            let b' := if idx == 0 then em.old b else em.old x
            let (em, mm) := em.add (.matmul a' b' axisA axisB)
            em.add (.binary op mm (em.old s)))
        | none => none
    | _ => none
  | _ => none

/-- `factor_row_scale` at site `[O, i]` (the plan of `factorRewrite`'s graph). -/
def factorApply (p : Plan) (site : Site) : Option Plan :=
  (factorRewrite p site).map (fun r => initialPlan r.1)

/-- Sites of `exp_to_exp2`: `[E]` for every `exp` node; on an unscheduled plan only. -/
def exp2Sites (p : Plan) : Array Site := Id.run do
  if !p.isUnscheduled then return #[]
  let mut out : Array Site := #[]
  for i in [0:p.graph.nodes.size] do
    match p.node i with
    | .unary .exp _ => out := out.push [siteN i]
    | _ => pure ()
  return out

/-- `exp x → exp2(x · log2 e)`, at site `[E]`: the new graph and its witness. -/
def exp2Rewrite (p : Plan) (site : Site) : Option (Graph × RewriteWitness) :=
  match site with
  | [e0] => do
    let e ← siteNat? e0
    match (p.node e).args with
    | x :: _ =>
      some (rewriteGraphW p.graph e fun em =>
        let (em, c) := em.add (.const log2eBits)
        let (em, y) := em.add (.binary .mul (em.old x) c)
        em.add (.unary .exp2 y))
    | [] => none
  | _ => none

/-- `exp_to_exp2` at site `[E]` (the plan of `exp2Rewrite`'s graph). -/
def exp2Apply (p : Plan) (site : Site) : Option Plan :=
  (exp2Rewrite p site).map (fun r => initialPlan r.1)

/-- Whether every element of `xs` is in `ys` and some element of `ys` is not in `xs` (Python:
`set(xs) < set(ys)`). -/
def strictSubset (xs ys : List Axis) : Bool :=
  xs.all (fun a => ys.contains a) && ys.any (fun a => !xs.contains a)

/-- If node `y` is `X + v`, `v + X` or `X − v` with `v` broadcast over `X` (its axes a strict
subset of `X`'s), `X` carrying `contracted`, and `X` keeping what `y` keeps of its axes but
`contracted`, the op, `X` and `v`; `v` may carry `contracted` (a bias) or not (a per-row offset)
(Python: `offset_parts`). -/
def offsetParts (p : Plan) (y : NodeId) (contracted : Axis) :
    Option (BinOp × NodeId × NodeId) :=
  let kept (axes : List Axis) : List Axis := axes.filter (fun a => a != contracted)
  let check (op : BinOp) (x v : NodeId) : Option (BinOp × NodeId × NodeId) :=
    let xa := p.axesOf x
    if xa.contains contracted && strictSubset (p.axesOf v) xa && kept xa == kept (p.axesOf y) then
      some (op, x, v)
    else none
  match p.node y with
  | .binary op a b =>
    if op == BinOp.add then
      match check op a b with
      | some r => some r
      | none => check op b a
    else if op == BinOp.sub then check op a b
    else none
  | _ => none

/-- Whether operand `y` (contracting `ax`) is an offset operand, and then whether its offset
carries `ax` (a bias). -/
def offsetAlong? (p : Plan) (y : NodeId) (ax : Axis) : Option Bool :=
  (offsetParts p y ax).map fun r => (p.axesOf r.2.2).contains ax

/-- Sites `[O, i]` of the matmul operands `X ± v` whose offset `v` carries (`along`) or lacks
the contracted axis; on an unscheduled plan only (Python: `_offset_sites`). -/
def offsetSites (along : Bool) (p : Plan) : Array Site := Id.run do
  if !p.isUnscheduled then return #[]
  let mut out : Array Site := #[]
  for i in [0:p.graph.nodes.size] do
    match p.node i with
    | .matmul a b axisA axisB =>
      if offsetAlong? p a axisA == some along then
        out := out.push [siteN i, siteN 0]
      if offsetAlong? p b axisB == some along then
        out := out.push [siteN i, siteN 1]
    | _ => pure ()
  return out

/-- Sites of `distribute_matmul`: `[O, i]` for operand `i` of matmul `O` offset by a row vector
free of the contracted axis. -/
def distributeSites (p : Plan) : Array Site := offsetSites false p

/-- Sites of `distribute_bias`: `[O, i]` for operand `i` of matmul `O` offset by a bias along
the contracted axis. -/
def distributeBiasSites (p : Plan) : Array Site := offsetSites true p

/-- `(X ± v) @ W → X @ W ± T` at site `[O, i]`: `T = v · Σ_k W` (`Σ_k A · v` for the second
operand) when `v` lacks the contracted axis `k`, `T = v @ W` when it carries it (Python:
`distribute_matmul`, both rules); the new graph and its witness. -/
def distributeRewrite (p : Plan) (site : Site) : Option (Graph × RewriteWitness) :=
  match site with
  | [e0, e1] => do
    let o ← siteNat? e0
    let idx ← siteNat? e1
    match p.node o with
    | .matmul a b axisA axisB =>
      if idx > 1 then none
      else
        let arg := if idx == 0 then a else b
        let ax := if idx == 0 then axisA else axisB
        let other := if idx == 0 then b else a
        let otherAx := if idx == 0 then axisB else axisA
        match offsetParts p arg ax with
        | some (op, x, v) =>
          let along := (p.axesOf v).contains ax
          some (rewriteGraphW p.graph o fun em =>
            let a' := if idx == 0 then em.old x else em.old a
            let b' := if idx == 0 then em.old b else em.old x
            let (em, mm) := em.add (Node.matmul a' b' axisA axisB)
            let (em, t) :=
              if along then
                let ta := if idx == 0 then em.old v else em.old a
                let tb := if idx == 0 then em.old b else em.old v
                em.add (Node.matmul ta tb axisA axisB)
              else
                let (em, s) := em.add (Node.reduce RedFn.sum otherAx (em.old other))
                em.add (if idx == 0 then Node.binary BinOp.mul (em.old v) s
                  else Node.binary BinOp.mul s (em.old v))
            em.add (Node.binary op mm t))
        | none => none
    | _ => none
  | _ => none

/-- `distribute_matmul` / `distribute_bias` at site `[O, i]` (the plan of
`distributeRewrite`'s graph). -/
def distributeApply (p : Plan) (site : Site) : Option Plan :=
  (distributeRewrite p site).map (fun r => initialPlan r.1)

/-- If operand `y` (contracting `contracted`) is `(X ⋆ s) · c` or `c · (X ⋆ s)` (`⋆` is `·` or
`/`) with `X ⋆ s` a row-scaled tensor (`rowScaleParts`) whose `X` has its axes in order and `c`
along `contracted`: the op `⋆`, `X`, `s`, `c` and whether `X ⋆ s` is the first factor (Python:
`commute_parts`). -/
def commuteParts (p : Plan) (y : NodeId) (contracted : Axis) :
    Option (BinOp × NodeId × NodeId × NodeId × Bool) :=
  let attempt (u c : NodeId) (first : Bool) : Option (BinOp × NodeId × NodeId × NodeId × Bool) :=
    if !(p.axesOf c).contains contracted then none
    else
      match rowScaleParts p u contracted with
      | some (op, x, s) =>
        if p.axesOf x == p.axesOf u then some (op, x, s, c, first) else none
      | none => none
  match p.node y with
  | .binary .mul a0 a1 =>
    match attempt a0 a1 true with
    | some r => some r
    | none => attempt a1 a0 false
  | _ => none

/-- Sites of `commute_row_scale`: `[O, i]` for operand `i` of matmul `O` of the form
`(X ⋆ s) · c`; on an unscheduled plan only. -/
def commuteSites (p : Plan) : Array Site := Id.run do
  if !p.isUnscheduled then return #[]
  let mut out : Array Site := #[]
  for i in [0:p.graph.nodes.size] do
    match p.node i with
    | .matmul a b axisA axisB =>
      if (commuteParts p a axisA).isSome then
        out := out.push [siteN i, siteN 0]
      if (commuteParts p b axisB).isSome then
        out := out.push [siteN i, siteN 1]
    | _ => pure ()
  return out

/-- `(X ⋆ s) · c → (X · c) ⋆ s` at the operand of site `[O, i]`: the new graph and its
witness. -/
def commuteRewrite (p : Plan) (site : Site) : Option (Graph × RewriteWitness) :=
  match site with
  | [e0, e1] => do
    let o ← siteNat? e0
    let idx ← siteNat? e1
    match p.node o with
    | .matmul a b axisA axisB =>
      if idx > 1 then none
      else
        let arg := if idx == 0 then a else b
        let ax := if idx == 0 then axisA else axisB
        match commuteParts p arg ax with
        | some (op, x, s, c, first) =>
          some (rewriteGraphW p.graph o fun em =>
            let (em, xc) := em.add (if first then Node.binary BinOp.mul (em.old x) (em.old c)
              else Node.binary BinOp.mul (em.old c) (em.old x))
            let (em, y) := em.add (Node.binary op xc (em.old s))
            let a' := if idx == 0 then y else em.old a
            let b' := if idx == 0 then em.old b else y
            em.add (Node.matmul a' b' axisA axisB))
        | none => none
    | _ => none
  | _ => none

/-- `commute_row_scale` at site `[O, i]` (the plan of `commuteRewrite`'s graph). -/
def commuteApply (p : Plan) (site : Site) : Option Plan :=
  (commuteRewrite p site).map (fun r => initialPlan r.1)

/-- If operand `idx` of matmul `o` is `u · c` or `c · u` with `c` along the contracted axis
(the same name on both sides), every axis of `c` an axis of the other operand, that other
operand an input (a weight) and `u` computed with the operand's axes: `u` and `c` (Python:
`contracted_scale_parts`). -/
def contractedScaleParts (p : Plan) (o idx : Nat) : Option (NodeId × NodeId) :=
  match p.node o with
  | .matmul a b axisA axisB =>
    let y := if idx == 0 then a else b
    let other := if idx == 0 then b else a
    if idx > 1 || axisA != axisB || !(p.node other).isInput then none
    else
      let ok (u c : NodeId) : Bool :=
        (p.axesOf c).contains axisA && !(p.node u).isInput && p.axesOf u == p.axesOf y &&
          (p.axesOf c).all (fun x => (p.axesOf other).contains x)
      match p.node y with
      | .binary .mul a0 a1 =>
        if ok a0 a1 then some (a0, a1) else if ok a1 a0 then some (a1, a0) else none
      | _ => none
  | _ => none

/-- Sites of `move_contracted_scale`: `[O, i]` for operand `i` of matmul `O` scaled along the
contracted axis against a weight; on an unscheduled plan only. -/
def moveScaleSites (p : Plan) : Array Site := Id.run do
  if !p.isUnscheduled then return #[]
  let mut out : Array Site := #[]
  for i in [0:p.graph.nodes.size] do
    match p.node i with
    | .matmul _ _ _ _ =>
      if (contractedScaleParts p i 0).isSome then
        out := out.push [siteN i, siteN 0]
      if (contractedScaleParts p i 1).isSome then
        out := out.push [siteN i, siteN 1]
    | _ => pure ()
  return out

/-- `(u · c) @ W → u @ (W · c)` at site `[O, i]` (the scale onto the weight): the new graph and
its witness. -/
def moveScaleRewrite (p : Plan) (site : Site) : Option (Graph × RewriteWitness) :=
  match site with
  | [e0, e1] => do
    let o ← siteNat? e0
    let idx ← siteNat? e1
    match p.node o with
    | .matmul a b axisA axisB =>
      let other := if idx == 0 then b else a
      match contractedScaleParts p o idx with
      | some (u, c) =>
        some (rewriteGraphW p.graph o fun em =>
          let (em, wc) := em.add (Node.binary BinOp.mul (em.old other) (em.old c))
          let a' := if idx == 0 then em.old u else wc
          let b' := if idx == 0 then wc else em.old u
          em.add (Node.matmul a' b' axisA axisB))
      | none => none
    | _ => none
  | _ => none

/-- `move_contracted_scale` at site `[O, i]` (the plan of `moveScaleRewrite`'s graph). -/
def moveScaleApply (p : Plan) (site : Site) : Option Plan :=
  (moveScaleRewrite p site).map (fun r => initialPlan r.1)

/-! ## Schedule rules -/

/-- Kernel `keep` absorbs kernels `others` (their nodes and shared anchors, plus
`extraShared`), at `keep`'s position, with its stream and online flag replaced when given
(Python: `_merge`). -/
def merge (p : Plan) (keep : Nat) (others : List Nat) (extraShared : List NodeId := [])
    (stream? : Option (Option Axis) := none) (online? : Option Bool := none) : Plan := Id.run do
  let ki := p.kernel keep
  let mut nodes : List NodeId := ki.nodes.toList
  let mut shared : List NodeId := ki.shared.toList ++ extraShared
  for o in others do
    nodes := nodes ++ (p.kernel o).nodes.toList
    shared := shared ++ (p.kernel o).shared.toList
  let merged : Kernel :=
    { ki with nodes := (sortNats nodes).toArray, shared := (sortNats shared).toArray,
              stream := stream?.getD ki.stream, online := online?.getD ki.online }
  let mut ks : Array Kernel := #[]
  for i in [0:p.kernels.size] do
    if i == keep then
      ks := ks.push merged
    else if !others.contains i then
      ks := ks.push (p.kernel i)
  return { p with kernels := ks }

/-- Every node kernel `k` reads from outside comes from an input or a kernel before `limit`. -/
def depsBefore (p : Plan) (k limit : Nat) : Bool :=
  (p.externalArgs k).all fun a =>
    match p.owner a with
    | some o => decide (o < limit)
    | none => true

/-- Whether every node of kernel `k` is elementwise. -/
def elementwiseOnly (p : Plan) (k : Nat) : Bool :=
  (p.kernel k).nodes.all fun n => (p.node n).isElementwise

/-- Whether kernel `k2` reads, transitively through any nodes, a node of kernel `k1` (Python:
`_depends_on`): some strict ancestor of a node of `k2` is in `k1`. -/
def dependsOn (p : Plan) (k2 k1 : Nat) : Bool := Id.run do
  let n := p.graph.nodes.size
  let target := (p.kernel k1).nodes
  let start := (p.kernel k2).nodes
  let mut reached : Array Bool := arrayOf n false
  for j in [0:n] do
    let i := n - 1 - j
    if start.contains i || reached.getD i false then
      for a in (p.node i).args do
        if decide (a < n) then
          reached := reached.set! a true
  let mut hit := false
  for i in [0:n] do
    if reached.getD i false && target.contains i then
      hit := true
  return hit

/-- Whether a kernel strictly between `pk` and `c` reads a node of kernel `pk`. -/
def readersBetween (p : Plan) (pk c : Nat) : Bool := Id.run do
  let nodes := (p.kernel pk).nodes
  let mut found := false
  for j in [pk + 1:c] do
    for n in (p.kernel j).nodes do
      if (p.node n).args.any (fun a => nodes.contains a) then
        found := true
  return found

/-- Where the epilogue-fused kernel goes: at `pk` if `c`'s other inputs are ready by then,
else at `c` if nothing in between reads `pk`; `none` if neither order is valid. -/
def epiloguePosition (p : Plan) (pk c : Nat) : Option Nat :=
  let others := (p.externalArgs c).toList.filterMap fun a =>
    match p.owner a with
    | some o => if o == pk then none else some o
    | none => none
  if others.all (fun o => decide (o < pk)) then some pk
  else if !readersBetween p pk c then some c
  else none

/-- Whether `axes` are the last `axes.length ≥ 1` axes of `dom`, in order: a column vector
(`[n]`), a block of columns (a bias `[h, e]` of `[b, t, h, e]`) or the whole domain (a
residual) (Python: `_domain_suffix`). -/
def domainSuffix (axes dom : List Axis) : Bool :=
  !axes.isEmpty && decide (axes.length ≤ dom.length) &&
    dom.drop (dom.length - axes.length) == axes

/-- Sites of `fuse_epilogue`: `[p, c]` for an elementwise kernel `c` reading kernel `p` (not
elementwise only) over the same domain, its reads being `p`'s fragments (outside `p`'s
streamed loop), row vectors and, when `p` writes each output element once from registers
(not online, and neither streaming nor reducing an axis of its domain: a GEMM, a row or
column reduction), tensors over a suffix of the domain's axes (`domainSuffix`): column
vectors (`[last axis]`: the bias of `X @ W + b`), blocks of columns (the bias `[h, e]` of a
projection written per head, `[b, t, h, e]`) and the whole domain (the residual of
`X + H @ W` or of `X + Σ_k G·Y`). -/
def fuseEpilogueSites (p : Plan) : Array Site := Id.run do
  let mut out : Array Site := #[]
  for c in [0:p.kernels.size] do
    if !elementwiseOnly p c then continue
    let dom := p.domain c
    let rowAxes := dom.take (dom.length - 1)
    let ext := p.externalArgs c
    let producers := sortNats (ext.toList.filterMap fun a => p.owner a)
    for pk in producers do
      let kp := p.kernel pk
      -- elementwise into elementwise is `fuse_elementwise` (the whole region at once)
      if p.domain pk != dom || elementwiseOnly p pk then continue
      -- not online, and neither streaming nor reducing an axis of its own domain (a kernel
      -- that does is row-fused): each output element leaves registers once, so its
      -- epilogue may read column vectors, column blocks and residuals
      let rowFused : Bool := match kp.stream with
        | some st => dom.contains st
        | none => false
      let reducesDomain : Bool := kp.nodes.any fun n => match p.node n with
        | .reduce _ ax _ => dom.contains ax
        | _ => false
      let tile : Bool := !kp.online && !rowFused && !reducesDomain
      let mut ok := true
      for a in ext do
        let fromP : Bool := p.owner a == some pk
        -- from p: a fragment, not a value inside p's streamed loop
        let inLoop : Bool := match kp.stream with
          | some st => (p.axesOf a).contains st
          | none => false
        -- from elsewhere: a row vector of the domain, or (from registers) a tensor over a
        -- suffix of the domain: a column vector, a block of columns or a residual
        let rowVector : Bool := (p.axesOf a).all (fun x => rowAxes.contains x)
        let onSuffix : Bool := tile && domainSuffix (p.axesOf a) dom
        if (fromP && inLoop) || (!fromP && !rowVector && !onSuffix) then
          ok := false
      if ok && (epiloguePosition p pk c).isSome then
        out := out.push [siteN pk, siteN c]
  return out

/-- Fuse kernel `c` into `p`'s epilogue, at site `[p, c]`. -/
def fuseEpilogueApply (p : Plan) (site : Site) : Option Plan :=
  match site with
  | [e0, e1] => do
    let pk ← siteNat? e0
    let c ← siteNat? e1
    if epiloguePosition p pk c == some pk then
      some (merge p pk [c])
    else
      some (merge p c [pk])
  | _ => none

/-- Sites of `fuse_prologue`: `[p, c]` for an elementwise kernel `p` (computing no output)
whose only reader is kernel `c`, itself not elementwise only. -/
def fusePrologueSites (p : Plan) : Array Site := Id.run do
  let mut out : Array Site := #[]
  for pk in [0:p.kernels.size] do
    if !elementwiseOnly p pk then continue
    let nodes := (p.kernel pk).nodes
    if p.graph.outputs.any (fun o => nodes.contains o) then continue
    let mut readers : Array (Option Nat) := #[]
    for n in nodes do
      for cn in p.consumers n do
        let o := p.owner cn
        if o != some pk && !readers.contains o then
          readers := readers.push o
    match readers.toList with
    | [some c] =>
      if !elementwiseOnly p c then
        out := out.push [siteN pk, siteN c]
    | _ => pure ()
  return out

/-- Compute kernel `p` on kernel `c`'s loaded tiles, at site `[p, c]`. -/
def fusePrologueApply (p : Plan) (site : Site) : Option Plan :=
  match site with
  | [e0, e1] => do
    let pk ← siteNat? e0
    let c ← siteNat? e1
    let kc := p.kernel c
    let merged : Kernel :=
      { kc with nodes := (sortNats (kc.nodes.toList ++ (p.kernel pk).nodes.toList)).toArray }
    let mut ks : Array Kernel := #[]
    for i in [0:p.kernels.size] do
      if i == c then
        ks := ks.push merged
      else if i != pk then
        ks := ks.push (p.kernel i)
    return { p with kernels := ks }
  | _ => none

/-- The reduction nodes (reduce, matmul) of kernel `k` over its reduction axis. -/
def anchors (p : Plan) (k : Nat) : List NodeId :=
  let r := p.reductionAxis k
  (p.kernel k).nodes.toList.filter fun n =>
    match p.node n with
    | .reduce _ axis _ => r == some axis
    | .matmul _ _ axisA _ => r == some axisA
    | _ => false

/-- External nodes that kernel `k` reads along its reduction axis (its streamed operands). -/
def streamedOperands (p : Plan) (k : Nat) : List NodeId :=
  match p.reductionAxis k with
  | some r => (p.externalArgs k).toList.filter fun a => (p.axesOf a).contains r
  | none => []

/-- Sites of `share_operand_load`: `[k1, k2]` (`k1 < k2`) for two kernels reducing over the
same axis with the same stream, reading a common streamed operand, over domains one a prefix
of the other (a GEMM's `[t, n]` or `[t, h, e]` beside its rows' statistics `[t]`), `k2`
independent of `k1` and ready at `k1`. -/
def shareSites (p : Plan) : Array Site := Id.run do
  let mut out : Array Site := #[]
  let n := p.kernels.size
  for k1 in [0:n] do
    let r1 := p.reductionAxis k1
    if r1.isNone || (p.kernel k1).online then continue
    for k2 in [k1 + 1:n] do
      if p.reductionAxis k2 != r1 || (p.kernel k2).online then continue
      if (p.kernel k1).stream != (p.kernel k2).stream then continue
      let s1 := streamedOperands p k1
      let s2 := streamedOperands p k2
      if !s1.any (fun a => s2.contains a) then continue
      let d1 := p.domain k1
      let d2 := p.domain k2
      let (sh, lg) := if d1.length ≤ d2.length then (d1, d2) else (d2, d1)
      if lg.take sh.length != sh then continue
      if dependsOn p k2 k1 || !depsBefore p k2 k1 then continue
      out := out.push [siteN k1, siteN k2]
  return out

/-- Merge kernel `k2` into `k1`, each operand tile loaded once, at site `[k1, k2]`. -/
def shareApply (p : Plan) (site : Site) : Option Plan :=
  match site with
  | [e0, e1] => do
    let k1 ← siteNat? e0
    let k2 ← siteNat? e1
    some (merge p k1 [k2] (extraShared := anchors p k1 ++ anchors p k2))
  | _ => none

/-- The elementwise nodes that compute the scores `x` from one matmul `S` (included), for the
streamed axis `a`: `S`, a scale `S·c`, a mask `select(band, S·c, −∞)`, a softcap, an additive
bias `S·c + M`, ...; every other node on the way is an inline leaf (`size`, `eps`, `const`,
`band`) or an input over some of `S`'s axes (a key-padding mask `M[b, t_kv]`, a relative
position bias `B[h, t_q, t_kv]`: one element read per score; read, not in the chain). `S` must
keep `a` and contract another axis. The chain ascending, or `none` (Python: `score_chain`; its
depth-first walk becomes one pass from the highest id down: arguments name earlier nodes). -/
def scoreChain (p : Plan) (x : NodeId) (a : Axis) : Option (List NodeId) := Id.run do
  let total := p.graph.nodes.size
  let mut reached : Array Bool := arrayOf total false
  if decide (x < total) then
    reached := reached.set! x true
  for j in [0:total] do
    let i := total - 1 - j
    if reached.getD i false && (p.node i).isElementwise then
      for b in (p.node i).args do
        if decide (b < total) then
          reached := reached.set! b true
  let mut chain : List NodeId := []
  let mut matmuls : List NodeId := []
  let mut inputs : List NodeId := []
  for i in [0:total] do
    if reached.getD i false then
      match p.node i with
      | .matmul _ _ axisA _ =>
        if !(p.axesOf i).contains a || axisA == a then return none
        matmuls := matmuls ++ [i]
        chain := chain ++ [i]
      | .input _ _ => inputs := inputs ++ [i]
      | node =>
        if node.isElementwise then
          chain := chain ++ [i]
        else if !node.isScalarLeaf then
          return none
  match matmuls with
  | [s] =>
    if inputs.all (fun l => (p.axesOf l).all (fun ax => (p.axesOf s).contains ax)) then
      return some chain
    else return none
  | _ => return none

/-- Match `O = E @_a V` over `E = exp(X − M)` or `exp2((X − M)·c)` with `M = max_a X`, the
scores `X` a `scoreChain` of one matmul, and one `Z = Σ_a E`; the node set (the chain, `M`,
`Z`, `O` and the numerator's nodes), ascending, when every intermediate is private to the
softmax (Python: `online_parts`). -/
def onlineParts (p : Plan) (o : NodeId) : Option (List NodeId) :=
  match p.node o with
  | .matmul e _ a axisB =>
    if a != axisB then none
    else
      match p.node e with
      | .unary uop x0 =>
        if uop != UnOp.exp && uop != UnOp.exp2 then none
        else
          -- an optional `· c` (exp2 form): the chain then holds the product too
          let chainX : List NodeId × NodeId :=
            match p.node x0 with
            | .binary .mul x1 c =>
              match p.node c with
              | .const _ => ([e, x0], x1)
              | _ => ([e], x0)
            | _ => ([e], x0)
          let chain := chainX.1
          let x := chainX.2
          match p.node x with
          | .binary .sub s m =>
            let mOk : Bool := match p.node m with
              | .reduce .max ax y => ax == a && y == s
              | _ => false
            if !mOk then none
            else
              match scoreChain p s a with
              | none => none
              | some scores =>
                let zs := (p.consumers e).filter fun c =>
                  match p.node c with
                  | .reduce .sum ax _ => ax == a
                  | _ => false
                match zs with
                | [z] =>
                  let nodes := sortNats ([m, z, o] ++ chain ++ [x] ++ scores)
                  let inner := nodes.filter fun i => i != o && i != z
                  if inner.any (fun i => (p.consumers i).any (fun c => !nodes.contains c)) then
                    none
                  else some nodes
                | _ => none
          | _ => none
      | _ => none
  | _ => none

/-- Sites of `online_softmax`: `[O]` for a matched `O` whose kernels hold nothing but the
softmax's nodes and are not online yet. -/
def onlineSites (p : Plan) : Array Site := Id.run do
  let mut out : Array Site := #[]
  for o in [0:p.graph.nodes.size] do
    match onlineParts p o with
    | none => pure ()
    | some nodes =>
      let ks := sortNats (nodes.filterMap fun i => p.owner i)
      let ownOnly : Bool := ks.all fun k =>
        !(p.kernel k).online && (p.kernel k).nodes.all (fun i => nodes.contains i)
      if ownOnly then
        out := out.push [siteN o]
  return out

/-- One kernel streaming `a` with running max and sum, the accumulator rescaled (FA2), at
site `[O]`. -/
def onlineApply (p : Plan) (site : Site) : Option Plan :=
  match site with
  | [e0] => do
    let o ← siteNat? e0
    let nodes ← onlineParts p o
    let axis : Option Axis := match p.node o with
      | .matmul _ _ axisA _ => some axisA
      | _ => none
    match sortNats (nodes.filterMap fun i => p.owner i) with
    | k0 :: rest => some (merge p k0 rest (stream? := some axis) (online? := some true))
    | [] => none
  | _ => none

/-- The nodes that move out of kernel `k` with per-row reduction `n`: its in-kernel ancestors
and its per-row descendants (same axes, reading only moved nodes and leaves); `none` if
nothing would stay or a staying node reads an ancestor (Python: `_split_parts`). -/
def splitParts (p : Plan) (k : Nat) (n : NodeId) : Option (List NodeId) := Id.run do
  let total := p.graph.nodes.size
  let kern := (p.kernel k).nodes
  let mut moved : Array Bool := arrayOf total false
  if decide (n < total) then
    moved := moved.set! n true
  -- in-kernel ancestors of `n`: one pass from `n` down (arguments name earlier nodes)
  for j in [0:total] do
    let i := total - 1 - j
    if moved.getD i false then
      for a in (p.node i).args do
        if kern.contains a && decide (a < total) then
          moved := moved.set! a true
  let ancestors : Array Bool := if decide (n < total) then moved.set! n false else moved
  for i in sortNats kern.toList do
    if moved.getD i false || decide (i < n) then continue
    let node := p.node i
    if node.isElementwise && p.axesOf i == p.axesOf n &&
        node.args.all (fun a => moved.getD a false || (p.node a).isLeaf) then
      moved := moved.set! i true
  let rest := kern.toList.filter fun i => !moved.getD i false
  if rest.isEmpty then return none
  if rest.any (fun r => (p.node r).args.any (fun a => ancestors.getD a false)) then return none
  return some ((List.range total).filter fun i => moved.getD i false)

/-- Whether kernel `k` streams an axis of its own domain: per row, its reductions over that
axis, then its outputs over the row (rule `fuse_rows`; Python: `is_row_fused`). -/
def isRowFused (p : Plan) (k : Nat) : Bool :=
  match (p.kernel k).stream with
  | some a => (p.domain k).contains a
  | none => false

/-- Sites of `split_kernel`: `[k, n]` for a per-row reduction `n` of a kernel `k` that is
neither online nor row-fused (its axes a strict prefix of the domain) that can move out. -/
def splitSites (p : Plan) : Array Site := Id.run do
  let mut out : Array Site := #[]
  for k in [0:p.kernels.size] do
    let kern := p.kernel k
    if kern.online || isRowFused p k then continue
    let dom := p.domain k
    for n in kern.nodes do
      match p.node n with
      | .reduce _ _ _ =>
        let ax := p.axesOf n
        if decide (ax.length < dom.length) && dom.take ax.length == ax &&
            (splitParts p k n).isSome then
          out := out.push [siteN k, siteN n]
      | _ => pure ()
  return out

/-- Move reduction `n` and its per-row chain out of kernel `k` into a kernel of their own,
just before it, at site `[k, n]`. -/
def splitApply (p : Plan) (site : Site) : Option Plan :=
  match site with
  | [e0, e1] => do
    let k ← siteNat? e0
    let n ← siteNat? e1
    let moved ← splitParts p k n
    let kern := p.kernel k
    let kMoved : Kernel :=
      { nodes := moved.toArray, grid := #[], stream := kern.stream, online := false,
        shared := #[] }
    let kRest : Kernel :=
      { kern with nodes := kern.nodes.filter (fun i => !moved.contains i),
                  shared := kern.shared.filter (fun i => !moved.contains i) }
    let ks := p.kernels.extract 0 k ++ #[kMoved, kRest] ++
      p.kernels.extract (k + 1) p.kernels.size
    return { p with kernels := ks }
  | _ => none

/-- The one axis every reduction among `nodes` reduces, if it is in `dom`, every reduction gives a
row of `dom` without it, no node is a matmul and every node's axes lie in `dom`; `none` otherwise
(Python: `_row_fusion_axis`). -/
def rowFusionAxis (p : Plan) (nodes : List NodeId) (dom : List Axis) : Option Axis := Id.run do
  let mut axes : List Axis := []
  for n in nodes do
    if !(p.axesOf n).all (fun x => dom.contains x) then return none
    match p.node n with
    | .matmul _ _ _ _ => return none
    | .reduce _ ax _ =>
      if !axes.contains ax then
        axes := axes ++ [ax]
    | _ => pure ()
  match axes with
  | [a] =>
    let row := dom.filter (fun x => x != a)
    let rowsOk : Bool := nodes.all fun n =>
      match p.node n with
      | .reduce _ _ _ => p.axesOf n == row
      | _ => true
    if dom.contains a && rowsOk then return some a else return none
  | _ => return none

/-- Sites of `fuse_rows`: `[p, c]` (`p < c`) for a kernel `c` reading kernel `p`, neither
online, whose merged nodes keep whole rows of one axis of the merged domain
(`rowFusionAxis`), each streaming nothing or that axis, in a valid launch order (Python:
`fuse_rows_sites`). -/
def fuseRowsSites (p : Plan) : Array Site := Id.run do
  let mut out : Array Site := #[]
  for c in [0:p.kernels.size] do
    let kc := p.kernel c
    if kc.online then continue
    let producers := sortNats ((p.externalArgs c).toList.filterMap fun a => p.owner a)
    for pk in producers do
      let kp := p.kernel pk
      if kp.online || !decide (pk < c) then continue
      let nodes := sortNats (kp.nodes.toList ++ kc.nodes.toList)
      let dom := (merge p pk [c]).domain pk
      match rowFusionAxis p nodes dom with
      | none => pure ()
      | some a =>
        let streamOk : Bool := (kp.stream.isNone || kp.stream == some a) &&
          (kc.stream.isNone || kc.stream == some a)
        if streamOk && (epiloguePosition p pk c).isSome then
          out := out.push [siteN pk, siteN c]
  return out

/-- Merge kernels `p` and `c` where the epilogue order allows (at `p`, else at `c`), the merged
kernel streaming the row axis (Python: `fuse_rows`), at site `[p, c]`. -/
def fuseRowsApply (p : Plan) (site : Site) : Option Plan :=
  match site with
  | [e0, e1] => do
    let pk ← siteNat? e0
    let c ← siteNat? e1
    let pair : Nat × Nat := if epiloguePosition p pk c == some pk then (pk, c) else (c, pk)
    let into := pair.1
    let other := pair.2
    let k := if into < other then into else into - 1
    let merged := merge p into [other]
    let a := rowFusionAxis p (merged.kernel k).nodes.toList (merged.domain k)
    some (merge p into [other] (stream? := some a))
  | _ => none

/-- The first `(producer, consumer)` pair of elementwise-only kernels of one domain, one of
them `k` and the other the lowest-numbered such partner, the consumer reading the producer,
that can merge in launch order (Python: `_elementwise_merge`). -/
def elementwiseMerge (p : Plan) (k : Nat) : Option (Nat × Nat) := Id.run do
  if !elementwiseOnly p k then return none
  let dom := p.domain k
  let mine := (p.kernel k).nodes
  for j in [0:p.kernels.size] do
    if j == k || !elementwiseOnly p j || p.domain j != dom then continue
    let theirs := (p.kernel j).nodes
    let jReadsK : Bool := theirs.any fun n => (p.node n).args.any (fun a => mine.contains a)
    let kReadsJ : Bool := mine.any fun n => (p.node n).args.any (fun a => theirs.contains a)
    let pair? : Option (Nat × Nat) :=
      if jReadsK then some (k, j) else if kReadsJ then some (j, k) else none
    match pair? with
    | some pr =>
      if (epiloguePosition p pr.1 pr.2).isSome then return some pr
    | none => pure ()
  return none

/-- Sites of `fuse_elementwise`: `[k]` for an elementwise-only kernel with a partner
(`elementwiseMerge`). -/
def fuseElementwiseSites (p : Plan) : Array Site := Id.run do
  let mut out : Array Site := #[]
  for k in [0:p.kernels.size] do
    if (elementwiseMerge p k).isSome then
      out := out.push [siteN k]
  return out

/-- Kernel `k` absorbs its elementwise partners one merge at a time, each an epilogue-order
merge, until none is left (`fuel`: each merge removes a kernel, so the kernel count
suffices). -/
def fuseElementwiseFrom : Nat → Plan → Nat → Plan
  | 0, p, _ => p
  | fuel + 1, p, k =>
    match elementwiseMerge p k with
    | none => p
    | some pr =>
      let into := if epiloguePosition p pr.1 pr.2 == some pr.1 then pr.1 else pr.2
      let other := if epiloguePosition p pr.1 pr.2 == some pr.1 then pr.2 else pr.1
      fuseElementwiseFrom fuel (merge p into [other]) (if into < other then into else into - 1)

/-- A whole elementwise region in one kernel, at site `[k]` (Python: `fuse_elementwise`). -/
def fuseElementwiseApply (p : Plan) (site : Site) : Option Plan :=
  match site with
  | [e0] => do
    let k ← siteNat? e0
    some (fuseElementwiseFrom p.kernels.size p k)
  | _ => none

/-- The operand through which kernel `c`'s one matmul contracts the axis `h` of producer `p`'s
output, when `p` (a matmul over another axis and its epilogue, read by `c` only) and `c` (one
matmul over `h` and its epilogue) form a GEMM chain, neither scheduled yet (Python:
`_chain_operand`). -/
def chainOperand (p : Plan) (pk c : Nat) : Option NodeId := Id.run do
  let kp := p.kernel pk
  let kc := p.kernel c
  if kp.online || kc.online || !kp.grid.isEmpty || !kc.grid.isEmpty || kp.stream.isSome ||
      kc.stream.isSome then
    return none
  let pn := kp.nodes
  if p.graph.outputs.any (fun o => pn.contains o) then return none
  let onlyChain : Bool := pn.all fun n => (p.consumers n).all fun cn =>
    p.owner cn == some pk || p.owner cn == some c
  if !onlyChain then return none
  match p.reductionAxis pk, p.reductionAxis c with
  | some rp, some h =>
    if rp == h || !(p.domain pk).contains h then return none
    let hasMatmul : Bool := pn.any fun n => match p.node n with
      | .matmul _ _ _ _ => true
      | _ => false
    let reducesH : Bool := pn.any fun n => match p.node n with
      | .reduce _ ax _ => ax == h
      | .matmul _ _ ax _ => ax == h
      | _ => false
    if !hasMatmul || reducesH then return none
    let mut found : Option NodeId := none
    for n in kc.nodes do
      match p.node n with
      | .reduce _ _ _ => return none
      | .matmul a b axA axB =>
        if axA != h then return none
        let ins := [a, b].filter fun x => pn.contains x
        if found.isSome || ins.length != 1 || axA != axB then return none
        found := ins.head?
      | _ => pure ()
    return found
  | _, _ => return none

/-- Sites of `fuse_gemm_chain`: `[p, c]` for a producer `p` of kernel `c` (ascending) with a
chain operand (Python: `fuse_gemm_chain_sites`). -/
def fuseGemmChainSites (p : Plan) : Array Site := Id.run do
  let mut out : Array Site := #[]
  for c in [0:p.kernels.size] do
    let producers := sortNats ((p.externalArgs c).toList.filterMap fun a => p.owner a)
    for pk in producers do
      if (chainOperand p pk c).isSome then
        out := out.push [siteN pk, siteN c]
  return out

/-- Back-to-back GEMMs: producer `p` joins consumer `c`, at `c`'s position, at site `[p, c]`;
completion streams the intermediate axis. -/
def fuseGemmChainApply (p : Plan) (site : Site) : Option Plan :=
  match site with
  | [e0, e1] => do
    let pk ← siteNat? e0
    let c ← siteNat? e1
    some (merge p c [pk])
  | _ => none

/-- The walk of `contractionChain` from node `n` down to kernel `k`'s matmul, `above` the
links already walked (the nearest first): through sums, each link owned by `k`, no graph
output and read by the node above it alone; `none` if it ends anywhere but a matmul of `k`
(`fuel` bounds the length: the node count suffices, arguments name earlier nodes). -/
def contractionWalk (p : Plan) (k : Nat) :
    Nat → NodeId → List NodeId → Option (List NodeId)
  | 0, _, _ => none
  | fuel + 1, n, above =>
    match p.node n with
    | .reduce .sum _ below =>
      if p.owner below != some k || p.graph.outputs.contains below ||
          p.consumers below != [n] then none
      else contractionWalk p k fuel below (n :: above)
    | .matmul _ _ _ _ => if p.owner n == some k then some (n :: above) else none
    | _ => none

/-- Kernel `k`'s node `top` as `Σ_{h_j} … Σ_{h_1} (A @_e B)`, computed in `k`: the chain
`[matmul, sum over h_1, …, top]`, every `h_i` an axis both operands of the matmul carry and
each link read only by the next; `none` otherwise (Python: `contraction_chain`). -/
def contractionChain (p : Plan) (k : Nat) (top : NodeId) : Option (List NodeId) :=
  match contractionWalk p k (p.graph.nodes.size + 1) top [] with
  | some (mm :: sums) =>
    match p.node mm with
    | .matmul a b _ _ =>
      let carried : Bool := sums.all fun n => match p.node n with
        | .reduce _ ax _ => (p.axesOf a).contains ax && (p.axesOf b).contains ax
        | _ => false
      if carried then some (mm :: sums) else none
    | _ => none
  | _ => none

/-- Whether kernels `p` and `c` form a contraction over several axes, neither scheduled yet
(Python: `_contraction_pair`): `c`'s one reduction (reduce or matmul) is a sum over an axis
`h` of a node `top` of `p`, `p`'s only output, no graph output and read by the sum alone (the
per-head products stay private to the sum); `top` is a matmul or sums of one
(`contractionChain`), that chain holds every reduction of `p`, and both operands of its
matmul carry `h`. -/
def contractionPair (p : Plan) (pk c : Nat) : Bool := Id.run do
  let kp := p.kernel pk
  let kc := p.kernel c
  if kp.online || kc.online || !kp.grid.isEmpty || !kc.grid.isEmpty || kp.stream.isSome ||
      kc.stream.isSome then
    return false
  let isRed : NodeId → Bool := fun n => match p.node n with
    | .reduce _ _ _ => true
    | .matmul _ _ _ _ => true
    | _ => false
  match kc.nodes.toList.filter isRed with
  | [rn] =>
    match p.node rn with
    | .reduce .sum h top =>
      if p.owner top != some pk || p.outputs pk != #[top] then return false
      -- the per-head products stay private to the sum
      if p.graph.outputs.contains top || p.consumers top != [rn] then return false
      match contractionChain p pk top with
      | some (mm :: rest) =>
        if kp.nodes.any (fun n => !(mm :: rest).contains n && isRed n) then return false
        match p.node mm with
        | .matmul a b _ _ => return (p.axesOf a).contains h && (p.axesOf b).contains h
        | _ => return false
      | _ => return false
    | _ => return false
  | _ => return false

/-- Sites of `fuse_contraction`: `[p, c]` for a producer `p` of kernel `c` (ascending) such
that `c` sums (with its epilogue) over an axis `h` that both operands of `p`'s matmul carry,
`p` computing that matmul or an earlier such sum of it (`contractionChain`), read only by
`c`'s sum, and writing nothing else: `Σ_h Σ_e O[.., h, .., e] · W[h, e, ..]`, a multi-head
output projection written per head (`Σ_g Σ_r` over grouped-query heads `[g, r]`, one site
each), in a valid position (`epiloguePosition`; Python: `fuse_contraction_sites`). -/
def fuseContractionSites (p : Plan) : Array Site := Id.run do
  let mut out : Array Site := #[]
  for c in [0:p.kernels.size] do
    let producers := sortNats ((p.externalArgs c).toList.filterMap fun a => p.owner a)
    for pk in producers do
      if contractionPair p pk c && (epiloguePosition p pk c).isSome then
        out := out.push [siteN pk, siteN c]
  return out

/-- A sum over a batch axis `h` of a matmul over `e` (or of such a sum) joins it, at site
`[p, c]`: one kernel contracting `(…, h, e)`, at `p`'s position if `c`'s other inputs are
ready by then, else at `c`'s; completion streams the last summed axis (the GEMM walks `e`
inside each head), so the per-head products never leave the chip (Python:
`fuse_contraction`). -/
def fuseContractionApply (p : Plan) (site : Site) : Option Plan :=
  match site with
  | [e0, e1] => do
    let pk ← siteNat? e0
    let c ← siteNat? e1
    if epiloguePosition p pk c == some pk then
      some (merge p pk [c])
    else
      some (merge p c [pk])
  | _ => none

/-- The axes `tile_parallel` may tile: the last two of the kernel's domain, leaving out the
axis a row-fused kernel streams inside each row (Python: `tileable_axes`). -/
def tileableAxes (p : Plan) (k : Nat) : List Axis :=
  let stream := (p.kernel k).stream
  let dom := (p.domain k).filter fun a => some a != stream
  dom.drop (dom.length - 2)

/-- Sites of `tile_parallel`: `[k, a]` for each tileable axis `a` of kernel `k` not yet
tiled. -/
def tileSites (p : Plan) : Array Site := Id.run do
  let mut out : Array Site := #[]
  for k in [0:p.kernels.size] do
    for a in tileableAxes p k do
      if !(p.kernel k).grid.contains a then
        out := out.push [siteN k, .axis a]
  return out

/-- Tile axis `a` of kernel `k` onto the grid (the grid kept in domain order). -/
def tileAt (p : Plan) (k : Nat) (a : Axis) : Plan :=
  let kern := p.kernel k
  let grid := (p.domain k).filter fun x => kern.grid.contains x || x == a
  { p with kernels := p.kernels.set! k { kern with grid := grid.toArray } }

/-- `tile_parallel` at site `[k, a]`. -/
def tileApply (p : Plan) (site : Site) : Option Plan :=
  match site with
  | [e0, .axis a] => do
    let k ← siteNat? e0
    if decide (k < p.kernels.size) then some (tileAt p k a) else none
  | _ => none

/-- Sites of `stream_reduction`: `[k]` for each kernel with a reduction axis and no stream. -/
def streamSites (p : Plan) : Array Site := Id.run do
  let mut out : Array Site := #[]
  for k in [0:p.kernels.size] do
    if (p.kernel k).stream.isNone && (p.reductionAxis k).isSome then
      out := out.push [siteN k]
  return out

/-- Stream kernel `k`'s reduction axis in tiles. -/
def streamAt (p : Plan) (k : Nat) : Plan :=
  let kern := p.kernel k
  { p with kernels := p.kernels.set! k { kern with stream := p.reductionAxis k } }

/-- `stream_reduction` at site `[k]`. -/
def streamApply (p : Plan) (site : Site) : Option Plan :=
  match site with
  | [e0] => do
    let k ← siteNat? e0
    if decide (k < p.kernels.size) then some (streamAt p k) else none
  | _ => none

/-! ## The rules -/

/-- A rewrite rule: `sites` lists where it applies (in a fixed order), `applyFn` rewrites at
a site without checking it. -/
structure Rule where
  /-- The stable rule id, e.g. `online_softmax` (the `rule` of a step on the wire). -/
  id : String
  /-- The Lean theorem the rule relies on (Python's `Rule.theorem`). -/
  theoremName : String
  /-- Where the rule applies, in order. -/
  sites : Plan → Array Site
  /-- Rewrite at a site (unchecked: `none` only for a malformed site). -/
  applyFn : Plan → Site → Option Plan
  /-- Whether the rule rewrites the graph (only on unscheduled plans). -/
  algebraic : Bool
  /-- For an algebraic rule, the rewritten graph with its witness (`applyFn` is the initial
  plan of that graph); `none` for schedule rules. -/
  rewriteW : Plan → Site → Option (Graph × RewriteWitness) := fun _ _ => none
  /-- An enabling rewrite only exposes another algebraic rewrite: its plan is no candidate,
  and the enumerator continues from it with the algebraic rules only (Python:
  `Rule.enabling`). -/
  enabling : Bool := false

/-- Apply `r` at `site` if `site` is one of `r.sites p` (Python: `Rule.apply`). -/
def Rule.apply (r : Rule) (p : Plan) (site : Site) : Option Plan :=
  if (r.sites p).contains site then r.applyFn p site else none

/-- `stabilize_softmax`. -/
def stabilizeSoftmax : Rule :=
  { id := "stabilize_softmax", theoremName := "Superopt.stabilize_softmax_sound",
    sites := stabilizeSites, applyFn := stabilizeApply, algebraic := true,
    rewriteW := stabilizeRewrite }

/-- `factor_row_scale`. -/
def factorRowScale : Rule :=
  { id := "factor_row_scale", theoremName := "Superopt.factor_row_scale_sound",
    sites := factorSites, applyFn := factorApply, algebraic := true, rewriteW := factorRewrite }

/-- `exp_to_exp2`. -/
def expToExp2 : Rule :=
  { id := "exp_to_exp2", theoremName := "Superopt.exp_to_exp2_sound",
    sites := exp2Sites, applyFn := exp2Apply, algebraic := true, rewriteW := exp2Rewrite }

/-- `distribute_matmul`. -/
def distributeMatmul : Rule :=
  { id := "distribute_matmul", theoremName := "Superopt.distribute_matmul_sound",
    sites := distributeSites, applyFn := distributeApply, algebraic := true,
    rewriteW := distributeRewrite }

/-- `distribute_bias` (enabling; the rewrite is `distribute_matmul`'s). -/
def distributeBias : Rule :=
  { id := "distribute_bias", theoremName := "Superopt.distribute_bias_sound",
    sites := distributeBiasSites, applyFn := distributeApply, algebraic := true,
    rewriteW := distributeRewrite, enabling := true }

/-- `commute_row_scale` (enabling). -/
def commuteRowScale : Rule :=
  { id := "commute_row_scale", theoremName := "Superopt.commute_row_scale_sound",
    sites := commuteSites, applyFn := commuteApply, algebraic := true,
    rewriteW := commuteRewrite, enabling := true }

/-- `move_contracted_scale` (enabling). -/
def moveContractedScale : Rule :=
  { id := "move_contracted_scale", theoremName := "Superopt.move_contracted_scale_sound",
    sites := moveScaleSites, applyFn := moveScaleApply, algebraic := true,
    rewriteW := moveScaleRewrite, enabling := true }

/-- `online_softmax`. -/
def onlineSoftmax : Rule :=
  { id := "online_softmax", theoremName := "Superopt.online_softmax_sound",
    sites := onlineSites, applyFn := onlineApply, algebraic := false }

/-- `share_operand_load`. -/
def shareOperandLoad : Rule :=
  { id := "share_operand_load", theoremName := "Superopt.share_operand_load_sound",
    sites := shareSites, applyFn := shareApply, algebraic := false }

/-- `fuse_prologue`. -/
def fusePrologue : Rule :=
  { id := "fuse_prologue", theoremName := "Superopt.fuse_prologue_sound",
    sites := fusePrologueSites, applyFn := fusePrologueApply, algebraic := false }

/-- `fuse_epilogue`. -/
def fuseEpilogue : Rule :=
  { id := "fuse_epilogue", theoremName := "Superopt.fuse_epilogue_sound",
    sites := fuseEpilogueSites, applyFn := fuseEpilogueApply, algebraic := false }

/-- `split_kernel`. -/
def splitKernel : Rule :=
  { id := "split_kernel", theoremName := "Superopt.split_kernel_sound",
    sites := splitSites, applyFn := splitApply, algebraic := false }

/-- `fuse_rows`. -/
def fuseRows : Rule :=
  { id := "fuse_rows", theoremName := "Superopt.fuse_rows_sound",
    sites := fuseRowsSites, applyFn := fuseRowsApply, algebraic := false }

/-- `fuse_elementwise`. -/
def fuseElementwise : Rule :=
  { id := "fuse_elementwise", theoremName := "Superopt.fuse_elementwise_sound",
    sites := fuseElementwiseSites, applyFn := fuseElementwiseApply, algebraic := false }

/-- `fuse_gemm_chain`. -/
def fuseGemmChain : Rule :=
  { id := "fuse_gemm_chain", theoremName := "Superopt.fuse_gemm_chain_sound",
    sites := fuseGemmChainSites, applyFn := fuseGemmChainApply, algebraic := false }

/-- `fuse_contraction`. -/
def fuseContraction : Rule :=
  { id := "fuse_contraction", theoremName := "Superopt.fuse_contraction_sound",
    sites := fuseContractionSites, applyFn := fuseContractionApply, algebraic := false }

/-- `tile_parallel`. -/
def tileParallel : Rule :=
  { id := "tile_parallel", theoremName := "Superopt.tile_parallel_sound",
    sites := tileSites, applyFn := tileApply, algebraic := false }

/-- `stream_reduction`. -/
def streamReduction : Rule :=
  { id := "stream_reduction", theoremName := "Superopt.stream_reduction_sound",
    sites := streamSites, applyFn := streamApply, algebraic := false }

/-- Every rule, in the order of Python's `RULES`. -/
def rules : List Rule :=
  [stabilizeSoftmax, factorRowScale, expToExp2, distributeMatmul, distributeBias,
    commuteRowScale, moveContractedScale, onlineSoftmax, shareOperandLoad, fusePrologue,
    fuseEpilogue, splitKernel, fuseRows, fuseElementwise, fuseGemmChain, fuseContraction,
    tileParallel, streamReduction]

/-- The rules the enumerator branches over, in this order (Python's `SEARCH_RULES`; tiling and
streaming come from `complete`). -/
def searchRules : List Rule :=
  [stabilizeSoftmax, factorRowScale, expToExp2, distributeMatmul, distributeBias,
    commuteRowScale, moveContractedScale, onlineSoftmax, shareOperandLoad, fusePrologue,
    fuseEpilogue, splitKernel, fuseRows, fuseElementwise, fuseGemmChain, fuseContraction]

/-- The rule with this id. -/
def ruleById? (id : String) : Option Rule := rules.find? (·.id == id)

/-- Whether the last of `steps` is an enabling rule's (Python:
`RULES[steps[-1].rule].enabling`). -/
def endsEnabling (steps : Array Step) : Bool :=
  match steps.toList.getLast? with
  | some s => ((ruleById? s.rule).map (·.enabling)).getD false
  | none => false


end Superopt.Derive

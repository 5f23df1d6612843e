import Superopt.Derive.Rules
import Superopt.Proofs.Derivation

/-!
# The derivation enumerator

Breadth-first search over `Superopt.Derive.searchRules` from a graph's initial plan, with
deduplication by `Plan.canonical`, then completion (every reduction streamed, the tileable axes
tiled): the same derivations, with the same ids and steps, as Python's
`superopt.derive.derive_all(graph, lowerable_only=False)`. The golden files
`tests/golden/<workload>.derivations.msgpack` pin the bytes (`lake test`).

## Main definitions

* `Superopt.Derive.explore`, `Superopt.Derive.complete`, `Superopt.Derive.deriveAllPlans`,
  `Superopt.Derive.deriveAllVerified`, `Superopt.Derive.deriveAll`, `Superopt.Derive.replay`.
* `Superopt.Derive.certificate`: the theorem names that justify a derivation.

`deriveAll` keeps the derivations whose steps pass the step checker
(`Superopt.Verify.verify`); `Superopt.derive_sound` is the theorem about them. `lake test`
checks that the checker keeps every derivation (the golden derivation bytes would differ
otherwise).
* `Superopt.Derive.derivationsResponse`: the wire `derivations` response (docs/wire.md 4.4).

## Implementation notes

Mirrors `python/superopt/derive/enumerator.py` function for function. The BFS is bounded by fuel (the plan
bound).
-/

namespace Superopt.Derive

open Superopt

/-! ## The enumerator -/

/-- Default search depth (Python's `DEFAULT_MAX_DEPTH`). -/
def defaultMaxDepth : Nat := 12

/-- Bound on the number of distinct plans explored (Python's `DEFAULT_MAX_PLANS`). -/
def defaultMaxPlans : Nat := 20000

/-- Every distinct plan reachable within `maxDepth` search-rule steps, in BFS order, each with
the first (shortest) path that reached it: for each plan in discovery order, for each rule of
`searchRules` (only the algebraic ones after an enabling step, `endsEnabling`), for each site
in order, keep the new plan unless its canonical form was seen; stop once `maxPlans` plans are
found (Python: `_explore`). -/
def explore (g : Graph) (maxDepth : Nat := defaultMaxDepth) (maxPlans : Nat := defaultMaxPlans) :
    Array (Plan × Array Step) := Id.run do
  let start := initialPlan g
  let mut seen : KeySet := KeySet.empty.insert start.canonical
  let mut found : Array (Plan × Array Step) := #[(start, #[])]
  -- the frontier is `found` from `head` on: both get exactly the same items, in order
  let mut head := 0
  -- each iteration takes one plan; at most `max maxPlans 1` plans are ever found
  for _ in [0:maxPlans + 2] do
    match found[head]? with
    | none => break
    | some (plan, steps) =>
      head := head + 1
      if steps.size ≥ maxDepth then continue
      -- an enabling rewrite is followed only by the (algebraic) rewrite it enables
      let enabled := endsEnabling steps
      for rule in searchRules do
        if enabled && !rule.algebraic then continue
        for site in rule.sites plan do
          match rule.applyFn plan site with
          | none => pure ()
          | some newPlan =>
            let key := newPlan.canonical
            if seen.contains key then continue
            seen := seen.insert key
            found := found.push (newPlan, steps.push { rule := rule.id, site := site })
            if found.size ≥ maxPlans then return found
  return found

/-- Stream every reduction and tile the tileable axes of every kernel, kernel by kernel, the
steps in order (Python: `complete`). -/
def complete (plan : Plan) : Plan × Array Step := Id.run do
  let mut p := plan
  let mut steps : Array Step := #[]
  for k in [0:plan.kernels.size] do
    if (p.kernel k).stream.isNone && (p.reductionAxis k).isSome then
      p := streamAt p k
      steps := steps.push { rule := "stream_reduction", site := [siteN k] }
    for axis in tileableAxes p k do
      if !(p.kernel k).grid.contains axis then
        p := tileAt p k axis
        steps := steps.push { rule := "tile_parallel", site := [siteN k, .axis axis] }
  return (p, steps)

/-- The derivations of `g` and the plans they produce: every distinct completed plan, in
discovery order, numbered `d0, d1, …`; a plan whose last step is enabling is skipped (Python:
`enumerate_derivations`). -/
def deriveAllPlans (g : Graph) (maxDepth : Nat := defaultMaxDepth)
    (maxPlans : Nat := defaultMaxPlans) : Array (Derivation × Plan) := Id.run do
  let mut seen : KeySet := KeySet.empty
  let mut out : Array (Derivation × Plan) := #[]
  for (plan, steps) in explore g maxDepth maxPlans do
    -- a plan ending in an enabling step is no candidate: only the rewrite it enables is
    if endsEnabling steps then continue
    let (completed, tail) := complete plan
    let key := completed.canonical
    if seen.contains key then continue
    seen := seen.insert key
    let d : Derivation :=
      { workload := g.name, id := s!"d{out.size}", steps := (steps ++ tail).toList }
    out := out.push (d, completed)
  return out

/-- The derivations of `g` that pass the step checker: ids `d0, d1, …` over the distinct
completed plans in discovery order, lowerable or not (the Python backend drops those it cannot
lower), each one verified (`Superopt.Verify.verify`). -/
def deriveAllVerified (g : Graph) (maxDepth : Nat := defaultMaxDepth)
    (maxPlans : Nat := defaultMaxPlans) : List Derivation :=
  Verify.keepVerified g ((deriveAllPlans g maxDepth maxPlans).toList.map (·.1))

/-- The derivations of `g` (`deriveAllVerified` as an array). -/
def deriveAll (g : Graph) (maxDepth : Nat := defaultMaxDepth)
    (maxPlans : Nat := defaultMaxPlans) : Array Derivation :=
  (deriveAllVerified g maxDepth maxPlans).toArray

/-- The chain of Lean theorems that justifies derivation `d`: the `<rule>_sound` theorem of each
step, in step order, then `Superopt.derive_sound` (the wire's `certificate`). -/
def certificate (d : Derivation) : List String :=
  d.steps.map (fun s => match ruleById? s.rule with
    | some r => r.theoremName
    | none => s!"Superopt.{s.rule}_sound") ++ ["Superopt.derive_sound"]

/-- Apply `steps` to `g`'s initial plan, checking each (Python: `replay`).

Errors: `steps[i]: …` naming the first step whose rule is unknown or does not apply. -/
def replay (g : Graph) (steps : List Step) : Except String Plan := do
  let mut plan := initialPlan g
  let mut i := 0
  for step in steps do
    match ruleById? step.rule with
    | none => throw s!"steps[{i}].rule: unknown rule '{step.rule}'"
    | some rule =>
      match rule.apply plan step.site with
      | none => throw s!"steps[{i}].site: rule {step.rule} does not apply at this site"
      | some p => plan := p
    i := i + 1
  return plan

/-- The `derivations` response map (docs/wire.md 4.4; Python: `derivations_response`). -/
def derivationsResponse (ds : List Derivation) : MsgValue :=
  .map [("v", Wire.nat Wire.version), ("kind", .str "derivations"),
    ("derivations", .arr (ds.map Derivation.toMsg))]

/-! ## Examples, checked when the module is built -/

#guard log2e.toBits == 0x3FF71547652B82FE
#guard log2e.toBits == log2eBits

end Superopt.Derive

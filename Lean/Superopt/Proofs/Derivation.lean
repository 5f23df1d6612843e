import Superopt.Proofs.Validate
import Superopt.Derive.Rules

/-!
# The step checker and verified derivations

`checkStep` is the seam between the enumerator and the proofs: it applies one step (rule, site)
to a plan exactly as `Superopt.Derive.replay` does, and checks it:

* the site must be one the rule lists (as `Rule.apply`);
* an algebraic step's rewrite must pass `Superopt.Validate.validRewrite` (its result is the
  initial plan of the rewritten graph);
* a schedule step must leave the graph unchanged (`decide (q.graph = p.graph)`).

Its result carries the proof that the outputs of the plan's graph still denote what the
original graph's outputs denote (`SameAs g`). `verify` runs the checker over a derivation's
steps from `initialPlan g` and, on the final plan, `Superopt.PlanSem.planWF`; its result carries
`planDenote T q env = denoteOutputs g env` for every tile configuration and input
(`VerifiedPlan g`). The proofs are `validRewrite_sound` and `planWF_sound`; nothing here is
trusted.

## Main definitions

* `Superopt.Verify.SameAs`, `Superopt.Verify.VerifiedPlan`.
* `Superopt.Verify.checkStep`, `verifySteps`, `verify`, `keepVerified`.

## Main statements

* `Superopt.Verify.mem_keepVerified`, `Superopt.Verify.keepVerified_sound` (the content of
  `Superopt.derive_sound`, stated in `Superopt.Proofs.Soundness` for `deriveAll`).
-/

namespace Superopt.Verify

open Superopt Superopt.Semantics Superopt.Derive Superopt.PlanSem Superopt.Validate

/-- A plan whose graph's outputs denote what `g`'s outputs denote, over every model of the laws
and every input. -/
abbrev SameAs (g : Graph) : Type :=
  { q : Plan // ∀ {α : Type} [ScalarLaws α] (env : String → Index → α),
    denoteOutputs q.graph env = denoteOutputs g env }

/-- A plan that denotes what `g` denotes, for every tile configuration `T`, every input, over
every model of the laws. -/
abbrev VerifiedPlan (g : Graph) : Type :=
  { q : Plan // ∀ {α : Type} [ScalarLaws α] (T : Axis → Nat) (env : String → Index → α),
    planDenote T q env = denoteOutputs g env }

/-- **The step checker.** Apply `s` to `p` as `replay` does and check it (see the module
docstring); `none` when the rule is unknown, the site is not listed, or the check fails. -/
def checkStep (g : Graph) (p : SameAs g) (s : Step) : Option (SameAs g) :=
  match ruleById? s.rule with
  | none => none
  | some r =>
    if (r.sites p.1).contains s.site then
      if r.algebraic then
        match r.rewriteW p.1 s.site with
        | some (g', w) =>
          if h : validRewrite p.1.graph g' w w.target = true then
            some ⟨initialPlan g', fun env => (validRewrite_sound h env).trans (p.2 env)⟩
          else none
        | none => none
      else
        match r.applyFn p.1 s.site with
        | some q =>
          if h : q.graph = p.1.graph then
            some ⟨q, fun env => by rw [h]; exact p.2 env⟩
          else none
        | none => none
    else none

/-- The checker over a list of steps. -/
def verifySteps (g : Graph) : SameAs g → List Step → Option (SameAs g)
  | p, [] => some p
  | p, s :: ss =>
    match checkStep g p s with
    | some q => verifySteps g q ss
    | none => none

/-- **A verified derivation.** The plan that `steps` derive from `g`, when every step passes
`checkStep` and the final plan passes `planWF`, with its proof of soundness. -/
def verify (g : Graph) (steps : List Step) : Option (VerifiedPlan g) :=
  match verifySteps g ⟨initialPlan g, fun _ => rfl⟩ steps with
  | some q =>
    if hw : planWF q.1 = true then
      some ⟨q.1, fun T env => (planWF_sound hw T env).trans (q.2 env)⟩
    else none
  | none => none

/-- The derivations of `ds` that `verify` accepts, in order. -/
def keepVerified (g : Graph) : List Derivation → List Derivation
  | [] => []
  | d :: ds => if (verify g d.steps).isSome then d :: keepVerified g ds else keepVerified g ds

/-- A kept derivation verifies. -/
theorem mem_keepVerified {g : Graph} {d : Derivation} :
    ∀ {ds : List Derivation}, d ∈ keepVerified g ds → (verify g d.steps).isSome = true
  | [], h => by cases h
  | d' :: ds, h => by
    by_cases hv : (verify g d'.steps).isSome = true
    · have e : keepVerified g (d' :: ds) = d' :: keepVerified g ds := if_pos hv
      rw [e] at h
      cases h with
      | head _ => exact hv
      | tail _ h' => exact mem_keepVerified h'
    · have e : keepVerified g (d' :: ds) = keepVerified g ds := if_neg hv
      rw [e] at h
      exact mem_keepVerified h

/-- Every kept derivation has a verified plan: its plan denotes what `g` denotes, for every
tile configuration and input, over every model of `ScalarLaws`. -/
theorem keepVerified_sound (g : Graph) (ds : List Derivation) :
    ∀ d ∈ keepVerified g ds, ∃ q : VerifiedPlan g, verify g d.steps = some q ∧
      ∀ {α : Type} [ScalarLaws α] (T : Axis → Nat) (env : String → Index → α),
        planDenote T q.1 env = denoteOutputs g env := by
  intro d hd
  have hs := mem_keepVerified hd
  cases hv : verify g d.steps with
  | none =>
    rw [hv] at hs
    cases hs
  | some q => exact ⟨q, rfl, q.2⟩

end Superopt.Verify

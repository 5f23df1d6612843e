import Superopt.IR.Semantics
import Superopt.Proofs.Bools

/-!
# Nodes that do not depend on an axis

`factor_row_scale` moves a scale `s` out of a contraction over axis `a`; that is sound because
`s` does not depend on the position along `a`. Python's site condition says so through the
inferred axes (`a ∉ axes s`); the step checker decides it on the graph itself (`indepAux`) and
`indep_sound` turns the decision into the fact the proof needs:
`denote g env s (idx.set a k) = denote g env s idx`.

## Main definitions

* `Superopt.Checks.indepNode`, `indepStep`, `indepAux`, `indep`.

## Main statements

* `Superopt.Checks.indep_sound`.
* `index_set_comm`, `index_set_ne`, `index_restrict_set`: moving one axis.
-/

namespace Superopt.Checks

open Superopt Superopt.Semantics

/-- Moving two different axes commutes. -/
theorem index_set_comm {a b : Axis} (h : a ≠ b) (idx : Index) (k k' : Nat) :
    Index.set (Index.set idx a k) b k' = Index.set (Index.set idx b k') a k := by
  funext c
  show (if c = b then k' else (if c = a then k else idx c)) =
    (if c = a then k else (if c = b then k' else idx c))
  by_cases hb : c = b
  · have ha : ¬ c = a := fun hca => h (hca.symm.trans hb)
    simp only [if_pos hb, if_neg ha]
  · by_cases ha : c = a
    · simp only [if_neg hb, if_pos ha]
    · simp only [if_neg hb, if_neg ha]

/-- Moving axis `a` leaves every other axis in place. -/
theorem index_set_ne {c a : Axis} (h : ¬ c = a) (idx : Index) (k : Nat) :
    Index.set idx a k c = idx c :=
  if_neg h

/-- An input that lacks axis `a` is read at the same position wherever `a` moves. -/
theorem index_restrict_set {axes : List Axis} {a : Axis} (h : axes.contains a = false)
    (idx : Index) (k : Nat) :
    Index.restrict axes (Index.set idx a k) = Index.restrict axes idx := by
  funext c
  show (if axes.contains c then Index.set idx a k c else 0) =
    (if axes.contains c then idx c else 0)
  by_cases hc : axes.contains c = true
  · by_cases hca : c = a
    · have hcon : axes.contains a = true := hca ▸ hc
      rw [h] at hcon
      exact absurd hcon (by decide)
    · simp only [if_pos hc, index_set_ne hca]
  · simp only [if_neg hc]

/-- Whether node `i` (`node`) does not depend on axis `a`, given `recur j` for its arguments:
an input lacking `a`, a scalar, a band over other axes, an elementwise node of independent
arguments, a reduction over `a` or of an independent argument, a contraction whose operands are
each contracted over `a` or independent. An argument not smaller than `i` denotes `0`. -/
def indepNode (a : Axis) (i : NodeId) (recur : NodeId → Bool) : Node → Bool
  | .input _ axes => !axes.contains a
  | .size _ => true
  | .eps _ => true
  | .const _ => true
  | .band x y _ _ => !decide (x = a) && !decide (y = a)
  | .unary _ x => !decide (x < i) || recur x
  | .binary _ x y => (!decide (x < i) || recur x) && (!decide (y < i) || recur y)
  | .select c x y =>
    (!decide (c < i) || recur c) && (!decide (x < i) || recur x) && (!decide (y < i) || recur y)
  | .reduce _ b x => decide (b = a) || (!decide (x < i) || recur x)
  | .matmul x y bx byy =>
    (decide (bx = a) || (!decide (x < i) || recur x)) &&
      (decide (byy = a) || (!decide (y < i) || recur y))

/-- `indepNode` at node `i` of `g` (`true` if `i` names no node). -/
def indepStep (g : Graph) (a : Axis) (i : NodeId) (recur : NodeId → Bool) : Bool :=
  match g.nodes[i]? with
  | none => true
  | some node => indepNode a i recur node

/-- `indepNode` with fuel over the graph's nodes. -/
def indepAux (g : Graph) (a : Axis) : Nat → NodeId → Bool
  | 0, _ => false
  | fuel + 1, i => indepStep g a i (indepAux g a fuel)

/-- Whether node `i` of `g` does not depend on axis `a`. -/
def indep (g : Graph) (a : Axis) (i : NodeId) : Bool := indepAux g a (i + 1) i

section Sound

variable {α : Type} [ScalarOps α]

/-- `(!decide p || b) = true` gives `b = true` when `p` holds. -/
theorem of_not_or {p : Prop} [Decidable p] {b : Bool} (h : (!decide p || b) = true) (hp : p) :
    b = true := by
  have hd : decide p = true := decide_eq_true hp
  rw [hd] at h
  exact h

/-- An argument that `indepNode` accepts reads the same along `a`. -/
theorem guard_indep {g : Graph} {env : String → Index → α} {a : Axis} {i x fuel : Nat}
    (hi : i < fuel + 1)
    (ih : ∀ j, indepAux g a fuel j = true → j < fuel →
      ∀ idx k, denote g env j (Index.set idx a k) = denote g env j idx)
    (h : (!decide (x < i) || indepAux g a fuel x) = true) (idx : Index) (k : Nat) :
    (if x < i then denote g env x (Index.set idx a k) else ScalarOps.zero) =
      (if x < i then denote g env x idx else ScalarOps.zero) := by
  by_cases hx : x < i
  · rw [if_pos hx, if_pos hx]
    exact ih x (of_not_or h hx) (by omega) idx k
  · rw [if_neg hx, if_neg hx]

/-- **Independence.** A node that `indepAux` accepts does not depend on the position along
`a`. -/
theorem indep_aux_sound {g : Graph} {env : String → Index → α} {a : Axis} :
    ∀ (fuel i : Nat), indepAux g a fuel i = true → i < fuel →
      ∀ idx k, denote g env i (Index.set idx a k) = denote g env i idx := by
  intro fuel
  induction fuel with
  | zero => intro i _ hi; exact absurd hi (Nat.not_lt_zero i)
  | succ fuel ih =>
    intro i hind hi idx k
    cases hn : g.nodes[i]? with
    | none =>
      rw [denote_eq_step, denote_eq_step]
      simp only [step, hn]
    | some node =>
      have e : indepAux g a (fuel + 1) i = indepStep g a i (indepAux g a fuel) := rfl
      rw [e] at hind
      have hI : indepNode a i (indepAux g a fuel) node = true := by
        simp only [indepStep, hn] at hind
        exact hind
      have gi : ∀ x, (!decide (x < i) || indepAux g a fuel x) = true → ∀ (idx' : Index) (k' : Nat),
          (if x < i then denote g env x (Index.set idx' a k') else ScalarOps.zero) =
            (if x < i then denote g env x idx' else ScalarOps.zero) :=
        fun x hx => guard_indep hi ih hx
      rw [denote_eq_step, denote_eq_step]
      simp only [step, hn]
      cases node with
      | input name axes =>
        have hc : axes.contains a = false := by
          cases hca : axes.contains a with
          | false => rfl
          | true =>
            have hI' : (!axes.contains a) = true := hI
            rw [hca] at hI'
            exact absurd hI' (by decide)
        show env name (Index.restrict axes (Index.set idx a k)) =
          env name (Index.restrict axes idx)
        rw [index_restrict_set hc]
      | size axis => rfl
      | eps bits => rfl
      | const bits => rfl
      | band x y lo hi' =>
        have hI' : (!decide (x = a) && !decide (y = a)) = true := hI
        have hxa : ¬ x = a := fun hxa => by
          have := (band_elim hI').1
          rw [decide_eq_true hxa] at this
          exact absurd this (by decide)
        have hya : ¬ y = a := fun hya => by
          have := (band_elim hI').2
          rw [decide_eq_true hya] at this
          exact absurd this (by decide)
        show (if bandOk lo hi' (Index.set idx a k x) (Index.set idx a k y) then ScalarOps.one
            else ScalarOps.zero) =
          (if bandOk lo hi' (idx x) (idx y) then ScalarOps.one else ScalarOps.zero)
        rw [index_set_ne hxa, index_set_ne hya]
      | unary op x =>
        show evalUnOp op (if x < i then denote g env x (Index.set idx a k) else ScalarOps.zero) =
          evalUnOp op (if x < i then denote g env x idx else ScalarOps.zero)
        rw [gi x hI idx k]
      | binary op x y =>
        have hI' : ((!decide (x < i) || indepAux g a fuel x) &&
            (!decide (y < i) || indepAux g a fuel y)) = true := hI
        show evalBinOp op (if x < i then denote g env x (Index.set idx a k) else ScalarOps.zero)
            (if y < i then denote g env y (Index.set idx a k) else ScalarOps.zero) =
          evalBinOp op (if x < i then denote g env x idx else ScalarOps.zero)
            (if y < i then denote g env y idx else ScalarOps.zero)
        rw [gi x (band_elim hI').1 idx k, gi y (band_elim hI').2 idx k]
      | select c x y =>
        have hI' : ((!decide (c < i) || indepAux g a fuel c) &&
            (!decide (x < i) || indepAux g a fuel x) &&
            (!decide (y < i) || indepAux g a fuel y)) = true := hI
        have h12 := band_elim (band_elim hI').1
        show ScalarOps.select
            (if c < i then denote g env c (Index.set idx a k) else ScalarOps.zero)
            (if x < i then denote g env x (Index.set idx a k) else ScalarOps.zero)
            (if y < i then denote g env y (Index.set idx a k) else ScalarOps.zero) =
          ScalarOps.select (if c < i then denote g env c idx else ScalarOps.zero)
            (if x < i then denote g env x idx else ScalarOps.zero)
            (if y < i then denote g env y idx else ScalarOps.zero)
        rw [gi c h12.1 idx k, gi x h12.2 idx k, gi y (band_elim hI').2 idx k]
      | reduce fn b x =>
        have hI' : (decide (b = a) || (!decide (x < i) || indepAux g a fuel x)) = true := hI
        show evalRed fn ((List.range (axisSize g.axes b)).map (fun k' =>
            if x < i then denote g env x (Index.set (Index.set idx a k) b k')
            else ScalarOps.zero)) =
          evalRed fn ((List.range (axisSize g.axes b)).map (fun k' =>
            if x < i then denote g env x (Index.set idx b k') else ScalarOps.zero))
        by_cases hba : b = a
        · subst hba
          simp only [Index.set_set]
        · have hab : a ≠ b := fun hab => hba hab.symm
          have hx : (!decide (x < i) || indepAux g a fuel x) = true := by
            cases bor_elim hI' with
            | inl h1 => exact absurd (of_decide_eq_true h1) hba
            | inr h2 => exact h2
          simp only [index_set_comm hab, gi x hx]
      | matmul x y bx byy =>
        have hI' : ((decide (bx = a) || (!decide (x < i) || indepAux g a fuel x)) &&
            (decide (byy = a) || (!decide (y < i) || indepAux g a fuel y))) = true := hI
        show sumList ((List.range (axisSize g.axes bx)).map (fun k' =>
            (if x < i then denote g env x (Index.set (Index.set idx a k) bx k')
              else ScalarOps.zero) *
            (if y < i then denote g env y (Index.set (Index.set idx a k) byy k')
              else ScalarOps.zero))) =
          sumList ((List.range (axisSize g.axes bx)).map (fun k' =>
            (if x < i then denote g env x (Index.set idx bx k') else ScalarOps.zero) *
            (if y < i then denote g env y (Index.set idx byy k') else ScalarOps.zero)))
        have hxs : ∀ k', (if x < i then denote g env x (Index.set (Index.set idx a k) bx k')
              else ScalarOps.zero) =
            (if x < i then denote g env x (Index.set idx bx k') else ScalarOps.zero) := by
          intro k'
          by_cases hba : bx = a
          · subst hba
            rw [Index.set_set]
          · have hab : a ≠ bx := fun hab => hba hab.symm
            have hx : (!decide (x < i) || indepAux g a fuel x) = true := by
              cases bor_elim (band_elim hI').1 with
              | inl h1 => exact absurd (of_decide_eq_true h1) hba
              | inr h2 => exact h2
            rw [index_set_comm hab, gi x hx]
        have hys : ∀ k', (if y < i then denote g env y (Index.set (Index.set idx a k) byy k')
              else ScalarOps.zero) =
            (if y < i then denote g env y (Index.set idx byy k') else ScalarOps.zero) := by
          intro k'
          by_cases hba : byy = a
          · subst hba
            rw [Index.set_set]
          · have hab : a ≠ byy := fun hab => hba hab.symm
            have hy : (!decide (y < i) || indepAux g a fuel y) = true := by
              cases bor_elim (band_elim hI').2 with
              | inl h1 => exact absurd (of_decide_eq_true h1) hba
              | inr h2 => exact h2
            rw [index_set_comm hab, gi y hy]
        simp only [hxs, hys]

/-- **Independence.** A node that `indep` accepts does not depend on the position along `a`. -/
theorem indep_sound {g : Graph} {env : String → Index → α} {a : Axis} {i : NodeId}
    (h : indep g a i = true) (idx : Index) (k : Nat) :
    denote g env i (Index.set idx a k) = denote g env i idx :=
  indep_aux_sound (i + 1) i h (Nat.lt_succ_self i) idx k

end Sound

end Superopt.Checks

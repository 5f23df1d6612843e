/-!
# Small Boolean and list facts the checkers' proofs use

The step checker and the plan checker compute `Bool`s; their soundness proofs turn a `true`
into the facts it stands for. This module keeps those steps to a handful of self-contained
lemmas, proved by case analysis on `Bool` and induction on lists, so that the proofs depend on
no library lemma whose name or form changed between releases.

## Main definitions

* `Superopt.Checks.memB`: membership of a node id in a list, decided.
* `Superopt.Checks.allB`: a predicate holds for every element of a list.

## Main statements

* `band_elim`, `bor_elim`, `bor_intro_left`, `bor_intro_right`: `(a && b) = true` and
  `(a || b) = true` unfolded and built.
* `allB_memB`, `allB_mem`: from `allB p l = true` to `p j = true` for a member `j`.
* `map_eq_of_allB`: two maps of a list agree where `p` holds on every element.
-/

namespace Superopt.Checks

/-- Whether `j` is in `l` (by `decide (j = a)` on each element). -/
def memB (j : Nat) : List Nat → Bool
  | [] => false
  | a :: as => decide (j = a) || memB j as

/-- Whether `p` holds for every element of `l`. -/
def allB {β : Type} (p : β → Bool) : List β → Bool
  | [] => true
  | a :: as => p a && allB p as

/-- `(a && b) = true` gives both. -/
theorem band_elim {a b : Bool} (h : (a && b) = true) : a = true ∧ b = true := by
  cases a <;> cases b <;> first | exact ⟨rfl, rfl⟩ | exact absurd h (by decide)

/-- `(a || b) = true` gives one of them. -/
theorem bor_elim {a b : Bool} (h : (a || b) = true) : a = true ∨ b = true := by
  cases a <;> cases b <;> first | exact Or.inl rfl | exact Or.inr rfl | exact absurd h (by decide)

/-- `(a || b) = true` from `a = true`. -/
theorem bor_intro_left {a b : Bool} (h : a = true) : (a || b) = true := by
  cases a <;> cases b <;> first | rfl | exact absurd h (by decide)

/-- `(a || b) = true` from `b = true`. -/
theorem bor_intro_right {a b : Bool} (h : b = true) : (a || b) = true := by
  cases a <;> cases b <;> first | rfl | exact absurd h (by decide)

/-- `allB p l` gives `p j` for every `j` that `memB` finds in `l`. -/
theorem allB_memB {p : Nat → Bool} : ∀ {l : List Nat} {j : Nat},
    allB p l = true → memB j l = true → p j = true
  | [], _, _, hm => absurd (show false = true from hm) (by decide)
  | a :: as, j, hall, hm => by
    have hall' : (p a && allB p as) = true := hall
    have hm' : (decide (j = a) || memB j as) = true := hm
    cases bor_elim hm' with
    | inl hja =>
      have hja' : j = a := of_decide_eq_true hja
      rw [hja']
      exact (band_elim hall').1
    | inr hrest => exact allB_memB (band_elim hall').2 hrest

/-- `allB p l` gives `p j` for every member `j ∈ l`. -/
theorem allB_mem {β : Type} {p : β → Bool} : ∀ {l : List β} {j : β},
    allB p l = true → j ∈ l → p j = true
  | [], _, _, hm => by cases hm
  | a :: as, j, hall, hm => by
    have hall' : (p a && allB p as) = true := hall
    cases hm with
    | head _ => exact (band_elim hall').1
    | tail _ hrest => exact allB_mem (band_elim hall').2 hrest

/-- Two maps of `l` agree when they agree on every element satisfying `p`, and `p` holds on all
of `l`. -/
theorem map_eq_of_allB {β γ : Type} {f f' : β → γ} {p : β → Bool}
    (hp : ∀ a, p a = true → f a = f' a) : ∀ {l : List β}, allB p l = true → l.map f = l.map f'
  | [], _ => rfl
  | a :: l, h => by
    have h' : (p a && allB p l) = true := h
    show f a :: l.map f = f' a :: l.map f'
    rw [hp a (band_elim h').1, map_eq_of_allB hp (band_elim h').2]

/-- `map (fun i => i)` is the identity on lists of node ids. -/
theorem map_id_self : ∀ l : List Nat, l.map (fun i => i) = l
  | [] => rfl
  | a :: l => by
    show a :: l.map (fun i => i) = a :: l
    rw [map_id_self l]

end Superopt.Checks

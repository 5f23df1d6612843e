import Superopt.IR.Dag

/-!
# Scalar operations and the algebraic laws the rewrite rules rely on

The superoptimizer never proves anything about `Float`: floating point is not associative, so
no tiling or fusion would be "sound" over it. Instead every rule is proved over an *abstract*
scalar type that satisfies a short list of algebraic laws, the ones real arithmetic satisfies.
A rule is then sound in exact arithmetic; its floating-point error is what the Python runner
measures against the float64 reference.

The file is split in two classes:

* `ScalarOps α`: the operations the semantics needs (`+ * - / neg`, `exp`, `exp2`, `sqrt`,
  `rsqrt`, `silu`, `tanh`, `sigmoid`, `log`, `gelu`, `geluTanh`, `select`, `max`, constants).
  It carries no laws, so `Float` is an instance (see `Superopt.Semantics`) and graphs can be
  evaluated with `#eval`.
* `ScalarLaws α extends ScalarOps α`: the laws, as fields (no `axiom` anywhere). ℝ with
  `x / 0 = 0`, `exp`, `exp2 x = 2 ^ x`, the usual `max`, and `ofBits b` the real value of the
  binary64 number `b` — except that the one constant `log2eBits` the `exp_to_exp2` rule writes
  is read as `log₂ e` exactly — satisfies every one of them; so does `Bool` read as the field 𝔽₂
  with `exp ≡ exp2 ≡ 1` (see `LeanTests/RulesTest.lean`), which shows that the laws are
  consistent.

## The constant of `exp_to_exp2`

The rule rewrites `exp x` into `exp2 (x * c)` with `c` the binary64 constant whose bits are
`log2eBits = 0x3FF71547652B82FE` (`1.4426950408889634`, Python's `1 / math.log(2.0)`), the
constant the kernel multiplies by. The law `exp2_mul_log2e` states `exp2 (x * ofBits log2eBits) =
exp x` for that constant: a model reads the literal as `log₂ e`. That the binary64 literal is
`log₂ e` rounded (relative error below `2⁻⁵³`) is outside the model; the runner's numerical check
against the float64 reference is what bounds it.

## Main definitions

* `Superopt.ScalarOps`, `Superopt.ScalarLaws`: the two classes.
* `Superopt.sumList`: `Σ xs`, a `foldr` of `+` from `0` (what `reduce sum` and `matmul` denote).
* `Superopt.maxFold`, `Superopt.maxList`: the running max from an initial value, and the max
  of a list (`negInf` for the empty list, as `reduce max` over an empty axis is `-∞`).
* `Superopt.concatTiles`: the concatenation of a list of tiles.

## Main statements

* Derived laws: `ScalarLaws.add_zero`, `ScalarLaws.right_distrib`, `ScalarLaws.neg_mul`,
  `ScalarLaws.sub_mul`, `ScalarLaws.neg_add`, `ScalarLaws.add_add_add_comm`,
  `ScalarLaws.exp_sub`, `ScalarLaws.exp_sub_mul_exp`, ...
* Sums: `sumList_append`, `sumList_concatTiles`, `sumList_map_congr`, `sumList_map_add`,
  `sumList_map_sub`, `sumList_map_mul_left`, `sumList_map_mul_right`, `sumList_map_div`.
* Maxima: `maxFold_append`, `maxFold_concatTiles`, `maxList_cons_eq_maxFold`.

## Implementation notes

Only core Lean is used. Every proof is `induction` + `rw`/`simp only` with explicit lemma
lists; `show` is used to state a goal up to definitional unfolding of `List.foldr`/`List.map`.
-/

namespace Superopt

/-- The scalar operations that the denotation of a graph uses, with no laws attached.

`Float` is an instance (in `Superopt.Semantics`), so that a `Graph` can be evaluated;
proofs use the stronger `ScalarLaws`. -/
class ScalarOps (α : Type) extends Add α, Mul α, Sub α, Neg α, Div α where
  /-- The additive identity `0`. -/
  zero : α
  /-- The multiplicative identity `1`. -/
  one : α
  /-- The value of an axis size (the `size(axis)` node). -/
  ofNat : Nat → α
  /-- The value of a binary64 literal given by its bits (the `eps` and `const` nodes). -/
  ofBits : UInt64 → α
  /-- The natural exponential `eˣ`. -/
  exp : α → α
  /-- The base-2 exponential `2ˣ`. -/
  exp2 : α → α
  /-- The square root. -/
  sqrt : α → α
  /-- The reciprocal square root `1 / √x`. -/
  rsqrt : α → α
  /-- SiLU, `x / (1 + e⁻ˣ)`. -/
  silu : α → α
  /-- The hyperbolic tangent. -/
  tanh : α → α
  /-- The logistic sigmoid `1 / (1 + e⁻ˣ)`. -/
  sigmoid : α → α
  /-- The natural logarithm. -/
  log : α → α
  /-- GELU, erf form: `x · Φ(x)`. -/
  gelu : α → α
  /-- GELU, tanh approximation. -/
  geluTanh : α → α
  /-- `select c x y`: `x` where `c ≠ 0`, else `y`. -/
  select : α → α → α → α
  /-- The binary maximum. -/
  max : α → α → α
  /-- The max over an empty axis (`-∞` in floating point; no law mentions it). -/
  negInf : α

/-- The algebraic laws that the rewrite rules are proved from.

A commutative ring with a division that is exact on non-zero divisors (`x / 0` is constrained
only by `div_mul_eq_mul_div`, `add_div` and `zero_div`, which hold in ℝ with `x / 0 = 0`), an
exponential that turns sums into products and never vanishes, `exp2 (x * c) = exp x` for the
constant `c` (bits `log2eBits`) that `exp_to_exp2` writes, and an associative, commutative,
idempotent `max`. ℝ satisfies every field (reading that one literal as `log₂ e`). -/
class ScalarLaws (α : Type) extends ScalarOps α where
  /-- `(a + b) + c = a + (b + c)`. -/
  add_assoc : ∀ a b c : α, a + b + c = a + (b + c)
  /-- `a + b = b + a`. -/
  add_comm : ∀ a b : α, a + b = b + a
  /-- `0 + a = a`. -/
  zero_add : ∀ a : α, zero + a = a
  /-- `(a * b) * c = a * (b * c)`. -/
  mul_assoc : ∀ a b c : α, a * b * c = a * (b * c)
  /-- `a * b = b * a`. -/
  mul_comm : ∀ a b : α, a * b = b * a
  /-- `1 * a = a`. -/
  one_mul : ∀ a : α, one * a = a
  /-- `0 * a = 0`. -/
  zero_mul : ∀ a : α, zero * a = zero
  /-- `a * (b + c) = a * b + a * c`. -/
  left_distrib : ∀ a b c : α, a * (b + c) = a * b + a * c
  /-- Subtraction is addition of the negation. -/
  sub_eq_add_neg : ∀ a b : α, a - b = a + -b
  /-- `-a + a = 0`. -/
  neg_add_cancel : ∀ a : α, -a + a = zero
  /-- A common non-zero factor cancels in a quotient: `(a c) / (b c) = a / b` for `c ≠ 0`. -/
  mul_div_mul_right : ∀ a b c : α, c ≠ zero → a * c / (b * c) = a / b
  /-- `(a / b) * c = (a * c) / b`. -/
  div_mul_eq_mul_div : ∀ a b c : α, a / b * c = a * c / b
  /-- Division distributes over addition: `(a + b) / c = a / c + b / c`. -/
  add_div : ∀ a b c : α, (a + b) / c = a / c + b / c
  /-- `0 / c = 0`. -/
  zero_div : ∀ c : α, zero / c = zero
  /-- `a / 1 = a`. -/
  div_one : ∀ a : α, a / one = a
  /-- `e^(a + b) = eᵃ · eᵇ`. -/
  exp_add : ∀ a b : α, exp (a + b) = exp a * exp b
  /-- `eᵃ ≠ 0` (so it may be divided by). -/
  exp_ne_zero : ∀ a : α, exp a ≠ zero
  /-- `2^(x · c) = eˣ` for the constant `c` the `exp_to_exp2` rule writes (bits `log2eBits`,
  read as `log₂ e` by the model; its rounding is outside the model). -/
  exp2_mul_log2e : ∀ x : α, exp2 (x * ofBits log2eBits) = exp x
  /-- `max (max a b) c = max a (max b c)`. -/
  max_assoc : ∀ a b c : α, max (max a b) c = max a (max b c)
  /-- `max a b = max b a`. -/
  max_comm : ∀ a b : α, max a b = max b a
  /-- `max a a = a`. -/
  max_idem : ∀ a : α, max a a = a

namespace ScalarLaws

variable {α : Type} [ScalarLaws α]

/-- `a + 0 = a`. -/
theorem add_zero (a : α) : a + ScalarOps.zero = a := by
  rw [ScalarLaws.add_comm a ScalarOps.zero, ScalarLaws.zero_add]

/-- `a + -a = 0`. -/
theorem add_neg_cancel (a : α) : a + -a = ScalarOps.zero := by
  rw [ScalarLaws.add_comm a (-a), ScalarLaws.neg_add_cancel]

/-- `(a - b) + b = a`. -/
theorem sub_add_cancel (a b : α) : a - b + b = a := by
  rw [ScalarLaws.sub_eq_add_neg a b, ScalarLaws.add_assoc a (-b) b, ScalarLaws.neg_add_cancel b,
    ScalarLaws.add_zero a]

/-- `a * 1 = a`. -/
theorem mul_one (a : α) : a * ScalarOps.one = a := by
  rw [ScalarLaws.mul_comm a ScalarOps.one, ScalarLaws.one_mul]

/-- `a * 0 = 0`. -/
theorem mul_zero (a : α) : a * ScalarOps.zero = ScalarOps.zero := by
  rw [ScalarLaws.mul_comm a ScalarOps.zero, ScalarLaws.zero_mul]

/-- `(a + b) * c = a * c + b * c`. -/
theorem right_distrib (a b c : α) : (a + b) * c = a * c + b * c := by
  rw [ScalarLaws.mul_comm (a + b) c, ScalarLaws.left_distrib c a b, ScalarLaws.mul_comm c a,
    ScalarLaws.mul_comm c b]

/-- `a * (b * c) = b * (a * c)`. -/
theorem mul_left_comm (a b c : α) : a * (b * c) = b * (a * c) := by
  rw [← ScalarLaws.mul_assoc a b c, ScalarLaws.mul_comm a b, ScalarLaws.mul_assoc b a c]

/-- `a * b * c = a * c * b`. -/
theorem mul_right_comm (a b c : α) : a * b * c = a * c * b := by
  rw [ScalarLaws.mul_assoc a b c, ScalarLaws.mul_comm b c, ← ScalarLaws.mul_assoc a c b]

/-- Additive inverses are unique: `a + b = 0 → a = -b`. -/
theorem neg_eq_of_add_eq_zero (a b : α) (h : a + b = ScalarOps.zero) : a = -b := by
  rw [← ScalarLaws.add_zero a, ← ScalarLaws.add_neg_cancel b, ← ScalarLaws.add_assoc a b (-b), h,
    ScalarLaws.zero_add]

/-- `-a * b = -(a * b)`. -/
theorem neg_mul (a b : α) : -a * b = -(a * b) := by
  apply ScalarLaws.neg_eq_of_add_eq_zero
  rw [← ScalarLaws.right_distrib (-a) a b, ScalarLaws.neg_add_cancel a, ScalarLaws.zero_mul b]

/-- `(a - b) * c = a * c - b * c`. -/
theorem sub_mul (a b c : α) : (a - b) * c = a * c - b * c := by
  rw [ScalarLaws.sub_eq_add_neg a b, ScalarLaws.sub_eq_add_neg (a * c) (b * c),
    ScalarLaws.right_distrib a (-b) c, ScalarLaws.neg_mul b c]

/-- `(a * c) / c = a` for `c ≠ 0`. -/
theorem mul_div_cancel_right (a c : α) (hc : c ≠ ScalarOps.zero) : a * c / c = a := by
  have h := ScalarLaws.mul_div_mul_right a ScalarOps.one c hc
  rw [ScalarLaws.one_mul c, ScalarLaws.div_one a] at h
  exact h

/-- `e^(a - b) · eᵇ = eᵃ`. -/
theorem exp_sub_mul_exp (a b : α) :
    ScalarOps.exp (a - b) * ScalarOps.exp b = ScalarOps.exp a := by
  rw [← ScalarLaws.exp_add (a - b) b, ScalarLaws.sub_add_cancel a b]

/-- `e^(a - b) = eᵃ · e^(-b)`. -/
theorem exp_sub_eq_mul (a b : α) :
    ScalarOps.exp (a - b) = ScalarOps.exp a * ScalarOps.exp (-b) := by
  rw [ScalarLaws.sub_eq_add_neg a b, ScalarLaws.exp_add a (-b)]

/-- `e^(a - b) = eᵃ / eᵇ`. -/
theorem exp_sub (a b : α) : ScalarOps.exp (a - b) = ScalarOps.exp a / ScalarOps.exp b := by
  rw [← ScalarLaws.exp_sub_mul_exp a b,
    ScalarLaws.mul_div_cancel_right _ _ (ScalarLaws.exp_ne_zero b)]

/-- `(a + b) + (c + d) = (a + c) + (b + d)`. -/
theorem add_add_add_comm (a b c d : α) : a + b + (c + d) = a + c + (b + d) := by
  rw [ScalarLaws.add_assoc a b (c + d), ← ScalarLaws.add_assoc b c d, ScalarLaws.add_comm b c,
    ScalarLaws.add_assoc c b d, ← ScalarLaws.add_assoc a c (b + d)]

/-- `-0 = 0`. -/
theorem neg_zero : -(ScalarOps.zero : α) = ScalarOps.zero :=
  (ScalarLaws.neg_eq_of_add_eq_zero (ScalarOps.zero : α) ScalarOps.zero
    (ScalarLaws.zero_add (ScalarOps.zero : α))).symm

/-- `-(a + b) = -a + -b`. -/
theorem neg_add (a b : α) : -(a + b) = -a + -b := by
  apply Eq.symm
  apply ScalarLaws.neg_eq_of_add_eq_zero
  rw [ScalarLaws.add_add_add_comm (-a) (-b) a b, ScalarLaws.neg_add_cancel a,
    ScalarLaws.neg_add_cancel b, ScalarLaws.zero_add]

/-- `max a (max b c) = max b (max a c)`. -/
theorem max_left_comm (a b c : α) :
    ScalarOps.max a (ScalarOps.max b c) = ScalarOps.max b (ScalarOps.max a c) := by
  rw [← ScalarLaws.max_assoc a b c, ScalarLaws.max_comm a b, ScalarLaws.max_assoc b a c]

end ScalarLaws

/-! ### Tiles -/

/-- The concatenation of a list of tiles, `[t₀, t₁, …] ↦ t₀ ++ t₁ ++ …`.

Defined here (rather than using `List.flatten`) so that the proofs depend on nothing but this
two-line definition. Example: `concatTiles [[0, 1], [2]] = [0, 1, 2]`. -/
def concatTiles {β : Type} : List (List β) → List β
  | [] => []
  | t :: ts => t ++ concatTiles ts

/-- Concatenating two lists of tiles. -/
theorem concatTiles_append {β : Type} (L₁ L₂ : List (List β)) :
    concatTiles (L₁ ++ L₂) = concatTiles L₁ ++ concatTiles L₂ := by
  induction L₁ with
  | nil => rfl
  | cons t L ih =>
    show t ++ concatTiles (L ++ L₂) = t ++ concatTiles L ++ concatTiles L₂
    rw [ih, List.append_assoc t (concatTiles L) (concatTiles L₂)]

/-! ### Sums and maxima of lists -/

section Ops

variable {α : Type} [ScalarOps α]

/-- `Σ xs`, a right fold of `+` from `0`: what `reduce sum` and `matmul` denote.

Example: `sumList [a, b] = a + (b + 0)`. -/
def sumList (xs : List α) : α :=
  xs.foldr (· + ·) ScalarOps.zero

/-- The running maximum of `xs`, starting from `init`: `max x₀ (max x₁ (… init))`.

This is what a kernel computes when it streams a `max` reduction with an accumulator
initialised to `init` (`-∞` in floating point, or any element of the row). -/
def maxFold (init : α) (xs : List α) : α :=
  xs.foldr ScalarOps.max init

/-- The maximum of a list: `negInf` for the empty list (as `reduce max` over an empty axis is
`-∞`), and otherwise the running max started from the first element. -/
def maxList : List α → α
  | [] => ScalarOps.negInf
  | x :: xs => maxFold x xs

/-- `Σ [] = 0`. -/
theorem sumList_nil : sumList ([] : List α) = ScalarOps.zero := rfl

/-- `Σ (x :: xs) = x + Σ xs`. -/
theorem sumList_cons (x : α) (xs : List α) : sumList (x :: xs) = x + sumList xs := rfl

/-- `maxFold i [] = i`. -/
theorem maxFold_nil (i : α) : maxFold i [] = i := rfl

/-- `maxFold i (x :: xs) = max x (maxFold i xs)`. -/
theorem maxFold_cons (i x : α) (xs : List α) :
    maxFold i (x :: xs) = ScalarOps.max x (maxFold i xs) := rfl

end Ops

section Laws

variable {α β : Type} [ScalarLaws α]

/-- A sum over a concatenation is the sum of the two sums. -/
theorem sumList_append (xs ys : List α) : sumList (xs ++ ys) = sumList xs + sumList ys := by
  induction xs with
  | nil => exact (ScalarLaws.zero_add (sumList ys)).symm
  | cons x xs ih =>
    show x + sumList (xs ++ ys) = x + sumList xs + sumList ys
    rw [ih, ScalarLaws.add_assoc x (sumList xs) (sumList ys)]

/-- A sum over tiles is the sum of the per-tile sums. -/
theorem sumList_concatTiles (L : List (List α)) :
    sumList (concatTiles L) = sumList (L.map sumList) := by
  induction L with
  | nil => rfl
  | cons t L ih =>
    show sumList (t ++ concatTiles L) = sumList t + sumList (L.map sumList)
    rw [sumList_append, ih]

/-- A common right factor comes out of a sum: `Σⱼ f j · c = (Σⱼ f j) · c`. -/
theorem sumList_map_mul_right (f : β → α) (c : α) (xs : List β) :
    sumList (xs.map (fun j => f j * c)) = sumList (xs.map f) * c := by
  induction xs with
  | nil => exact (ScalarLaws.zero_mul c).symm
  | cons x xs ih =>
    show f x * c + sumList (xs.map (fun j => f j * c)) = (f x + sumList (xs.map f)) * c
    rw [ih, ScalarLaws.right_distrib (f x) (sumList (xs.map f)) c]

/-- A common divisor comes out of a sum: `Σⱼ f j / c = (Σⱼ f j) / c`. -/
theorem sumList_map_div (f : β → α) (c : α) (xs : List β) :
    sumList (xs.map (fun j => f j / c)) = sumList (xs.map f) / c := by
  induction xs with
  | nil => exact (ScalarLaws.zero_div c).symm
  | cons x xs ih =>
    show f x / c + sumList (xs.map (fun j => f j / c)) = (f x + sumList (xs.map f)) / c
    rw [ih, ScalarLaws.add_div (f x) (sumList (xs.map f)) c]

/-- Sums of pointwise equal terms are equal: `(∀ k, f k = g k) → Σₖ f k = Σₖ g k`. -/
theorem sumList_map_congr {f g : β → α} (h : ∀ k, f k = g k) (xs : List β) :
    sumList (xs.map f) = sumList (xs.map g) :=
  congrArg (fun F => sumList (xs.map F)) (funext h)

/-- A sum of sums: `Σⱼ (f j + g j) = Σⱼ f j + Σⱼ g j`. -/
theorem sumList_map_add (f g : β → α) (xs : List β) :
    sumList (xs.map (fun j => f j + g j)) = sumList (xs.map f) + sumList (xs.map g) := by
  induction xs with
  | nil => exact (ScalarLaws.add_zero (ScalarOps.zero : α)).symm
  | cons x xs ih =>
    show f x + g x + sumList (xs.map (fun j => f j + g j)) =
      f x + sumList (xs.map f) + (g x + sumList (xs.map g))
    rw [ih, ScalarLaws.add_add_add_comm (f x) (g x) (sumList (xs.map f)) (sumList (xs.map g))]

/-- A sum of differences: `Σⱼ (f j - g j) = Σⱼ f j - Σⱼ g j`. -/
theorem sumList_map_sub (f g : β → α) (xs : List β) :
    sumList (xs.map (fun j => f j - g j)) = sumList (xs.map f) - sumList (xs.map g) := by
  induction xs with
  | nil =>
    show (ScalarOps.zero : α) = ScalarOps.zero - ScalarOps.zero
    rw [ScalarLaws.sub_eq_add_neg, ScalarLaws.neg_zero, ScalarLaws.add_zero]
  | cons x xs ih =>
    show f x - g x + sumList (xs.map (fun j => f j - g j)) =
      f x + sumList (xs.map f) - (g x + sumList (xs.map g))
    rw [ih, ScalarLaws.sub_eq_add_neg (f x) (g x),
      ScalarLaws.sub_eq_add_neg (sumList (xs.map f)) (sumList (xs.map g)),
      ScalarLaws.sub_eq_add_neg (f x + sumList (xs.map f)) (g x + sumList (xs.map g)),
      ScalarLaws.neg_add (g x) (sumList (xs.map g)),
      ScalarLaws.add_add_add_comm (f x) (-g x) (sumList (xs.map f)) (-sumList (xs.map g))]

/-- A common left factor comes out of a sum: `Σⱼ c · f j = c · Σⱼ f j`. -/
theorem sumList_map_mul_left (c : α) (f : β → α) (xs : List β) :
    sumList (xs.map (fun j => c * f j)) = c * sumList (xs.map f) := by
  induction xs with
  | nil => exact (ScalarLaws.mul_zero c).symm
  | cons x xs ih =>
    show c * f x + sumList (xs.map (fun j => c * f j)) = c * (f x + sumList (xs.map f))
    rw [ih, ScalarLaws.left_distrib c (f x) (sumList (xs.map f))]

/-- The initial value of a running max is absorbed: `max i (maxFold i xs) = maxFold i xs`. -/
theorem max_maxFold_self (i : α) (xs : List α) :
    ScalarOps.max i (maxFold i xs) = maxFold i xs := by
  induction xs with
  | nil => exact ScalarLaws.max_idem i
  | cons x xs ih =>
    show ScalarOps.max i (ScalarOps.max x (maxFold i xs)) = ScalarOps.max x (maxFold i xs)
    rw [ScalarLaws.max_left_comm i x (maxFold i xs), ih]

/-- A running max over a concatenation is the max of the two running maxima. -/
theorem maxFold_append (i : α) (xs ys : List α) :
    maxFold i (xs ++ ys) = ScalarOps.max (maxFold i xs) (maxFold i ys) := by
  induction xs with
  | nil => exact (max_maxFold_self i ys).symm
  | cons x xs ih =>
    show ScalarOps.max x (maxFold i (xs ++ ys)) =
      ScalarOps.max (ScalarOps.max x (maxFold i xs)) (maxFold i ys)
    rw [ih, ScalarLaws.max_assoc x (maxFold i xs) (maxFold i ys)]

/-- A running max over tiles is the running max of the per-tile maxima. -/
theorem maxFold_concatTiles (i : α) (L : List (List α)) :
    maxFold i (concatTiles L) = maxFold i (L.map (maxFold i)) := by
  induction L with
  | nil => rfl
  | cons t L ih =>
    show maxFold i (t ++ concatTiles L) =
      ScalarOps.max (maxFold i t) (maxFold i (L.map (maxFold i)))
    rw [maxFold_append, ih]

/-- The max of a non-empty list is its running max started from any of its elements (here the
first), which is how `maxFold` statements apply to `maxList`. -/
theorem maxList_cons_eq_maxFold (x : α) (xs : List α) :
    maxList (x :: xs) = maxFold x (x :: xs) := by
  show maxFold x xs = ScalarOps.max x (maxFold x xs)
  exact (max_maxFold_self x xs).symm

end Laws

end Superopt

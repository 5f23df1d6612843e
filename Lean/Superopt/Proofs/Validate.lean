import Superopt.Proofs.PlanDenote
import Superopt.Proofs.Indep
import Superopt.Derive.Rules

/-!
# Checking an algebraic rewrite: the new graph denotes what the old one did

An algebraic rule (`stabilize_softmax`, `factor_row_scale`, `exp_to_exp2`, `distribute_matmul`,
`distribute_bias`, `commute_row_scale`, `move_contracted_scale`) rewrites one node of the graph
and renumbers the result canonically (`Superopt.Derive.rewriteGraphW`). Rather than proving the
rewriting code, the step checker validates each rewrite it performs: the rewrite returns a
witness (for each new node, the old node it copies; and the new node `root` that replaces the
rewritten `target`), and `validRewrite` checks, node by node, that

* every copy is the old node with its arguments renamed (`fwd`) to new nodes that denote the
  old arguments, each argument earlier than the node (`copyOk`);
* the root is one of the rule patterns over nodes that denote the old ones (`stabCheck`,
  `factorCheck`, `exp2Check`, and `modelCheck`: `distCheck`, `biasCheck`, `commCheck`,
  `moveCheck`), a scale or offset taken out of a contraction being independent of the
  contracted axis (`Superopt.Checks.indep`);
* the outputs correspond, position by position, and the axes are the same.

`validRewrite_sound` proves that a rewrite passing the check preserves the denotation of every
output, over any `[ScalarLaws α]`. Nothing about unchanged nodes is assumed: it is checked.

## Main definitions

* `corr`, `fwd`, `copyOk`, `stabCheck`, `factorCheck`, `exp2Check`, `distCheck`, `biasCheck`,
  `commCheck`, `moveCheck`, `modelCheck`, `rootOk`, `validAt`, `validRewrite`.

## Main statements

* `stab_root_sound`, `factor_root_sound`, `exp2_root_sound`, `dist_root_sound`,
  `bias_root_sound`, `comm_root_sound`, `move_root_sound`: the patterns.
* `valid_denote`, `validRewrite_sound`.

## Implementation notes

Each pattern reads the ids it names from the two graphs without checking anything (`…Ids?`,
`argAt` for the nodes a rule emitted) and then decides one conjunction (`…Shape`), so that the
proof is a destructuring of that conjunction and a rewrite with the `denote_*` lemmas.
-/

namespace Superopt.Validate

open Superopt Superopt.Semantics Superopt.Rules Superopt.Checks Superopt.PlanSem Superopt.Derive

/-! ## Small helpers -/

/-- Entry `k` of a list of options (`none` past the end). -/
def lookupO : List (Option NodeId) → Nat → Option NodeId
  | [], _ => none
  | x :: _, 0 => x
  | _ :: xs, k + 1 => lookupO xs k

/-- Past the end, `lookupO` is `none`. -/
theorem lookupO_none : ∀ (l : List (Option NodeId)) (k : Nat), l.length ≤ k → lookupO l k = none
  | [], _, _ => rfl
  | _ :: _, 0, h => absurd h (Nat.not_succ_le_zero _)
  | _ :: xs, k + 1, h => lookupO_none xs k (Nat.le_of_succ_le_succ h)

/-- The position (from `k`) of the first `some a` in `l`. -/
def indexOfSome : List (Option NodeId) → NodeId → Nat → Option Nat
  | [], _, _ => none
  | x :: xs, a, k => if x = some a then some k else indexOfSome xs a (k + 1)

/-- `p v` for the value of `o`, `false` for `none`. -/
def optAny {β : Type} (o : Option β) (p : β → Bool) : Bool :=
  match o with
  | some v => p v
  | none => false

/-- `optAny o p = true` gives the value and `p` of it. -/
theorem optAny_elim {β : Type} {o : Option β} {p : β → Bool} (h : optAny o p = true) :
    ∃ v, o = some v ∧ p v = true := by
  cases o with
  | none => exact absurd (show false = true from h) (by decide)
  | some v => exact ⟨v, rfl, h⟩

/-- `p v` for the value of `o`, `true` for `none`. -/
def optAll {β : Type} (o : Option β) (p : β → Bool) : Bool :=
  match o with
  | some v => p v
  | none => true

/-- `optAll o p = true` gives `p` of the value. -/
theorem optAll_some {β : Type} {o : Option β} {p : β → Bool} {v : β} (h : optAll o p = true)
    (ho : o = some v) : p v = true := by
  subst ho
  exact h

/-- `p j` for every `j < n`. -/
def allUpTo (p : Nat → Bool) : Nat → Bool
  | 0 => true
  | n + 1 => allUpTo p n && p n

/-- `allUpTo p n = true` gives `p j` for `j < n`. -/
theorem allUpTo_lt {p : Nat → Bool} : ∀ {n j : Nat}, allUpTo p n = true → j < n → p j = true
  | 0, _, _, hj => absurd hj (Nat.not_lt_zero _)
  | n + 1, j, h, hj => by
    have h' : (allUpTo p n && p n) = true := h
    by_cases hjn : j = n
    · rw [hjn]
      exact (band_elim h').2
    · exact allUpTo_lt (band_elim h').1 (by omega)

/-! ## The correspondence a witness claims -/

/-- The old node that new node `j` denotes the same as: the rewritten `target` for the root, the
copied node for a copy, `none` for a node the rule emitted. -/
def corr (w : RewriteWitness) (target j : NodeId) : Option NodeId :=
  if j = w.root then some target else lookupO w.origin j

/-- Where old node `a` went: the root for the rewritten node, else the first new node copying
it. -/
def fwd (w : RewriteWitness) (target a : NodeId) : NodeId :=
  if a = target then w.root else (indexOfSome w.origin a 0).getD 0

/-- New node `j` is old node `i` with its arguments renamed by `fwd`, each renamed argument
earlier than `j` and corresponding to the old argument, which is earlier than `i`. -/
def copyOk (g g' : Graph) (w : RewriteWitness) (target j i : NodeId) : Bool :=
  optAny g.nodes[i]? fun n =>
    decide (g'.nodes[j]? = some (n.mapArgs (fwd w target))) &&
      allB (fun a => decide (fwd w target a < j) && decide (a < i) &&
        decide (corr w target (fwd w target a) = some a)) n.args

/-! ## The three root patterns -/

/-- The nodes of a `stabilize_softmax` root: in the new graph `j = e' / z'`, `e' = exp d`,
`d = s' − m`; in the old one `i = e / z`, `e = exp s`, `z = Σ_axis _`. -/
structure StabIds where
  /-- The softmax axis. -/
  axis : Axis
  /-- Old scores. -/
  s : NodeId
  /-- Old numerator. -/
  e : NodeId
  /-- Old denominator. -/
  z : NodeId
  /-- New scores. -/
  s' : NodeId
  /-- New row max. -/
  m : NodeId
  /-- New shifted scores. -/
  d : NodeId
  /-- New numerator. -/
  e' : NodeId
  /-- New denominator. -/
  z' : NodeId

/-- Read the ids of a `stabilize_softmax` root (unchecked). -/
def stabIds? (g g' : Graph) (j i : NodeId) : Option StabIds :=
  match g'.nodes[j]?, g.nodes[i]? with
  | some (.binary .div e' z'), some (.binary .div e z) =>
    match g'.nodes[e']?, g.nodes[e]?, g.nodes[z]? with
    | some (.unary .exp d), some (.unary .exp s), some (.reduce .sum axis _) =>
      match g'.nodes[d]? with
      | some (.binary .sub s' m) => some ⟨axis, s, e, z, s', m, d, e', z'⟩
      | _ => none
    | _, _, _ => none
  | _, _ => none

/-- The `stabilize_softmax` pattern, in the order `denote_stabilize_softmax` takes it, then the
row max, the correspondence of the scores and their order. -/
abbrev StabShape (g g' : Graph) (c : NodeId → Option NodeId) (j i : NodeId) (v : StabIds) :
    Prop :=
  g.nodes[v.e]? = some (.unary .exp v.s) ∧ v.s < v.e ∧
  g.nodes[v.z]? = some (.reduce .sum v.axis v.e) ∧ v.e < v.z ∧
  g.nodes[i]? = some (.binary .div v.e v.z) ∧ v.e < i ∧ v.z < i ∧
  g'.nodes[v.d]? = some (.binary .sub v.s' v.m) ∧ v.s' < v.d ∧ v.m < v.d ∧
  g'.nodes[v.e']? = some (.unary .exp v.d) ∧ v.d < v.e' ∧
  g'.nodes[v.z']? = some (.reduce .sum v.axis v.e') ∧ v.e' < v.z' ∧
  g'.nodes[j]? = some (.binary .div v.e' v.z') ∧ v.e' < j ∧ v.z' < j ∧
  g'.nodes[v.m]? = some (.reduce .max v.axis v.s') ∧ v.s' < v.m ∧
  c v.s' = some v.s ∧ v.s' < j

/-- Whether new node `j` is the `stabilize_softmax` rewrite of old node `i`. -/
def stabCheck (g g' : Graph) (c : NodeId → Option NodeId) (j i : NodeId) : Bool :=
  optAny (stabIds? g g' j i) fun v => decide (StabShape g g' c j i v)

/-- How a row-scaled operand `y` is written: `x · s`, `s · x` or `x / s`. -/
inductive RowForm where
  /-- `x · s`. -/
  | xs
  /-- `s · x`. -/
  | sx
  /-- `x / s`. -/
  | dv
  deriving Repr, DecidableEq

/-- The node `y` of a form. -/
def RowForm.node : RowForm → NodeId → NodeId → Node
  | .xs, x, s => .binary .mul x s
  | .sx, x, s => .binary .mul s x
  | .dv, x, s => .binary .div x s

/-- The op of the factored result: `·` or `/`. -/
def RowForm.op : RowForm → BinOp
  | .xs => .mul
  | .sx => .mul
  | .dv => .div

/-- The value of `y` from the values of `x` and `s`. -/
def RowForm.val {α : Type} [ScalarOps α] : RowForm → α → α → α
  | .xs, x, s => x * s
  | .sx, x, s => s * x
  | .dv, x, s => x / s

/-- The nodes of a `factor_row_scale` root: in the old graph `i = matmul _ _ axA axB` with the
scaled operand `y` (`side = false`: the first, else the second), `y = form x s`, `other` the
other operand; in the new graph `j = mm op s'`, `mm = matmul a' b' axA axB`. -/
structure FactorIds where
  /-- The contracted axis of the first operand. -/
  axA : Axis
  /-- The contracted axis of the second operand. -/
  axB : Axis
  /-- The scaled operand. -/
  y : NodeId
  /-- The other operand. -/
  other : NodeId
  /-- The unscaled tensor. -/
  x : NodeId
  /-- The row scale. -/
  s : NodeId
  /-- The new contraction. -/
  mm : NodeId
  /-- The new first operand. -/
  a' : NodeId
  /-- The new second operand. -/
  b' : NodeId
  /-- The new scale. -/
  s' : NodeId

/-- Read the ids of a `factor_row_scale` root for one side and form (unchecked). -/
def factorIds? (g g' : Graph) (j i : NodeId) (side : Bool) (f : RowForm) : Option FactorIds :=
  match g.nodes[i]?, g'.nodes[j]? with
  | some (.matmul a b axA axB), some (.binary _ mm s') =>
    match g'.nodes[mm]? with
    | some (.matmul a' b' _ _) =>
      let y := if side then b else a
      let other := if side then a else b
      match g.nodes[y]? with
      | some (.binary _ u w) =>
        let x : NodeId := (match f with | .sx => w | _ => u)
        let s : NodeId := (match f with | .sx => u | _ => w)
        some ⟨axA, axB, y, other, x, s, mm, a', b', s'⟩
      | _ => none
    | _ => none
  | _, _ => none

/-- The `factor_row_scale` pattern with the first operand scaled. -/
abbrev FactorShape0 (g g' : Graph) (c : NodeId → Option NodeId) (j i : NodeId) (f : RowForm)
    (v : FactorIds) : Prop :=
  g.nodes[i]? = some (.matmul v.y v.other v.axA v.axB) ∧ v.y < i ∧ v.other < i ∧
  g.nodes[v.y]? = some (f.node v.x v.s) ∧ v.x < v.y ∧ v.s < v.y ∧
  g'.nodes[j]? = some (.binary f.op v.mm v.s') ∧ v.mm < j ∧ v.s' < j ∧
  g'.nodes[v.mm]? = some (.matmul v.a' v.b' v.axA v.axB) ∧ v.a' < v.mm ∧ v.b' < v.mm ∧
  c v.a' = some v.x ∧ c v.b' = some v.other ∧ c v.s' = some v.s ∧ indep g v.axA v.s = true

/-- The `factor_row_scale` pattern with the second operand scaled. -/
abbrev FactorShape1 (g g' : Graph) (c : NodeId → Option NodeId) (j i : NodeId) (f : RowForm)
    (v : FactorIds) : Prop :=
  g.nodes[i]? = some (.matmul v.other v.y v.axA v.axB) ∧ v.other < i ∧ v.y < i ∧
  g.nodes[v.y]? = some (f.node v.x v.s) ∧ v.x < v.y ∧ v.s < v.y ∧
  g'.nodes[j]? = some (.binary f.op v.mm v.s') ∧ v.mm < j ∧ v.s' < j ∧
  g'.nodes[v.mm]? = some (.matmul v.a' v.b' v.axA v.axB) ∧ v.a' < v.mm ∧ v.b' < v.mm ∧
  c v.a' = some v.other ∧ c v.b' = some v.x ∧ c v.s' = some v.s ∧ indep g v.axB v.s = true

/-- Whether new node `j` is the `factor_row_scale` rewrite of old node `i` for one form. -/
def factorCheckForm (g g' : Graph) (c : NodeId → Option NodeId) (j i : NodeId) (f : RowForm) :
    Bool :=
  optAny (factorIds? g g' j i false f) (fun v => decide (FactorShape0 g g' c j i f v)) ||
    optAny (factorIds? g g' j i true f) (fun v => decide (FactorShape1 g g' c j i f v))

/-- Whether new node `j` is the `factor_row_scale` rewrite of old node `i`. -/
def factorCheck (g g' : Graph) (c : NodeId → Option NodeId) (j i : NodeId) : Bool :=
  factorCheckForm g g' c j i .xs || factorCheckForm g g' c j i .sx ||
    factorCheckForm g g' c j i .dv

/-- The nodes of an `exp_to_exp2` root: old `i = exp x`; new `j = exp2 y`, `y = x' · c`. -/
structure Exp2Ids where
  /-- The old argument. -/
  x : NodeId
  /-- The new product. -/
  y : NodeId
  /-- The new argument. -/
  x' : NodeId
  /-- The constant. -/
  c : NodeId

/-- Read the ids of an `exp_to_exp2` root (unchecked). -/
def exp2Ids? (g g' : Graph) (j i : NodeId) : Option Exp2Ids :=
  match g.nodes[i]?, g'.nodes[j]? with
  | some (.unary .exp x), some (.unary .exp2 y) =>
    match g'.nodes[y]? with
    | some (.binary .mul x' c) => some ⟨x, y, x', c⟩
    | _ => none
  | _, _ => none

/-- The `exp_to_exp2` pattern: the constant is the one of bits `log2eBits`. -/
abbrev Exp2Shape (g g' : Graph) (c : NodeId → Option NodeId) (j i : NodeId) (v : Exp2Ids) :
    Prop :=
  g.nodes[i]? = some (.unary .exp v.x) ∧ v.x < i ∧
  g'.nodes[j]? = some (.unary .exp2 v.y) ∧ v.y < j ∧
  g'.nodes[v.y]? = some (.binary .mul v.x' v.c) ∧ v.x' < v.y ∧ v.c < v.y ∧
  g'.nodes[v.c]? = some (.const log2eBits) ∧ c v.x' = some v.x

/-- Whether new node `j` is the `exp_to_exp2` rewrite of old node `i`. -/
def exp2Check (g g' : Graph) (c : NodeId → Option NodeId) (j i : NodeId) : Bool :=
  optAny (exp2Ids? g g' j i) fun v => decide (Exp2Shape g g' c j i v)

/-! ## The rewrites of what models contain -/

/-- Argument `k` of node `n` of `g` (`0` when there is none): how the checks read the nodes a
rule emitted (what they read is then checked). -/
def argAt (g : Graph) (n k : NodeId) : NodeId :=
  match g.nodes[n]? with
  | some node => (node.args.drop k).headD 0
  | none => 0

/-- `p j` for some element `j` of the list. -/
def someB {β : Type} (p : β → Bool) : List β → Bool
  | [] => false
  | a :: as => p a || someB p as

/-- `someB p l = true` gives an element with `p`. -/
theorem someB_elim {β : Type} {p : β → Bool} : ∀ {l : List β}, someB p l = true →
    ∃ a, p a = true
  | [], h => absurd (show false = true from h) (by decide)
  | a :: as, h => by
    have h' : (p a || someB p as) = true := h
    cases bor_elim h' with
    | inl ha => exact ⟨a, ha⟩
    | inr hs => exact someB_elim hs

/-- How an offset operand `y` is written: `x + v`, `v + x` or `x − v`. -/
inductive OffForm where
  /-- `x + v`. -/
  | addR
  /-- `v + x`. -/
  | addL
  /-- `x − v`. -/
  | subR
  deriving Repr, DecidableEq

/-- The node `y` of a form. -/
def OffForm.node : OffForm → NodeId → NodeId → Node
  | .addR, x, v => .binary .add x v
  | .addL, x, v => .binary .add v x
  | .subR, x, v => .binary .sub x v

/-- The op of the distributed result: `+` or `−`. -/
def OffForm.op : OffForm → BinOp
  | .addR => .add
  | .addL => .add
  | .subR => .sub

/-- The value of `y` from the values of `x` and `v`. -/
def OffForm.val {α : Type} [ScalarOps α] : OffForm → α → α → α
  | .addR, x, v => x + v
  | .addL, x, v => v + x
  | .subR, x, v => x - v

/-- The nodes of a `distribute_matmul` / `distribute_bias` root: in the old graph
`i = matmul _ _ axA axB` with the offset operand `y = form x off` (`side = false`: the first
operand, else the second) and the other operand `other`; in the new graph `j = mm ± t`,
`mm = matmul a' b' _ _`, `t` with arguments `t1`, `t2`, and `o'` the argument of the column sum
(`t2` for the first operand, `t1` for the second). -/
structure OffIds where
  /-- The contracted axis of the first operand. -/
  axA : Axis
  /-- The contracted axis of the second operand. -/
  axB : Axis
  /-- The offset operand. -/
  y : NodeId
  /-- The other operand. -/
  other : NodeId
  /-- The offset tensor. -/
  x : NodeId
  /-- The offset. -/
  off : NodeId
  /-- The new contraction of `x`. -/
  mm : NodeId
  /-- Its first operand. -/
  a' : NodeId
  /-- Its second operand. -/
  b' : NodeId
  /-- The new term. -/
  t : NodeId
  /-- The term's first argument. -/
  t1 : NodeId
  /-- The term's second argument. -/
  t2 : NodeId
  /-- The argument of the column sum (row-offset form). -/
  o' : NodeId

/-- Read the ids of a `distribute_*` root for one side and form (unchecked). -/
def offIds? (g g' : Graph) (j i : NodeId) (side : Bool) (f : OffForm) : Option OffIds :=
  match g.nodes[i]?, g'.nodes[j]? with
  | some (.matmul a b axA axB), some (.binary _ mm t) =>
    let y := if side then b else a
    let u := argAt g y 0
    let w := argAt g y 1
    let t1 := argAt g' t 0
    let t2 := argAt g' t 1
    some { axA := axA, axB := axB, y := y, other := if side then a else b,
           x := (match f with | .addL => w | _ => u),
           off := (match f with | .addL => u | _ => w),
           mm := mm, a' := argAt g' mm 0, b' := argAt g' mm 1, t := t, t1 := t1, t2 := t2,
           o' := argAt g' (if side then t1 else t2) 0 }
  | _, _ => none

/-- `distribute_matmul`, first operand: old `i = y @ other`, `y = x ± v` with `v` independent
of `axA`; new `j = mm ± t`, `mm = x' @ other'`, `t = v' · s`, `s = Σ_axB other''` (the column
sum, over an axis of `axA`'s size). -/
abbrev RowOffShape0 (g g' : Graph) (c : NodeId → Option NodeId) (j i : NodeId) (f : OffForm)
    (d : OffIds) : Prop :=
  g.nodes[i]? = some (.matmul d.y d.other d.axA d.axB) ∧ d.y < i ∧ d.other < i ∧
  g.nodes[d.y]? = some (f.node d.x d.off) ∧ d.x < d.y ∧ d.off < d.y ∧
  g'.nodes[j]? = some (.binary f.op d.mm d.t) ∧ d.mm < j ∧ d.t < j ∧
  g'.nodes[d.mm]? = some (.matmul d.a' d.b' d.axA d.axB) ∧ d.a' < d.mm ∧ d.b' < d.mm ∧
  g'.nodes[d.t]? = some (.binary .mul d.t1 d.t2) ∧ d.t1 < d.t ∧ d.t2 < d.t ∧
  g'.nodes[d.t2]? = some (.reduce .sum d.axB d.o') ∧ d.o' < d.t2 ∧
  c d.a' = some d.x ∧ c d.b' = some d.other ∧ c d.t1 = some d.off ∧ c d.o' = some d.other ∧
  indep g d.axA d.off = true ∧ axisSize g.axes d.axB = axisSize g.axes d.axA

/-- `distribute_matmul`, second operand: old `i = other @ y`, `v` independent of `axB`; new
`j = mm ± t`, `mm = other' @ x'`, `t = s · v'`, `s = Σ_axA other''`. -/
abbrev RowOffShape1 (g g' : Graph) (c : NodeId → Option NodeId) (j i : NodeId) (f : OffForm)
    (d : OffIds) : Prop :=
  g.nodes[i]? = some (.matmul d.other d.y d.axA d.axB) ∧ d.other < i ∧ d.y < i ∧
  g.nodes[d.y]? = some (f.node d.x d.off) ∧ d.x < d.y ∧ d.off < d.y ∧
  g'.nodes[j]? = some (.binary f.op d.mm d.t) ∧ d.mm < j ∧ d.t < j ∧
  g'.nodes[d.mm]? = some (.matmul d.a' d.b' d.axA d.axB) ∧ d.a' < d.mm ∧ d.b' < d.mm ∧
  g'.nodes[d.t]? = some (.binary .mul d.t1 d.t2) ∧ d.t1 < d.t ∧ d.t2 < d.t ∧
  g'.nodes[d.t1]? = some (.reduce .sum d.axA d.o') ∧ d.o' < d.t1 ∧
  c d.a' = some d.other ∧ c d.b' = some d.x ∧ c d.t2 = some d.off ∧ c d.o' = some d.other ∧
  indep g d.axB d.off = true

/-- `distribute_bias`, first operand: old `i = y @ other`, `y = x ± v`; new `j = mm ± t`,
`mm = x' @ other'`, `t = v' @ other''`. -/
abbrev BiasShape0 (g g' : Graph) (c : NodeId → Option NodeId) (j i : NodeId) (f : OffForm)
    (d : OffIds) : Prop :=
  g.nodes[i]? = some (.matmul d.y d.other d.axA d.axB) ∧ d.y < i ∧ d.other < i ∧
  g.nodes[d.y]? = some (f.node d.x d.off) ∧ d.x < d.y ∧ d.off < d.y ∧
  g'.nodes[j]? = some (.binary f.op d.mm d.t) ∧ d.mm < j ∧ d.t < j ∧
  g'.nodes[d.mm]? = some (.matmul d.a' d.b' d.axA d.axB) ∧ d.a' < d.mm ∧ d.b' < d.mm ∧
  g'.nodes[d.t]? = some (.matmul d.t1 d.t2 d.axA d.axB) ∧ d.t1 < d.t ∧ d.t2 < d.t ∧
  c d.a' = some d.x ∧ c d.b' = some d.other ∧ c d.t1 = some d.off ∧ c d.t2 = some d.other

/-- `distribute_bias`, second operand: old `i = other @ y`; new `j = mm ± t`,
`mm = other' @ x'`, `t = other'' @ v'`. -/
abbrev BiasShape1 (g g' : Graph) (c : NodeId → Option NodeId) (j i : NodeId) (f : OffForm)
    (d : OffIds) : Prop :=
  g.nodes[i]? = some (.matmul d.other d.y d.axA d.axB) ∧ d.other < i ∧ d.y < i ∧
  g.nodes[d.y]? = some (f.node d.x d.off) ∧ d.x < d.y ∧ d.off < d.y ∧
  g'.nodes[j]? = some (.binary f.op d.mm d.t) ∧ d.mm < j ∧ d.t < j ∧
  g'.nodes[d.mm]? = some (.matmul d.a' d.b' d.axA d.axB) ∧ d.a' < d.mm ∧ d.b' < d.mm ∧
  g'.nodes[d.t]? = some (.matmul d.t1 d.t2 d.axA d.axB) ∧ d.t1 < d.t ∧ d.t2 < d.t ∧
  c d.a' = some d.other ∧ c d.b' = some d.x ∧ c d.t1 = some d.other ∧ c d.t2 = some d.off

/-- Every offset form. -/
def offForms : List OffForm := [.addR, .addL, .subR]

/-- Whether new node `j` is the `distribute_matmul` rewrite of old node `i` (a row offset
distributed over the contraction, either operand, every form). -/
def distCheck (g g' : Graph) (c : NodeId → Option NodeId) (j i : NodeId) : Bool :=
  someB (fun (f : OffForm) =>
    optAny (offIds? g g' j i false f) (fun d => decide (RowOffShape0 g g' c j i f d)) ||
      optAny (offIds? g g' j i true f) (fun d => decide (RowOffShape1 g g' c j i f d)))
    offForms

/-- Whether new node `j` is the `distribute_bias` rewrite of old node `i` (a bias along the
contracted axis split off as its own contraction, either operand, every form). -/
def biasCheck (g g' : Graph) (c : NodeId → Option NodeId) (j i : NodeId) : Bool :=
  someB (fun (f : OffForm) =>
    optAny (offIds? g g' j i false f) (fun d => decide (BiasShape0 g g' c j i f d)) ||
      optAny (offIds? g g' j i true f) (fun d => decide (BiasShape1 g g' c j i f d)))
    offForms

/-- `a · c` (`first = true`) or `c · a`: the product with a gain or scale `c`. -/
def outerNode : Bool → NodeId → NodeId → Node
  | true, a, c => .binary .mul a c
  | false, a, c => .binary .mul c a

/-- The value of `outerNode`. -/
def outerVal {α : Type} [ScalarOps α] : Bool → α → α → α
  | true, a, c => a * c
  | false, a, c => c * a

/-- The nodes of a `commute_row_scale` root: old `i = matmul _ _ axA axB` with operand
`y = outer q cc`, `q = form x s`; new `j = matmul _ _ axA axB` with operand `y' = xc ⋆ s'`,
`xc = outer x' c'`, and `o'` the other operand. -/
structure CommIds where
  /-- The contracted axis of the first operand. -/
  axA : Axis
  /-- The contracted axis of the second operand. -/
  axB : Axis
  /-- The old operand. -/
  y : NodeId
  /-- The other operand. -/
  other : NodeId
  /-- The row-scaled tensor. -/
  q : NodeId
  /-- The gain. -/
  cc : NodeId
  /-- The unscaled tensor. -/
  x : NodeId
  /-- The row scale. -/
  s : NodeId
  /-- The new operand. -/
  y' : NodeId
  /-- The new other operand. -/
  o' : NodeId
  /-- The new gained tensor. -/
  xc : NodeId
  /-- The new row scale. -/
  s' : NodeId
  /-- The new unscaled tensor. -/
  x' : NodeId
  /-- The new gain. -/
  c' : NodeId

/-- Read the ids of a `commute_row_scale` root (unchecked). -/
def commIds? (g g' : Graph) (j i : NodeId) (side first : Bool) (f : RowForm) :
    Option CommIds :=
  match g.nodes[i]?, g'.nodes[j]? with
  | some (.matmul a b axA axB), some (.matmul a' b' _ _) =>
    let y := if side then b else a
    let q := if first then argAt g y 0 else argAt g y 1
    let u := argAt g q 0
    let w := argAt g q 1
    let y' := if side then b' else a'
    let xc := argAt g' y' 0
    some { axA := axA, axB := axB, y := y, other := if side then a else b, q := q,
           cc := if first then argAt g y 1 else argAt g y 0,
           x := (match f with | .sx => w | _ => u), s := (match f with | .sx => u | _ => w),
           y' := y', o' := if side then a' else b', xc := xc, s' := argAt g' y' 1,
           x' := if first then argAt g' xc 0 else argAt g' xc 1,
           c' := if first then argAt g' xc 1 else argAt g' xc 0 }
  | _, _ => none

/-- `commute_row_scale`, first operand: old `i = y @ other`, `y = outer (x ⋆ s) c`; new
`j = y' @ other'`, `y' = outer x' c' ⋆ s'`. -/
abbrev CommShape0 (g g' : Graph) (c : NodeId → Option NodeId) (j i : NodeId) (first : Bool)
    (f : RowForm) (d : CommIds) : Prop :=
  g.nodes[i]? = some (.matmul d.y d.other d.axA d.axB) ∧ d.y < i ∧ d.other < i ∧
  g.nodes[d.y]? = some (outerNode first d.q d.cc) ∧ d.q < d.y ∧ d.cc < d.y ∧
  g.nodes[d.q]? = some (f.node d.x d.s) ∧ d.x < d.q ∧ d.s < d.q ∧
  g'.nodes[j]? = some (.matmul d.y' d.o' d.axA d.axB) ∧ d.y' < j ∧ d.o' < j ∧
  g'.nodes[d.y']? = some (.binary f.op d.xc d.s') ∧ d.xc < d.y' ∧ d.s' < d.y' ∧
  g'.nodes[d.xc]? = some (outerNode first d.x' d.c') ∧ d.x' < d.xc ∧ d.c' < d.xc ∧
  c d.o' = some d.other ∧ c d.x' = some d.x ∧ c d.c' = some d.cc ∧ c d.s' = some d.s

/-- `commute_row_scale`, second operand: old `i = other @ y`; new `j = other' @ y'`. -/
abbrev CommShape1 (g g' : Graph) (c : NodeId → Option NodeId) (j i : NodeId) (first : Bool)
    (f : RowForm) (d : CommIds) : Prop :=
  g.nodes[i]? = some (.matmul d.other d.y d.axA d.axB) ∧ d.other < i ∧ d.y < i ∧
  g.nodes[d.y]? = some (outerNode first d.q d.cc) ∧ d.q < d.y ∧ d.cc < d.y ∧
  g.nodes[d.q]? = some (f.node d.x d.s) ∧ d.x < d.q ∧ d.s < d.q ∧
  g'.nodes[j]? = some (.matmul d.o' d.y' d.axA d.axB) ∧ d.o' < j ∧ d.y' < j ∧
  g'.nodes[d.y']? = some (.binary f.op d.xc d.s') ∧ d.xc < d.y' ∧ d.s' < d.y' ∧
  g'.nodes[d.xc]? = some (outerNode first d.x' d.c') ∧ d.x' < d.xc ∧ d.c' < d.xc ∧
  c d.o' = some d.other ∧ c d.x' = some d.x ∧ c d.c' = some d.cc ∧ c d.s' = some d.s

/-- Whether new node `j` is the `commute_row_scale` rewrite of old node `i` (either operand,
either order of the gain, every row-scale form). -/
def commCheck (g g' : Graph) (c : NodeId → Option NodeId) (j i : NodeId) : Bool :=
  someB (fun (f : RowForm) => someB (fun (first : Bool) =>
      optAny (commIds? g g' j i false first f)
          (fun d => decide (CommShape0 g g' c j i first f d)) ||
        optAny (commIds? g g' j i true first f)
          (fun d => decide (CommShape1 g g' c j i first f d)))
      [true, false])
    [.xs, .sx, .dv]

/-- The nodes of a `move_contracted_scale` root: old `i = matmul _ _ axA axB` with operand
`y = outer u cc` and the weight `other`; new `j = matmul _ _ axA axB` with operands `a'` and
`wc = o' · c'`. -/
structure MoveIds where
  /-- The contracted axis of the first operand. -/
  axA : Axis
  /-- The contracted axis of the second operand. -/
  axB : Axis
  /-- The old scaled operand. -/
  y : NodeId
  /-- The weight. -/
  other : NodeId
  /-- The unscaled activation. -/
  u : NodeId
  /-- The scale. -/
  cc : NodeId
  /-- The new activation operand. -/
  a' : NodeId
  /-- The new scaled weight. -/
  wc : NodeId
  /-- The new weight. -/
  o' : NodeId
  /-- The new scale. -/
  c' : NodeId

/-- Read the ids of a `move_contracted_scale` root (unchecked). -/
def moveIds? (g g' : Graph) (j i : NodeId) (side first : Bool) : Option MoveIds :=
  match g.nodes[i]?, g'.nodes[j]? with
  | some (.matmul a b axA axB), some (.matmul a' b' _ _) =>
    let y := if side then b else a
    let wc := if side then a' else b'
    some { axA := axA, axB := axB, y := y, other := if side then a else b,
           u := if first then argAt g y 0 else argAt g y 1,
           cc := if first then argAt g y 1 else argAt g y 0,
           a' := if side then b' else a', wc := wc, o' := argAt g' wc 0, c' := argAt g' wc 1 }
  | _, _ => none

/-- `move_contracted_scale`, first operand: old `i = y @ other`, `y = outer u c`; new
`j = u' @ wc`, `wc = other' · c'`; one contracted name. -/
abbrev MoveShape0 (g g' : Graph) (c : NodeId → Option NodeId) (j i : NodeId) (first : Bool)
    (d : MoveIds) : Prop :=
  g.nodes[i]? = some (.matmul d.y d.other d.axA d.axB) ∧ d.y < i ∧ d.other < i ∧
  g.nodes[d.y]? = some (outerNode first d.u d.cc) ∧ d.u < d.y ∧ d.cc < d.y ∧
  g'.nodes[j]? = some (.matmul d.a' d.wc d.axA d.axB) ∧ d.a' < j ∧ d.wc < j ∧
  g'.nodes[d.wc]? = some (.binary .mul d.o' d.c') ∧ d.o' < d.wc ∧ d.c' < d.wc ∧
  c d.a' = some d.u ∧ c d.o' = some d.other ∧ c d.c' = some d.cc ∧ d.axB = d.axA

/-- `move_contracted_scale`, second operand: old `i = other @ y`; new `j = wc @ u'`. -/
abbrev MoveShape1 (g g' : Graph) (c : NodeId → Option NodeId) (j i : NodeId) (first : Bool)
    (d : MoveIds) : Prop :=
  g.nodes[i]? = some (.matmul d.other d.y d.axA d.axB) ∧ d.other < i ∧ d.y < i ∧
  g.nodes[d.y]? = some (outerNode first d.u d.cc) ∧ d.u < d.y ∧ d.cc < d.y ∧
  g'.nodes[j]? = some (.matmul d.wc d.a' d.axA d.axB) ∧ d.wc < j ∧ d.a' < j ∧
  g'.nodes[d.wc]? = some (.binary .mul d.o' d.c') ∧ d.o' < d.wc ∧ d.c' < d.wc ∧
  c d.a' = some d.u ∧ c d.o' = some d.other ∧ c d.c' = some d.cc ∧ d.axB = d.axA

/-- Whether new node `j` is the `move_contracted_scale` rewrite of old node `i` (either
operand, either order of the scale). -/
def moveCheck (g g' : Graph) (c : NodeId → Option NodeId) (j i : NodeId) : Bool :=
  someB (fun (first : Bool) =>
      optAny (moveIds? g g' j i false first) (fun d => decide (MoveShape0 g g' c j i first d)) ||
        optAny (moveIds? g g' j i true first) (fun d => decide (MoveShape1 g g' c j i first d)))
    [true, false]

/-- Whether new node `j` is one of the rewrites of what models contain. -/
def modelCheck (g g' : Graph) (c : NodeId → Option NodeId) (j i : NodeId) : Bool :=
  distCheck g g' c j i || biasCheck g g' c j i || commCheck g g' c j i || moveCheck g g' c j i

/-- Whether new node `j` is one of the rewrites of old node `i`. -/
def rootOk (g g' : Graph) (c : NodeId → Option NodeId) (j i : NodeId) : Bool :=
  stabCheck g g' c j i || factorCheck g g' c j i || exp2Check g g' c j i ||
    modelCheck g g' c j i

/-! ## The whole check -/

/-- The check of new node `j`, claimed to denote what old node `i` denotes. -/
def validAt (g g' : Graph) (w : RewriteWitness) (target j i : NodeId) : Bool :=
  if j = w.root then rootOk g g' (corr w target) j i else copyOk g g' w target j i

/-- Whether the new outputs correspond to the old ones, position by position. -/
def outputsMatch (c : NodeId → Option NodeId) : List NodeId → List NodeId → Bool
  | [], [] => true
  | o' :: os', o :: os => decide (c o' = some o) && outputsMatch c os' os
  | _, _ => false

/-- **The rewrite check**: the same axes; every new node the witness relates to an old one
passes `validAt` (every node past `origin` and `root` is related to none); the outputs
correspond. -/
def validRewrite (g g' : Graph) (w : RewriteWitness) (target : NodeId) : Bool :=
  decide (g'.axes = g.axes) &&
    allUpTo (fun j => optAll (corr w target j) (fun i => validAt g g' w target j i))
      (w.origin.length + w.root + 1) &&
    outputsMatch (corr w target) g'.outputs g.outputs

/-! ## The proofs -/

section Proofs

variable {α : Type}

/-- Renaming a node's arguments is reading them through the renaming (same axes). -/
theorem evalNode_mapArgs [ScalarOps α] {g g' : Graph} (hax : g'.axes = g.axes)
    (env : String → Index → α) (arg' : NodeId → Index → α) (F : NodeId → NodeId) (n : Node)
    (idx : Index) :
    evalNode g' env arg' (n.mapArgs F) idx = evalNode g env (fun a ix => arg' (F a) ix) n idx := by
  cases n with
  | input name axes => rfl
  | size axis =>
    show ScalarOps.ofNat (axisSize g'.axes axis) = ScalarOps.ofNat (axisSize g.axes axis)
    rw [hax]
  | eps bits => rfl
  | const bits => rfl
  | band a b lo hi => rfl
  | unary op x => rfl
  | binary op x y => rfl
  | select c x y => rfl
  | reduce fn axis x =>
    show evalRed fn ((List.range (axisSize g'.axes axis)).map
        (fun k => arg' (F x) (Index.set idx axis k))) =
      evalRed fn ((List.range (axisSize g.axes axis)).map
        (fun k => arg' (F x) (Index.set idx axis k)))
    rw [hax]
  | matmul a b axisA axisB =>
    show sumList ((List.range (axisSize g'.axes axisA)).map
        (fun k => arg' (F a) (Index.set idx axisA k) * arg' (F b) (Index.set idx axisB k))) =
      sumList ((List.range (axisSize g.axes axisA)).map
        (fun k => arg' (F a) (Index.set idx axisA k) * arg' (F b) (Index.set idx axisB k)))
    rw [hax]

/-- A form's node denotes the form's value. -/
theorem RowForm.denote_y [ScalarOps α] {g : Graph} {env : String → Index → α} {f : RowForm}
    {y x s : NodeId} (h : g.nodes[y]? = some (f.node x s)) (hx : x < y) (hs : s < y)
    (ix : Index) : denote g env y ix = f.val (denote g env x ix) (denote g env s ix) := by
  cases f with
  | xs => exact denote_binary h hx hs ix
  | sx => exact denote_binary h hs hx ix
  | dv => exact denote_binary h hx hs ix

variable [ScalarLaws α]

/-- A row scale comes out of a contraction, first operand scaled:
`Σₖ (Xₖ ⋆ S) Bₖ = (Σₖ Xₖ Bₖ) ⋆ S` for `⋆` = `· S`, `S ·`, `/ S`. -/
theorem RowForm.sum_left (f : RowForm) (X B : Nat → α) (S : α) (ks : List Nat) :
    sumList (ks.map (fun k => f.val (X k) S * B k)) =
      evalBinOp f.op (sumList (ks.map (fun k => X k * B k))) S := by
  cases f with
  | xs =>
    show sumList (ks.map (fun k => X k * S * B k)) = sumList (ks.map (fun k => X k * B k)) * S
    rw [factor_row_scale X B S ks, ScalarLaws.mul_comm]
  | sx =>
    show sumList (ks.map (fun k => S * X k * B k)) = sumList (ks.map (fun k => X k * B k)) * S
    have h : ∀ k, S * X k * B k = X k * S * B k := fun k => by
      rw [ScalarLaws.mul_comm S (X k)]
    simp only [h]
    rw [factor_row_scale X B S ks, ScalarLaws.mul_comm]
  | dv =>
    show sumList (ks.map (fun k => X k / S * B k)) = sumList (ks.map (fun k => X k * B k)) / S
    simp only [ScalarLaws.div_mul_eq_mul_div]
    exact sumList_map_div (fun k => X k * B k) S ks

/-- A row scale comes out of a contraction, second operand scaled:
`Σₖ Aₖ (Xₖ ⋆ S) = (Σₖ Aₖ Xₖ) ⋆ S`. -/
theorem RowForm.sum_right (f : RowForm) (A X : Nat → α) (S : α) (ks : List Nat) :
    sumList (ks.map (fun k => A k * f.val (X k) S)) =
      evalBinOp f.op (sumList (ks.map (fun k => A k * X k))) S := by
  cases f with
  | xs =>
    show sumList (ks.map (fun k => A k * (X k * S))) = sumList (ks.map (fun k => A k * X k)) * S
    have h : ∀ k, A k * (X k * S) = A k * X k * S := fun k => (ScalarLaws.mul_assoc _ _ _).symm
    simp only [h]
    exact sumList_map_mul_right (fun k => A k * X k) S ks
  | sx =>
    show sumList (ks.map (fun k => A k * (S * X k))) = sumList (ks.map (fun k => A k * X k)) * S
    have h : ∀ k, A k * (S * X k) = A k * X k * S := fun k => by
      rw [ScalarLaws.mul_comm S (X k), ScalarLaws.mul_assoc]
    simp only [h]
    exact sumList_map_mul_right (fun k => A k * X k) S ks
  | dv =>
    show sumList (ks.map (fun k => A k * (X k / S))) = sumList (ks.map (fun k => A k * X k)) / S
    have h : ∀ k, A k * (X k / S) = A k * X k / S := fun k => by
      rw [ScalarLaws.mul_comm (A k) (X k / S), ScalarLaws.div_mul_eq_mul_div,
        ScalarLaws.mul_comm (X k) (A k)]
    simp only [h]
    exact sumList_map_div (fun k => A k * X k) S ks

/-- **`stabilize_softmax`, checked.** A root that `stabCheck` accepts denotes what the old
softmax denotes, given that every earlier related node does (the scores). -/
theorem stab_root_sound {g g' : Graph} {c : NodeId → Option NodeId} {env : String → Index → α}
    {j i : NodeId} (hax : g'.axes = g.axes)
    (ih : ∀ j', j' < j → ∀ i', c j' = some i' → ∀ ix, denote g' env j' ix = denote g env i' ix)
    (h : stabCheck g g' c j i = true) (idx : Index) :
    denote g' env j idx = denote g env i idx := by
  cases optAny_elim h with
  | intro v hv =>
    have hS : StabShape g g' c j i v := of_decide_eq_true hv.2
    exact match hS with
      | ⟨he, hse, hz, hez, hp, hep, hzp, hd, hsd, hmd, he', hde, hz', hez', hp', hep', hzp',
          hm, hsm, hc, hsj⟩ =>
        denote_stabilize_softmax he hse hz hez hp hep hzp hd hsd hmd he' hde hz' hez' hp' hep'
          hzp' (ih v.s' hsj v.s hc) (fun ix k => denote_reduce_invariant hm hsm ix k)
          (by rw [hax]) idx

/-- **`factor_row_scale`, checked**, for one form of the scaled operand. -/
theorem factor_form_sound {g g' : Graph} {c : NodeId → Option NodeId}
    {env : String → Index → α} {j i : NodeId} {f : RowForm} (hax : g'.axes = g.axes)
    (ih : ∀ j', j' < j → ∀ i', c j' = some i' → ∀ ix, denote g' env j' ix = denote g env i' ix)
    (h : factorCheckForm g g' c j i f = true) (idx : Index) :
    denote g' env j idx = denote g env i idx := by
  cases bor_elim h with
  | inl h0 =>
    cases optAny_elim h0 with
    | intro v hv =>
      have hS : FactorShape0 g g' c j i f v := of_decide_eq_true hv.2
      exact match hS with
        | ⟨hi, hyi, hoi, hy, hxy, hsy, hj, hmj, hsj, hmm, ham, hbm, hca, hcb, hcs, hind⟩ => by
          rw [denote_binary hj hmj hsj idx, denote_matmul hmm ham hbm idx,
            denote_matmul hi hyi hoi idx]
          simp only [RowForm.denote_y (env := env) hy hxy hsy, indep_sound (env := env) hind,
            ih v.a' (Nat.lt_trans ham hmj) v.x hca, ih v.b' (Nat.lt_trans hbm hmj) v.other hcb,
            ih v.s' hsj v.s hcs, hax]
          exact (RowForm.sum_left f (fun k => denote g env v.x (Index.set idx v.axA k))
            (fun k => denote g env v.other (Index.set idx v.axB k)) (denote g env v.s idx)
            (List.range (axisSize g.axes v.axA))).symm
  | inr h1 =>
    cases optAny_elim h1 with
    | intro v hv =>
      have hS : FactorShape1 g g' c j i f v := of_decide_eq_true hv.2
      exact match hS with
        | ⟨hi, hoi, hyi, hy, hxy, hsy, hj, hmj, hsj, hmm, ham, hbm, hca, hcb, hcs, hind⟩ => by
          rw [denote_binary hj hmj hsj idx, denote_matmul hmm ham hbm idx,
            denote_matmul hi hoi hyi idx]
          simp only [RowForm.denote_y (env := env) hy hxy hsy, indep_sound (env := env) hind,
            ih v.a' (Nat.lt_trans ham hmj) v.other hca, ih v.b' (Nat.lt_trans hbm hmj) v.x hcb,
            ih v.s' hsj v.s hcs, hax]
          exact (RowForm.sum_right f (fun k => denote g env v.other (Index.set idx v.axA k))
            (fun k => denote g env v.x (Index.set idx v.axB k)) (denote g env v.s idx)
            (List.range (axisSize g.axes v.axA))).symm

/-- **`factor_row_scale`, checked**, every form and either operand. -/
theorem factor_root_sound {g g' : Graph} {c : NodeId → Option NodeId}
    {env : String → Index → α} {j i : NodeId} (hax : g'.axes = g.axes)
    (ih : ∀ j', j' < j → ∀ i', c j' = some i' → ∀ ix, denote g' env j' ix = denote g env i' ix)
    (h : factorCheck g g' c j i = true) (idx : Index) :
    denote g' env j idx = denote g env i idx := by
  cases bor_elim h with
  | inl h12 =>
    cases bor_elim h12 with
    | inl h1 => exact factor_form_sound hax ih h1 idx
    | inr h2 => exact factor_form_sound hax ih h2 idx
  | inr h3 => exact factor_form_sound hax ih h3 idx

/-- **`exp_to_exp2`, checked.** A root `exp2 (x' · c)` with `c` the `log2eBits` constant denotes
what `exp x` denotes when `x'` denotes what `x` does (the law `exp2_mul_log2e`). -/
theorem exp2_root_sound {g g' : Graph} {c : NodeId → Option NodeId} {env : String → Index → α}
    {j i : NodeId}
    (ih : ∀ j', j' < j → ∀ i', c j' = some i' → ∀ ix, denote g' env j' ix = denote g env i' ix)
    (h : exp2Check g g' c j i = true) (idx : Index) :
    denote g' env j idx = denote g env i idx := by
  cases optAny_elim h with
  | intro v hv =>
    have hS : Exp2Shape g g' c j i v := of_decide_eq_true hv.2
    exact match hS with
      | ⟨hi, hxi, hj, hyj, hy, hxy, hcy, hc, hcx⟩ => by
        rw [denote_unary hj hyj idx, denote_binary hy hxy hcy idx, denote_const hc idx,
          denote_unary hi hxi idx, ih v.x' (Nat.lt_trans hxy hyj) v.x hcx idx]
        exact ScalarLaws.exp2_mul_log2e _

/-! ### The rewrites of what models contain, checked -/

/-- `evalBinOp .mul` is `*`. -/
theorem evalBinOp_mul (a b : α) : evalBinOp BinOp.mul a b = a * b := rfl

/-- `evalRed .sum` is `sumList`. -/
theorem evalRed_sum (xs : List α) : evalRed RedFn.sum xs = sumList xs := rfl

/-- An offset form's node denotes the form's value. -/
theorem OffForm.denote_y {g : Graph} {env : String → Index → α} {f : OffForm}
    {y x v : NodeId} (h : g.nodes[y]? = some (f.node x v)) (hx : x < y) (hv : v < y)
    (ix : Index) : denote g env y ix = f.val (denote g env x ix) (denote g env v ix) := by
  cases f with
  | addR => exact denote_binary h hx hv ix
  | addL => exact denote_binary h hv hx ix
  | subR => exact denote_binary h hx hv ix

/-- A row offset distributed over a contraction, first operand:
`Σₖ (Xₖ ± V) Wₖ = (Σₖ Xₖ Wₖ) ± V · Σₖ Wₖ` (`Rules.distribute_matmul` and its `+` forms). -/
theorem OffForm.sum_left (f : OffForm) (X W : Nat → α) (V : α) (ks : List Nat) :
    sumList (ks.map (fun k => f.val (X k) V * W k)) =
      evalBinOp f.op (sumList (ks.map (fun k => X k * W k))) (V * sumList (ks.map W)) := by
  cases f with
  | addR =>
    show sumList (ks.map (fun k => (X k + V) * W k)) =
      sumList (ks.map (fun k => X k * W k)) + V * sumList (ks.map W)
    rw [Rules.distribute_bias X (fun _ => V) W ks, sumList_map_mul_left V W ks]
  | addL =>
    show sumList (ks.map (fun k => (V + X k) * W k)) =
      sumList (ks.map (fun k => X k * W k)) + V * sumList (ks.map W)
    have h : ∀ k, (V + X k) * W k = (X k + V) * W k := fun k => by
      rw [ScalarLaws.add_comm V (X k)]
    rw [sumList_map_congr h ks, Rules.distribute_bias X (fun _ => V) W ks,
      sumList_map_mul_left V W ks]
  | subR => exact Rules.distribute_matmul X W V ks

/-- A row offset distributed over a contraction, second operand:
`Σₖ Wₖ (Xₖ ± V) = (Σₖ Wₖ Xₖ) ± (Σₖ Wₖ) · V`. -/
theorem OffForm.sum_right (f : OffForm) (W X : Nat → α) (V : α) (ks : List Nat) :
    sumList (ks.map (fun k => W k * f.val (X k) V)) =
      evalBinOp f.op (sumList (ks.map (fun k => W k * X k))) (sumList (ks.map W) * V) := by
  have h1 : ∀ k, W k * f.val (X k) V = f.val (X k) V * W k := fun k => ScalarLaws.mul_comm _ _
  have h2 : ∀ k, W k * X k = X k * W k := fun k => ScalarLaws.mul_comm _ _
  rw [sumList_map_congr h1 ks, sumList_map_congr h2 ks,
    ScalarLaws.mul_comm (sumList (ks.map W)) V]
  exact OffForm.sum_left f X W V ks

/-- A bias along the contraction split off, first operand:
`Σₖ (Xₖ ± Vₖ) Wₖ = (Σₖ Xₖ Wₖ) ± Σₖ Vₖ Wₖ` (`Rules.distribute_bias`). -/
theorem OffForm.bias_left (f : OffForm) (X V W : Nat → α) (ks : List Nat) :
    sumList (ks.map (fun k => f.val (X k) (V k) * W k)) =
      evalBinOp f.op (sumList (ks.map (fun k => X k * W k)))
        (sumList (ks.map (fun k => V k * W k))) := by
  cases f with
  | addR => exact Rules.distribute_bias X V W ks
  | addL =>
    have h : ∀ k, (V k + X k) * W k = (X k + V k) * W k := fun k => by
      rw [ScalarLaws.add_comm (V k) (X k)]
    exact (sumList_map_congr h ks).trans (Rules.distribute_bias X V W ks)
  | subR => exact Rules.distribute_bias_sub X V W ks

/-- A bias along the contraction split off, second operand:
`Σₖ Wₖ (Xₖ ± Vₖ) = (Σₖ Wₖ Xₖ) ± Σₖ Wₖ Vₖ`. -/
theorem OffForm.bias_right (f : OffForm) (W X V : Nat → α) (ks : List Nat) :
    sumList (ks.map (fun k => W k * f.val (X k) (V k))) =
      evalBinOp f.op (sumList (ks.map (fun k => W k * X k)))
        (sumList (ks.map (fun k => W k * V k))) := by
  have h1 : ∀ k, W k * f.val (X k) (V k) = f.val (X k) (V k) * W k :=
    fun k => ScalarLaws.mul_comm _ _
  have h2 : ∀ k, W k * X k = X k * W k := fun k => ScalarLaws.mul_comm _ _
  have h3 : ∀ k, W k * V k = V k * W k := fun k => ScalarLaws.mul_comm _ _
  rw [sumList_map_congr h1 ks, sumList_map_congr h2 ks, sumList_map_congr h3 ks]
  exact OffForm.bias_left f X V W ks

/-- **`distribute_matmul`, checked**, for one form of the offset operand. -/
theorem dist_form_sound {g g' : Graph} {c : NodeId → Option NodeId}
    {env : String → Index → α} {j i : NodeId} {f : OffForm} (hax : g'.axes = g.axes)
    (ih : ∀ j', j' < j → ∀ i', c j' = some i' → ∀ ix, denote g' env j' ix = denote g env i' ix)
    (h : (optAny (offIds? g g' j i false f) (fun d => decide (RowOffShape0 g g' c j i f d)) ||
      optAny (offIds? g g' j i true f) (fun d => decide (RowOffShape1 g g' c j i f d))) = true)
    (idx : Index) : denote g' env j idx = denote g env i idx := by
  cases bor_elim h with
  | inl h0 =>
    cases optAny_elim h0 with
    | intro d hd =>
      have hS : RowOffShape0 g g' c j i f d := of_decide_eq_true hd.2
      exact match hS with
        | ⟨hi, hyi, hoi, hy, hxy, hvy, hj, hmj, htj, hmm, ham, hbm, ht, ht1, ht2, hs, hos,
            hca, hcb, hct, hco, hind, hsize⟩ => by
          rw [denote_binary hj hmj htj idx, denote_matmul hmm ham hbm idx,
            denote_binary ht ht1 ht2 idx, denote_reduce hs hos idx,
            denote_matmul hi hyi hoi idx]
          simp only [OffForm.denote_y (env := env) hy hxy hvy, indep_sound (env := env) hind,
            ih d.a' (Nat.lt_trans ham hmj) d.x hca, ih d.b' (Nat.lt_trans hbm hmj) d.other hcb,
            ih d.t1 (Nat.lt_trans ht1 htj) d.off hct,
            ih d.o' (Nat.lt_trans hos (Nat.lt_trans ht2 htj)) d.other hco, hax, hsize,
            evalBinOp_mul, evalRed_sum]
          exact (OffForm.sum_left f (fun k => denote g env d.x (Index.set idx d.axA k))
            (fun k => denote g env d.other (Index.set idx d.axB k)) (denote g env d.off idx)
            (List.range (axisSize g.axes d.axA))).symm
  | inr h1 =>
    cases optAny_elim h1 with
    | intro d hd =>
      have hS : RowOffShape1 g g' c j i f d := of_decide_eq_true hd.2
      exact match hS with
        | ⟨hi, hoi, hyi, hy, hxy, hvy, hj, hmj, htj, hmm, ham, hbm, ht, ht1, ht2, hs, hos,
            hca, hcb, hct, hco, hind⟩ => by
          rw [denote_binary hj hmj htj idx, denote_matmul hmm ham hbm idx,
            denote_binary ht ht1 ht2 idx, denote_reduce hs hos idx,
            denote_matmul hi hoi hyi idx]
          simp only [OffForm.denote_y (env := env) hy hxy hvy, indep_sound (env := env) hind,
            ih d.a' (Nat.lt_trans ham hmj) d.other hca, ih d.b' (Nat.lt_trans hbm hmj) d.x hcb,
            ih d.t2 (Nat.lt_trans ht2 htj) d.off hct,
            ih d.o' (Nat.lt_trans hos (Nat.lt_trans ht1 htj)) d.other hco, hax,
            evalBinOp_mul, evalRed_sum]
          exact (OffForm.sum_right f (fun k => denote g env d.other (Index.set idx d.axA k))
            (fun k => denote g env d.x (Index.set idx d.axB k)) (denote g env d.off idx)
            (List.range (axisSize g.axes d.axA))).symm

/-- **`distribute_matmul`, checked**, every form and either operand. -/
theorem dist_root_sound {g g' : Graph} {c : NodeId → Option NodeId}
    {env : String → Index → α} {j i : NodeId} (hax : g'.axes = g.axes)
    (ih : ∀ j', j' < j → ∀ i', c j' = some i' → ∀ ix, denote g' env j' ix = denote g env i' ix)
    (h : distCheck g g' c j i = true) (idx : Index) :
    denote g' env j idx = denote g env i idx := by
  cases someB_elim h with
  | intro f hf => exact dist_form_sound hax ih hf idx

/-- **`distribute_bias`, checked**, for one form of the offset operand. -/
theorem bias_form_sound {g g' : Graph} {c : NodeId → Option NodeId}
    {env : String → Index → α} {j i : NodeId} {f : OffForm} (hax : g'.axes = g.axes)
    (ih : ∀ j', j' < j → ∀ i', c j' = some i' → ∀ ix, denote g' env j' ix = denote g env i' ix)
    (h : (optAny (offIds? g g' j i false f) (fun d => decide (BiasShape0 g g' c j i f d)) ||
      optAny (offIds? g g' j i true f) (fun d => decide (BiasShape1 g g' c j i f d))) = true)
    (idx : Index) : denote g' env j idx = denote g env i idx := by
  cases bor_elim h with
  | inl h0 =>
    cases optAny_elim h0 with
    | intro d hd =>
      have hS : BiasShape0 g g' c j i f d := of_decide_eq_true hd.2
      exact match hS with
        | ⟨hi, hyi, hoi, hy, hxy, hvy, hj, hmj, htj, hmm, ham, hbm, ht, ht1, ht2,
            hca, hcb, hct, hco⟩ => by
          rw [denote_binary hj hmj htj idx, denote_matmul hmm ham hbm idx,
            denote_matmul ht ht1 ht2 idx, denote_matmul hi hyi hoi idx]
          simp only [OffForm.denote_y (env := env) hy hxy hvy,
            ih d.a' (Nat.lt_trans ham hmj) d.x hca, ih d.b' (Nat.lt_trans hbm hmj) d.other hcb,
            ih d.t1 (Nat.lt_trans ht1 htj) d.off hct, ih d.t2 (Nat.lt_trans ht2 htj) d.other hco,
            hax]
          exact (OffForm.bias_left f (fun k => denote g env d.x (Index.set idx d.axA k))
            (fun k => denote g env d.off (Index.set idx d.axA k))
            (fun k => denote g env d.other (Index.set idx d.axB k))
            (List.range (axisSize g.axes d.axA))).symm
  | inr h1 =>
    cases optAny_elim h1 with
    | intro d hd =>
      have hS : BiasShape1 g g' c j i f d := of_decide_eq_true hd.2
      exact match hS with
        | ⟨hi, hoi, hyi, hy, hxy, hvy, hj, hmj, htj, hmm, ham, hbm, ht, ht1, ht2,
            hca, hcb, hct, hco⟩ => by
          rw [denote_binary hj hmj htj idx, denote_matmul hmm ham hbm idx,
            denote_matmul ht ht1 ht2 idx, denote_matmul hi hoi hyi idx]
          simp only [OffForm.denote_y (env := env) hy hxy hvy,
            ih d.a' (Nat.lt_trans ham hmj) d.other hca, ih d.b' (Nat.lt_trans hbm hmj) d.x hcb,
            ih d.t1 (Nat.lt_trans ht1 htj) d.other hct, ih d.t2 (Nat.lt_trans ht2 htj) d.off hco,
            hax]
          exact (OffForm.bias_right f (fun k => denote g env d.other (Index.set idx d.axA k))
            (fun k => denote g env d.x (Index.set idx d.axB k))
            (fun k => denote g env d.off (Index.set idx d.axB k))
            (List.range (axisSize g.axes d.axA))).symm

/-- **`distribute_bias`, checked**, every form and either operand. -/
theorem bias_root_sound {g g' : Graph} {c : NodeId → Option NodeId}
    {env : String → Index → α} {j i : NodeId} (hax : g'.axes = g.axes)
    (ih : ∀ j', j' < j → ∀ i', c j' = some i' → ∀ ix, denote g' env j' ix = denote g env i' ix)
    (h : biasCheck g g' c j i = true) (idx : Index) :
    denote g' env j idx = denote g env i idx := by
  cases someB_elim h with
  | intro f hf => exact bias_form_sound hax ih hf idx

/-- An `outerNode` denotes its `outerVal`. -/
theorem outer_denote {g : Graph} {env : String → Index → α} {first : Bool} {y a c : NodeId}
    (h : g.nodes[y]? = some (outerNode first a c)) (ha : a < y) (hc : c < y) (ix : Index) :
    denote g env y ix = outerVal first (denote g env a ix) (denote g env c ix) := by
  cases first with
  | true => exact denote_binary h ha hc ix
  | false => exact denote_binary h hc ha ix

/-- A gain moves inside a row scale, pointwise, every form and order:
`outer (X ⋆ S) C = (outer X C) ⋆ S` (`Rules.commute_row_scale`, `Rules.commute_row_scale_div`). -/
theorem commute_val (f : RowForm) (first : Bool) (X S C : α) :
    outerVal first (f.val X S) C = evalBinOp f.op (outerVal first X C) S := by
  cases f with
  | xs =>
    cases first with
    | true => exact Rules.commute_row_scale X S C
    | false => exact (ScalarLaws.mul_assoc C X S).symm
  | sx =>
    cases first with
    | true =>
      show S * X * C = X * C * S
      rw [ScalarLaws.mul_comm S X]
      exact Rules.commute_row_scale X S C
    | false =>
      show C * (S * X) = C * X * S
      rw [ScalarLaws.mul_comm S X]
      exact (ScalarLaws.mul_assoc C X S).symm
  | dv =>
    cases first with
    | true => exact Rules.commute_row_scale_div X S C
    | false =>
      show C * (X / S) = C * X / S
      rw [ScalarLaws.mul_comm C (X / S), ScalarLaws.div_mul_eq_mul_div X S C,
        ScalarLaws.mul_comm X C]

/-- **`commute_row_scale`, checked**, for one side, order and form. -/
theorem comm_form_sound {g g' : Graph} {c : NodeId → Option NodeId}
    {env : String → Index → α} {j i : NodeId} {first : Bool} {f : RowForm}
    (hax : g'.axes = g.axes)
    (ih : ∀ j', j' < j → ∀ i', c j' = some i' → ∀ ix, denote g' env j' ix = denote g env i' ix)
    (h : (optAny (commIds? g g' j i false first f)
        (fun d => decide (CommShape0 g g' c j i first f d)) ||
      optAny (commIds? g g' j i true first f)
        (fun d => decide (CommShape1 g g' c j i first f d))) = true)
    (idx : Index) : denote g' env j idx = denote g env i idx := by
  cases bor_elim h with
  | inl h0 =>
    cases optAny_elim h0 with
    | intro d hd =>
      have hS : CommShape0 g g' c j i first f d := of_decide_eq_true hd.2
      exact match hS with
        | ⟨hi, hyi, hoi, hy, hqy, hcy, hq, hxq, hsq, hj, hy'j, ho'j, hy', hxc, hs', hxc', hx',
            hc', hco, hcx, hcc, hcs⟩ => by
          have hyy : ∀ ix, denote g' env d.y' ix = denote g env d.y ix := fun ix => by
            rw [denote_binary hy' hxc hs' ix, outer_denote hxc' hx' hc' ix,
              outer_denote hy hqy hcy ix, RowForm.denote_y hq hxq hsq ix,
              ih d.x' (Nat.lt_trans hx' (Nat.lt_trans hxc hy'j)) d.x hcx ix,
              ih d.c' (Nat.lt_trans hc' (Nat.lt_trans hxc hy'j)) d.cc hcc ix,
              ih d.s' (Nat.lt_trans hs' hy'j) d.s hcs ix]
            exact (commute_val f first (denote g env d.x ix) (denote g env d.s ix)
              (denote g env d.cc ix)).symm
          rw [denote_matmul hj hy'j ho'j idx, denote_matmul hi hyi hoi idx]
          simp only [hyy, ih d.o' ho'j d.other hco, hax]
  | inr h1 =>
    cases optAny_elim h1 with
    | intro d hd =>
      have hS : CommShape1 g g' c j i first f d := of_decide_eq_true hd.2
      exact match hS with
        | ⟨hi, hoi, hyi, hy, hqy, hcy, hq, hxq, hsq, hj, ho'j, hy'j, hy', hxc, hs', hxc', hx',
            hc', hco, hcx, hcc, hcs⟩ => by
          have hyy : ∀ ix, denote g' env d.y' ix = denote g env d.y ix := fun ix => by
            rw [denote_binary hy' hxc hs' ix, outer_denote hxc' hx' hc' ix,
              outer_denote hy hqy hcy ix, RowForm.denote_y hq hxq hsq ix,
              ih d.x' (Nat.lt_trans hx' (Nat.lt_trans hxc hy'j)) d.x hcx ix,
              ih d.c' (Nat.lt_trans hc' (Nat.lt_trans hxc hy'j)) d.cc hcc ix,
              ih d.s' (Nat.lt_trans hs' hy'j) d.s hcs ix]
            exact (commute_val f first (denote g env d.x ix) (denote g env d.s ix)
              (denote g env d.cc ix)).symm
          rw [denote_matmul hj ho'j hy'j idx, denote_matmul hi hoi hyi idx]
          simp only [hyy, ih d.o' ho'j d.other hco, hax]

/-- **`commute_row_scale`, checked**, every side, order and form. -/
theorem comm_root_sound {g g' : Graph} {c : NodeId → Option NodeId}
    {env : String → Index → α} {j i : NodeId} (hax : g'.axes = g.axes)
    (ih : ∀ j', j' < j → ∀ i', c j' = some i' → ∀ ix, denote g' env j' ix = denote g env i' ix)
    (h : commCheck g g' c j i = true) (idx : Index) :
    denote g' env j idx = denote g env i idx := by
  cases someB_elim h with
  | intro f hf =>
    cases someB_elim hf with
    | intro first hfirst => exact comm_form_sound hax ih hfirst idx

/-- A scale along the contraction moved onto the other operand, first operand scaled:
`Σₖ outer Aₖ Cₖ · Wₖ = Σₖ Aₖ (Wₖ Cₖ)` (`Rules.move_contracted_scale`). -/
theorem move_sum_left (first : Bool) (A C W : Nat → α) (ks : List Nat) :
    sumList (ks.map (fun k => outerVal first (A k) (C k) * W k)) =
      sumList (ks.map (fun k => A k * (W k * C k))) := by
  cases first with
  | true => exact Rules.move_contracted_scale A C W ks
  | false =>
    have h : ∀ k, outerVal false (A k) (C k) * W k = A k * C k * W k := fun k => by
      show C k * A k * W k = A k * C k * W k
      rw [ScalarLaws.mul_comm (C k) (A k)]
    exact (sumList_map_congr h ks).trans (Rules.move_contracted_scale A C W ks)

/-- The same, second operand scaled: `Σₖ Wₖ · outer Aₖ Cₖ = Σₖ (Wₖ Cₖ) Aₖ`. -/
theorem move_sum_right (first : Bool) (W A C : Nat → α) (ks : List Nat) :
    sumList (ks.map (fun k => W k * outerVal first (A k) (C k))) =
      sumList (ks.map (fun k => W k * C k * A k)) := by
  cases first with
  | true =>
    have h : ∀ k, W k * outerVal true (A k) (C k) = W k * C k * A k := fun k => by
      show W k * (A k * C k) = W k * C k * A k
      rw [ScalarLaws.mul_comm (A k) (C k), ScalarLaws.mul_assoc (W k) (C k) (A k)]
    exact sumList_map_congr h ks
  | false =>
    have h : ∀ k, W k * outerVal false (A k) (C k) = W k * C k * A k := fun k => by
      show W k * (C k * A k) = W k * C k * A k
      rw [ScalarLaws.mul_assoc (W k) (C k) (A k)]
    exact sumList_map_congr h ks

/-- **`move_contracted_scale`, checked**, for one side and order. -/
theorem move_form_sound {g g' : Graph} {c : NodeId → Option NodeId}
    {env : String → Index → α} {j i : NodeId} {first : Bool} (hax : g'.axes = g.axes)
    (ih : ∀ j', j' < j → ∀ i', c j' = some i' → ∀ ix, denote g' env j' ix = denote g env i' ix)
    (h : (optAny (moveIds? g g' j i false first)
        (fun d => decide (MoveShape0 g g' c j i first d)) ||
      optAny (moveIds? g g' j i true first)
        (fun d => decide (MoveShape1 g g' c j i first d))) = true)
    (idx : Index) : denote g' env j idx = denote g env i idx := by
  cases bor_elim h with
  | inl h0 =>
    cases optAny_elim h0 with
    | intro d hd =>
      have hS : MoveShape0 g g' c j i first d := of_decide_eq_true hd.2
      exact match hS with
        | ⟨hi, hyi, hoi, hy, huy, hcy, hj, haj, hwj, hw, how, hcw, hca, hco, hcc, hab⟩ => by
          rw [denote_matmul hj haj hwj idx, denote_matmul hi hyi hoi idx]
          simp only [denote_binary (env := env) hw how hcw, outer_denote (env := env) hy huy hcy,
            ih d.a' haj d.u hca, ih d.o' (Nat.lt_trans how hwj) d.other hco,
            ih d.c' (Nat.lt_trans hcw hwj) d.cc hcc, hax, hab, evalBinOp_mul]
          exact (move_sum_left first (fun k => denote g env d.u (Index.set idx d.axA k))
            (fun k => denote g env d.cc (Index.set idx d.axA k))
            (fun k => denote g env d.other (Index.set idx d.axA k))
            (List.range (axisSize g.axes d.axA))).symm
  | inr h1 =>
    cases optAny_elim h1 with
    | intro d hd =>
      have hS : MoveShape1 g g' c j i first d := of_decide_eq_true hd.2
      exact match hS with
        | ⟨hi, hoi, hyi, hy, huy, hcy, hj, hwj, haj, hw, how, hcw, hca, hco, hcc, hab⟩ => by
          rw [denote_matmul hj hwj haj idx, denote_matmul hi hoi hyi idx]
          simp only [denote_binary (env := env) hw how hcw, outer_denote (env := env) hy huy hcy,
            ih d.a' haj d.u hca, ih d.o' (Nat.lt_trans how hwj) d.other hco,
            ih d.c' (Nat.lt_trans hcw hwj) d.cc hcc, hax, hab, evalBinOp_mul]
          exact (move_sum_right first (fun k => denote g env d.other (Index.set idx d.axA k))
            (fun k => denote g env d.u (Index.set idx d.axA k))
            (fun k => denote g env d.cc (Index.set idx d.axA k))
            (List.range (axisSize g.axes d.axA))).symm

/-- **`move_contracted_scale`, checked**, either side and order. -/
theorem move_root_sound {g g' : Graph} {c : NodeId → Option NodeId}
    {env : String → Index → α} {j i : NodeId} (hax : g'.axes = g.axes)
    (ih : ∀ j', j' < j → ∀ i', c j' = some i' → ∀ ix, denote g' env j' ix = denote g env i' ix)
    (h : moveCheck g g' c j i = true) (idx : Index) :
    denote g' env j idx = denote g env i idx := by
  cases someB_elim h with
  | intro first hf => exact move_form_sound hax ih hf idx

/-- A root that `modelCheck` accepts denotes what the rewritten node denotes. -/
theorem model_root_sound {g g' : Graph} {c : NodeId → Option NodeId}
    {env : String → Index → α} {j i : NodeId} (hax : g'.axes = g.axes)
    (ih : ∀ j', j' < j → ∀ i', c j' = some i' → ∀ ix, denote g' env j' ix = denote g env i' ix)
    (h : modelCheck g g' c j i = true) (idx : Index) :
    denote g' env j idx = denote g env i idx := by
  cases bor_elim h with
  | inl h123 =>
    cases bor_elim h123 with
    | inl h12 =>
      cases bor_elim h12 with
      | inl hd => exact dist_root_sound hax ih hd idx
      | inr hb => exact bias_root_sound hax ih hb idx
    | inr hc => exact comm_root_sound hax ih hc idx
  | inr hm => exact move_root_sound hax ih hm idx

/-- A root that `rootOk` accepts denotes what the rewritten node denotes. -/
theorem rootOk_sound {g g' : Graph} {c : NodeId → Option NodeId} {env : String → Index → α}
    {j i : NodeId} (hax : g'.axes = g.axes)
    (ih : ∀ j', j' < j → ∀ i', c j' = some i' → ∀ ix, denote g' env j' ix = denote g env i' ix)
    (h : rootOk g g' c j i = true) (idx : Index) :
    denote g' env j idx = denote g env i idx := by
  cases bor_elim h with
  | inl h123 =>
    cases bor_elim h123 with
    | inl h12 =>
      cases bor_elim h12 with
      | inl hs => exact stab_root_sound hax ih hs idx
      | inr hf => exact factor_root_sound hax ih hf idx
    | inr he => exact exp2_root_sound ih he idx
  | inr hm => exact model_root_sound hax ih hm idx

/-- A copy that `copyOk` accepts denotes what the copied node denotes. -/
theorem copy_sound {g g' : Graph} {w : RewriteWitness} {target : NodeId}
    {env : String → Index → α} {j i : NodeId} (hax : g'.axes = g.axes)
    (ih : ∀ j', j' < j → ∀ i', corr w target j' = some i' →
      ∀ ix, denote g' env j' ix = denote g env i' ix)
    (h : copyOk g g' w target j i = true) (idx : Index) :
    denote g' env j idx = denote g env i idx := by
  cases optAny_elim h with
  | intro n hn =>
    have hb := band_elim hn.2
    have hj : g'.nodes[j]? = some (n.mapArgs (fwd w target)) := of_decide_eq_true hb.1
    rw [denote_some hj, evalNode_mapArgs hax, denote_some hn.1]
    apply evalNode_congr
    intro a ha ix
    have hP := band_elim (allB_mem hb.2 ha)
    have hP1 := band_elim hP.1
    have hlt : fwd w target a < j := of_decide_eq_true hP1.1
    have hai : a < i := of_decide_eq_true hP1.2
    have hc : corr w target (fwd w target a) = some a := of_decide_eq_true hP.2
    show guardD g' env j (fwd w target a) ix = guardD g env i a ix
    unfold guardD
    rw [if_pos hlt, if_pos hai]
    exact ih _ hlt a hc ix

/-- **Every related node, checked.** In a rewrite that passes `validRewrite`, every new node
the witness relates to an old node denotes what that node denotes. -/
theorem valid_denote {g g' : Graph} {w : RewriteWitness} {target : NodeId}
    {env : String → Index → α} (hv : validRewrite g g' w target = true) :
    ∀ fuel j, j < fuel → ∀ i, corr w target j = some i →
      ∀ idx, denote g' env j idx = denote g env i idx := by
  have hv' := band_elim hv
  have hv1 := band_elim hv'.1
  have hax : g'.axes = g.axes := of_decide_eq_true hv1.1
  intro fuel
  induction fuel with
  | zero => intro j hj; exact absurd hj (Nat.not_lt_zero j)
  | succ fuel ih =>
    intro j hj i hc idx
    have ih' : ∀ j', j' < j → ∀ i', corr w target j' = some i' →
        ∀ ix, denote g' env j' ix = denote g env i' ix :=
      fun j' hj' => ih j' (by omega)
    by_cases hjN : j < w.origin.length + w.root + 1
    · have hP := allUpTo_lt hv1.2 hjN
      have hval : validAt g g' w target j i = true := optAll_some hP hc
      by_cases hroot : j = w.root
      · have e : validAt g g' w target j i = rootOk g g' (corr w target) j i := if_pos hroot
        rw [e] at hval
        exact rootOk_sound hax ih' hval idx
      · have e : validAt g g' w target j i = copyOk g g' w target j i := if_neg hroot
        rw [e] at hval
        exact copy_sound hax ih' hval idx
    · have hne : ¬ j = w.root := by omega
      have hnone : corr w target j = none := by
        unfold corr
        rw [if_neg hne]
        exact lookupO_none w.origin j (by omega)
      rw [hnone] at hc
      cases hc

/-- Corresponding outputs denote the same. -/
theorem outputsMatch_denote {g g' : Graph} {c : NodeId → Option NodeId}
    {env : String → Index → α}
    (hc : ∀ j i, c j = some i → ∀ ix, denote g' env j ix = denote g env i ix) :
    ∀ os' os : List NodeId, outputsMatch c os' os = true →
      os'.map (denote g' env) = os.map (denote g env)
  | [], [], _ => rfl
  | o' :: os', o :: os, h => by
    have h' : (decide (c o' = some o) && outputsMatch c os' os) = true := h
    show denote g' env o' :: os'.map (denote g' env) = denote g env o :: os.map (denote g env)
    rw [funext (hc o' o (of_decide_eq_true (band_elim h').1)),
      outputsMatch_denote hc os' os (band_elim h').2]
  | [], _ :: _, h => absurd (show false = true from h) (by decide)
  | _ :: _, [], h => absurd (show false = true from h) (by decide)

/-- **An algebraic rewrite that passes `validRewrite` preserves the denotation of every
output**, over any model of `ScalarLaws`. -/
theorem validRewrite_sound {g g' : Graph} {w : RewriteWitness} {target : NodeId}
    (hv : validRewrite g g' w target = true) (env : String → Index → α) :
    denoteOutputs g' env = denoteOutputs g env := by
  have hv' := band_elim hv
  unfold denoteOutputs
  exact outputsMatch_denote
    (fun j i hc ix => valid_denote hv (j + 1) j (Nat.lt_succ_self j) i hc ix)
    g'.outputs g.outputs hv'.2

end Proofs

end Superopt.Validate

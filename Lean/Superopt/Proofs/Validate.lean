import Superopt.Proofs.PlanDenote
import Superopt.Proofs.Indep
import Superopt.Derive.Rules

/-!
# Checking an algebraic rewrite: the new graph denotes what the old one did

An algebraic rule (`stabilize_softmax`, `factor_row_scale`, `exp_to_exp2`) rewrites one node of
the graph and renumbers the result canonically (`Superopt.Derive.rewriteGraphW`). Rather than
proving the rewriting code, the step checker validates each rewrite it performs: the rewrite
returns a witness (for each new node, the old node it copies; and the new node `root` that
replaces the rewritten `target`), and `validRewrite` checks, node by node, that

* every copy is the old node with its arguments renamed (`fwd`) to new nodes that denote the
  old arguments, each argument earlier than the node (`copyOk`);
* the root is one of the three rule patterns over nodes that denote the old ones
  (`stabCheck`, `factorCheck`, `exp2Check`), the `factor_row_scale` scale being independent of
  the contracted axis (`Superopt.Checks.indep`);
* the outputs correspond, position by position, and the axes are the same.

`validRewrite_sound` proves that a rewrite passing the check preserves the denotation of every
output, over any `[ScalarLaws α]`. Nothing about unchanged nodes is assumed: it is checked.

## Main definitions

* `corr`, `fwd`, `copyOk`, `stabCheck`, `factorCheck`, `exp2Check`, `rootOk`, `validAt`,
  `validRewrite`.

## Main statements

* `stab_root_sound`, `factor_root_sound`, `exp2_root_sound`: the three patterns.
* `valid_denote`, `validRewrite_sound`.
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
  | none => exact absurd h (by decide)
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

/-- Whether new node `j` is one of the three rewrites of old node `i`. -/
def rootOk (g g' : Graph) (c : NodeId → Option NodeId) (j i : NodeId) : Bool :=
  stabCheck g g' c j i || factorCheck g g' c j i || exp2Check g g' c j i

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

/-- A root that `rootOk` accepts denotes what the rewritten node denotes. -/
theorem rootOk_sound {g g' : Graph} {c : NodeId → Option NodeId} {env : String → Index → α}
    {j i : NodeId} (hax : g'.axes = g.axes)
    (ih : ∀ j', j' < j → ∀ i', c j' = some i' → ∀ ix, denote g' env j' ix = denote g env i' ix)
    (h : rootOk g g' c j i = true) (idx : Index) :
    denote g' env j idx = denote g env i idx := by
  cases bor_elim h with
  | inl h12 =>
    cases bor_elim h12 with
    | inl hs => exact stab_root_sound hax ih hs idx
    | inr hf => exact factor_root_sound hax ih hf idx
  | inr he => exact exp2_root_sound ih he idx

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
  | [], _ :: _, h => absurd h (by decide)
  | _ :: _, [], h => absurd h (by decide)

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

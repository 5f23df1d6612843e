import Superopt.IR.Dag
import Superopt.IR.Laws

/-!
# Denotational semantics of a `Superopt.Graph`

A node of a graph over named axes denotes a function from *indices* (a position along every
axis name) to scalars. Elementwise ops evaluate their arguments at the same index (so named-axis
broadcasting is automatic: an argument ignores the axes it lacks); `reduce fn axis` folds its
argument over the positions `0 … size(axis) - 1` of `axis`; `matmul a b axisA axisB` sums
`a[axisA := k] * b[axisB := k]` over `k`. This mirrors `superopt.semantics.evaluate` (Python),
which is the float64 ground truth every kernel is checked against.

## Main definitions

* `Superopt.Semantics.Index`, `Index.set`: indices and moving one axis.
* `Superopt.Semantics.axisSize`: the declared size of an axis (`0` if undeclared).
* `Superopt.Semantics.evalNode`: one node, given the denotations of earlier nodes.
* `Superopt.Semantics.denote`: the denotation of node `i`, by recursion on node ids with fuel:
  an argument id that is not smaller than the current id denotes `0`.
* `Superopt.Semantics.denoteOutputs`, `denoteOutput k`: the denotations of the graph's
  outputs.
* `instance : ScalarOps Float`: IEEE binary64, so `#eval denote g env i idx` runs.

## Main statements

* `denote_eq_step`: `denote` unfolds one node, with every argument denoted by `denote` itself
  (the fuel does not matter, `denoteAux_fuel`).
* `denote_input`, `denote_const`, `denote_unary`, `denote_binary`, `denote_reduce`,
  `denote_matmul`: the denotation of each kind of node, given `g.nodes[i]? = some node` and
  that its arguments are earlier nodes. The rules in `Superopt.Rules` are stated through these
  lemmas.
* `denote_reduce_invariant`: a reduction over `axis` does not depend on the position along
  `axis`.

## Implementation notes

`denote` is structural recursion on the fuel `i + 1`, so it reduces by `rfl`/`decide` on small
graphs and needs no well-formedness proof. The Python twin raises on ill-formed graphs instead.
-/

namespace Superopt.Semantics

/-- An index: the position along every axis name. Axes a tensor lacks are ignored. -/
abbrev Index := Axis → Nat

/-- `Index.set idx axis k` is `idx` with `axis` moved to position `k`.

Example: `Index.set (fun _ => 0) "d" 3 "d" = 3`. -/
def Index.set (idx : Index) (axis : Axis) (k : Nat) (a : Axis) : Nat :=
  if a = axis then k else idx a

/-- Moving the same axis twice keeps the last position. -/
theorem Index.set_set (idx : Index) (axis : Axis) (k k' : Nat) :
    Index.set (Index.set idx axis k) axis k' = Index.set idx axis k' := by
  funext a
  by_cases h : a = axis
  · simp only [Index.set, if_pos h]
  · simp only [Index.set, if_neg h]

/-- `idx` restricted to `axes`: the positions along `axes`, `0` along every other axis. An input
`X[m, d]` is read at `idx.restrict ["m", "d"]`, so its value depends on its own axes only.

Example: `Index.restrict ["m"] (fun _ => 3) "d" = 0`. -/
def Index.restrict (axes : List Axis) (idx : Index) (a : Axis) : Nat :=
  if axes.contains a then idx a else 0

/-- Whether positions `i` along `axisA` and `j` along `axisB` are in the band
`lo ≤ i − j ≤ hi` (`none`: unbounded), as integers. -/
def bandOk (lo hi : Option Int) (i j : Nat) : Bool :=
  let d : Int := Int.ofNat i - Int.ofNat j
  (match lo with
    | some l => decide (l ≤ d)
    | none => true) &&
  (match hi with
    | some h => decide (d ≤ h)
    | none => true)

/-- The declared size of `axis` in a graph's axis list (the first binding; `0` if none).

Example: `axisSize [("m", 4), ("d", 8)] "d" = 8`. -/
def axisSize : List (Axis × Nat) → Axis → Nat
  | [], _ => 0
  | (a, n) :: rest, axis => if a = axis then n else axisSize rest axis

section Eval

variable {α : Type} [ScalarOps α]

/-- The scalar function of a unary op (`square x = x * x`, `recip x = 1 / x`,
`relu x = max x 0`). -/
def evalUnOp : UnOp → α → α
  | .exp, x => ScalarOps.exp x
  | .exp2, x => ScalarOps.exp2 x
  | .silu, x => ScalarOps.silu x
  | .square, x => x * x
  | .rsqrt, x => ScalarOps.rsqrt x
  | .sqrt, x => ScalarOps.sqrt x
  | .neg, x => -x
  | .recip, x => ScalarOps.one / x
  | .tanh, x => ScalarOps.tanh x
  | .sigmoid, x => ScalarOps.sigmoid x
  | .relu, x => ScalarOps.max x ScalarOps.zero
  | .log, x => ScalarOps.log x
  | .gelu, x => ScalarOps.gelu x
  | .geluTanh, x => ScalarOps.geluTanh x

/-- The scalar function of a binary op. -/
def evalBinOp : BinOp → α → α → α
  | .add, x, y => x + y
  | .sub, x, y => x - y
  | .mul, x, y => x * y
  | .div, x, y => x / y
  | .max, x, y => ScalarOps.max x y

/-- The fold of a reduction over the list of values along the reduced axis. -/
def evalRed : RedFn → List α → α
  | .sum, xs => sumList xs
  | .max, xs => maxList xs

/-- The value of one node at `idx`, given `arg j ix`, the value of earlier node `j` at `ix`.

* `input name axes`: `env name (idx.restrict axes)`;
* `size axis`: `ofNat (axisSize g.axes axis)`; `eps b`, `const b`: `ofBits b`;
* `band a b lo hi`: `one` where `lo ≤ idx a − idx b ≤ hi`, else `zero`;
* elementwise ops and `select`: the arguments at the same `idx`;
* `reduce fn axis x`: `fn` over `[x at idx[axis := k] | k < size axis]`;
* `matmul a b axisA axisB`: `Σ_{k < size axisA} a[axisA := k] * b[axisB := k]`. -/
def evalNode (g : Graph) (env : String → Index → α) (arg : NodeId → Index → α) :
    Node → Index → α
  | .input name axes, idx => env name (Index.restrict axes idx)
  | .size axis, _ => ScalarOps.ofNat (axisSize g.axes axis)
  | .eps bits, _ => ScalarOps.ofBits bits
  | .const bits, _ => ScalarOps.ofBits bits
  | .band axisA axisB lo hi, idx =>
    if bandOk lo hi (idx axisA) (idx axisB) then ScalarOps.one else ScalarOps.zero
  | .unary op x, idx => evalUnOp op (arg x idx)
  | .binary op x y, idx => evalBinOp op (arg x idx) (arg y idx)
  | .select c x y, idx => ScalarOps.select (arg c idx) (arg x idx) (arg y idx)
  | .reduce fn axis x, idx =>
    evalRed fn ((List.range (axisSize g.axes axis)).map (fun k => arg x (Index.set idx axis k)))
  | .matmul a b axisA axisB, idx =>
    sumList ((List.range (axisSize g.axes axisA)).map
      (fun k => arg a (Index.set idx axisA k) * arg b (Index.set idx axisB k)))

/-- One unfolding step: node `i` of `g` evaluated with `arg` for its arguments (`0` if `i` is
not a node of `g`). -/
def step (g : Graph) (env : String → Index → α) (i : NodeId) (arg : NodeId → Index → α)
    (idx : Index) : α :=
  match g.nodes[i]? with
  | none => ScalarOps.zero
  | some node => evalNode g env arg node idx

/-- `denote` with explicit fuel: an argument `j` of node `i` is evaluated only if `j < i`
(else it denotes `0`), and with one unit of fuel less. -/
def denoteAux (g : Graph) (env : String → Index → α) : Nat → NodeId → Index → α
  | 0, _, _ => ScalarOps.zero
  | fuel + 1, i, idx =>
    step g env i (fun j ix => if j < i then denoteAux g env fuel j ix else ScalarOps.zero) idx

/-- The denotation of node `i` of `g` at index `idx`, with the inputs given by `env`
(`env name idx` is the value of input `name` at `idx`).

Fuel `i + 1` always suffices because argument ids strictly decrease (`denoteAux_fuel`).
Mirrors `superopt.semantics.evaluate`. -/
def denote (g : Graph) (env : String → Index → α) (i : NodeId) (idx : Index) : α :=
  denoteAux g env (i + 1) i idx

/-- The denotations of the graph's outputs, in order. -/
def denoteOutputs (g : Graph) (env : String → Index → α) : List (Index → α) :=
  g.outputs.map (denote g env)

/-- The denotation of output `k` of the graph (`zero` when `k` is out of range). -/
def denoteOutput (g : Graph) (env : String → Index → α) (k : Nat) (idx : Index) : α :=
  match g.outputs[k]? with
  | some o => denote g env o idx
  | none => ScalarOps.zero

/-- `denoteAux` unfolds one step (definitionally). -/
theorem denoteAux_succ (g : Graph) (env : String → Index → α) (fuel : Nat) (i : NodeId)
    (idx : Index) :
    denoteAux g env (fuel + 1) i idx =
      step g env i (fun j ix => if j < i then denoteAux g env fuel j ix else ScalarOps.zero)
        idx :=
  rfl

/-- Any fuel larger than the node id gives the same value. -/
theorem denoteAux_fuel (g : Graph) (env : String → Index → α) (a : Nat) :
    ∀ (b j : Nat) (idx : Index), j < a → j < b →
      denoteAux g env a j idx = denoteAux g env b j idx := by
  induction a with
  | zero => intro _ j _ ha _; exact absurd ha (Nat.not_lt_zero j)
  | succ a ih =>
    intro b j idx ha hb
    cases b with
    | zero => exact absurd hb (Nat.not_lt_zero j)
    | succ b =>
      have harg : (fun k ix => if k < j then denoteAux g env a k ix else ScalarOps.zero) =
          (fun k ix => if k < j then denoteAux g env b k ix else (ScalarOps.zero : α)) := by
        funext k ix
        by_cases hk : k < j
        · rw [if_pos hk, if_pos hk]
          exact ih b k ix (by omega) (by omega)
        · rw [if_neg hk, if_neg hk]
      rw [denoteAux_succ, denoteAux_succ]
      exact congrArg (fun arg => step g env j arg idx) harg

/-- `denote` unfolds one node, every argument being denoted by `denote` itself. -/
theorem denote_eq_step (g : Graph) (env : String → Index → α) (i : NodeId) (idx : Index) :
    denote g env i idx =
      step g env i (fun j ix => if j < i then denote g env j ix else ScalarOps.zero) idx := by
  have harg : (fun j ix => if j < i then denoteAux g env i j ix else ScalarOps.zero) =
      (fun j ix => if j < i then denote g env j ix else (ScalarOps.zero : α)) := by
    funext j ix
    by_cases hj : j < i
    · rw [if_pos hj, if_pos hj]
      exact denoteAux_fuel g env i (j + 1) j ix hj (Nat.lt_succ_self j)
    · rw [if_neg hj, if_neg hj]
  exact congrArg (fun arg => step g env i arg idx) harg

/-- An input node denotes its tensor, read along its own axes. -/
theorem denote_input {g : Graph} {env : String → Index → α} {i : NodeId} {name : String}
    {axes : List Axis} (h : g.nodes[i]? = some (.input name axes)) (idx : Index) :
    denote g env i idx = env name (Index.restrict axes idx) := by
  rw [denote_eq_step g env i idx]
  simp only [step, h, evalNode]

/-- A `const` node denotes its literal. -/
theorem denote_const {g : Graph} {env : String → Index → α} {i : NodeId} {bits : UInt64}
    (h : g.nodes[i]? = some (.const bits)) (idx : Index) :
    denote g env i idx = ScalarOps.ofBits bits := by
  rw [denote_eq_step g env i idx]
  simp only [step, h, evalNode]

/-- A unary node denotes its op applied to its argument at the same index. -/
theorem denote_unary {g : Graph} {env : String → Index → α} {i x : NodeId} {op : UnOp}
    (h : g.nodes[i]? = some (.unary op x)) (hx : x < i) (idx : Index) :
    denote g env i idx = evalUnOp op (denote g env x idx) := by
  rw [denote_eq_step g env i idx]
  simp only [step, h, evalNode, if_pos hx]

/-- A binary node denotes its op applied to its arguments at the same index. -/
theorem denote_binary {g : Graph} {env : String → Index → α} {i x y : NodeId} {op : BinOp}
    (h : g.nodes[i]? = some (.binary op x y)) (hx : x < i) (hy : y < i) (idx : Index) :
    denote g env i idx = evalBinOp op (denote g env x idx) (denote g env y idx) := by
  rw [denote_eq_step g env i idx]
  simp only [step, h, evalNode, if_pos hx, if_pos hy]

/-- A reduction node folds its argument over the positions of the reduced axis. -/
theorem denote_reduce {g : Graph} {env : String → Index → α} {i x : NodeId} {fn : RedFn}
    {axis : Axis} (h : g.nodes[i]? = some (.reduce fn axis x)) (hx : x < i) (idx : Index) :
    denote g env i idx =
      evalRed fn ((List.range (axisSize g.axes axis)).map
        (fun k => denote g env x (Index.set idx axis k))) := by
  rw [denote_eq_step g env i idx]
  simp only [step, h, evalNode, if_pos hx]

/-- A contraction node sums the products of its arguments along the contracted axes. -/
theorem denote_matmul {g : Graph} {env : String → Index → α} {i a b : NodeId}
    {axisA axisB : Axis} (h : g.nodes[i]? = some (.matmul a b axisA axisB)) (ha : a < i)
    (hb : b < i) (idx : Index) :
    denote g env i idx =
      sumList ((List.range (axisSize g.axes axisA)).map
        (fun k => denote g env a (Index.set idx axisA k) *
          denote g env b (Index.set idx axisB k))) := by
  rw [denote_eq_step g env i idx]
  simp only [step, h, evalNode, if_pos ha, if_pos hb]

/-- A reduction over `axis` does not depend on the position along `axis`. -/
theorem denote_reduce_invariant {g : Graph} {env : String → Index → α} {i x : NodeId}
    {fn : RedFn} {axis : Axis} (h : g.nodes[i]? = some (.reduce fn axis x)) (hx : x < i)
    (idx : Index) (k : Nat) :
    denote g env i (Index.set idx axis k) = denote g env i idx := by
  rw [denote_reduce h hx (Index.set idx axis k), denote_reduce h hx idx]
  simp only [Index.set_set]

end Eval

/-- `π` as a binary64 float. -/
def piFloat : Float := 3.141592653589793

/-- `erf x` to about `1.5e-7` (Abramowitz and Stegun 7.1.26), for the `Float` instance's `gelu`
only: core Lean has no `Float.erf`. `#eval` values of `gelu` are therefore approximate; the
proofs never use `Float`. -/
def erfApprox (x : Float) : Float :=
  let s : Float := if x < 0.0 then -1.0 else 1.0
  let a := s * x
  let t := 1.0 / (1.0 + 0.3275911 * a)
  let poly := t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 +
    t * 1.061405429))))
  s * (1.0 - poly * Float.exp (-(a * a)))

/-- IEEE-754 binary64 operations, for evaluating graphs with `#eval` and comparing with the
Python reference. This is *not* a `ScalarLaws` instance: floating point is not associative,
which is why the rules are proved over `ScalarLaws` instead. -/
instance : ScalarOps Float where
  add := Float.add
  mul := Float.mul
  sub := Float.sub
  neg := Float.neg
  div := Float.div
  zero := 0.0
  one := 1.0
  ofNat := Float.ofNat
  ofBits := Float.ofBits
  exp := Float.exp
  exp2 := Float.exp2
  sqrt := Float.sqrt
  rsqrt := fun x => 1.0 / Float.sqrt x
  silu := fun x => x / (1.0 + Float.exp (-x))
  tanh := Float.tanh
  sigmoid := fun x => 1.0 / (1.0 + Float.exp (-x))
  log := Float.log
  gelu := fun x => 0.5 * x * (1.0 + erfApprox (x / Float.sqrt 2.0))
  geluTanh := fun x =>
    0.5 * x * (1.0 + Float.tanh (Float.sqrt (2.0 / piFloat) * (x + 0.044715 * x * x * x)))
  select := fun c x y => if c == 0.0 then y else x
  max := fun x y => if x < y then y else x
  negInf := -(1.0 / 0.0)

end Superopt.Semantics

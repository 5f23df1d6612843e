import Superopt.Proofs.Soundness

/-!
# Tests of the laws, the semantics and the rule lemmas

Three kinds of checks, by what checks them:

* **A model of the laws** (kernel): `boolLaws` makes `Bool` read as the field 𝔽₂ (`xor`, `and`,
  `x / y = x ∧ y`, `exp ≡ 1`, `max = or`) an instance of `ScalarLaws`. The laws are therefore
  consistent, and the rule theorems are instantiated at it below.
* **Concrete lists** (kernel, `rfl`/`decide`): the tiling statements on small sizes, including
  sizes that are not multiples of the tile.
* **Float evaluation** (`#eval`, the compiled code): `denote` on small graphs against values
  computed by hand, the rewritten programs (stabilised softmax, online softmax, streamed
  sums) against the literal ones, and `planDenote` of every plan of a small attention against
  `denote`. A failing check throws, which fails the build.
-/

namespace Superopt.RulesTest

open Superopt Superopt.Semantics Superopt.Rules

/-! ## 𝔽₂ is a model of `ScalarLaws` -/

/-- The operations of 𝔽₂ on `Bool`: `+ = -` is `xor`, `*` and `/` are `and`, `exp ≡ 1`. -/
def boolOps : ScalarOps Bool where
  add := fun a b => a != b
  mul := fun a b => a && b
  sub := fun a b => a != b
  neg := fun a => a
  div := fun a b => a && b
  zero := false
  one := true
  ofNat := fun n => n % 2 == 1
  ofBits := fun _ => false
  exp := fun _ => true
  exp2 := fun _ => true
  sqrt := fun a => a
  rsqrt := fun a => a
  silu := fun a => a
  tanh := fun a => a
  sigmoid := fun a => a
  log := fun a => a
  gelu := fun a => a
  geluTanh := fun a => a
  select := fun c x y => if c then x else y
  max := fun a b => a || b
  negInf := false

/-- 𝔽₂ with `exp ≡ 1` satisfies every law of `ScalarLaws`. -/
instance boolLaws : ScalarLaws Bool where
  toScalarOps := boolOps
  add_assoc := by intro a b c; cases a <;> cases b <;> cases c <;> rfl
  add_comm := by intro a b; cases a <;> cases b <;> rfl
  zero_add := by intro a; cases a <;> rfl
  mul_assoc := by intro a b c; cases a <;> cases b <;> cases c <;> rfl
  mul_comm := by intro a b; cases a <;> cases b <;> rfl
  one_mul := by intro a; cases a <;> rfl
  zero_mul := by intro a; cases a <;> rfl
  left_distrib := by intro a b c; cases a <;> cases b <;> cases c <;> rfl
  sub_eq_add_neg := by intro a b; cases a <;> cases b <;> rfl
  neg_add_cancel := by intro a; cases a <;> rfl
  mul_div_mul_right := by
    intro a b c hc
    cases a <;> cases b <;> cases c <;> first | rfl | exact absurd rfl hc
  div_mul_eq_mul_div := by intro a b c; cases a <;> cases b <;> cases c <;> rfl
  add_div := by intro a b c; cases a <;> cases b <;> cases c <;> rfl
  zero_div := by intro a; cases a <;> rfl
  div_one := by intro a; cases a <;> rfl
  exp_add := by intro a b; cases a <;> cases b <;> rfl
  exp_ne_zero := by intro a; cases a <;> decide
  exp2_mul_log2e := by intro a; rfl
  max_assoc := by intro a b c; cases a <;> cases b <;> cases c <;> rfl
  max_comm := by intro a b; cases a <;> cases b <;> rfl
  max_idem := by intro a; cases a <;> rfl

/-- `stabilize_softmax` holds in the model (the statement is usable at a concrete type). -/
example (f : Nat → Bool) (xs : List Nat) (a m : Bool) :
    ScalarOps.exp (a - m) / sumList (xs.map (fun j => ScalarOps.exp (f j - m))) =
      ScalarOps.exp a / sumList (xs.map (fun j => ScalarOps.exp (f j))) :=
  stabilize_softmax f xs a m

/-- `online_softmax` holds in the model. -/
example (s v : Nat → Bool) (tiles : List (List Nat)) :
    (onlineSoftmax s v ⟨false, false, false⟩ tiles).out =
      sumList ((concatTiles tiles).map (fun j => ScalarOps.exp (s j) * v j)) /
        sumList ((concatTiles tiles).map (fun j => ScalarOps.exp (s j))) :=
  online_softmax s v false tiles

/-- `factor_row_scale` holds in the model. -/
example (x w : Nat → Bool) (r : Bool) (ks : List Nat) :
    sumList (ks.map (fun k => x k * r * w k)) = r * sumList (ks.map (fun k => x k * w k)) :=
  factor_row_scale x w r ks

/-- `Rules.distribute_matmul` at 𝔽₂. -/
example (x w : Nat → Bool) (v : Bool) (ks : List Nat) :
    sumList (ks.map (fun k => (x k - v) * w k)) =
      sumList (ks.map (fun k => x k * w k)) - v * sumList (ks.map w) :=
  distribute_matmul x w v ks

/-- `Rules.move_contracted_scale` at 𝔽₂. -/
example (a c w : Nat → Bool) (ks : List Nat) :
    sumList (ks.map (fun k => a k * c k * w k)) =
      sumList (ks.map (fun k => a k * (w k * c k))) :=
  move_contracted_scale a c w ks

/-! ## The theorems that the rule ids name exist (`superopt.rules.RULES`, `Superopt.Derive`) -/

#check @Superopt.stabilize_softmax_sound
#check @Superopt.factor_row_scale_sound
#check @Superopt.exp_to_exp2_sound
#check @Superopt.distribute_matmul_sound
#check @Superopt.distribute_bias_sound
#check @Superopt.commute_row_scale_sound
#check @Superopt.move_contracted_scale_sound
#check @Superopt.online_softmax_sound
#check @Superopt.share_operand_load_sound
#check @Superopt.fuse_prologue_sound
#check @Superopt.fuse_epilogue_sound
#check @Superopt.split_kernel_sound
#check @Superopt.fuse_rows_sound
#check @Superopt.fuse_elementwise_sound
#check @Superopt.fuse_gemm_chain_sound
#check @Superopt.fuse_contraction_sound
#check @Superopt.tile_parallel_sound
#check @Superopt.stream_reduction_sound
#check @Superopt.derive_sound
#check @Superopt.PlanSem.planWF_sound
#check @Superopt.Validate.validRewrite_sound

/-! ## Tiling on concrete sizes -/

/-- `tile_parallel` with `n = 10`, `T = 3`: three full tiles and an edge tile of one. -/
example : (List.range 10).map id =
    concatTiles ((List.range 3).map (tileOf id 3)) ++ (List.range 1).map (fun i => 3 * 3 + i) :=
  rfl

/-- `tileOf` on a concrete tile. -/
example : tileOf id 4 2 = [8, 9, 10, 11] := rfl

/-- `concatTiles` on concrete tiles. -/
example : concatTiles [[0, 1], [], [2]] = [0, 1, 2] := rfl

/-- `axisSize` takes the first binding and defaults to `0`. -/
example : axisSize [("m", 4), ("d", 8)] "d" = 8 ∧ axisSize [("m", 4)] "d" = 0 := by decide

/-! ## Float evaluation -/

/-- Throws (and so fails the build) unless `ok`. -/
def check (what : String) (ok : Bool) : IO Unit :=
  unless ok do throw (IO.userError s!"check failed: {what}")

/-- `|a - b| ≤ 1e-12 · (1 + |b|)`. -/
def close (a b : Float) : Bool :=
  Float.abs (a - b) ≤ 1e-12 * (1.0 + Float.abs b)

/-- The index with every axis at position `0`. -/
def idx0 : Index := fun _ => 0

/-- `X[m] = m + 1` for `m < 3`: `sum_m X = 6`. -/
def sumGraph : Graph :=
  { name := "sum", axes := [("m", 3)],
    nodes := #[.input "X" ["m"], .reduce .sum "m" 0], outputs := [1] }

/-- `X[m] = m + 1` (any other input is `0`). -/
def envX : String → Index → Float := fun name idx =>
  if name = "X" then Float.ofNat (idx "m" + 1) else 0.0

/-- `X[m, d] @_d W[d, n]` with `m = 2`, `d = 3`, `n = 2`. -/
def matmulGraph : Graph :=
  { name := "matmul", axes := [("m", 2), ("d", 3), ("n", 2)],
    nodes := #[.input "X" ["m", "d"], .input "W" ["d", "n"], .matmul 0 1 "d" "d"],
    outputs := [2] }

/-- `X[m, d] = m + d`, `W[d, n] = d · n + 1`. -/
def envXW : String → Index → Float := fun name idx =>
  if name = "X" then Float.ofNat (idx "m" + idx "d")
  else if name = "W" then Float.ofNat (idx "d" * idx "n" + 1) else 0.0

/-- The scores of one query row (`k` has size 5, not a multiple of the tile size 2). -/
def scores : List Float := [1.0, 2.5, -0.5, 3.0, 0.25]

/-- The values of one output column. -/
def values : List Float := [0.5, -1.0, 2.0, 1.5, -0.75]

/-- The literal softmax over `k`: `exp(S) / sum_k exp(S)`. -/
def softmaxGraph : Graph :=
  { name := "softmax", axes := [("k", 5)],
    nodes := #[.input "S" ["k"], .unary .exp 0, .reduce .sum "k" 1, .binary .div 1 2],
    outputs := [3] }

/-- The stabilised softmax: `exp(S - max_k S) / sum_k exp(S - max_k S)`. -/
def stableSoftmaxGraph : Graph :=
  { name := "softmax_stable", axes := [("k", 5)],
    nodes := #[.input "S" ["k"], .reduce .max "k" 0, .binary .sub 0 1, .unary .exp 2,
      .reduce .sum "k" 3, .binary .div 3 4],
    outputs := [5] }

/-- `S[k]` from `scores`. -/
def envS : String → Index → Float := fun _ idx => scores.getD (idx "k") 0.0

#eval check "sum_m X = 6" (denote sumGraph envX 1 idx0 == 6.0)

-- O[m, n] = Σ_d (m + d)(d n + 1): O[1, 1] = 1·1 + 2·2 + 3·3 = 14, O[0, 0] = 0 + 1 + 2 = 3.
#eval check "matmul O[1,1] = 14"
  (denote matmulGraph envXW 2 (fun a => if a = "m" then 1 else if a = "n" then 1 else 0) == 14.0)
#eval check "matmul O[0,0] = 3" (denote matmulGraph envXW 2 idx0 == 3.0)

#eval check "stabilize_softmax on Float" <|
  (List.range 5).all fun k =>
    close (denote stableSoftmaxGraph envS 5 (fun _ => k)) (denote softmaxGraph envS 3 (fun _ => k))

#eval check "online_softmax on Float (tiles of 2, edge tile of 1)" <|
  let s := fun j => scores.getD j 0.0
  let v := fun j => values.getD j 0.0
  let z := sumList ((List.range 5).map (fun j => Float.exp (s j)))
  let literal := sumList ((List.range 5).map (fun j => Float.exp (s j) / z * v j))
  let st : OnlineState Float := ⟨ScalarOps.negInf, 0.0, 0.0⟩
  close (onlineSoftmax s v st [[0, 1], [2, 3], [4]]).out literal

#eval check "stream_reduction on Float" <|
  let f := fun j => scores.getD j 0.0
  close (streamSum ((List.range 2).map (tileOf f 2) ++ [[f 4]]))
    (sumList ((List.range 5).map f))

/-! ## Plans on `Float`: `planDenote` agrees with `denote` -/

/-- `Q`, `K`, `V` of the small attention below. -/
def envQKV : String → Index → Float := fun name idx =>
  let a := Float.ofNat (idx "t_q" + 2 * idx "t_kv" + 3 * idx "d_h" + 1)
  if name = "Q" then 0.1 * a else if name = "K" then 0.2 * a - 0.3 else 0.05 * a

/-- Every derivation of attention at h=1 t_q=2 t_kv=5 d_h=2 (stabilised, factored, base 2,
online, fused, split ...), its plan run by `planDenote` with tiles of 2 (so edge tiles of 1),
gives the graph's output on `Float`, at every output index. -/
def attentionPlansAgree : Bool :=
  match attentionGraph 1 2 5 2 with
  | .error _ => false
  | .ok g =>
    let idxs : List Index := [(0, 0), (0, 1), (1, 0), (1, 1)].map fun (q, d) =>
      fun a => if a = "t_q" then q else if a = "d_h" then d else 0
    (Derive.deriveAllPlans g).toList.all fun (_, plan) =>
      match PlanSem.planDenote (fun _ => 2) plan envQKV, denoteOutputs g envQKV with
      | [o'], [o] => idxs.all fun ix => close (o' ix) (o ix)
      | _, _ => false

#eval check "planDenote of every attention plan = denote (Float, tiles of 2)" attentionPlansAgree

end Superopt.RulesTest

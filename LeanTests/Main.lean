import Superopt
import LeanTests.RulesTest

/-!
# The Lean test driver (`lake test`)

Checked against the golden wire vectors `tests/golden/*.msgpack` that the Python side
produces (`python tests/golden/generate.py`), so that the two halves agree byte for byte:

* **golden bytes**: Lean's encoding of the registered graphs (the five workloads,
  `llama3_attention`, `residual_rmsnorm`, and the m=2 d=3 n=4 matmul of docs/wire.md 4.1), of
  the example derivation and of the `ping`, `derive` and malformed-version requests equals the
  files' bytes;
* **round trips**: every golden file (but the malformed one) decodes, and re-encodes to the same
  bytes; graphs and results go through `Graph.ofMsg?` / `Results.ofMsg?` and back;
* **responses**: the golden error responses decode to the documented error kind and path;
* **graph checks**: the workload graphs are well formed, and each graph error kind is raised
  where Python raises it;
* **decoder hardening**: truncated input, `c1`, trailing bytes, deep nesting, huge length
  headers, repeated or non-string keys, invalid UTF-8 and ext types are rejected;
* **the enumerator** (`Superopt.Derive`): for each workload, Lean's `deriveAll` encoded as a
  `derivations` response equals `tests/golden/<workload>.derivations.msgpack` byte for byte
  (Python's `derive_all`), every derivation replays (each step checked) to the plan it was
  derived with, the step checker (`Superopt.Verify.verify`) accepts every derivation of every
  registered graph with the same plan, and a few rule sites, the canonical renumbering, the
  certificates and the bits of `log2e` are checked;
* **graphs beyond the golden derivation files** (`llama3_attention`, `residual_rmsnorm`, and
  test graphs mirroring `examples/models/` that exercise `distribute_*`, `commute_row_scale`,
  `move_contracted_scale`, `fuse_gemm_chain`, `fuse_contraction` (over grouped-query heads
  too, a sum of a sum of the matmul), `fuse_epilogue` from a reduction and of a bias over a
  block of columns, `share_operand_load` over domains two axes apart, and `online_softmax`
  over scores with an additive input): the graph bytes and the derivations match Python's by
  fingerprint (`modelFingerprints`, printed by `LeanTests/fingerprints.py`), and the step
  checker accepts every derivation.

Importing `LeanTests.RulesTest` makes `lake test` also build the kernel and `#eval` checks of
the law model and the rules (a failing one fails the build of the test driver).

Usage: `lake test` (from the repository root), or `lake exe superopt_tests [GOLDEN_DIR]`.
The last line is `N passed, M failed`; the exit status is 1 when anything failed.
-/

open Superopt

namespace Superopt.Tests

/-- Counts of checks. -/
structure Counts where
  /-- Checks that passed. -/
  passed : Nat := 0
  /-- Checks that failed. -/
  failed : Nat := 0

/-- The test monad: counts over `IO`. -/
abbrev TestM := StateT Counts IO

/-- Record one check. -/
def check (name : String) (ok : Bool) (detail : String := "") : TestM Unit := do
  if ok then
    modify fun c => { c with passed := c.passed + 1 }
  else
    modify fun c => { c with failed := c.failed + 1 }
    let suffix := if detail.isEmpty then "" else ": " ++ detail
    IO.println s!"FAIL {name}{suffix}"

/-- The bytes of a golden file, or `none` (a failed check) when it cannot be read. -/
def readGolden (dir : System.FilePath) (name : String) : TestM (Option ByteArray) := do
  try
    let bytes ← IO.FS.readBinFile (dir / name)
    return some bytes
  catch e =>
    check s!"read {name}" false (toString e)
    return none

/-- Compare the bytes Lean produces with a golden file. -/
def checkBytes (dir : System.FilePath) (name : String) (ours : ByteArray) : TestM Unit := do
  let golden? ← readGolden dir name
  if let some golden := golden? then
    check s!"golden bytes {name}" (Msgpack.bytesEq ours golden)
      s!"\n  lean:   {Msgpack.hex ours}\n  python: {Msgpack.hex golden}"

/-- Decode a golden file and re-encode it: the same bytes (canonical form). -/
def checkRoundTrip (dir : System.FilePath) (name : String) : TestM Unit := do
  let golden? ← readGolden dir name
  if let some golden := golden? then
    match Msgpack.decode golden with
    | .ok v =>
      check s!"round trip {name}" (Msgpack.bytesEq v.encode golden)
        s!"\n  re-encoded: {Msgpack.hex v.encode}\n  golden:     {Msgpack.hex golden}"
    | .error msg => check s!"decode {name}" false msg

/-- A graph builder's graph (a failed check when it fails). -/
def built (name : String) (g : Except GraphError Graph) : TestM (Option Graph) :=
  match g with
  | .ok g => pure (some g)
  | .error e => do
    check s!"build {name}" false (toString e)
    pure none

/-- The example derivation of `tests/golden/generate.py` (`EXAMPLE_DERIVATION`). -/
def exampleDerivation : Derivation :=
  { workload := "attention", id := "example", steps := [
    { rule := "stabilize_softmax", site := [.node 5] },
    { rule := "online_softmax", site := [.node 5, .axis "t_kv"] },
    { rule := "exp_to_exp2", site := [.node 4], params := [("scale", .float 1.4426950408889634)] },
    { rule := "tile_parallel", site := [.axis "t_q"], params := [("block", .int 128)] },
    { rule := "stream_reduction", site := [.axis "t_kv"],
      params := [("block", .int 64), ("pipelined", .bool true), ("order", .str "row")] }] }

/-- The graph error kind of building `body` over `axes`, or `"ok"`. -/
def errorKindOf (axes : List (Axis × Nat)) (body : Dsl.DagM NodeId) : String :=
  match Dsl.buildGraphWithOutput "t" axes body with
  | .ok _ => "ok"
  | .error e => e.kind.wireName

/-- The graph error kind and path of checking `g`, or `"ok"`. -/
def checkKindOf (g : Graph) : String :=
  match g.check with
  | .ok _ => "ok"
  | .error e => s!"{e.kind.wireName}@{e.path}"

/-- Whether decoding `bytes` fails. -/
def rejects (bytes : ByteArray) : Bool :=
  match Msgpack.decode bytes with
  | .ok _ => false
  | .error _ => true

/-- The kind and path of an error response file, as `kind@path`. -/
def responseError (bytes : ByteArray) : String :=
  match Response.decode? bytes with
  | .ok (.error e) => s!"{e.kind}@{e.path}"
  | .ok _ => "not an error response"
  | .error e => s!"undecodable: {e}"

/-- Decode a golden graph file and re-encode it: `"ok"` when the bytes are the same. -/
def graphRoundTrip (golden : ByteArray) : String :=
  match Graph.decode? golden with
  | .ok g => if Msgpack.bytesEq g.encode golden then "ok" else Msgpack.hex g.encode
  | .error e => toString e

/-- The derivation of a decoded value, re-encoded and compared with `golden`. -/
def derivationRoundTripOf (v : MsgValue) (golden : ByteArray) : String :=
  match Derivation.ofMsg? v with
  | .ok d => if Msgpack.bytesEq d.toMsg.encode golden then "ok" else Msgpack.hex d.toMsg.encode
  | .error e => toString e

/-- Decode a derivation file and re-encode it: `"ok"` when the bytes are the same. -/
def derivationRoundTrip (golden : ByteArray) : String :=
  match Msgpack.decode golden with
  | .error msg => msg
  | .ok v => derivationRoundTripOf v golden

/-- The results of a golden results file, if it decodes. -/
def resultsOf? (golden : ByteArray) : Option Results :=
  match Response.decode? golden with
  | .ok (.results r) => some r
  | _ => none

/-- Whether the third candidate's relative error is NaN. -/
def thirdRelerrIsNaN (r : Results) : Bool :=
  match r.candidates.drop 2 with
  | c :: _ => (c.relerr.map Float.isNaN).getD false
  | [] => false

/-- The kind and path of decoding a graph map, or `"ok"`. -/
def graphErrorOf (v : MsgValue) : String :=
  match Graph.ofMsg? v "graph" with
  | .ok _ => "ok"
  | .error e => s!"{e.kind}@{e.path}"

/-- The kind and path of the graph error of a request's `graph` field, or `"ok"`. -/
def requestGraphError (bytes : ByteArray) : String :=
  match Msgpack.decode bytes with
  | .ok (.map entries) => graphErrorOf (Wire.field entries "graph")
  | _ => "undecodable"

/-- Where Lean's derivations first differ from the golden response's (for a failed check). -/
def firstDifference (ds : List Derivation) (golden : ByteArray) : String :=
  match Response.decode? golden with
  | .ok (.derivations gs) =>
    let pairs := ds.zip gs
    match pairs.find? (fun pr => !Msgpack.bytesEq pr.1.toMsg.encode pr.2.toMsg.encode) with
    | some pr =>
      s!"first difference at {pr.1.id}:\n  lean:   {pr.1.toMsg.render}\n" ++
        s!"  python: {pr.2.toMsg.render}"
    | none => s!"lean has {ds.length} derivation(s), python {gs.length}"
  | _ => "the golden file is not a derivations response"

/-- The step checker accepts every derivation of `g`, and its verified plan is the plan the
derivation was enumerated with. -/
def checkVerified (name : String) (g : Graph) : TestM Unit := do
  let derived := Derive.deriveAllPlans g
  let mut bad : Option String := none
  for (d, plan) in derived do
    if bad.isNone then
      match Verify.verify g d.steps with
      | some q =>
        if !(q.1.canonical == plan.canonical) then
          bad := some s!"{d.id}: the verified plan is another plan"
      | none => bad := some s!"{d.id} fails the step checker"
  check s!"step checker {name}" bad.isNone (bad.getD "")
  check s!"deriveAll keeps every derivation {name}"
    ((Derive.deriveAll g).size == derived.size)
    s!"{(Derive.deriveAll g).size} of {derived.size}"

/-- The derivations of workload `name`: their number, the golden bytes of the `derivations`
response, and a checked replay of each to the plan it was derived with. -/
def checkDerivations (dir : System.FilePath) (name : String) (g : Graph) (count : Nat) :
    TestM Unit := do
  let derived := Derive.deriveAllPlans g
  let ds := derived.toList.map (·.1)
  check s!"derivation count {name}" (ds.length == count) s!"{ds.length}, expected {count}"
  check s!"derivation ids {name}"
    ((ds.zip (List.range ds.length)).all fun pr => pr.1.id == s!"d{pr.2}")
  let golden? ← readGolden dir s!"{name}.derivations.msgpack"
  if let some golden := golden? then
    let ours := (Derive.derivationsResponse ds).encode
    let same := Msgpack.bytesEq ours golden
    check s!"golden derivations {name}" same (if same then "" else firstDifference ds golden)
  let mut bad : Option String := none
  for (d, plan) in derived do
    if bad.isNone then
      match Derive.replay g d.steps with
      | .ok p =>
        if !(p.canonical == plan.canonical) then
          bad := some s!"{d.id} replays to another plan"
      | .error e => bad := some s!"{d.id}: {e}"
  check s!"replay {name}" bad.isNone (bad.getD "")
  checkVerified name g

/-! ## Graphs beyond the golden derivation files -/

/-- A 64-bit hash of `bytes`, `h ↦ (h + b + 1) · 0x100000001B3` from `0xCBF29CE484222325`
(Python: `LeanTests/fingerprints.py`, `byte_hash`). -/
def byteHash (bytes : ByteArray) : UInt64 :=
  bytes.data.foldl (fun h b => (h + UInt64.ofNat b.toNat + 1) * 0x100000001B3)
    0xCBF29CE484222325

/-- `examples/models/gelu_mlp_chain.py` at its default case: two GEMMs through a GELU
(`fuse_gemm_chain`). -/
def geluMlpChainGraph : Except GraphError Graph :=
  Dsl.buildGraphWithOutput "gelu_mlp_chain" [("t", 8192), ("d", 1024), ("f", 256), ("o", 1024)] do
    let x ← Dsl.input "X" ["t", "d"]
    let w1 ← Dsl.input "W_1" ["d", "f"]
    let w2 ← Dsl.input "W_2" ["f", "o"]
    let h ← Dsl.matmul x w1 "d" "d"
    let a ← Dsl.gelu h
    Dsl.matmul a w2 "f" "f"

/-- `examples/models/llama3_mlp.py` at its default case: SwiGLU then the down projection
(`fuse_gemm_chain`, `share_operand_load`). -/
def llama3MlpGraph : Except GraphError Graph :=
  Dsl.buildGraphWithOutput "llama3_mlp" [("t", 4096), ("d", 4096), ("f", 14336), ("o", 4096)] do
    let x ← Dsl.input "X" ["t", "d"]
    let wg ← Dsl.input "W_gate" ["d", "f"]
    let wu ← Dsl.input "W_up" ["d", "f"]
    let wd ← Dsl.input "W_down" ["f", "o"]
    let gate ← Dsl.matmul x wg "d" "d"
    let act ← Dsl.silu gate
    let up ← Dsl.matmul x wu "d" "d"
    let h ← Dsl.mul act up
    Dsl.matmul h wd "f" "f"

/-- `examples/models/llama3_rmsnorm_qkv.py` at its default case: RMSNorm with its gain, then
the QKV projection (`commute_row_scale`, `move_contracted_scale`). -/
def llama3RmsnormQkvGraph : Except GraphError Graph :=
  Dsl.buildGraphWithOutput "llama3_rmsnorm_qkv" [("t", 4096), ("d", 4096), ("n", 6144)] do
    let x ← Dsl.input "X" ["t", "d"]
    let gamma ← Dsl.input "gamma" ["d"]
    let w ← Dsl.input "W_qkv" ["d", "n"]
    let y ← Dsl.rmsNormSubdag x "d" rmsEps
    let z ← Dsl.mul y gamma
    Dsl.matmul z w "d" "d"

/-- `(X − mean_d X + b) @ W` at t=64 d=32 f=16 (Python: `centred_bias_matmul` of
`LeanTests/fingerprints.py`): `distribute_bias`, then `distribute_matmul`. -/
def centredBiasMatmulGraph : Except GraphError Graph :=
  Dsl.buildGraphWithOutput "centred_bias_matmul" [("t", 64), ("d", 32), ("f", 16)] do
    let x ← Dsl.input "X" ["t", "d"]
    let bias ← Dsl.input "b" ["d"]
    let w ← Dsl.input "W" ["d", "f"]
    let mu ← Dsl.mean "d" x
    let xc ← Dsl.sub x mu
    let y ← Dsl.add xc bias
    Dsl.matmul y w "d" "d"

/-- `examples/models/mixtral_moe_combine.py` at its default case: the gated sum over the top-k
axis, a middle axis (a column reduction), plus the residual, which `fuse_epilogue` reads
from a reduction kernel's registers. -/
def mixtralMoeCombineGraph : Except GraphError Graph :=
  Dsl.buildGraphWithOutput "mixtral_moe_combine" [("t", 4096), ("k", 2), ("d", 4096)] do
    let y ← Dsl.input "Y" ["t", "k", "d"]
    let gate ← Dsl.input "G" ["t", "k"]
    let x ← Dsl.input "X" ["t", "d"]
    let yg ← Dsl.mul y gate
    let s ← Dsl.red .sum "k" yg
    Dsl.add x s

/-- `examples/models/bert_attention.py` at its default case: the scaled scores plus the additive
key-padding mask `M[b, t_kv]`, an input that `scoreChain` admits as a leaf read per score, so
`online_softmax` fuses the masked softmax. -/
def bertAttentionGraph : Except GraphError Graph :=
  Dsl.buildGraphWithOutput "bert_attention"
      [("b", 32), ("h", 12), ("t_q", 512), ("t_kv", 512), ("d_h", 64)] do
    let q ← Dsl.input "Q" ["b", "h", "t_q", "d_h"]
    let k ← Dsl.input "K" ["b", "h", "t_kv", "d_h"]
    let v ← Dsl.input "V" ["b", "h", "t_kv", "d_h"]
    let m ← Dsl.input "M" ["b", "t_kv"]
    let s ← Dsl.matmul q k "d_h" "d_h"
    let c ← Dsl.const 0.125
    let t ← Dsl.mul s c
    let x ← Dsl.add t m
    let p ← Dsl.softmaxSubdag x "t_kv"
    Dsl.matmul p v "t_kv" "t_kv"

/-- `examples/models/attention_out_proj.py` at its default case: the per-head output projection
`Σ_h Σ_e O[b, h, t, e] · W_o[h, e, d]` plus the residual `X`, which `fuse_contraction` makes one
GEMM contracting `(h, e)`. -/
def attentionOutProjGraph : Except GraphError Graph :=
  Dsl.buildGraphWithOutput "attention_out_proj"
      [("b", 1), ("h", 32), ("t", 4096), ("e", 128), ("d", 4096)] do
    let o ← Dsl.input "O" ["b", "h", "t", "e"]
    let w ← Dsl.input "W_o" ["h", "e", "d"]
    let x ← Dsl.input "X" ["b", "t", "d"]
    let m ← Dsl.matmul o w "e" "e"
    let s ← Dsl.red .sum "h" m
    Dsl.add x s

/-- `gqa_out_proj` of `LeanTests/fingerprints.py`: the output projection over grouped-query heads
`[g, r]`, `X + Σ_g Σ_r Σ_e O[b, g, r, t, e] · W_o[g, r, e, d]`, which `fuse_contraction` makes
one GEMM contracting `(g, r, e)` in two steps (the second from a sum of the matmul). -/
def gqaOutProjGraph : Except GraphError Graph :=
  Dsl.buildGraphWithOutput "gqa_out_proj"
      [("b", 1), ("g", 8), ("r", 4), ("t", 4096), ("e", 128), ("d", 4096)] do
    let o ← Dsl.input "O" ["b", "g", "r", "t", "e"]
    let w ← Dsl.input "W_o" ["g", "r", "e", "d"]
    let x ← Dsl.input "X" ["b", "t", "d"]
    let m ← Dsl.matmul o w "e" "e"
    let s1 ← Dsl.red .sum "r" m
    let s2 ← Dsl.red .sum "g" s1
    Dsl.add x s2

/-- `rms_head_proj` of `LeanTests/fingerprints.py`: `rmsnorm(X) @ W[d, h, e] + bias[h, e]`, a
query projection written per head, where `share_operand_load` merges the domains `[t]` and
`[t, h, e]` and `fuse_epilogue` reads the `[h, e]` bias, a suffix of the domain. -/
def rmsHeadProjGraph : Except GraphError Graph :=
  Dsl.buildGraphWithOutput "rms_head_proj" [("t", 4096), ("d", 4096), ("h", 32), ("e", 128)] do
    let x ← Dsl.input "X" ["t", "d"]
    let w ← Dsl.input "W" ["d", "h", "e"]
    let bias ← Dsl.input "bias" ["h", "e"]
    let y ← Dsl.rmsNormSubdag x "d" rmsEps
    let q ← Dsl.matmul y w "d" "d"
    Dsl.add q bias

/-- A registered graph at its reference case, or one of the test graphs above. -/
def testGraph? (name : String) : Option (Except GraphError Graph) :=
  match workloadByName? name with
  | some w => some (w.build w.referenceCase)
  | none =>
    if name == "gelu_mlp_chain" then some geluMlpChainGraph
    else if name == "llama3_mlp" then some llama3MlpGraph
    else if name == "llama3_rmsnorm_qkv" then some llama3RmsnormQkvGraph
    else if name == "centred_bias_matmul" then some centredBiasMatmulGraph
    else if name == "mixtral_moe_combine" then some mixtralMoeCombineGraph
    else if name == "bert_attention" then some bertAttentionGraph
    else if name == "attention_out_proj" then some attentionOutProjGraph
    else if name == "gqa_out_proj" then some gqaOutProjGraph
    else if name == "rms_head_proj" then some rmsHeadProjGraph
    else none

/-- Python's fingerprints of the graphs beyond the golden derivation files, printed by
`PYTHONPATH=python python3 LeanTests/fingerprints.py`: name, the graph's wire bytes (length,
`byteHash`), its derivations (count, the `derivations` response's length and `byteHash`). -/
def modelFingerprints : List (String × Nat × UInt64 × Nat × Nat × UInt64) := [
  ("llama3_attention", 465, 0x0EC37F557C31EF9E, 1676, 1345182, 0x79F91F3D83A4CB4C),
  ("residual_rmsnorm", 320, 0x7E5B503FE14314AE, 56, 25174, 0xCB6A0E56F17BC45F),
  ("gelu_mlp_chain", 249, 0x3D86663730265F85, 4, 1266, 0x5CBC98D2D64B577E),
  ("llama3_mlp", 330, 0x8120EF57718F4894, 22, 9712, 0x217CD8E57E2C089E),
  ("llama3_rmsnorm_qkv", 352, 0xB3A63BED1F0129AA, 298, 171499, 0xF418567C0F5C35DD),
  ("centred_bias_matmul", 275, 0x5F4B50EBDF51B8B7, 93, 58818, 0xD893A72B4E455BF4),
  ("mixtral_moe_combine", 218, 0xB7CAAEE06D7766D5, 4, 1170, 0xFE28E04EA9EB11F5),
  ("bert_attention", 415, 0x45AD6B7191174EA3, 1392, 1125705, 0x402778357AF8F6F1),
  ("attention_out_proj", 255, 0x30E5F9EF678D9FEB, 4, 1248, 0xA613FDDAE589C0C9),
  ("gqa_out_proj", 285, 0xA291BD5E1C06D273, 6, 2272, 0x4579A793EF817FA1),
  ("rms_head_proj", 349, 0x74EE6605AF525972, 208, 111008, 0xC101B84D85E240FF)]

/-- Each graph of `modelFingerprints`: Lean builds the same graph bytes and enumerates the same
derivations as Python (by fingerprint), and the step checker accepts every derivation. -/
def checkFingerprints : TestM Unit := do
  for (name, gLen, gHash, count, dLen, dHash) in modelFingerprints do
    match testGraph? name with
    | some (.ok g) =>
      let gb := g.encode
      check s!"graph fingerprint {name}" (gb.size == gLen && byteHash gb == gHash)
        s!"{gb.size} bytes, hash {byteHash gb}"
      let ds := (Derive.deriveAllPlans g).toList.map (·.1)
      let db := (Derive.derivationsResponse ds).encode
      check s!"derivation fingerprint {name}"
        (ds.length == count && db.size == dLen && byteHash db == dHash)
        s!"{ds.length} derivations, {db.size} bytes, hash {byteHash db}"
      checkVerified name g
    | _ => check s!"graph {name}" false

/-- The enumerator: golden derivations of the five workloads, and unit checks. -/
def runDerive (dir : System.FilePath) : TestM Unit := do
  check "log2e bits" (Derive.log2e.toBits == 0x3FF71547652B82FE) (toString Derive.log2e.toBits)
  let counts : List (String × Nat) :=
    [("attention", 296), ("swiglu", 11), ("matmul", 1), ("rmsnorm", 104), ("rmsnorm_mlp", 1794)]
  for (name, count) in counts do
    match (workloadByName? name).map (·.graphWithCase []) with
    | some (.ok g) =>
      -- the literal workload graphs are already in canonical order
      check s!"canonical order {name}"
        (Msgpack.bytesEq (Derive.deadCodeEliminate g).encode g.encode)
      checkDerivations dir name g count
    | _ => check s!"workload {name}" false
  -- the other registered graphs and the test graphs: Python's fingerprints, the step checker
  -- (the literal llama3_attention graph is not in canonical order: its band mask comes after S)
  checkFingerprints
  match (attentionGraph : Except GraphError Graph) with
  | .ok g =>
    let p := initialPlan g
    check "attention initial plan"
      (p.kernels.toList.map (·.nodes.toList) == [[3], [4], [5], [6], [7]])
    check "attention unscheduled" p.isUnscheduled
    let sites (xs : List Derive.Site) : Array Derive.Site := xs.toArray
    check "attention stabilize sites" (Derive.stabilizeSites p == sites [[.node 6]])
    check "attention factor sites" (Derive.factorSites p == sites [[.node 7, .node 0]])
    check "attention prologue sites" (Derive.fusePrologueSites p == sites [[.node 3, .node 4]])
    check "attention epilogue sites" (Derive.fuseEpilogueSites p == sites [[.node 0, .node 1]])
    check "attention fuse_rows sites"
      (Derive.fuseRowsSites p == sites [[.node 1, .node 2], [.node 2, .node 3]])
    check "attention model-rule sites" ((Derive.distributeSites p).isEmpty &&
      (Derive.distributeBiasSites p).isEmpty && (Derive.commuteSites p).isEmpty &&
      (Derive.moveScaleSites p).isEmpty && (Derive.fuseElementwiseSites p).isEmpty &&
      (Derive.fuseGemmChainSites p).isEmpty && (Derive.fuseContractionSites p).isEmpty)
    check "attention stream sites"
      (Derive.streamSites p == sites [[.node 0], [.node 2], [.node 4]])
    check "attention share and split sites"
      ((Derive.shareSites p).isEmpty && (Derive.splitSites p).isEmpty &&
        (Derive.onlineSites p).isEmpty)
    check "attention domain" (p.domain 4 == ["h", "t_q", "d_h"])
    check "attention reduction axis" (p.reductionAxis 4 == some "t_kv")
    check "checked apply rejects a bad site"
      (Derive.stabilizeSoftmax.apply p [.node 5]).isNone
    check "checked apply accepts a listed site"
      (Derive.stabilizeSoftmax.apply p [.node 6]).isSome
    -- exp_to_exp2 introduces the constant log2(e), bit for bit
    match Derive.expToExp2.apply p [.node 4] with
    | some q =>
      check "exp_to_exp2 constant" (q.graph.nodes.any fun n => match n with
        | .const b => b == log2eBits
        | _ => false)
      check "exp_to_exp2 leaves the plan unscheduled" q.isUnscheduled
    | none => check "exp_to_exp2 applies" false
    -- the certificate of a derivation: one theorem per step, then derive_sound
    match (Derive.deriveAll g).toList.drop 5 with
    | d :: _ =>
      let cert := Derive.certificate d
      check "certificate length" (cert.length == d.steps.length + 1)
      check "certificate ends with derive_sound" (cert.getLast? == some "Superopt.derive_sound")
      check "certificate names rule theorems" ((cert.take d.steps.length).zip d.steps |>.all
        fun pr => pr.1 == s!"Superopt.{pr.2.rule}_sound")
    | [] => check "attention has derivations" false
    -- the plan map a replay response carries (docs/wire.md 4.3)
    match p.toMsg with
    | .map entries =>
      check "plan map keys" (entries.map (·.1) == ["v", "kind", "graph", "kernels"])
    | _ => check "plan map" false
  | .error e => check "attention graph" false (toString e)

/-- Every check. -/
def runAll (dir : System.FilePath) : TestM Unit := do
  -- golden bytes of the workload graphs
  let graphs : List (String × Except GraphError Graph) := [
    ("attention", attentionGraph), ("swiglu", swigluGraph), ("matmul", matmulGraph),
    ("rmsnorm", rmsnormGraph), ("rmsnorm_mlp", rmsnormMlpGraph),
    ("llama3_attention", llama3AttentionGraph), ("residual_rmsnorm", residualRmsnormGraph),
    ("small_matmul", matmulGraph 2 3 4)]
  for (name, g?) in graphs do
    let built? ← built name g?
    if let some g := built? then
      check s!"check {name}" (checkKindOf g == "ok") (checkKindOf g)
      checkBytes dir s!"{name}.graph.msgpack" g.encode
      -- decode the golden file back into a graph and re-encode it
      let golden? ← readGolden dir s!"{name}.graph.msgpack"
      if let some golden := golden? then
        check s!"graph round trip {name}" (graphRoundTrip golden == "ok") (graphRoundTrip golden)
  -- the registry builds the same graphs
  for w in workloads do
    match w.graphWithCase [], workloadByName? w.name with
    | .ok g, some _ =>
      let golden? ← readGolden dir s!"{w.name}.graph.msgpack"
      if let some golden := golden? then
        check s!"registry {w.name}" (Msgpack.bytesEq g.encode golden)
    | _, _ => check s!"registry {w.name}" false
  check "case override" (match (workloadByName? "matmul").map (·.graphWithCase [("m", 2)]) with
    | some (.ok g) => g.axes == [("m", 2), ("d", 4096), ("n", 4096)]
    | _ => false)
  check "case unknown axis" (match (workloadByName? "matmul").map (·.graphWithCase [("h", 2)]) with
    | some (.error _) => true
    | _ => false)
  -- golden bytes of derivations and requests
  checkBytes dir "example.derivation.msgpack" exampleDerivation.toMsg.encode
  checkBytes dir "ping.request.msgpack" Wire.pingRequest.encode
  let matmul? ← built "matmul" matmulGraph
  if let some g := matmul? then
    checkBytes dir "derive.request.msgpack" (Wire.deriveRequest g 4).encode
  checkBytes dir "bad_version.request.msgpack"
    (MsgValue.map [("v", .int 1), ("kind", .str "ping")]).encode
  checkBytes dir "unknown_kind.request.msgpack"
    (MsgValue.map [("v", .int 2), ("kind", .str "frobnicate")]).encode
  -- every golden file round-trips through the codec
  for name in ["attention.graph.msgpack", "swiglu.graph.msgpack", "matmul.graph.msgpack",
      "rmsnorm.graph.msgpack", "rmsnorm_mlp.graph.msgpack", "small_matmul.graph.msgpack",
      "llama3_attention.graph.msgpack", "residual_rmsnorm.graph.msgpack",
      "example.derivation.msgpack", "example.results.msgpack", "derive.request.msgpack",
      "ping.request.msgpack", "ping.response.msgpack", "bad_version.request.msgpack",
      "bad_version.response.msgpack", "unknown_kind.request.msgpack",
      "unknown_kind.response.msgpack", "malformed.response.msgpack",
      "schema_error.request.msgpack", "schema_error.response.msgpack"] do
    checkRoundTrip dir name
  -- typed round trips
  let derivationGolden? ← readGolden dir "example.derivation.msgpack"
  if let some golden := derivationGolden? then
    check "derivation round trip" (derivationRoundTrip golden == "ok") (derivationRoundTrip golden)
  let resultsGolden? ← readGolden dir "example.results.msgpack"
  if let some golden := resultsGolden? then
    match resultsOf? golden with
    | some r =>
      check "results round trip" (Msgpack.bytesEq r.toMsg.encode golden)
      check "results fields" (r.workload == "matmul" && r.candidates.length == 3 &&
        r.peers.length == 3 && r.top1 == some "d0/c0")
      check "results absent peer" ((r.peers.map (·.status)).getLast? == some "absent")
      check "results certificate" (r.certificate == ["Superopt.tile_parallel_sound",
        "Superopt.stream_reduction_sound", "Superopt.derive_sound"])
      check "results NaN relerr" (thirdRelerrIsNaN r)
    | none => check "results decode" false
  -- golden responses
  let pong? ← readGolden dir "ping.response.msgpack"
  if let some b := pong? then
    check "ping response" (match Response.decode? b with
      | .ok (.pong _) => true
      | _ => false)
  for (name, want) in [("bad_version", "version@v"), ("unknown_kind", "unknown_kind@kind"),
      ("malformed", "decode@"), ("schema_error", "schema@graph.nodes[2].op")] do
    let b? ← readGolden dir s!"{name}.response.msgpack"
    if let some b := b? then
      check s!"{name} response" (responseError b == want) (responseError b)
  let malformed? ← readGolden dir "malformed.request.msgpack"
  if let some b := malformed? then
    check "malformed request rejected" (rejects b)
  let schemaReq? ← readGolden dir "schema_error.request.msgpack"
  if let some b := schemaReq? then
    let got := requestGraphError b
    check "schema error path" (got == "schema@graph.nodes[2].op") got
  -- graph errors, as Python raises them
  check "unknown axis" (errorKindOf [("m", 2)] (Dsl.input "X" ["m", "k"]) == "unknown_axis")
  check "repeated input axis" (errorKindOf [("m", 2)] (Dsl.input "X" ["m", "m"]) == "graph")
  check "reduce axis" (errorKindOf [("m", 2), ("n", 3)] (do
    let x ← Dsl.input "X" ["m"]
    Dsl.red .sum "n" x) == "reduce_axis")
  check "contraction" (errorKindOf [("m", 2), ("n", 3)] (do
    let x ← Dsl.input "X" ["m"]
    Dsl.matmul x x "n" "m") == "contraction")
  check "size mismatch" (errorKindOf [("m", 2), ("n", 3)] (do
    let x ← Dsl.input "X" ["m", "n"]
    Dsl.matmul x x "m" "n") == "size_mismatch")
  check "axis table" (errorKindOf [("m", 2), ("m", 3)] (Dsl.input "X" ["m"]) == "size_mismatch")
  check "dangling in DSL" (errorKindOf [("m", 2)] (Dsl.exp 7) == "dangling_node")
  check "cycle" (checkKindOf { name := "c", axes := [("m", 2)], outputs := [1],
    nodes := #[.input "X" ["m"], .unary .exp 1] } == "cycle@nodes[1]")
  check "dangling" (checkKindOf { name := "d", axes := [("m", 2)], outputs := [1],
    nodes := #[.input "X" ["m"], .unary .exp 9] } == "dangling_node@nodes[1]")
  check "dangling output" (checkKindOf { name := "o", axes := [("m", 2)], outputs := [3],
    nodes := #[.input "X" ["m"]] } == "dangling_node@outputs[0]")
  check "no output" (checkKindOf { name := "o", axes := [("m", 2)], outputs := [],
    nodes := #[.input "X" ["m"]] } == "missing_output@outputs")
  check "output twice" (checkKindOf { name := "o", axes := [("m", 2)], outputs := [1, 0, 1],
    nodes := #[.input "X" ["m"], .unary .exp 0] } == "graph@outputs[2]")
  check "NaN eps" (checkKindOf { name := "e", axes := [("m", 2)], outputs := [0],
    nodes := #[.eps 0x7ff8000000000000] } == "graph@nodes[0]")
  check "negative eps" (checkKindOf { name := "e", axes := [("m", 2)], outputs := [0],
    nodes := #[.eps (-1.0 : Float).toBits] } == "graph@nodes[0]")
  check "infinite eps" (checkKindOf { name := "e", axes := [("m", 2)], outputs := [0],
    nodes := #[.eps negInfFloat.toBits] } == "graph@nodes[0]")
  check "NaN const" (checkKindOf { name := "c", axes := [("m", 2)], outputs := [0],
    nodes := #[.const 0x7ff8000000000000] } == "graph@nodes[0]")
  check "-inf const" (checkKindOf { name := "c", axes := [("m", 2)], outputs := [0],
    nodes := #[.const negInfFloat.toBits] } == "ok")
  check "band over one axis" (errorKindOf [("m", 2)] (Dsl.band "m" "m" none none) == "graph")
  check "band over an undeclared axis"
    (errorKindOf [("m", 2)] (Dsl.band "m" "n" none none) == "unknown_axis")
  check "band axes" (outputAxesOf (Dsl.buildGraphWithOutput "b" [("i", 2), ("j", 3)]
    (Dsl.band "i" "j" (some 0) none)) == ["i", "j"])
  check "select axes" (outputAxesOf (Dsl.buildGraphWithOutput "s" [("m", 2), ("n", 3), ("k", 4)]
    (do
      let c ← Dsl.input "C" ["k", "m"]
      let x ← Dsl.input "X" ["m"]
      let y ← Dsl.input "Y" ["n", "m"]
      Dsl.select c x y)) == ["m", "n", "k"])
  check "mean is three nodes" (nodeCount (Dsl.buildGraphWithOutput "mean" [("m", 2), ("d", 3)]
    (do
      let x ← Dsl.input "X" ["m", "d"]
      Dsl.mean "d" x)) == 4)
  check "new unary ops on the wire" (["tanh", "sigmoid", "relu", "log", "gelu", "gelu_tanh"].all
    fun s => (UnOp.ofName? s).map UnOp.name == some s)
  check "two outputs" (match residualRmsnormGraph with
    | .ok g => g.outputs == [3, 12]
    | .error _ => false)
  check "band values" (Semantics.bandOk (some 0) none 3 2 && !Semantics.bandOk (some 0) none 2 3 &&
    Semantics.bandOk (some 0) (some 1) 3 2 && !Semantics.bandOk (some 0) (some 1) 5 2)
  check "broadcast axes" (outputAxesOf (Dsl.buildGraphWithOutput "b" [("m", 2), ("n", 3)] (do
      let x ← Dsl.input "X" ["m"]
      let y ← Dsl.input "Y" ["n", "m"]
      Dsl.add x y)) == ["m", "n"])
  check "matmul batch axes" (outputAxesOf attentionGraph == ["h", "t_q", "d_h"])
  -- decoder hardening (docs/wire.md section 2)
  let deep := Msgpack.bytesOf (List.replicate 100000 0x91 ++ [0x00])
  check "100000 nested arrays rejected" (rejects deep)
  check "64 nested arrays accepted" (!rejects (Msgpack.bytesOf (List.replicate 63 0x91 ++ [0x90])))
  check "65 nested arrays rejected" (rejects (Msgpack.bytesOf (List.replicate 65 0x91 ++ [0x00])))
  check "huge array header"
    (rejects (Msgpack.bytesOf [0xdd, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0]))
  check "huge str header" (rejects (Msgpack.bytesOf [0xdb, 0xff, 0xff, 0xff, 0xff, 0x61]))
  check "empty" (rejects ByteArray.empty)
  check "c1" (rejects (Msgpack.bytesOf [0xc1]))
  check "truncated" (rejects (Msgpack.bytesOf [0xcd, 0x01]))
  check "trailing" (rejects (Msgpack.bytesOf [0xc0, 0xc0]))
  check "ext" (rejects (Msgpack.bytesOf [0xd4, 0x01, 0x02]))
  check "timestamp ext" (rejects (Msgpack.bytesOf [0xd6, 0xff, 0, 0, 0, 0]))
  check "invalid utf-8" (rejects (Msgpack.bytesOf [0xa2, 0xc3, 0x28]))
  check "non-string key" (rejects (Msgpack.bytesOf [0x81, 0x01, 0x02]))
  check "repeated key" (rejects (Msgpack.bytesOf [0x82, 0xa1, 0x61, 0x01, 0xa1, 0x61, 0x02]))
  check "non-canonical accepted" (match Msgpack.decode (Msgpack.bytesOf [0xd1, 0x00, 0x05]) with
    | .ok (.int i) => i == 5
    | _ => false)
  check "float32 accepted" (match Msgpack.decode (Msgpack.bytesOf [0xca, 0x3f, 0xc0, 0, 0]) with
    | .ok (.float f) => f == 1.5
    | _ => false)
  -- canonical integer and string forms
  for (n, want) in [((0 : Int), "00"), (127, "7f"), (128, "cc80"), (255, "ccff"),
      (256, "cd0100"), (65535, "cdffff"), (65536, "ce00010000"),
      (4294967296, "cf0000000100000000"), (-1, "ff"), (-32, "e0"), (-33, "d0df"),
      (-128, "d080"), (-129, "d1ff7f"), (-32768, "d18000"), (-32769, "d2ffff7fff"),
      (-2147483649, "d3ffffffff7fffffff")] do
    check s!"int {n}" (Msgpack.hex (MsgValue.int n).encode == want)
      (Msgpack.hex (MsgValue.int n).encode)
  check "str8" (Msgpack.hex (MsgValue.str "abcdefghijklmnopqrstuvwxyz012345").encode ==
    "d920" ++ Msgpack.hex "abcdefghijklmnopqrstuvwxyz012345".toUTF8)
  check "-0.0" (Msgpack.hex (MsgValue.float (-0.0)).encode == "cb8000000000000000")
  check "utf-8 round trip" (match Msgpack.decode (MsgValue.str "µs → λ").encode with
    | .ok (.str s) => s == "µs → λ"
    | _ => false)
  -- the enumerator (Superopt.Derive) against Python's golden derivations
  runDerive dir

end Superopt.Tests

/-- Run every check against `tests/golden` (or the directory given as the first argument). -/
def main (args : List String) : IO UInt32 := do
  let dir : System.FilePath := match args with
    | d :: _ => System.FilePath.mk d
    | [] => System.FilePath.mk "tests/golden"
  let (_, counts) ← (Superopt.Tests.runAll dir).run {}
  IO.println s!"{counts.passed} passed, {counts.failed} failed"
  return if counts.failed == 0 then 0 else 1

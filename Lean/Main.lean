import Superopt

/-!
# `lake exe superopt`: derive, tune and rank one workload

```
lake exe superopt attention [--case k=v,...] [--budget N] [--seconds S] [--out DIR]
                            [--dtype fp16|bf16] [--max-depth D] [--python-derive]
```

1. builds the graph in Lean (any name of `Superopt.workloads`, the registry; `--case`
   overrides);
2. enumerates its derivations in Lean (`Superopt.Derive.deriveAll`: every distinct completed
   plan, ids `d0, d1, …`, the same as Python's `derive_all`, each one passing the step checker;
   docs/derivations.md), or, with `--python-derive`, asks the backend for them (a `derive`
   request) and checks each with the step checker (`Superopt.Verify.verify`);
3. checks what Python will lower: a `replay` request returns the plan Python replays for each
   derivation, and its canonical bytes must equal those of Lean's own verified plan
   (`Superopt.Plan.toMsg`); a mismatch is an error naming the derivation;
4. sends a `tune` request with those derivations through the FFI bridge
   (`Superopt.bridgeCall`); the backend replays each one, drops the plans it cannot lower, and
   times the rest per derivation id;
5. prints the ranked candidates (id, derivation, status, µs per call, µs per CUDA-graph replay,
   relative error), the peers, and the certificate of the top-1: the Lean theorems that justify
   its derivation, one per step, then `Superopt.derive_sound`;
6. writes the response bytes to `DIR/results.msgpack` (default
   `.superopt/last-results.msgpack`) for `#eval` (see `examples/Eval.lean`).

Exit status: 0 on success; 2 for an unknown workload or a bad option (message on stderr);
1 when the backend fails, a derivation fails the step checker, or a replayed plan differs.
-/

open Superopt

namespace Superopt.Cli

/-- The command-line options. -/
structure Options where
  /-- The workload name. -/
  workload : String
  /-- Axis sizes overriding the reference case (`--case`). -/
  sizes : List (Axis × Nat) := []
  /-- Most candidates to compile and time. -/
  budget : Nat := 64
  /-- Most seconds the search may take. -/
  seconds : Nat := 1800
  /-- Where the backend writes artifacts and where `results.msgpack` goes. -/
  outDir : Option String := none
  /-- `"float16"` or `"bfloat16"`. -/
  dtype : String := "float16"
  /-- Most search-rule steps per derivation (before completion). -/
  maxDepth : Nat := Derive.defaultMaxDepth
  /-- Ask the Python backend for the derivations instead of enumerating them in Lean. -/
  pythonDerive : Bool := false

/-- The usage text. -/
def usage : String :=
  "usage: lake exe superopt WORKLOAD [--case k=v,...] [--budget N] [--seconds S] [--out DIR]\n" ++
  "                                  [--dtype fp16|bf16] [--max-depth D] [--python-derive]\n" ++
  "graphs (the registry): " ++ ", ".intercalate workloadNames ++ "\n" ++
  "Derives equivalent programs of WORKLOAD (rewrite rules proved in Lean), lowers them to\n" ++
  "TileLang, compiles, checks and times them on the GPU, and prints the ranked table.\n" ++
  "  --case k=v,...   axis sizes overriding the reference case, e.g. --case m=256,n=512\n" ++
  "  --budget N       most candidates to compile and time (default 64)\n" ++
  "  --seconds S      most seconds for the search (default 1800)\n" ++
  "  --out DIR        artifacts and results.msgpack go to DIR\n" ++
  "                   (default: .superopt/last-results.msgpack)\n" ++
  "  --dtype T        fp16 (default) or bf16\n" ++
  s!"  --max-depth D    most search-rule steps per derivation " ++
  s!"(default {Derive.defaultMaxDepth})\n" ++
  "  --python-derive  ask the Python backend for the derivations (a derive request)\n" ++
  "                   instead of enumerating them in Lean\n"

/-- Parse `"m=256,n=512"` (Python: `parse_case`).

Errors: malformed entries, repeated axes, sizes that are not integers ≥ 1. -/
def parseCase (text : String) : Except String (List (Axis × Nat)) := do
  if text.trim.isEmpty then return []
  let mut out : Array (Axis × Nat) := #[]
  for part in text.splitOn "," do
    match part.splitOn "=" with
    | [k, v] =>
      let key := k.trim
      let value := v.trim
      if key.isEmpty then
        throw s!"malformed case entry '{part}'; expected axis=size, e.g. m=256"
      if out.any (fun e => e.1 == key) then
        throw s!"axis '{key}' given twice"
      match value.toNat? with
      | none => throw s!"size of '{key}' is '{value}', not an integer"
      | some n =>
        if n < 1 then throw s!"size of '{key}' is {n}; sizes must be >= 1"
        out := out.push (key, n)
    | _ => throw s!"malformed case entry '{part}'; expected axis=size, e.g. m=256"
  return out.toList

/-- A natural-number option value. -/
def parseNat (opt value : String) (least : Nat := 0) : Except String Nat :=
  match value.trim.toNat? with
  | some n => if n < least then .error s!"{opt} must be >= {least}, got {n}" else .ok n
  | none => .error s!"{opt} expects an integer, got '{value}'"

/-- The wire dtype of a `--dtype` value. -/
def parseDtype (value : String) : Except String String :=
  if value == "fp16" || value == "float16" then .ok "float16"
  else if value == "bf16" || value == "bfloat16" then .ok "bfloat16"
  else .error s!"--dtype must be fp16 or bf16, got '{value}'"

/-- Split `--opt=value` into `("--opt", some "value")`; other arguments are unchanged. -/
def splitOpt (arg : String) : String × Option String :=
  if arg.startsWith "--" then
    match arg.splitOn "=" with
    | opt :: v :: rest => (opt, some ("=".intercalate (v :: rest)))
    | _ => (arg, none)
  else (arg, none)

/-- The options in `args`, or `none` for `--help`.

Errors: a missing workload, an unknown option, a missing or bad value. -/
def parseArgs (args : List String) : Except String (Option Options) := do
  let mut workload : Option String := none
  let mut opts : Options := { workload := "" }
  let mut rest := args
  -- each iteration consumes one or two arguments; `args.length` bounds the loop
  for _ in [0:args.length] do
    match rest with
    | [] => break
    | arg :: tail =>
      let (opt, inline?) := splitOpt arg
      if opt == "--help" || opt == "-h" then return none
      if opt == "--python-derive" then
        if inline?.isSome then throw s!"{opt} takes no value"
        opts := { opts with pythonDerive := true }
        rest := tail
        continue
      let valueOpts := ["--case", "--budget", "--seconds", "--out", "--dtype", "--max-depth"]
      if valueOpts.contains opt then
        let (value, tail') ← match inline?, tail with
          | some v, t => pure (v, t)
          | none, v :: t => pure (v, t)
          | none, [] => throw s!"{opt} expects a value"
        rest := tail'
        if opt == "--case" then opts := { opts with sizes := (← parseCase value) }
        else if opt == "--budget" then opts := { opts with budget := (← parseNat opt value 1) }
        else if opt == "--seconds" then
          opts := { opts with seconds := (← parseNat opt value 1) }
        else if opt == "--out" then opts := { opts with outDir := some value }
        else if opt == "--dtype" then opts := { opts with dtype := (← parseDtype value) }
        else opts := { opts with maxDepth := (← parseNat opt value 1) }
      else if opt.startsWith "-" then
        throw s!"unknown option {opt}"
      else
        if workload.isSome then throw s!"unexpected argument '{arg}'"
        workload := some arg
        rest := tail
  match workload with
  | none => throw "missing WORKLOAD"
  | some w => return some { opts with workload := w }

/-- Right-pad `s` with spaces to `width` characters. -/
def padRight (s : String) (width : Nat) : String := s.pushn ' ' (width - s.length)

/-- Left-pad `s` with spaces to `width` characters. -/
def padLeft (s : String) (width : Nat) : String := "".pushn ' ' (width - s.length) ++ s

/-- `f` with `digits` decimals, e.g. `61.50`; `nan`, `inf`, `-inf` for the special values. -/
def fmtFixed (f : Float) (digits : Nat := 2) : String :=
  if f.isNaN then "nan"
  else if f.isInf then (if f < 0 then "-inf" else "inf")
  else
    let neg := f < 0
    let a := if neg then -f else f
    let scale := 10 ^ digits
    let scaled := (a * Float.ofNat scale).round.toUInt64.toNat
    let whole := toString (scaled / scale)
    let frac := toString (scaled % scale)
    let frac := "".pushn '0' (digits - frac.length) ++ frac
    (if neg then "-" else "") ++ whole ++ (if digits == 0 then "" else "." ++ frac)

/-- `f` in scientific notation with two decimals, e.g. `2.44e-04`. -/
def fmtSci (f : Float) : String :=
  if f.isNaN then "nan"
  else if f.isInf then (if f < 0 then "-inf" else "inf")
  else if f == 0 then "0"
  else
    let neg := f < 0
    let a := if neg then -f else f
    -- the decimal exponent ⌊log10 a⌋ as an Int, without Float → Int conversions
    let fl := (Float.log10 a).floor
    let e : Int :=
      if fl ≥ 0 then Int.ofNat fl.toUInt64.toNat else -Int.ofNat (-fl).toUInt64.toNat
    let pow10 (k : Int) : Float :=
      if k ≥ 0 then Float.ofNat (10 ^ k.toNat) else 1.0 / Float.ofNat (10 ^ (-k).toNat)
    -- normalise the mantissa into [1, 10) (log10 may be off by one at the boundaries)
    let m0 := a / pow10 e
    let (m, e) :=
      if m0 ≥ 10 then (m0 / 10, e + 1) else if m0 < 1 then (m0 * 10, e - 1) else (m0, e)
    let ms := fmtFixed m 2
    let (ms, e) := if ms == "10.00" then ("1.00", e + 1) else (ms, e)
    let es := toString e.natAbs
    let es := (if e < 0 then "-" else "+") ++ (if es.length < 2 then "0" ++ es else es)
    (if neg then "-" else "") ++ ms ++ "e" ++ es

/-- An optional time in µs, `-` when absent. -/
def fmtUs : Option Float → String
  | some f => fmtFixed f 2
  | none => "-"

/-- An optional relative error, `-` when absent. -/
def fmtErr : Option Float → String
  | some f => fmtSci f
  | none => "-"

/-- A compact rendering of a tile configuration: `block_m=128 threads=256`. -/
def fmtConfig (config : List (String × ParamValue)) : String :=
  " ".intercalate (config.map fun kv =>
    let v := match kv.2 with
      | .int i => toString i
      | .float f => toString f
      | .str s => s
      | .bool b => if b then "true" else "false"
    kv.1 ++ "=" ++ v)

/-- The ranked table of `r`, then its peers, as lines. -/
def renderResults (r : Results) : List String := Id.run do
  let mut lines : Array String := #[]
  let floor := match r.floorUs with
    | some f => s!", roofline floor {fmtFixed f 2} us"
    | none => ""
  lines := lines.push (s!"workload {r.workload} on {r.device}" ++ floor)
  lines := lines.push ""
  lines := lines.push (padLeft "#" 4 ++ "  " ++ padRight "candidate" 16 ++
    padRight "derivation" 14 ++ padRight "status" 15 ++ padLeft "call_us" 11 ++
    padLeft "graph_us" 11 ++ padLeft "relerr" 11 ++ "  config")
  let mut rank := 1
  for c in r.candidates do
    let mark := if r.top1 == some c.id then "*" else " "
    lines := lines.push (padLeft (toString rank) 3 ++ mark ++ "  " ++ padRight c.id 16 ++
      padRight c.derivation 14 ++ padRight c.status 15 ++ padLeft (fmtUs c.callUs) 11 ++
      padLeft (fmtUs c.graphUs) 11 ++ padLeft (fmtErr c.relerr) 11 ++ "  " ++
      fmtConfig c.config)
    match c.error with
    | some e => lines := lines.push ("        " ++ e)
    | none => pure ()
    rank := rank + 1
  lines := lines.push ""
  lines := lines.push (padRight "peer" 34 ++ padRight "status" 15 ++ padLeft "call_us" 11 ++
    padLeft "graph_us" 11 ++ padLeft "relerr" 11)
  for p in r.peers do
    lines := lines.push (padRight p.name 34 ++ padRight p.status 15 ++
      padLeft (fmtUs p.callUs) 11 ++ padLeft (fmtUs p.graphUs) 11 ++
      padLeft (fmtErr p.relerr) 11)
  match r.top1 with
  | some t => lines := lines.push "" |>.push s!"top-1: {t} (marked *)"
  | none => lines := lines.push "" |>.push "no correct candidate"
  return lines.toList

/-- Where the response bytes are written: `DIR/results.msgpack`, or
`.superopt/last-results.msgpack`. -/
def resultsPath (outDir : Option String) : System.FilePath :=
  match outDir with
  | some d => System.FilePath.mk d / "results.msgpack"
  | none => System.FilePath.mk ".superopt" / "last-results.msgpack"

/-- The derivations of `g`: enumerated in Lean (`Superopt.Derive.deriveAll`, the same ids and
steps as Python's `derive_all`), or asked from the backend with `--python-derive`.

Errors: the backend's error response (`--python-derive`). -/
def derivationsFor (opts : Options) (g : Graph) : IO (List Derivation) := do
  if opts.pythonDerive then
    match ← callBackend (Wire.deriveRequest g opts.maxDepth) with
    | .derivations ds => return ds
    | _ => throw (IO.userError "the backend answered derive with something other than derivations")
  else
    return (Derive.deriveAll g opts.maxDepth).toList

/-- Check what Python will lower: Lean verifies every derivation (`Superopt.Verify.verify`),
asks the backend to replay them (a `replay` request), and compares each returned plan map's
canonical bytes with those of its own plan.

Errors: a derivation that fails the step checker, a plan that differs (both naming the
derivation), a backend failure. -/
def checkReplay (g : Graph) (derivations : List Derivation) : IO Unit := do
  let mut ours : Array (Derivation × Plan) := #[]
  for d in derivations do
    match Verify.verify g d.steps with
    | some q => ours := ours.push (d, q.1)
    | none => throw (IO.userError s!"derivation {d.id} does not pass the Lean step checker")
  if ours.isEmpty then return
  match ← callBackend (Wire.replayRequest g derivations) with
  | .plans ps =>
    if ps.length != ours.size then
      throw (IO.userError
        s!"the backend replayed {ps.length} plan(s) for {ours.size} derivation(s)")
    for (pm, (d, p)) in ps.zip ours.toList do
      if !Msgpack.bytesEq pm.encode p.toMsg.encode then
        throw (IO.userError
          s!"derivation {d.id}: the plan the backend replays differs from Lean's verified plan")
  | _ => throw (IO.userError "the backend answered replay with something other than plans")

/-- The certificate lines of the top-1 candidate of `r` (empty without one): the theorem names
justifying its derivation, computed in Lean (`Superopt.Derive.certificate`), and a warning
line if the backend's `certificate` field says otherwise. -/
def certificateLines (r : Results) (derivations : List Derivation) : List String :=
  match r.top1 with
  | none => []
  | some t =>
    match r.candidates.find? (·.id == t) with
    | none => []
    | some c =>
      match derivations.find? (·.id == c.derivation) with
      | none => []
      | some d =>
        let ours := Derive.certificate d
        let head := s!"certificate of {t} ({d.id}): " ++ " → ".intercalate ours
        if !r.certificate.isEmpty && r.certificate != ours then
          [head, "warning: the backend's certificate differs: " ++ ", ".intercalate r.certificate]
        else [head]

/-- Derive, check, tune and report `g`; returns the exit status. -/
def runGraph (opts : Options) (g : Graph) : IO UInt32 := do
  let derivations ← derivationsFor opts g
  let source := if opts.pythonDerive then "Python" else "Lean"
  IO.println (s!"{opts.workload}: {g.nodes.size} nodes, {derivations.length} derivation(s) " ++
    s!"enumerated in {source}")
  checkReplay g derivations
  IO.println s!"the backend replays all {derivations.length} plan(s) as Lean verified them"
  let req := Wire.tuneRequest g derivations opts.dtype opts.budget (Float.ofNat opts.seconds)
    opts.outDir
  let bytes ← bridgeCall req.encode
  let response ← match Response.decode? bytes with
    | .ok r => pure r
    | .error e => throw (IO.userError s!"malformed backend response: {e}")
  match response with
  | .error e => throw (backendError e)
  | .results r =>
    let path := resultsPath opts.outDir
    if let some dir := path.parent then
      IO.FS.createDirAll dir
    IO.FS.writeBinFile path bytes
    for line in renderResults r do
      IO.println line
    for line in certificateLines r derivations do
      IO.println line
    IO.println s!"results written to {path}"
    return 0
  | _ => throw (IO.userError "the backend answered tune with something other than results")

/-- Run the pipeline for parsed options; returns the exit status (2 for an unknown workload
or a bad `--case`). -/
def run (opts : Options) : IO UInt32 := do
  let known := ", ".intercalate workloadNames
  match workloadByName? opts.workload with
  | none =>
    IO.eprintln s!"superopt: unknown graph '{opts.workload}'; the registry has: {known}"
    return 2
  | some w =>
    match w.graphWithCase opts.sizes with
    | .error msg =>
      IO.eprintln s!"superopt: --case: {msg}"
      return 2
    | .ok g => runGraph opts g

end Superopt.Cli

/-- `lake exe superopt WORKLOAD [options]`: see the module docstring. -/
def main (args : List String) : IO UInt32 := do
  match Superopt.Cli.parseArgs args with
  | .error msg =>
    IO.eprintln s!"superopt: {msg}"
    IO.eprintln Superopt.Cli.usage
    return 2
  | .ok none =>
    IO.println Superopt.Cli.usage
    return 0
  | .ok (some opts) =>
    try
      Superopt.Cli.run opts
    catch e =>
      IO.eprintln s!"superopt: {e}"
      return 1

import Superopt

/-!
# `#eval` in the editor

Open this file in VS Code (with the Lean 4 extension) from the repository root after
`lake build`; each `#eval` shows its output inline. Nothing here calls the GPU or the bridge:
the last example reads the results that `lake exe superopt attention` wrote.
-/

open Superopt

-- The attention graph at the reference case: 8 nodes.
#eval match attentionGraph with
  | .ok g => s!"{g.name}: {g.nodes.size} nodes, axes {g.axes}, outputs {g.outputs}"
  | .error e => toString e

-- Its nodes, one per line (the Lean structure, as `Repr` prints it).
#eval match attentionGraph with
  | .ok g => repr g.nodes
  | .error e => repr (toString e)

-- A small graph built with the DSL, and its inferred output axes: [m, n].
#eval outputAxesOf (Dsl.buildGraphWithOutput "tiny" [("m", 2), ("d", 3), ("n", 4)] do
  let x ← Dsl.input "X" ["m", "d"]
  let w ← Dsl.input "W" ["d", "n"]
  let y ← Dsl.matmul x w "d" "d"
  Dsl.silu y)

-- A shape error names the node: reduce_axis at nodes[1].
#eval match Dsl.buildGraphWithOutput "bad" [("m", 2), ("n", 3)] (do
    let x ← Dsl.input "X" ["m"]
    Dsl.red .sum "n" x) with
  | .ok _ => "ok"
  | .error e => toString e

-- The canonical msgpack bytes of the m=2 d=3 n=4 matmul (docs/wire.md 4.1), as hex.
#eval match matmulGraph 2 3 4 with
  | .ok g => Msgpack.hex g.encode
  | .error e => toString e

-- The same graph as a msgpack value, rendered.
#eval match matmulGraph 2 3 4 with
  | .ok g => g.toMsg.render
  | .error e => toString e

-- The registry: every graph `lake exe superopt NAME` accepts, with its reference case and its
-- node count there.
#eval workloads.map fun w =>
  (w.name, w.referenceCase, match w.graphWithCase [] with
    | .ok g => g.nodes.size
    | .error _ => 0)

-- A registered graph at another case: LLaMA-3 attention with a short context (the causal
-- band's lower bound is t_q - t_kv).
#eval match (workloadByName? "llama3_attention").map (·.graphWithCase [("t_q", 16), ("t_kv", 64)]) with
  | some (.ok g) => repr g.nodes
  | some (.error e) => repr e
  | none => repr "not registered"

-- A graph with two outputs, built with the DSL: the residual stream and its RMSNorm.
#eval match residualRmsnormGraph 2 8 with
  | .ok g => s!"{g.name}: outputs {g.outputs}, axes {g.outputsAxes.toOption}"
  | .error e => toString e

-- The certificate of a derivation: the Lean theorem behind each step, then derive_sound.
#eval match attentionGraph 2 4 4 8 with
  | .ok g => (Derive.deriveAll g).toList.take 3 |>.map fun d => (d.id, Derive.certificate d)
  | .error _ => []

-- The step checker accepts every derivation of the small attention (Superopt.Verify.verify).
#eval match attentionGraph 2 4 4 8 with
  | .ok g =>
    let ds := (Derive.deriveAllPlans g).toList.map (·.1)
    s!"{(ds.filter fun d => (Verify.verify g d.steps).isSome).length} of {ds.length} verified"
  | .error e => toString e

-- The results of the last `lake exe superopt ...` run, if there is one, with the certificate of
-- its top-1.
#eval show IO Unit from do
  let path : System.FilePath := System.FilePath.mk ".superopt" / "last-results.msgpack"
  if !(← path.pathExists) then
    IO.println s!"no {path} yet: run `lake exe superopt attention` first"
    return
  let bytes ← IO.FS.readBinFile path
  match Response.decode? bytes with
  | .ok (.results r) =>
    IO.println s!"{r.workload} on {r.device}: {r.candidates.length} candidates, top-1 {r.top1}"
    IO.println s!"certificate: {r.certificate}"
    for c in r.candidates do
      IO.println s!"  {c.id} [{c.derivation}] {c.status} call_us={c.callUs} graph_us={c.graphUs}"
    for p in r.peers do
      IO.println s!"  peer {p.name} {p.status} call_us={p.callUs} graph_us={p.graphUs}"
  | .ok _ => IO.println "not a results message"
  | .error e => IO.println s!"cannot decode {path}: {e}"

"""Experiment: cubins of chosen configurations, built on the CPU, for ``cuobjdump -sass``.

    python bench/explore/cubins.py SPEC OUTDIR VARIANT [VARIANT ...]
    # then, where cuobjdump is on the PATH:
    python bench/explore/cubins.py --count OUTDIR

The CPU machine has nvcc but no disassembler of its own; ``cuobjdump`` is on the GPU
machine, and here after ``pip download --no-deps nvidia-cuda-cuobjdump`` (a 5 MB wheel:
unzip it and put its ``nvidia/cu13/bin`` on the PATH). The first form lowers each ``VARIANT``
(``time_configs.py``'s syntax) and compiles its first kernel's CUDA, after the
configuration's rewrites of TileLang's CUDA, to ``OUTDIR/vI.cubin`` for sm_90a with
TileLang's own nvcc options (plus ``--use_fast_math`` when the kernel asks for it),
writing ``OUTDIR/variants.json``. ``--count`` disassembles every cubin there and prints,
per variant, its instruction count and the count of each opcode class a schedule change
is meant to move (barriers, ``WARPSYNC``, convergence barriers ``BSSY``/``BSYNC``,
shuffles, ``R2UR``, ``MUFU``, ``HGMMA``), and the same for the kernel's main loop alone
(:func:`main_loop`; a loop unrolled by the stages holds that many iterations, its ``HGMMA``
count says how many), writing ``OUTDIR/counts.json``. Static counts: an instruction on a path not taken
(e.g. the online softmax's large-magnitude branch) counts as much as one that runs.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

#: opcode (first word of a SASS instruction, without modifiers) → the class counted
CLASSES = ("BAR", "WARPSYNC", "BSSY", "BSYNC", "SHFL", "R2UR", "MUFU", "HGMMA", "BRA",
           "SYNCS", "FMUL", "FFMA", "FMNMX", "FADD")

_INSN = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)")
#: an instruction with its address (cuobjdump's ``/*0a30*/  OP ... ;`` lines)
_ADDRESSED = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)([^;]*);")


def main_loop(sass: str) -> Counter:
    """Opcode counts of the main loop of ``sass``: of the innermost loops that issue
    ``HGMMA`` (a span from a backward branch's target to the branch, holding no other such
    span), the one with the most ``HGMMA`` (an unrolled loop rather than nvcc's rolled
    remainder; the shortest on a tie); empty when there is none. Branches after the last
    ``EXIT`` are left out: nvcc places the retry stubs of the mbarrier waits there, each
    jumping back to its wait."""
    ins = [(int(m.group(1), 16), m.group(2), m.group(3)) for m in _ADDRESSED.finditer(sass)]
    exits = [i for i, (_, o, _) in enumerate(ins) if o == "EXIT"]
    ins = ins[:exits[-1] + 1] if exits else ins
    at = {a: i for i, (a, _, _) in enumerate(ins)}
    spans = []
    for i, (a, op, rest) in enumerate(ins):
        target = re.search(r"0x([0-9a-f]+)", rest) if op == "BRA" else None
        if target and int(target.group(1), 16) < a and int(target.group(1), 16) in at:
            lo = at[int(target.group(1), 16)]
            if any(o == "HGMMA" for _, o, _ in ins[lo:i + 1]):
                spans.append((lo, i))
    inner = [(lo, hi) for lo, hi in spans
             if not any(lo <= l2 and h2 <= hi and (l2, h2) != (lo, hi) for l2, h2 in spans)]
    if not inner:
        return Counter()
    lo, hi = max(inner, key=lambda sp: (sum(o == "HGMMA" for _, o, _ in ins[sp[0]:sp[1] + 1]),
                                        sp[0] - sp[1]))
    return Counter(o for _, o, _ in ins[lo:hi + 1])


def build(spec: str, outdir: Path, variants: list[str]) -> None:
    from tilelang.contrib.nvcc import compile_cuda, default_compile_options

    from superopt.graphs import load_graph
    from superopt.lower import tl
    from time_configs import lower_variants

    g = load_graph(spec)
    outdir.mkdir(parents=True, exist_ok=True)
    rows = []
    lowered = lower_variants(g, variants, "float16", Path(tempfile.mkdtemp(prefix="cubins_")))
    for i, (text, (_, _, cfg, mod)) in enumerate(zip(variants, lowered)):
        m = tl.import_module_file(mod.path, f"cubins_v{i}")
        rewrites = dict(getattr(m, "REWRITTEN_KERNELS", {}))
        name = next(n for n in dir(m) if n.startswith("build_k0_"))
        kernel = name.removeprefix("build_")
        cuda = tl.lower_to_cuda(getattr(m, name)(), rewrites=tuple(rewrites.get(kernel, ())))
        opts = default_compile_options()
        if "tl.enable_fast_math" in Path(mod.path).read_text():
            opts.append("--use_fast_math")
        cubin = compile_cuda(cuda, target_format="cubin", options=opts,
                             arch=["-gencode", "arch=compute_90a,code=sm_90a"])
        (outdir / f"v{i}.cubin").write_bytes(cubin)
        (outdir / f"v{i}.cu").write_text(cuda)
        rows.append({"subject": f"v{i}", "variant": text, "config": cfg, "kernel": kernel,
                     "rewrites": list(rewrites.get(kernel, ()))})
        print(f"v{i}: {text} -> {kernel} {len(cubin)} bytes", flush=True)
    (outdir / "variants.json").write_text(json.dumps(rows, indent=1))


def count(outdir: Path) -> None:
    rows = json.loads((outdir / "variants.json").read_text())
    result = {}
    for r in rows:
        sass = subprocess.run(["cuobjdump", "-sass", str(outdir / f"{r['subject']}.cubin")],
                              capture_output=True, text=True, check=True).stdout
        ops = Counter(m.group(1) for m in _INSN.finditer(sass))
        loop = main_loop(sass)
        result[r["subject"]] = {"variant": r["variant"], "total": sum(ops.values()),
                                **{c: ops.get(c, 0) for c in CLASSES},
                                "loop": {"total": sum(loop.values()), **dict(loop.most_common())}}
    (outdir / "counts.json").write_text(json.dumps(result, indent=1))
    print(f"{'':9} {'total':>6} " + " ".join(f"{c:>8}" for c in CLASSES))
    for s, c in result.items():
        loop = c["loop"]
        print(f"{s:4} all  {c['total']:>6} " + " ".join(f"{c[k]:>8}" for k in CLASSES)
              + f"  {c['variant']}")
        print(f"{s:4} loop {loop['total']:>6} "
              + " ".join(f"{loop.get(k, 0):>8}" for k in CLASSES))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=Path, metavar="OUTDIR")
    ap.add_argument("spec", nargs="?")
    ap.add_argument("outdir", nargs="?", type=Path)
    ap.add_argument("variants", nargs="*")
    a = ap.parse_args()
    if a.count:
        count(a.count)
    else:
        if not (a.spec and a.outdir and a.variants):
            ap.error("SPEC OUTDIR VARIANT... (or --count OUTDIR)")
        build(a.spec, a.outdir, a.variants)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``superopt.optimize``: any graph, from a plain script with no ``__main__`` guard; on a
machine without a CUDA GPU the dry run's record, not an exception."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import superopt
from superopt.errors import CaseError

ROOT = Path(__file__).resolve().parents[2]
NO_GPU = not __import__("torch").cuda.is_available()


@pytest.mark.skipif(not NO_GPU, reason="the dry-run fallback is for machines without a GPU")
def test_optimize_from_a_plain_script_without_a_main_guard(tmp_path):
    script = tmp_path / "my_block.py"
    script.write_text(textwrap.dedent("""\
        from superopt import DagBuilder, optimize

        b = DagBuilder("my_block", [("t", 256), ("d", 128), ("f", 256)])
        x, w = b.input("X", ["t", "d"]), b.input("W", ["d", "f"])
        b.output(b.gelu_tanh(b.matmul(x, w, "d", "d")))
        rec = optimize(b.build(), budget=2, out="run")
        print(repr(rec))
        print(rec.mode, len(rec.candidates), " | ".join(rec.notes))
        """))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "python"),
                                                       os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    shown, line = p.stdout.strip().split("\n")
    # the record's repr is one line (the candidates' CUDA C stays in the record)
    assert re.fullmatch(r"<RunRecord 'my_block' float16 dry-run: 2 candidates of \d+ lowerable "
                        r"plans, estimated_top1=c0 [\d.]+ us \(not timed\)>", shown), shown
    mode, n, note = line.split(" ", 2)
    assert mode == "dry-run" and int(n) == 2 and "no CUDA GPU here" in note
    record = json.loads((tmp_path / "run" / "record.json").read_text())
    assert record["workload"] == "my_block" and record["mode"] == "dry-run"
    assert [c["status"] for c in record["candidates"]] == ["lowered", "lowered"]
    assert all(c["lowering"]["status"] == "ok" and c["families"][0] == "gemm"
               for c in record["candidates"])


def test_optimize_takes_the_command_line_specs_and_names_bad_ones():
    with pytest.raises(CaseError, match="no such file"):
        superopt.optimize("does/not/exist.py:block")
    with pytest.raises(CaseError):
        superopt.optimize("matmul", sizes={"no_such_axis": 4})

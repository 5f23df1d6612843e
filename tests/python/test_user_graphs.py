"""A user's own graph through the entry points: ``FILE.py:FUNCTION`` and ``GRAPH.msgpack`` on
the command line, the caps, and every way such a file can be wrong (exit status 2, one line
naming the problem, nothing written)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from superopt import cli, errors, wire
from superopt.graphs import load_graph
from superopt.workloads import WORKLOADS

MODELS = Path(__file__).resolve().parents[2] / "examples" / "models"

MY_BLOCK = """
from superopt.dsl import DagBuilder


def my_block(m=64, d=32, n=48):
    b = DagBuilder("my_block", [("m", m), ("d", d), ("n", n)])
    x = b.input("X", ["m", "d"])
    w = b.input("W", ["d", "n"])
    b.output(b.gelu(b.matmul(x, w, "d", "d")))
    return b.build()


def raises(m=4):
    raise RuntimeError("boom")


def not_a_graph(m=4):
    return 42


def exits(m=4):
    import sys
    sys.exit(3)


def _private_helper():
    return None
"""


@pytest.fixture()
def user_file(tmp_path):
    p = tmp_path / "model.py"
    p.write_text(textwrap.dedent(MY_BLOCK))
    return p


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_derive_json_of_a_user_function(capsys, user_file):
    code, out, err = run(capsys, "derive", f"{user_file}:my_block", "--case", "m=16", "--json")
    assert code == 0 and err == ""
    doc = json.loads(out)
    assert doc["workload"] == "my_block" and doc["case"] == {"m": 16, "d": 32, "n": 48}
    assert doc["derivations"] and doc["capped"] is None
    # the GELU epilogue fuses into the GEMM: a one-kernel plan exists
    assert any(d["families"] == ["gemm"] for d in doc["derivations"])


def test_derive_of_a_wire_graph(capsys, tmp_path):
    g = WORKLOADS["matmul"].graph(m=8, d=8, n=8)
    p = tmp_path / "g.msgpack"
    p.write_bytes(wire.encode(wire.graph_to_wire(g)))
    code, out, _ = run(capsys, "derive", str(p), "--case", "n=16", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["case"] == {"m": 8, "d": 8, "n": 16}


def test_caps_are_reported(capsys):
    code, out, _ = run(capsys, "derive", "attention", "--max-plans", "5")
    assert code == 0
    assert out.strip().splitlines()[-1].startswith(
        "note: the enumerator stopped at --max-plans 5 (5 plans explored)")
    code, out, _ = run(capsys, "derive", "attention", "--max-depth", "1", "--json")
    assert json.loads(out)["capped"] == "max_depth"


@pytest.mark.parametrize("spec,case,message", [
    ("{dir}/nope.py:my_block", None, "no such file '{dir}/nope.py'"),
    ("{dir}/model.py:missing", None, "has no function 'missing'; its functions: my_block, "
                                     "raises, not_a_graph, exits\n"),
    # sys.exit(3) in the user's function is theirs, not superopt's exit status 3 (no GPU)
    ("{dir}/model.py:exits", None, "exits(**{{}}) raised SystemExit: 3"),
    ("{dir}/model.py:raises", None, "raises(**{{}}) raised RuntimeError: boom"),
    ("{dir}/model.py:not_a_graph", None, "not_a_graph() returned int, not a superopt Graph"),
    ("{dir}/model.py:my_block", "q=4", "my_block() takes no size 'q'; its parameters are m, d, n"),
    # the unknown size named before its value is judged (a newcomer's eps=1e-6)
    ("{dir}/model.py:my_block", "eps=1e-6",
     "my_block() takes no size 'eps'; its parameters are m, d, n"),
    ("{dir}/model.py:my_block", "m=1e3", "--case: size of 'm' is '1e3', not an integer"),
    ("{dir}/model.txt:my_block", None, "is not a .py file"),
])
def test_bad_user_files_are_one_line_and_status_2(capsys, user_file, spec, case, message):
    d = str(user_file.parent)
    argv = ["derive", spec.format(dir=d)] + (["--case", case] if case else [])
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message.format(dir=d) in err, err


def test_a_file_that_fails_to_import(capsys, tmp_path):
    p = tmp_path / "broken.py"
    p.write_text("import not_a_module_anywhere\n")
    code, _, err = run(capsys, "derive", f"{p}:f")
    assert code == 2 and "importing" in err and "ModuleNotFoundError" in err
    p.write_text("import sys\nsys.exit(0)\n")
    code, _, err = run(capsys, "derive", f"{p}:f")
    assert code == 2 and "importing" in err and "SystemExit: 0" in err


def test_a_model_file_imports_its_sibling_modules(capsys, tmp_path):
    """As ``python model.py`` would: a model split over files in one folder."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "blocks_of_mine.py").write_text(textwrap.dedent(MY_BLOCK))
    (pkg / "model.py").write_text("from blocks_of_mine import my_block\n\n\n"
                                  "def model(m=16):\n    return my_block(m=m)\n")
    code, out, err = run(capsys, "derive", f"{pkg}/model.py:model", "--json")
    assert code == 0, err
    assert json.loads(out)["case"]["m"] == 16


def test_run_with_a_bad_graph_writes_nothing(capsys, tmp_path):
    out = tmp_path / "out"
    code, _, err = run(capsys, "run", f"{tmp_path}/none.py:f", "--dry-run", "--out", str(out))
    assert code == 2 and not out.exists()


DOT_PRODUCT = """
from superopt.dsl import DagBuilder


def dot_product(k=48):
    b = DagBuilder("dot_product", [("k", k)])
    b.output(b.matmul(b.input("x", ["k"]), b.input("y", ["k"]), "k", "k"))
    return b.build()
"""


def test_a_dry_run_with_no_lowerable_plan_says_why_and_fails(capsys, tmp_path):
    """A dot product written as a matmul leaves no axis for a GEMM tile: no plan lowers. The
    dry run exits 1, as a run with no correct candidate does, and its notes say why the
    plans did not lower (and what to write instead); before, it exited 0 with "0 lowerable,
    candidates: 0" and no reason."""
    p = tmp_path / "dot.py"
    p.write_text(textwrap.dedent(DOT_PRODUCT))
    out = tmp_path / "out"
    code, text, err = run(capsys, "run", f"{p}:dot_product", "--dry-run", "--budget", "2",
                          "--no-progress", "--out", str(out))
    assert code == 1 and "Traceback" not in err
    doc = json.loads((out / "record.json").read_text())
    assert doc["lowerable"] == 0 and doc["candidates"] == []
    (note,) = [n for n in doc["notes"] if "no plan is lowerable" in n]
    assert "d0: lowering: kernels[0]: kernel 0 is a dot product" in note
    assert "write it as a reduction" in note and note in text


def test_load_graph_api_raises_the_typed_error(user_file):
    with pytest.raises(errors.CaseError) as e:
        load_graph(f"{user_file}:not_a_graph")
    assert e.value.path == "graph"
    g = load_graph(f"{user_file}:my_block", {"n": 16})
    assert g.sizes == {"m": 64, "d": 32, "n": 16}


def test_example_models_load_at_their_defaults():
    g = load_graph(f"{MODELS / 'llama3_attention.py'}:llama3_attention")
    assert g.sizes["t_q"] == 4096 and g.output_shape == (1, 8, 4, 4096, 128)


OUTPUT_IS_INPUT = """
from superopt.dsl import DagBuilder


def identity(m=8, n=8):
    b = DagBuilder("identity", [("m", m), ("n", n)])
    b.output(b.input("X", ["m", "n"]))
    return b.build()
"""


def test_a_graph_whose_output_is_its_input_says_there_is_nothing_to_compute(capsys, tmp_path):
    """Derive called it one lowerable plan of no kernel and the dry run then failed inside
    the configuration space (``ValueError: max() arg is an empty sequence``, a hostile-user
    pass); now both say why nothing lowers."""
    p = tmp_path / "ident.py"
    p.write_text(textwrap.dedent(OUTPUT_IS_INPUT))
    code, out, _ = run(capsys, "derive", f"{p}:identity")
    assert code == 1 and out.startswith("0 lowerable derivations of 1")
    assert "output 0 (node 0) is input 'X'" in out and "nothing to compute" in out
    code, out, err = run(capsys, "run", f"{p}:identity", "--dry-run", "--out",
                         str(tmp_path / "o"))
    assert code == 1 and "nothing to compute" in out + err and "internal" not in out + err

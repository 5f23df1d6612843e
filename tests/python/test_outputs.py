"""What a run shows and leaves behind, in process: the tables (a terminal's and a log's),
the progress display, the logging levels and the log file, and the derivation pictures.

The records are real planned candidates of attention (no GPU: a dry run's rows, with their
estimates); the command-line faces of the same things are in ``test_cli.py``.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import os
import re
import shutil
import struct

import pytest

from superopt import draw, report
from superopt.derive import find, derive_all
from superopt.record import CandidateRecord, RunRecord
from superopt.run.progress import Progress
from superopt.runlog import RunLog, run_log_path
from superopt.search import plan_candidates
from superopt.workloads import WORKLOADS


@pytest.fixture(scope="module")
def attention_record(tmp_path_factory) -> RunRecord:
    """The reference attention's first 12 candidates."""
    g = WORKLOADS["attention"].graph()
    plans = plan_candidates(g, budget=12, directory=tmp_path_factory.mktemp("kernels"))
    return RunRecord(g, "float16", "dry-run", "test", {}, len(plans.derived),
                     len(plans.matched), [CandidateRecord(c) for c in plans.candidates])


# -- tables ---------------------------------------------------------------------------------

def test_distinguishing_keys():
    a = {"k0.block_m": 128, "k0.fast_math": True, "k0.stages": 2}
    b = {"k0.block_m": 128, "k0.fast_math": False, "k0.stages": 2}
    c = {"k0.block_m": 128, "k0.stages": 2, "k1.threads": 64}
    assert report.distinguishing_keys([a, b]) == ["k0.fast_math"]
    assert report.distinguishing_keys([a, b, c]) == ["k0.fast_math", "k1.threads"]
    assert report.distinguishing_keys([a, dict(a)]) == []
    assert report.common_config([a, b, c]) == {"k0.block_m": 128, "k0.stages": 2}


def test_a_piped_table_is_markdown_with_every_configuration_in_full(attention_record,
                                                                      capsys):
    report.print_table(attention_record)  # stdout is not a terminal here
    out = capsys.readouterr().out
    rows = [ln for ln in out.splitlines() if re.match(r"\| \d+ \| c\d+ ", ln)]
    assert len(rows) == len(attention_record.candidates) == 12
    for row, c in zip(rows, attention_record.candidates):
        full = " ".join(f"{k}={v}" for k, v in c.planned.config.items())
        assert f"| {c.id} ({'+'.join(c.planned.match.families)}) | {full} |" in row
    assert len({tuple(r.split(" | ")[2:4]) for r in rows}) == len(rows)  # no two alike
    assert "…" not in out
    assert out.splitlines()[0] == ("# superopt dry-run: attention {'h': 16, 't_q': 4096, "
                                   "'t_kv': 4096, 'd_h': 128} (float16)")


def test_a_terminal_table_shows_what_tells_the_candidates_apart(attention_record):
    from rich.console import Console

    # c1 made the one-warp-producer twin of c0: they differ only in a key the terminal
    # hides by default
    first = attention_record.candidates[0]
    twin = dataclasses.replace(first.planned, id="c1", config=dict(
        first.planned.config, **{"k0.lean_producer": not first.planned.config[
            "k0.lean_producer"]}))
    record = dataclasses.replace(attention_record, candidates=[
        first, CandidateRecord(twin)] + attention_record.candidates[2:])
    buf = io.StringIO()
    report.print_table(record, console=Console(file=buf, width=110))
    text = buf.getvalue()
    assert "…" not in text
    pair, apart = (first, record.candidates[1]), ["k0.lean_producer"]
    assert "lean_producer" not in report._SHOWN_KEYS
    flat = re.sub(r"[\s│]+", " ", text)
    for c in pair:
        for k in apart:  # the hidden key that differs is on both rows
            assert f"{k}={c.planned.config[k]}" in flat, (k, flat[:3000])


def test_report_lists_failures_with_their_reason(attention_record):
    from superopt.run.protocol import LowerOutcome

    rec = RunRecord(attention_record.graph, "float16", "dry-run", "test", {}, 1, 1,
                    [CandidateRecord(attention_record.candidates[0].planned,
                                     lowered=LowerOutcome("compile_error",
                                                          "LoweringError: shared memory\n"
                                                          "traceback line", 1.0))])
    md = report.markdown(rec)
    assert md.rstrip().endswith("* c0 (compile_error): LoweringError: shared memory")


# -- progress ------------------------------------------------------------------------------

def test_plain_progress_lines_have_counts_and_an_estimate(caplog, monkeypatch):
    caplog.set_level(logging.INFO, logger="superopt.progress")
    now = [100.0]
    monkeypatch.setattr("superopt.run.progress.time.monotonic", lambda: now[0])
    p = Progress("lines", every_s=5.0, min_s=2.0)
    with p, p.phase("compile", 4) as ph:
        for i in range(4):
            now[0] += 3.0  # a candidate every 3 s: a line at most every 5 s
            ph.advance(info=f"{i + 1} ok")
    with p.phase("short", 2) as quick:
        now[0] += 1.0  # ends within min_s: says nothing
        quick.advance(2)
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["compile: 2/4 (50%), 6.0 s, about 6.0 s left: 2 ok",
                     "compile: 4/4 (100%), 12 s: 4 ok",
                     "compile: 4/4 done in 12 s: 4 ok"]
    assert quick.closed


def test_announced_and_open_ended_phases(caplog):
    caplog.set_level(logging.INFO, logger="superopt.progress")
    p = Progress("lines", min_s=0.0)
    with p.phase("ceilings", announce=True):
        pass
    with p.phase("derive") as d:
        d.advance(300)
    assert [r.getMessage() for r in caplog.records][0] == "ceilings: started"
    assert re.fullmatch(r"ceilings: done in [\d.]+ s", caplog.records[1].getMessage())
    assert re.fullmatch(r"derive: 300 done in [\d.]+ s", caplog.records[2].getMessage())
    off = Progress("off")
    with off, off.phase("x", 3) as ph:
        ph.advance()
    assert len(caplog.records) == 3


def test_bars_show_count_and_eta():
    from rich.console import Console

    buf = io.StringIO()
    p = Progress("bars", console=Console(file=buf, width=120, force_terminal=True))
    with p, p.phase("compile", 3) as ph:
        for _ in range(3):
            ph.advance(info="ok so far")
    text = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", buf.getvalue())
    assert "compile" in text and "3/3" in text and "ETA" in text and "ok so far" in text
    with pytest.raises(ValueError):
        Progress("loud")


# -- logging -------------------------------------------------------------------------------

def _emit_everything() -> None:
    logging.getLogger("superopt.progress").info("progress line")
    logging.getLogger("superopt.cache").debug("detail")
    logging.getLogger("superopt.report").warning("no dot")
    logging.getLogger("superopt.worker").debug("worker said T.prim_func")
    logging.getLogger("tilelang").warning("AnnotateWarpGroupRegAlloc: something")


@pytest.mark.parametrize("verbosity,shown", [
    (-1, ["superopt: warning: no dot"]),
    (0, ["progress line", "superopt: warning: no dot"]),
    (1, ["progress line", "detail", "superopt: warning: no dot"]),
])
def test_the_terminal_gets_superopt_at_its_level_and_never_the_workers(capsys, tmp_path,
                                                                       monkeypatch,
                                                                       verbosity, shown):
    tl = logging.getLogger("tilelang")  # as TileLang sets it up: its own handler to stderr
    own = io.StringIO()
    monkeypatch.setattr(tl, "handlers", [logging.StreamHandler(own)])
    monkeypatch.setattr(tl, "propagate", False)
    with RunLog() as logs:
        logs.set_verbosity(verbosity)
        path = logs.open_file(tmp_path / "superopt.log")
        _emit_everything()
    assert capsys.readouterr().err.splitlines() == shown
    kept = path.read_text()
    for text in ("progress line", "detail", "no dot", "worker said T.prim_func",
                 "AnnotateWarpGroupRegAlloc"):
        assert text in kept
    assert own.getvalue() == ""  # TileLang's handler was set aside while the file was open
    n = len(logging.getLogger().handlers)
    _emit_everything()  # after the command: its handlers are gone, TileLang's is back
    assert len(logging.getLogger().handlers) == n and "T.prim_func" not in \
        capsys.readouterr().err
    assert own.getvalue() == "AnnotateWarpGroupRegAlloc: something\n" and not tl.propagate


def test_run_logs_are_kept_under_the_cache_root(tmp_path, monkeypatch):
    monkeypatch.setenv("SUPEROPT_CACHE", str(tmp_path))
    assert run_log_path(tmp_path / "out", "x") == tmp_path / "out" / "superopt.log"
    logs = tmp_path / "logs"
    logs.mkdir()
    for i in range(25):
        f = logs / f"run-2026-{i:02d}.log"
        f.write_text("")
        os.utime(f, (i, i))
    path = run_log_path(None, "my graph/1")
    assert path.parent == logs and path.name.endswith("-my_graph_1.log")
    left = sorted(p.name for p in logs.iterdir())
    assert len(left) == 19 and left[0] == "run-2026-06.log"  # with the new one: 20


# -- pictures ------------------------------------------------------------------------------

def _d67():
    g = WORKLOADS["attention"].graph()
    return g, find(derive_all(g), "d67").derivation


def test_the_picture_has_a_legend_and_wraps():
    g, d = _d67()
    dot = draw.derivation_dot(g, d)
    for meaning in draw.MEANINGS.values():
        assert meaning in dot
    for colour in draw.COLOURS.values():
        assert f'BGCOLOR="{colour}"' in dot  # the legend
    for where in ("global", "shared"):  # and on nodes
        assert f'fillcolor="{draw.COLOURS[where]}"' in dot
    panels = draw.panels(g, d)
    assert len(d.steps) == 13 and len(panels) == 5  # ten completion steps in one panel
    assert panels[-1][0].startswith("steps 4-13: stream_reduction [0], tile_parallel")
    assert dot.count("style=invis") == len(panels) - draw.PANELS_PER_ROW
    assert len(re.findall(r'subgraph "cluster_s\d+_" ', dot)) == len(panels)


@pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz's dot is not installed")
def test_a_long_derivation_is_not_a_strip(tmp_path):
    g, d = _d67()
    png = draw.render(draw.derivation_dot(g, d), tmp_path / "fa2.png")
    width, height = struct.unpack(">II", png.read_bytes()[16:24])
    assert width < 2500 and height < 3000, (width, height)  # was 5925 x 1013


def test_a_missing_dot_says_how_to_install_it(tmp_path, monkeypatch):
    g, d = _d67()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(RuntimeError) as e:
        draw.render(draw.derivation_dot(g, d), tmp_path / "pic.png")
    msg = str(e.value)
    assert msg.startswith("graphviz's `dot` program is not on PATH, so no picture: install")
    assert "apt-get install graphviz" in msg and "pip install" not in msg
    assert msg.endswith(f"wrote {tmp_path / 'pic.dot'} instead")
    assert (tmp_path / "pic.dot").read_text().startswith("digraph derivation {")


def test_the_check_phase_counts_correct_results_and_the_best_time():
    """One tally for both engines: ``N correct, best X µs`` as results come in."""
    from superopt.run.progress import CheckTally

    t = CheckTally()
    assert t.add("compile_error", None) == "0 correct"
    assert t.add("ok", 52.25) == "1 correct, best 52.2 µs"
    assert t.add("wrong", 10.0) == "1 correct, best 52.2 µs"  # a wrong one is no best
    assert t.add("ok", 60.0) == "2 correct, best 52.2 µs"
    assert t.add("ok", 41.0) == "3 correct, best 41.0 µs"

"""The helpers every kernel family shares: the line emitter (``superopt.lower.emit``), the
spec checks and the tile arithmetic (``superopt.lower.kernels``). No GPU, no TileLang."""

from __future__ import annotations

import pytest

from superopt.errors import LoweringError
from superopt.lower.emit import Lines
from superopt.lower.kernels.spec_checks import check_dtype, check_identifier, format_fields
from superopt.lower.kernels.tiling import ceil_div, round_up


def test_lines_indent_dedent_and_blank_lines():
    e = Lines()
    e("def build():")
    with e.indent():
        e('"""doc."""')
        e()
        e("for i in range(2):")
        e.indent()
        e("pass")
        e.dedent()
        e("return 1")
    e("x = 1")
    assert e.depth == 0
    assert e.text() == ('def build():\n    """doc."""\n\n    for i in range(2):\n'
                        "        pass\n    return 1\nx = 1\n")


def test_lines_start_depth_and_dedent_below_zero():
    e = Lines(depth=2)
    e("a")
    assert e.lines == ["        a"]
    e.dedent()
    e.dedent()
    with pytest.raises(ValueError):
        e.dedent()


def test_spec_checks():
    check_identifier("k0_gemm", "kernel name")
    for bad in ("1x", "a-b", "class", ""):
        with pytest.raises(LoweringError, match="is not a Python identifier"):
            check_identifier(bad, "kernel name")
    assert format_fields("{acc} * T.sigmoid({acc}) * {acc2}", "epilogue") == ["acc", "acc", "acc2"]
    with pytest.raises(LoweringError, match="malformed epilogue"):
        format_fields("{acc", "epilogue")
    check_dtype("bfloat16", "dtype")
    check_dtype("float32", "out_dtype", float32=True)
    with pytest.raises(LoweringError, match=r"dtype must be one of \('float16', 'bfloat16'\)"):
        check_dtype("float32", "dtype")
    with pytest.raises(LoweringError, match="got 'float64'"):
        check_dtype("float64", "out_dtype", float32=True)


def test_tiling():
    assert [ceil_div(a, 64) for a in (0, 1, 64, 65, 129)] == [0, 1, 1, 2, 3]
    assert [round_up(a, 16) for a in (1, 16, 17, 80)] == [16, 16, 32, 80]

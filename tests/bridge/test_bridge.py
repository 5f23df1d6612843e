"""The FFI bridge, built with g++ and driven through its C ABI by ``bridge_test.cpp``.

Builds ``bridge/`` with ``bridge/build.sh`` and the C++ driver into a temporary folder
(about 10 s on 2 cores), then runs the driver against

* a throw-away stub ``superopt.bridge`` written under ``tmp_path`` (Python exceptions,
  non-bytes results, many threads, a library loaded with ``RTLD_LOCAL``);
* a ``superopt`` without ``bridge`` (import failure) and a broken ``PYTHONHOME`` (the
  interpreter cannot start): every call must still answer a wire error response;
* the real package in ``python/``, with every ``tests/golden/*.request.msgpack``, once
  ``python/superopt/bridge.py`` exists.

The error responses the C++ side writes itself are compared byte for byte with
``msgpack.packb`` of the same map.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import msgpack
import pytest

REPO = Path(__file__).resolve().parents[2]
BRIDGE_DIR = REPO / "bridge"
TEST_SOURCE = Path(__file__).resolve().parent / "bridge_test.cpp"
GOLDEN_DIR = REPO / "tests" / "golden"
REAL_BRIDGE = REPO / "python" / "superopt" / "bridge.py"

RUN_TIMEOUT_S = 120
SUMMARY = re.compile(r"^(\d+) passed, (\d+) failed$")

#: The stub ``superopt/bridge.py``: deterministic answers plus requests that misbehave.
STUB_BRIDGE = '''\
"""Test stub of superopt.bridge (tests/bridge/test_bridge.py); not the real one."""
import math
import sys
import time

import msgpack


def _error(kind, message):
    return msgpack.packb({"v": 2, "kind": "error",
                          "error": {"kind": kind, "message": message, "path": ""}})


def handle(request: bytes) -> bytes:
    try:
        msg = msgpack.unpackb(request)
    except Exception as exc:  # noqa: BLE001 - any decode failure is a decode error
        return _error("decode", str(exc))
    if not isinstance(msg, dict):
        return _error("schema", "request is not a map")
    kind = msg.get("kind")
    if kind == "ping":
        # math is an extension module that does not link libpython: importing it checks
        # that libpython's symbols are global even under dlopen(RTLD_LOCAL).
        return msgpack.packb({"v": 2, "kind": "pong", "impl": "stub", "sqrt2": math.sqrt(2.0)})
    if kind == "test_sleep":
        time.sleep(0.002)  # releases the GIL mid-call
        return msgpack.packb({"v": 2, "kind": "pong"})
    if kind == "test_raise":
        raise RuntimeError(msg.get("message", "x" * msg.get("repeat", 0)))
    if kind == "test_nonbytes":
        return "not bytes"
    if kind == "test_empty":
        return b""
    if kind == "test_exit":
        raise SystemExit(3)
    if kind == "test_surrogate":
        raise RuntimeError("bad \\udcff")
    if kind == "test_info":
        return msgpack.packb({"v": 2, "kind": "info", "executable": sys.executable})
    return _error("unknown_kind", f"unknown kind {kind!r}")
'''

STUB_PONG = {"v": 2, "kind": "pong", "impl": "stub", "sqrt2": math.sqrt(2.0)}


@dataclass(frozen=True)
class Build:
    """Paths of one build of the bridge and of its two test drivers."""

    out: Path
    library: Path
    driver: Path  # linked against the library, as a Lean executable is
    driver_dlopen: Path  # loads the library with dlopen(RTLD_LOCAL) (--lib)
    python_executable: str
    link_flags: str


def _missing_toolchain() -> str | None:
    """Why the bridge cannot be built here, or None when it can."""
    if shutil.which("g++") is None:
        return "g++ not found on PATH"
    include = sysconfig.get_paths().get("include")
    if not include or not (Path(include) / "Python.h").exists():
        return f"Python.h not found (sysconfig include dir {include!r}): no embed headers"
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    ldversion = sysconfig.get_config_var("LDVERSION") or ""
    if not list(Path(libdir).glob(f"libpython{ldversion}*")):
        return f"libpython{ldversion} not found in {libdir!r}: Python's embed flags unusable"
    try:
        import pybind11  # noqa: F401
    except ImportError:
        return "pybind11 is not installed"
    return None


def _run(args: list[str], env: dict[str, str] | None = None, timeout: float = RUN_TIMEOUT_S):
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout,
                          check=False)


def _gxx(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen(["g++", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def _wait(proc: subprocess.Popen, what: str) -> None:
    output, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, f"{what} failed:\n{output}"


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Build:
    """The library built by bridge/build.sh and the driver built against it."""
    reason = _missing_toolchain()
    if reason is not None:
        pytest.skip(f"cannot build the bridge: {reason}")
    out = tmp_path_factory.mktemp("bridge-build")
    driver_flags = ["-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", f"-I{BRIDGE_DIR}"]
    # The drivers compile while build.sh compiles the library (two cores).
    driver_object = _gxx([*driver_flags, "-c", str(TEST_SOURCE), "-o", str(out / "driver.o")])
    dlopen_driver = _gxx([*driver_flags, "-DSUPEROPT_BRIDGE_TEST_NO_LINK", str(TEST_SOURCE),
                          "-o", str(out / "bridge_test_dlopen"), "-ldl", "-pthread"])
    env = dict(os.environ, PYTHON=sys.executable)
    result = _run(["bash", str(BRIDGE_DIR / "build.sh"), "--out", str(out)], env=env,
                  timeout=300)
    assert result.returncode == 0, f"build.sh failed:\n{result.stdout}\n{result.stderr}"
    link_flags = result.stdout.strip().splitlines()[-1]
    _wait(driver_object, "compiling bridge_test.cpp")
    _wait(dlopen_driver, "compiling bridge_test.cpp (dlopen)")
    # Linked exactly with the flags build.sh prints, as a Lean executable would be.
    _wait(_gxx([str(out / "driver.o"), "-o", str(out / "bridge_test"), *link_flags.split(),
                "-pthread"]), "linking bridge_test")
    return Build(out=out, library=out / "libsuperopt_bridge.so", driver=out / "bridge_test",
                 driver_dlopen=out / "bridge_test_dlopen",
                 python_executable=sys.executable, link_flags=link_flags)


@pytest.fixture()
def stub_path(tmp_path: Path) -> Path:
    """A folder holding a stub ``superopt`` package whose ``bridge.handle`` is STUB_BRIDGE."""
    root = tmp_path / "stub"
    package = root / "superopt"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('"""Test stub of the superopt package."""\n')
    (package / "bridge.py").write_text(STUB_BRIDGE)
    return root


def _package_without_bridge(tmp_path: Path) -> Path:
    """A folder holding a ``superopt`` package that has no ``bridge`` module."""
    root = tmp_path / "nobridge"
    (root / "superopt").mkdir(parents=True, exist_ok=True)
    (root / "superopt" / "__init__.py").write_text('"""A superopt without bridge.py."""\n')
    return root


def _env(python_path: Path | str, **extra: str) -> dict[str, str]:
    """The driver's environment: SUPEROPT_PYTHONPATH set, no inherited overrides."""
    env = {k: v for k, v in os.environ.items()
           if k not in {"SUPEROPT_PYTHON_EXECUTABLE", "PYTHONHOME", "PYTHONSTARTUP"}}
    env["SUPEROPT_PYTHONPATH"] = str(python_path)
    env.update(extra)
    return env


def _check_output(result: subprocess.CompletedProcess, expect_failed: int = 0) -> list[str]:
    """The driver's lines, after asserting its summary and exit status."""
    lines = result.stdout.strip().splitlines()
    detail = f"stdout:\n{result.stdout}\nstderr (tail):\n{result.stderr[-4000:]}"
    assert lines, f"no output from the driver\n{detail}"
    match = SUMMARY.match(lines[-1])
    assert match, f"last line is not 'N passed, N failed'\n{detail}"
    passed, failed = int(match.group(1)), int(match.group(2))
    fail_lines = [line for line in lines if line.startswith("FAIL ")]
    assert failed == expect_failed == len(fail_lines), detail
    assert passed == sum(line.startswith("PASS ") for line in lines), detail
    assert result.returncode == (0 if expect_failed == 0 else 1), detail
    return lines


def _passed(lines: list[str]) -> set[str]:
    return {line[len("PASS "):] for line in lines if line.startswith("PASS ")}


def _golden_pair(folder: Path, name: str, request: dict, response: bytes | None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    request_path = folder / f"{name}.request.msgpack"
    request_path.write_bytes(msgpack.packb(request))
    if response is not None:
        (folder / f"{name}.response.msgpack").write_bytes(response)
    return request_path


def _error_map(message: str) -> dict:
    return {"v": 2, "kind": "error",
            "error": {"kind": "internal", "message": message, "path": ""}}


def test_stub_suite(build: Build, stub_path: Path, tmp_path: Path) -> None:
    """ping, malformed requests, golden files, threads, Python failures: all answered."""
    golden = tmp_path / "golden"
    with_response = _golden_pair(golden, "ping", {"v": 2, "kind": "ping"},
                                 msgpack.packb(STUB_PONG))
    without_response = _golden_pair(golden, "unknown", {"v": 2, "kind": "nope"}, None)
    dump = tmp_path / "dump"
    dump.mkdir()
    # Two entries, first one first: the stub must shadow a superopt without bridge.py.
    python_path = f"{stub_path}:{_package_without_bridge(tmp_path)}"
    result = _run([str(build.driver), "--stub", "--expect-executable", build.python_executable,
                   "--dump", str(dump), str(with_response), str(without_response)],
                  env=_env(python_path))
    lines = _check_output(result)
    assert {
        "init", "ping", "malformed_c1", "empty_request", "not_a_map", "null_out_pointers",
        "null_request_with_length", "threads_8x25", "python_exception", "python_returns_str",
        "python_returns_empty", "python_system_exit", "python_surrogate_message",
        "python_long_message", "alive_after_python_failures", "sys_executable",
        f"golden {with_response}",
        f"golden {without_response} (no golden response: shape only)",
    } <= _passed(lines)

    # What the stub answered arrives unchanged.
    assert (dump / "ping.msgpack").read_bytes() == msgpack.packb(STUB_PONG)

    # The C++ msgpack writer agrees with msgpack-python byte for byte: every string form
    # (fixstr, str8, str16, str32) and the UTF-8 repair.
    writer_cases = sorted(dump.glob("writer_*.msgpack"))
    assert len(writer_cases) == 14
    for case in writer_cases:
        raw = case.with_suffix(".message").read_bytes()
        expected = msgpack.packb(_error_map(raw.decode("utf-8", "replace")))
        assert case.read_bytes() == expected, case.name

    # Error responses written by the bridge itself are canonical msgpack of the same map.
    for name in ["python_exception", "python_returns_str", "python_returns_empty",
                 "python_system_exit", "python_surrogate_message", "python_long_message"]:
        data = (dump / f"{name}.msgpack").read_bytes()
        obj = msgpack.unpackb(data)
        assert list(obj) == ["v", "kind", "error"], name
        assert list(obj["error"]) == ["kind", "message", "path"], name
        assert msgpack.packb(obj) == data, name
    long_message = msgpack.unpackb((dump / "python_long_message.msgpack").read_bytes())
    assert "x" * 70000 in long_message["error"]["message"]  # a str32 message
    exc = msgpack.unpackb((dump / "python_exception.msgpack").read_bytes())
    assert exc["error"]["message"].startswith("superopt.bridge.handle raised RuntimeError: boom")


def test_golden_mismatch_is_reported(build: Build, stub_path: Path, tmp_path: Path) -> None:
    """A response that differs from its golden file fails the driver (exit status 1)."""
    wrong = _golden_pair(tmp_path / "golden", "ping", {"v": 2, "kind": "ping"},
                         msgpack.packb({"v": 2, "kind": "pong"}))
    result = _run([str(build.driver), str(wrong)], env=_env(stub_path))
    lines = _check_output(result, expect_failed=1)
    assert any(line.startswith(f"FAIL golden {wrong}: response differs") for line in lines)


def test_stub_suite_dlopen_local(build: Build, stub_path: Path) -> None:
    """The same checks with the library dlopen'ed RTLD_LOCAL (extension modules still load),
    the stub found through superopt_bridge_init's argument instead of the environment."""
    env = _env("")
    del env["SUPEROPT_PYTHONPATH"]
    result = _run([str(build.driver_dlopen), "--lib", str(build.library), "--stub",
                   "--init-path", str(stub_path),
                   "--expect-executable", build.python_executable], env=env)
    lines = _check_output(result)
    assert {"ping", "threads_8x25", "python_exception"} <= _passed(lines)


def test_import_failure_is_an_error_response(build: Build, tmp_path: Path) -> None:
    """A superopt without bridge.py: status 'import' and an error response, every call."""
    result = _run([str(build.driver), "--expect-import-failure"],
                  env=_env(_package_without_bridge(tmp_path)))
    lines = _check_output(result)
    assert {"import_failure_0", "import_failure_1"} <= _passed(lines)


def test_interpreter_start_failure_is_an_error_response(build: Build, tmp_path: Path) -> None:
    """An interpreter that cannot start (no stdlib): status 'init', the process lives."""
    result = _run([str(build.driver), "--expect-init-failure"],
                  env=_env(tmp_path, PYTHONHOME=str(tmp_path / "no-such-python-home")))
    lines = _check_output(result)
    assert {"init_fails", "init_failure_0", "init_failure_1"} <= _passed(lines)


@pytest.mark.skipif(not REAL_BRIDGE.exists(),
                    reason="python/superopt/bridge.py does not exist yet (written by the "
                           "wire engineer); the lead removes this skip once it lands")
def test_real_package(build: Build) -> None:
    """The real superopt.bridge: ping, malformed input, threads, and every golden vector."""
    golden = sorted(str(p) for p in GOLDEN_DIR.glob("*.request.msgpack"))
    result = _run([str(build.driver), *golden], env=_env(REPO / "python"))
    lines = _check_output(result)
    assert {"init", "ping", "malformed_c1", "empty_request", "threads_8x25"} <= _passed(lines)
    for request in golden:
        assert any(line.startswith(f"PASS golden {request}") for line in lines), request


def test_library_exports_only_the_abi(build: Build) -> None:
    """No libstdc++/pybind11 symbol leaks out to interpose on the host's (Lean's libc++)."""
    if shutil.which("nm") is None:
        pytest.skip("nm not found on PATH")
    result = _run(["nm", "-D", "--defined-only", str(build.library)])
    assert result.returncode == 0, result.stderr
    names = sorted(line.split()[-1] for line in result.stdout.splitlines() if line.strip())
    assert names == ["superopt_bridge_call", "superopt_bridge_free", "superopt_bridge_init",
                     "superopt_bridge_status_name"]


def test_build_script_prints_link_flags(build: Build) -> None:
    """--print-link-flags prints one line, the flags a lakefile passes to the linker."""
    result = _run(["bash", str(BRIDGE_DIR / "build.sh"), "--out", str(build.out),
                   "--print-link-flags"], env=dict(os.environ, PYTHON=sys.executable))
    assert result.returncode == 0, result.stderr
    expected = f"-L{build.out} -lsuperopt_bridge -Wl,-rpath,{build.out}"
    assert result.stdout == expected + "\n"
    assert build.link_flags == expected


def test_header_is_plain_c(build: Build, tmp_path: Path) -> None:
    """superopt_bridge.h compiles as strict C99, as the Lean shim and other C hosts need."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler (gcc/cc) on PATH")
    source = tmp_path / "uses_header.c"
    source.write_text('#include "superopt_bridge.h"\n'
                      "int main(void) {\n"
                      "    int (*call)(const uint8_t *, size_t, uint8_t **, size_t *) =\n"
                      "        superopt_bridge_call;\n"
                      "    return call == superopt_bridge_call ? SUPEROPT_BRIDGE_OK : 1;\n"
                      "}\n")
    result = _run([cc, "-std=c99", "-pedantic", "-Wall", "-Wextra", "-Werror",
                   f"-I{BRIDGE_DIR}", "-fsyntax-only", str(source)])
    assert result.returncode == 0, result.stderr

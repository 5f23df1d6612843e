"""Where a graph comes from: a workload name, a user's ``FILE.py:FUNCTION``, or a wire-format
``GRAPH.msgpack``.

* ``attention`` (any name of :data:`superopt.workloads.WORKLOADS`): the reference case,
  with ``--case`` sizes overriding axes;
* ``path/to/model.py:my_block``: ``my_block(**sizes)`` must return a
  :class:`~superopt.ir.dag.Graph` built with the DSL; the ``--case`` sizes become its
  keyword arguments (so its defaults are the default case);
* ``graph.msgpack``: a graph map of the wire format (``docs/wire.md`` 4.1); ``--case``
  rebinds its axes.

Every way it can go wrong is one :class:`~superopt.errors.CaseError` (CLI exit status 2)
naming the problem, or the graph's own typed error.

Owns: resolving a graph specification. Imports the IR and the wire's graph decoder.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from pathlib import Path
from typing import Mapping

from .errors import CaseError, SuperoptError
from .ir.dag import Graph
from .ir.workloads import WORKLOADS, case_size, get_workload
from .wire import codec, messages


def load_graph(spec: str, sizes: Mapping[str, int | str] | None = None) -> Graph:
    """The graph that ``spec`` names, at ``sizes`` (see the module docstring). A size may be
    given as written on the command line (``"256"``, :func:`~superopt.ir.workloads.case_entries`):
    a workload or a ``FILE.py:FUNCTION`` then names a size it does not take before the
    values are checked (:func:`~superopt.ir.workloads.case_size`).

    Raises:
        CaseError: a file that does not exist or cannot be imported, a function that is
            missing, raises, takes other parameters than ``sizes`` names, or returns
            something that is not a Graph; a ``.msgpack`` that is not a graph map; a size
            that is not an integer in [1, 2^31).
        GraphError: the graph itself is ill formed (shape inference).
    """
    sizes = dict(sizes or {})
    if ":" in spec and not spec.endswith(".msgpack") and spec not in WORKLOADS:
        file, _, func = spec.rpartition(":")
        return _from_python(Path(file), func, sizes)
    if spec in WORKLOADS:  # (an axis it lacks named before a value is judged)
        get_workload(spec).check_axes(sizes)
        return get_workload(spec).graph(**_sizes(sizes))
    sizes = _sizes(sizes)
    if spec.endswith(".msgpack"):
        return _from_msgpack(Path(spec), sizes)
    raise CaseError(f"{spec!r} is neither a workload ({', '.join(WORKLOADS)}), nor "
                    "FILE.py:FUNCTION, nor a GRAPH.msgpack", path="graph")


def _sizes(sizes: dict) -> dict[str, int]:
    """``sizes`` with each value written as text checked and made an integer."""
    return {k: case_size(k, v) if isinstance(v, str) else v for k, v in sizes.items()}


def _from_msgpack(path: Path, sizes: dict) -> Graph:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise CaseError(f"cannot read {str(path)!r}: {e.strerror or e}", path="graph") from None
    try:
        g = messages.graph_from_wire(codec.decode(data))
    except SuperoptError as e:
        raise CaseError(f"{path}: not a graph map: {e}", path="graph") from None
    return g.with_sizes(**sizes) if sizes else g


def _from_python(path: Path, func: str, sizes: dict) -> Graph:
    if path.suffix != ".py":
        raise CaseError(f"{str(path)!r} is not a .py file (expected FILE.py:FUNCTION)",
                        path="graph")
    if not path.is_file():
        raise CaseError(f"no such file {str(path)!r}", path="graph")
    name = f"superopt_user_graph_{abs(hash(str(path.resolve())))}"
    # the file's folder on the path, as `python FILE.py` would have it: a model file may
    # import its sibling modules
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    except (Exception, SystemExit) as e:  # noqa: BLE001 - the user's file failed (or
        # called sys.exit, which must not become superopt's own exit status): one line
        sys.modules.pop(name, None)
        raise CaseError(f"importing {str(path)!r} failed: {type(e).__name__}: {e}",
                        path="graph") from None
    fn = getattr(mod, func, None)
    if not callable(fn):
        known = [n for n, v in vars(mod).items() if inspect.isfunction(v)
                 and v.__module__ == name and not n.startswith("_")]
        raise CaseError(f"{path} has no function {func!r}; its functions: "
                        f"{', '.join(known) or 'none'}", path="graph")
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        params = {}
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    unknown = sorted(set(sizes) - set(params)) if not takes_any else []
    if unknown:
        raise CaseError(f"{func}() takes no size {unknown[0]!r}; its parameters are "
                        f"{', '.join(params) or 'none'}", path="--case")
    sizes = _sizes(sizes)
    try:
        g = fn(**sizes)
    except SuperoptError:
        raise
    except (Exception, SystemExit) as e:  # noqa: BLE001 - sys.exit(N) too: not our status
        raise CaseError(f"{func}(**{sizes}) raised {type(e).__name__}: {e}",
                        path="graph") from None
    if not isinstance(g, Graph):
        raise CaseError(f"{func}() returned {type(g).__name__}, not a superopt Graph (build "
                        "one with superopt.dsl.DagBuilder)", path="graph")
    return g

"""The launches one kernel of a plan may declare when it is not one launch over its
matcher's views: a split kernel's partial pass and its combine, sharing scratch buffers
(attention's split-KV, a column reduction split along its reduced axis).

A family's configuration declares them with ``launch_plan(spec) -> LaunchPlan | None``;
:func:`superopt.lower.module.module_source` compiles ``funcs``, allocates ``scratch`` when the
module loads and runs ``calls`` in order.

Owns: these records. Imports nothing of the project.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ScratchBuffer:
    """A device buffer a kernel's launches share, allocated once when the module loads.

    Attributes:
        name: its name (unique within the kernel's launches).
        shape: its shape; ``dtype``: a torch dtype name (``"float32"``).
    """

    name: str
    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class LaunchCall:
    """One launch: prim_func ``func`` with ``args``, each ``("param", i, view)`` (the
    kernel's i-th input, viewed), ``("output", view)`` (its first output, viewed),
    ``("outputs",)`` (every output in the view the matcher gave it) or ``("scratch", name)``."""

    func: str
    args: tuple


@dataclass(frozen=True)
class LaunchPlan:
    """What the generated module's launcher does for one kernel: compile ``funcs`` (each
    built by ``build_<func>()`` in the kernel's source), allocate ``scratch``, and run
    ``calls`` in order. Read by :func:`superopt.lower.module.module_source`."""

    funcs: tuple[str, ...]
    scratch: tuple[ScratchBuffer, ...]
    calls: tuple[LaunchCall, ...]

"""The derivation records: a rewrite :class:`Step`, a :class:`Derivation` (the ordered steps
from a literal graph) and :class:`Derived` (a derivation with the plan it produces).

Owns: the records that travel from the enumerator to the wire, the lowering and the
report. Must not import the rules, the lowering or anything later.

Mirrors ``Step`` and ``Derivation`` of ``Lean/Superopt/Wire/Messages.lean``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from .plan import Plan

@dataclass(frozen=True)
class Step:
    """One rewrite step: the Lean theorem ``rule`` applied at ``site`` with ``params``.

    ``site`` is a tuple of node ids (int) and axis names (str); ``params`` maps a name to an
    int, float, str or bool and is kept sorted by key. Steps are hashable.
    """

    rule: str
    site: tuple = ()
    params: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "site", tuple(self.site))
        object.__setattr__(self, "params", {k: self.params[k] for k in sorted(self.params)})

    def __hash__(self) -> int:
        return hash((self.rule, self.site, tuple(self.params.items())))


@dataclass(frozen=True)
class Derivation:
    """A derivation of ``workload``: the steps applied in order to its literal graph.

    ``id`` names it in results (``candidate.derivation``), e.g. ``"d3"`` or a content hash.
    """

    workload: str
    id: str
    steps: tuple[Step, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "steps", tuple(self.steps))


@dataclass(frozen=True)
class Derived:
    """A derivation together with the plan it produces (what the enumerator returns)."""

    derivation: Derivation
    plan: Plan

"""What may be rewritten into what: kernel plans, the rewrite rules, the enumerator.

* :mod:`superopt.derive.plan`: :class:`Plan` and :class:`Kernel`, the state a derivation
  acts on;
* :mod:`superopt.derive.rules`: the rule table (each rule names its Lean soundness
  theorem); the rules themselves by kind in :mod:`~superopt.derive.algebra` (graph
  rewrites, through :mod:`~superopt.derive.rewrite`), :mod:`~superopt.derive.fusion` and
  :mod:`~superopt.derive.online` (kernel merges), :mod:`~superopt.derive.schedule`
  (completion: grid and stream);
* :mod:`superopt.derive.enumerator`: :func:`derive_all`, :func:`replay`, :func:`find`;
* :mod:`superopt.derive.derivation`: the :class:`Step`, :class:`Derivation` and
  :class:`Derived` records.

The second stage: imports the IR only. Mirrors ``Lean/Superopt/Derive/``.
"""

from .derivation import Derivation, Derived, Step
from .enumerator import (DEFAULT_MAX_DEPTH, DEFAULT_MAX_PLANS, Enumeration, complete,
                         derive_all, enumerate_derivations, explore, find, replay)

__all__ = ["Derivation", "Derived", "Step", "DEFAULT_MAX_DEPTH", "DEFAULT_MAX_PLANS",
           "Enumeration", "complete", "derive_all", "enumerate_derivations", "explore", "find",
           "replay"]

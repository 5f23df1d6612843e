"""Verification: the machine checks of the rules and derivations that run in Python.

* :mod:`superopt.verify.interpreter`: a tile interpreter that executes a kernel plan as the
  lowered kernels do (tiles, streamed accumulators, online rescaling), in float64 or on
  symbolic arrays; the tiling of an axis is its ``tiling`` argument;
* :mod:`superopt.verify.laws`: the law class ``Superopt.ScalarLaws`` in sympy and the
  symbolic ops the evaluators run on;
* :mod:`superopt.verify.prover`: obligations proved under the laws (sympy, z3) or refuted
  with a counterexample;
* :mod:`superopt.verify.statements`: each rule's identity as its Lean theorem states it,
  with its bound;
* :mod:`superopt.verify.implementation`: the interpreter run symbolically on every rule
  application, each output proved equal to the graph's;
* :mod:`superopt.verify.mutants`: a deliberately wrong implementation per rule, refuted;
* :mod:`superopt.verify.rule_check`: :func:`~superopt.verify.rule_check.check_rule`, the
  three checks of one rule in one report;
* :mod:`superopt.verify.step_checker`: the twin of Lean's step checker
  (``Superopt.Verify.verify``): a derivation replayed and every step checked —
  ``validRewrite`` for an algebraic rewrite (:mod:`superopt.verify.validate`,
  :mod:`superopt.verify.root_patterns`, on the Lean view of a graph,
  :mod:`superopt.verify.lean_graph`), an unchanged graph for a schedule step — then
  ``planWF`` on the plan (:mod:`superopt.verify.plan_wf`). Needs no solver.

The last stage: it may import every earlier one, and nothing imports it. It is the only
place that imports sympy and z3 (test extras: ``pip install -e '.[test]'``); of its modules
only the interpreter and the step checker run without them. This package module imports
none of them.
"""

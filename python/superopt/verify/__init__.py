"""Verification: the machine checks of the rules and derivations that run in Python.

* :mod:`superopt.verify.interpreter`: a tile interpreter that executes a kernel plan as the
  lowered kernels do (tiles, streamed accumulators, online rescaling), in float64 or on
  symbolic arrays;
* :mod:`superopt.verify.symbolic`: each rule's identity proved with sympy/z3 as its Lean
  theorem states it, the interpreter run symbolically on every rule application, and a
  refuted mutant per rule.

The last stage: it may import every earlier one, and nothing imports it. It is the only
place that imports sympy and z3 (test extras: ``pip install -e '.[test]'``).
"""

"""The intermediate representation: the graph over named axes, its DSL, its meaning.

* :mod:`superopt.ir.dag`: :class:`Graph`, :class:`Node`, shape inference;
* :mod:`superopt.ir.dsl`: :class:`DagBuilder`, the builder users write graphs with;
* :mod:`superopt.ir.semantics`: the float64 reference (:func:`evaluate`) and seeded inputs;
* :mod:`superopt.ir.facts`: FLOPs, fewest bytes and input scales, computed from a graph;
* :mod:`superopt.ir.workloads`: the five reference workloads (examples, not special cases).

The first stage: imports nothing of the package beyond :mod:`superopt.errors` and
:mod:`superopt.dtypes`. Mirrors ``Lean/Superopt/IR/``.
"""

"""The rewrite rules. Each has a stable id, ``sites(plan)`` and ``apply(plan, site)``.

Every rule names the Lean theorem that proves the identity it relies on (``docs/rules.md``
lists them with the identity, and ``tests/python/test_symbolic.py`` checks each identity
with a solver). Sites are tuples of ints (node ids, kernel indices) and strings (axes):
that is how they travel in a derivation step on the wire.

Algebraic rules rewrite the graph and act only on an unscheduled plan (one kernel per node):

* ``stabilize_softmax`` — site ``(P,)``, ``P = E / Z``, ``E = exp S``, ``Z = Σ_a E``:
  ``exp S / Σ exp S  →  exp(S − M) / Σ exp(S − M)`` with ``M = max_a S``.
* ``factor_row_scale`` — site ``(O, i)``: operand ``i`` of matmul ``O`` is ``X·s`` (or ``X/s``)
  with ``s`` free of the contracted axis: ``(X·s) @ W → (X @ W)·s`` (FlashNorm).
* ``exp_to_exp2`` — site ``(E,)``, ``E = exp x``: ``exp x → exp2(x · log2 e)``.
* ``distribute_matmul`` — site ``(O, i)``: operand ``i`` is ``X ± v`` with ``v`` free of the
  contracted axis ``k``: ``(X − v) @ W → X @ W − v · Σ_k W`` (LayerNorm's mean folded past
  the GEMM).
* ``distribute_bias`` — site ``(O, i)``: the same with ``v`` along ``k`` (a bias):
  ``(X + b) @ W → X @ W + b @ W``. Enabling.
* ``commute_row_scale`` — site ``(O, i)``: operand ``(X ⋆ s) · c`` with ``s`` a row scale and
  ``c`` along ``k``: ``→ (X · c) ⋆ s``, so ``factor_row_scale`` applies. Enabling.
* ``move_contracted_scale`` — site ``(O, i)``: operand ``a · c`` with ``c`` along ``k`` and the
  other operand an input: ``(a · c) @ W → a @ (W · c)`` (a norm's gain onto the weight).
  Enabling.

An *enabling* rule (``Rule.enabling``) only exposes another algebraic rewrite: its plan is
no candidate, and the enumerator continues from it with the algebraic rules only.

Schedule rules change the kernels, never the graph:

* ``online_softmax`` — site ``(O,)``, ``O = E @_a V`` over a stabilised softmax numerator
  whose scores are an elementwise chain of one matmul (``S``, ``S·c``, a masked
  ``select(band, S·c, −∞)``): one kernel streaming ``a`` with running max and sum, the
  scores computed per tile, the accumulator rescaled (FA2).
* ``share_operand_load`` — site ``(k1, k2)``: two kernels reducing over the same axis and
  reading the same operand merge and load each operand tile once (dual GEMM; RMS sum of
  squares in the GEMM's loop).
* ``fuse_prologue`` — site ``(p, c)``: an elementwise kernel whose only reader is kernel
  ``c`` is computed on ``c``'s loaded tiles.
* ``fuse_epilogue`` — site ``(p, c)``: an elementwise kernel reading kernel ``p`` (a kernel
  with a reduction; elementwise into elementwise is ``fuse_elementwise``) over the same
  domain runs in ``p``'s epilogue on its fragments; its other reads are row vectors or,
  when ``p`` is a GEMM (a matmul, not online), tensors over a suffix of the domain's axes:
  column vectors (the bias of ``X @ W + b``), blocks of columns (a bias ``[h, e]`` of
  ``X @ W[d, h, e]``) and the whole domain (the residual of ``X + H @ W``).
* ``fuse_elementwise`` — site ``(k,)``: elementwise kernel ``k`` absorbs every elementwise
  kernel of its domain it reads or that reads it, transitively, in one step.
* ``fuse_gemm_chain`` — site ``(p, c)``: back-to-back GEMMs; ``p`` (a matmul over ``k`` and
  its epilogue, read only by ``c``) joins ``c`` (a matmul contracting ``p``'s axis ``h``);
  completion streams ``h`` and the intermediate never leaves the chip.
* ``fuse_contraction`` — site ``(p, c)``: ``c`` sums over an axis ``h`` that both operands of
  ``p``'s matmul (over ``e``) carry, ``p`` computing that matmul (or a sum of it over another
  such axis), read only by ``c``: one kernel contracting ``(h, e)`` (``Σ_h O[b, h, t, e] ·
  W[h, e, d]``, a multi-head output projection; ``Σ_g Σ_r`` in two steps); completion
  streams ``h`` and the per-head products never leave the chip.
* ``split_kernel`` — site ``(k, n)``: a per-row reduction ``n`` of kernel ``k`` and the
  per-row chain after it move to their own kernel and are materialised (FlashNorm's
  two-kernel form).
* ``fuse_rows`` — site ``(p, c)``: two kernels that keep whole rows of one axis ``a``
  (softmax's max, sum and divide; LayerNorm's mean and variance) merge; the kernel streams
  ``a`` inside each row, one pass per dependent reduction, and its grid tiles the others.
* ``tile_parallel`` — site ``(k, axis)``: tile a parallel axis (one of the domain's last
  two) of kernel ``k`` onto the grid.
* ``stream_reduction`` — site ``(k,)``: stream kernel ``k``'s reduction axis in tiles.

The matches and rewrites live by kind: :mod:`~superopt.derive.algebra` (graph rewrites),
:mod:`~superopt.derive.fusion` and :mod:`~superopt.derive.online` (kernel merges),
:mod:`~superopt.derive.schedule` (completion).

Owns: the rule table (ids, Lean theorems, search order). Imports the derive stage only; it
must not import the lowering (a rule is a fact about programs, not about kernels).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

from ..errors import DerivationError
from ..ir.dag import Graph
from .algebra import (commute_row_scale_rewrite, commute_row_scale_sites, distribute_bias_sites,
                      distribute_matmul_rewrite, distribute_matmul_sites, exp_to_exp2_rewrite,
                      exp_to_exp2_sites, factor_row_scale_rewrite, factor_row_scale_sites,
                      move_contracted_scale_rewrite, move_contracted_scale_sites,
                      stabilize_softmax_rewrite, stabilize_softmax_sites)
from .fusion import (fuse_contraction, fuse_contraction_sites, fuse_elementwise,
                     fuse_elementwise_sites, fuse_epilogue, fuse_epilogue_sites, fuse_gemm_chain,
                     fuse_gemm_chain_sites, fuse_prologue, fuse_prologue_sites, fuse_rows,
                     fuse_rows_sites, share_operand_load, share_operand_load_sites, split_kernel,
                     split_kernel_sites)
from .online import online_softmax, online_softmax_sites
from .plan import Plan, initial_plan
from .rewrite import RewriteWitness
from .schedule import (stream_reduction, stream_reduction_sites, tile_parallel,
                       tile_parallel_sites)

Site = tuple


@dataclass(frozen=True)
class Rule:
    """A rewrite rule: ``sites(plan)`` lists where it applies, ``apply`` rewrites there."""

    id: str
    theorem: str
    sites: Callable[[Plan], list[Site]]
    apply_fn: Callable[[Plan, Site], Plan]
    algebraic: bool
    #: An enabling rewrite only exposes another algebraic rewrite (a gain commuted past a
    #: row scale, a bias split off): its plan is no candidate, and the enumerator continues
    #: from it with the algebraic rules only.
    enabling: bool = False
    #: For an algebraic rule, the rewritten graph with its witness (``apply_fn`` is the
    #: initial plan of that graph; Lean: ``Rule.rewriteW``); ``None`` for schedule rules.
    rewrite_w: Callable[[Plan, Site], tuple[Graph, RewriteWitness]] | None = None

    def apply(self, plan: Plan, site: Site) -> Plan:
        """Apply at ``site``. Raises :class:`DerivationError` if the rule does not apply there."""
        site = tuple(site)
        if site not in self.sites(plan):
            raise DerivationError(f"rule {self.id} does not apply at site {list(site)}",
                                  path="site")
        return self.apply_fn(plan, site)


def _initial_plan_of(rewrite_w: Callable[[Plan, Site], tuple[Graph, RewriteWitness]],
                     plan: Plan, site: Site) -> Plan:
    """An algebraic rule's plan: the initial plan of its rewritten graph (Lean:
    ``Rule.applyFn``)."""
    return initial_plan(rewrite_w(plan, site)[0])


def _algebraic(rule_id: str, sites: Callable[[Plan], list[Site]],
               rewrite_w: Callable[[Plan, Site], tuple[Graph, RewriteWitness]],
               enabling: bool = False) -> Rule:
    """An algebraic rule from its sites and its witnessed rewrite; its theorem is
    ``Superopt.<id>_sound``."""
    return Rule(rule_id, f"Superopt.{rule_id}_sound", sites,
                functools.partial(_initial_plan_of, rewrite_w), True, enabling=enabling,
                rewrite_w=rewrite_w)


RULES: dict[str, Rule] = {r.id: r for r in (
    _algebraic("stabilize_softmax", stabilize_softmax_sites, stabilize_softmax_rewrite),
    _algebraic("factor_row_scale", factor_row_scale_sites, factor_row_scale_rewrite),
    _algebraic("exp_to_exp2", exp_to_exp2_sites, exp_to_exp2_rewrite),
    _algebraic("distribute_matmul", distribute_matmul_sites, distribute_matmul_rewrite),
    _algebraic("distribute_bias", distribute_bias_sites, distribute_matmul_rewrite,
               enabling=True),
    _algebraic("commute_row_scale", commute_row_scale_sites, commute_row_scale_rewrite,
               enabling=True),
    _algebraic("move_contracted_scale", move_contracted_scale_sites,
               move_contracted_scale_rewrite, enabling=True),
    Rule("online_softmax", "Superopt.online_softmax_sound",
         online_softmax_sites, online_softmax, False),
    Rule("share_operand_load", "Superopt.share_operand_load_sound",
         share_operand_load_sites, share_operand_load, False),
    Rule("fuse_prologue", "Superopt.fuse_prologue_sound", fuse_prologue_sites, fuse_prologue,
         False),
    Rule("fuse_epilogue", "Superopt.fuse_epilogue_sound", fuse_epilogue_sites, fuse_epilogue,
         False),
    Rule("split_kernel", "Superopt.split_kernel_sound", split_kernel_sites, split_kernel, False),
    Rule("fuse_rows", "Superopt.fuse_rows_sound", fuse_rows_sites, fuse_rows, False),
    Rule("fuse_elementwise", "Superopt.fuse_elementwise_sound",
         fuse_elementwise_sites, fuse_elementwise, False),
    Rule("fuse_gemm_chain", "Superopt.fuse_gemm_chain_sound",
         fuse_gemm_chain_sites, fuse_gemm_chain, False),
    Rule("fuse_contraction", "Superopt.fuse_contraction_sound",
         fuse_contraction_sites, fuse_contraction, False),
    Rule("tile_parallel", "Superopt.tile_parallel_sound", tile_parallel_sites, tile_parallel,
         False),
    Rule("stream_reduction", "Superopt.stream_reduction_sound",
         stream_reduction_sites, stream_reduction, False),
)}

#: Rules the enumerator branches over, in this order (tile/stream come from completion).
SEARCH_RULES = ("stabilize_softmax", "factor_row_scale", "exp_to_exp2", "distribute_matmul",
                "distribute_bias", "commute_row_scale", "move_contracted_scale", "online_softmax",
                "share_operand_load", "fuse_prologue", "fuse_epilogue", "split_kernel",
                "fuse_rows", "fuse_elementwise", "fuse_gemm_chain", "fuse_contraction")


def get_rule(rule_id: str) -> Rule:
    """The rule with this id. Raises :class:`DerivationError` naming the known ids."""
    try:
        return RULES[rule_id]
    except KeyError:
        raise DerivationError(f"unknown rule {rule_id!r}; known: {', '.join(RULES)}",
                              path="rule") from None

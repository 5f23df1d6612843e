"""Configurations of a matched plan: the search space, and its flat wire form.

A plan's configuration is one family configuration per kernel. Its wire form is a flat map
``{"k0.block_m": 128, "k0.stages": 2, "k1.block_rows": 4, ...}`` (``docs/wire.md``, config
maps), which :func:`flatten_config` and :func:`unflatten_config` convert.

Owns: the whole-plan space and the flat form. Must not import module emission.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import MISSING, asdict, fields, replace

from ..errors import LoweringError
from .families import FAMILIES
from .lowering import KernelLowering, PlanMatch


def kernel_config_space(kl: KernelLowering) -> list:
    """The pruned, best-first configurations of one matched kernel."""
    return FAMILIES[kl.family].config_space(kl.spec)


#: Configurations the cost model prices within this factor of the kernel's best count as
#: contenders: the best of each distinct structure among them is measured before the rest.
STRUCTURE_FACTOR = 1.25


def config_space(match: PlanMatch, limit: int = 16) -> list[dict]:
    """Whole-plan configurations, best first: the dominant kernel (most FLOPs; the first if
    none) runs through its configuration space, the others keep their best-ranked one.

    The dominant kernel's space is taken structures first (:func:`structures_first`): a
    small budget measures TileLang's pipeline and K steps of 128 beside the model's best
    128x256 "ws" tile instead of four ring depths of the latter, which it prices alike.

    Second come the launch hedges (:func:`launch_count`): for each kernel but the dominant
    one (which walks its space) whose best configuration launches a different number of
    kernels than another of its whole space (a split-K GEMM's partial pass and combine
    against one launch; a split column reduction's), the best of the other count, the rest
    of the plan as the first configuration has it. The model trades a second launch against
    filling the SMs, a trade it has not been calibrated on, and the other kernels are
    otherwise measured at their best-ranked configuration only.

    Returns flat dicts ``{"k0.block_m": 128, ...}``; ``[]`` when some kernel has no valid
    configuration at all.
    """
    kls = match.kernels
    spaces = [kernel_config_space(kl) for kl in kls]
    if any(not s for s in spaces):
        return []
    main = dominant_kernel(match)
    walk = structures_first(kls[main], spaces[main])
    first = [walk[0] if i == main else spaces[i][0] for i in range(len(kls))]
    out = [first]
    for i, kl in enumerate(kls if limit is None or limit > 1 else ()):
        if i == main:
            continue
        n = launch_count(kl, first[i])
        alt = next((c for c in _whole_space(kl) if launch_count(kl, c) != n), None)
        if alt is not None:
            out.append([alt if j == i else c for j, c in enumerate(first)])
    for cfg in walk[1:]:
        chosen = [cfg if i == main else spaces[i][0] for i in range(len(kls))]
        if chosen not in out:
            out.append(chosen)
    return [flatten_config(c) for c in out][:limit]


def _whole_space(kl: KernelLowering) -> list:
    """``kl``'s whole configuration space, best first, where its family's space takes a
    ``limit`` (the pruned one otherwise)."""
    space = FAMILIES[kl.family].config_space
    if "limit" not in inspect.signature(space).parameters:
        return space(kl.spec)
    return _whole_space_of(kl.family, kl.spec)


@functools.lru_cache(maxsize=256)
def _whole_space_of(family: str, spec) -> tuple:
    return tuple(FAMILIES[family].config_space(spec, limit=None))


def launch_count(kl: KernelLowering, cfg) -> int:
    """How many kernels ``cfg`` launches for ``kl`` (its ``launch_plan``'s calls; 1 without
    one)."""
    declare = getattr(cfg, "launch_plan", None)
    plan = declare(kl.spec) if callable(declare) else None
    return 1 if plan is None else len(plan.calls)


def structures_first(kl: KernelLowering, space: list) -> list:
    """``space`` (best first) reordered: first the best configuration of each distinct
    structure (``Family.structure``) that the cost model prices within
    :data:`STRUCTURE_FACTOR` of the best, in cost order, then the rest in their order. The
    best configuration stays first. Unchanged for a family without a structure or with a
    cost that is a sort key rather than a number.

    Why: the model prices ring depths, clusters and staging alike (exact ties), and it
    ranked the 256x128 GEMM tile 12 % behind 128x256 where the H200 timed them within
    2 % (``bench/results/2026-12-03-session/variants/matmul_tiles.json``), and rmsnorm_mlp's
    K steps of 128 in two stages 2.5 % behind steps of 64 in five where they ran 9 % faster
    (11.2 against 12.3 µs, ``bench/results/2026-12-03-session/ref_rmsnorm_mlp_b24``);
    measuring one of each structure first hedges those blind spots at no cost to the best
    one's slot.
    """
    fam = FAMILIES[kl.family]
    if fam.structure is None or len(space) < 2:
        return space
    costs = [fam.cost(kl.spec, c) for c in space]
    if not all(isinstance(c, (int, float)) for c in costs) or costs[0] <= 0:
        return space
    return leaders_first(space, costs, fam.structure, STRUCTURE_FACTOR)


def leaders_first(items: list, costs: list, key, factor: float) -> list:
    """``items`` (ordered by ``costs``, ascending) reordered: first the first item of each
    distinct ``key(item)`` among those costing at most ``factor`` × the first's cost, in
    order, then the rest in their order. The first item stays first. The search uses it for
    plans (key: the kernel families) and for configurations (key: the family's
    structure)."""
    if not items:
        return items
    bound = costs[0] * factor
    leaders, seen = [], set()
    for i, (item, cost) in enumerate(zip(items, costs)):
        if cost > bound:
            break
        k = key(item)
        if k not in seen:
            seen.add(k)
            leaders.append(i)
    chosen = set(leaders)
    return [items[i] for i in leaders] + [x for i, x in enumerate(items) if i not in chosen]


def dominant_kernel(match: PlanMatch) -> int:
    """The kernel whose configuration space the search walks: the most FLOPs (the first if
    none has any)."""
    return max(range(len(match.kernels)), key=lambda i: (match.kernels[i].flops, -i))


def complete_config(match: PlanMatch, partial: dict) -> dict:
    """A whole flat configuration from a partial one: for each kernel, the best-ranked
    configuration that agrees with the fields ``partial`` gives it (:func:`_agreeing`: all
    of them, else the shape fields, else the best with its options at their defaults), then
    overridden by ``partial``.

    Keys of ``partial`` are ``k<i>.<field>`` or a bare ``<field>``, which means the dominant
    kernel's (:func:`dominant_kernel`), so that ``{"block_m": 128, "stages": 2}`` configures
    a one-GEMM or one-attention plan.

    Raises:
        LoweringError: a kernel with no valid configuration, or a key that names no kernel or
            no field of its family's configuration (the message lists the fields).
    """
    spaces = [kernel_config_space(kl) for kl in match.kernels]
    for kl, space in zip(match.kernels, spaces):
        if not space:
            raise LoweringError(f"kernel {kl.index} ({kl.family}) has no valid configuration",
                                path=f"config.k{kl.index}")
    flat = flatten_config([s[0] for s in spaces])
    main = dominant_kernel(match)
    given: dict[str, object] = {}
    for key, value in partial.items():
        full = key if "." in key else f"k{main}.{key}"
        if full not in flat:
            head = full.partition(".")[0]
            if head in {f"k{i}" for i in range(len(match.kernels))}:
                kl = match.kernels[int(head[1:])]
                fields = sorted(k.partition(".")[2] for k in flat if k.startswith(head + "."))
                raise LoweringError(f"configuration key {key!r}: kernel {kl.index} "
                                    f"({kl.family}) has no such field; its fields are "
                                    f"{', '.join(fields)}", path=f"config.{key}")
            raise LoweringError(f"configuration key {key!r} names no kernel (the plan has "
                                f"{len(match.kernels)}; keys are k<i>.<field> or a field of "
                                f"the dominant kernel k{main})", path=f"config.{key}")
        given[full] = value
    flat = flatten_config([_agreeing(kl, space, given) for kl, space in zip(match.kernels,
                                                                          spaces)])
    flat.update(given)
    return flat


def _agreeing(kl: KernelLowering, space: list, given: dict):
    """The best-ranked configuration of ``space`` whose fields equal the ``k<i>.<field>``
    values of ``given`` for kernel ``kl``; else the best-ranked one that agrees on the given
    shape fields (those without a default: tile, stages, threads), so that an option the
    space never sets (``uniform_wg``) keeps the rest of the best configuration of that
    shape; else the best-ranked one with its defaulted fields that ``given`` leaves open
    reset to their defaults (a shape outside the space: its options were chosen for
    another shape); :func:`complete_config` then overrides it with ``given``'s fields. A
    shape match whose own options the family refuses beside the given ones (a chain's
    pipelined column loop, ``col_stages`` 2, under a given ``col_tiles`` that does not
    divide the column tiles) gives way to the next shape match."""
    head = f"k{kl.index}."
    mine = {k[len(head):]: v for k, v in given.items() if k.startswith(head)}
    optional = {f.name: f.default for f in fields(space[0]) if f.default is not MISSING}
    shape = {f: v for f, v in mine.items() if f not in optional}
    for cfg in space:
        if all(getattr(cfg, f) == v for f, v in mine.items()):
            return cfg
    for cfg in space:
        if all(getattr(cfg, f) == v for f, v in shape.items()):
            try:
                FAMILIES[kl.family].source(kl.spec, replace(cfg, **mine))
            except (LoweringError, TypeError, ValueError):  # refused, or not even typed
                continue
            return cfg
    return replace(space[0], **{f: d for f, d in optional.items() if f not in mine})


def flatten_config(configs: list) -> dict:
    """``[GemmConfig(...), RowConfig(...)]`` → ``{"k0.block_m": ..., "k1.block_rows": ...}``."""
    flat: dict = {}
    for i, c in enumerate(configs):
        for key, value in asdict(c).items():
            flat[f"k{i}.{key}"] = value
    return flat


def unflatten_config(match: PlanMatch, flat: dict) -> list:
    """The per-kernel config objects of a flat configuration.

    Raises:
        LoweringError: a key that names no kernel or field, a missing field, or a value
            the family refuses.
    """
    kls = match.kernels
    per: list[dict] = [{} for _ in kls]
    for key, value in flat.items():
        head, _, fld = key.partition(".")
        if not head.startswith("k") or not head[1:].isdigit() or int(head[1:]) >= len(kls):
            raise LoweringError(f"configuration key {key!r} names no kernel (the plan has "
                                f"{len(kls)}; keys are k<i>.<field>, e.g. k0.block_m)",
                                path=f"config.{key}")
        per[int(head[1:])][fld] = value
    out = []
    for kl, given in zip(kls, per):
        cls = FAMILIES[kl.family].config_type
        try:
            out.append(cls(**given))
        except TypeError as e:
            raise LoweringError(f"configuration of kernel {kl.index} ({kl.family}): {e}",
                                path=f"config.k{kl.index}") from None
        except LoweringError as e:
            raise LoweringError(f"configuration of kernel {kl.index} ({kl.family}): "
                                f"{e.message}", path=f"config.k{kl.index}") from None
    return out

"""Lowering: a completed plan → TileLang kernels, for a space of tile configurations.

* :mod:`superopt.lower.match`: :func:`match_plan` (every kernel to its family, once) →
  :class:`~superopt.lower.lowering.PlanMatch`;
* :mod:`superopt.lower.families`: the family table (matcher, config space, source, cost);
* :mod:`superopt.lower.config`: the whole-plan configuration space and its flat form;
* :mod:`superopt.lower.module`: the generated module file and its launcher;
* :mod:`superopt.lower.kernels`: the TileLang source writers of each family;
* :mod:`superopt.lower.tl`: the one module that calls TileLang.

The third stage after :mod:`superopt.ir` and :mod:`superopt.derive` (and beside
:mod:`superopt.wire`); it never runs a kernel.
"""

from .config import config_space, flatten_config, unflatten_config
from .lowering import KernelLowering, PlanMatch, storage_dtype
from .match import lowerable, match_kernel, match_plan
from .module import (LoweredModule, cache_dir, lower_derivation, lower_plan, module_source,
                     prim_funcs, write_module)

__all__ = ["config_space", "flatten_config", "unflatten_config", "KernelLowering", "PlanMatch",
           "storage_dtype", "lowerable", "match_kernel", "match_plan", "LoweredModule",
           "cache_dir", "lower_derivation", "lower_plan", "module_source", "prim_funcs",
           "write_module"]

"""Where a GEMM's output tiles go on the launch grid, within the hardware's grid limits.

One block computes the output tile ``(bx, by)`` of batch ``bz``: column tile ``bx <
n_blocks``, row tile ``by < m_blocks``. The natural grid is ``(n_blocks, m_blocks,
batch)``, but grid y and z hold at most ``HOPPER.max_grid_yz`` (65535) blocks, so a larger
batch or more row tiles would fail at launch (``CUDA_ERROR_INVALID_VALUE``). Grid x holds
``2^31 - 1``, so :func:`plan_grid` folds what does not fit into x:

==========  ==================================  ==========================================
layout      launch grid                          tile of block (X, Y, Z)
==========  ==================================  ==========================================
``"xyz"``   ``(n_blocks, m_blocks, batch)``      ``bx = X, by = Y, bz = Z``
``"xz"``    ``(n_blocks · batch, m_blocks, 1)``  ``bx = X % n_blocks, bz = X // n_blocks``
``"flat"``  ``(n_blocks · m_blocks · batch,)``   ``by = X % m_blocks``, then ``bx``, ``bz``
==========  ==================================  ==========================================

``"xyz"`` whenever it fits (the kernels of every size that fitted before are unchanged);
``"xz"`` when only the batch is too large; ``"flat"`` when the row tiles are. Row tiles vary
fastest in ``"flat"``, so that a 2-CTA cluster along x (:func:`open_kernel`) pairs two
adjacent row tiles of one column tile, as the ``(1, 2, 1)`` cluster does along y otherwise.
The tile count never exceeds grid x: it is at most the number of output elements, which
:func:`~.gemm_spec.check_spec` keeps below ``2^31``.

Owns: the GEMM grid layout and the text that opens the kernel and names ``bx, by, bz``.
Imports the target, the tiling and the emitter; must not import a GEMM source writer or the
spec module (which imports this one).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import LoweringError
from ..emit import Lines
from ..target import HOPPER
from .tiling import ceil_div

#: The most blocks on grid x (``2^31 - 1``).
MAX_GRID_X = 2 ** 31 - 1


@dataclass(frozen=True)
class GemmGrid:
    """The launch grid of ``n_blocks × m_blocks × batch`` output tiles (module docstring)."""

    n_blocks: int
    m_blocks: int
    batch: int
    layout: str

    @property
    def dims(self) -> tuple[int, ...]:
        """The launch extents, as ``T.Kernel`` takes them (1, 2 or 3 of them)."""
        if self.layout == "xyz":
            return (self.n_blocks, self.m_blocks, self.batch)
        if self.layout == "xz":
            return (self.n_blocks * self.batch, self.m_blocks)
        return (self.n_blocks * self.m_blocks * self.batch,)

    @property
    def launch(self) -> tuple[int, int, int]:
        """``(grid x, grid y, grid z)`` of the launch."""
        d = self.dims
        return d + (1,) * (3 - len(d))


def plan_grid(n_blocks: int, m_blocks: int, batch: int, max_grid_yz: int = HOPPER.max_grid_yz
              ) -> GemmGrid:
    """The grid layout for these tile counts (module docstring).

    Raises:
        LoweringError: more tiles folded into x than grid x holds (only possible for a
            tensor of 2^31 elements or more, which :func:`~.gemm_spec.check_spec` refuses
            first).
    """
    layout = ("flat" if m_blocks > max_grid_yz else "xz" if batch > max_grid_yz else "xyz")
    grid = GemmGrid(n_blocks, m_blocks, batch, layout)
    if grid.launch[0] > MAX_GRID_X:
        raise LoweringError(f"{n_blocks} x {m_blocks} x {batch} output tiles exceed the "
                            f"{MAX_GRID_X} blocks of grid x")
    return grid


def gemm_grid(spec, cfg) -> GemmGrid:
    """The launch grid of a non-persistent GEMM kernel (:class:`~.gemm_spec.GemmSpec`,
    :class:`~.gemm_spec.GemmConfig`): split-K's ``splits`` blocks per tile along z."""
    return plan_grid(ceil_div(spec.n, cfg.block_n), ceil_div(spec.m, cfg.block_m),
                     spec.batch * cfg.splits)


def open_kernel(e: Lines, grid: GemmGrid, threads: int, cluster_m: int = 1,
                splits: int = 1) -> None:
    """Write ``with T.Kernel(...) as ...:`` for ``grid`` and indent into it, then (for a
    folded layout) bind ``bx, by, bz`` from the block index; the caller dedents.

    ``cluster_m > 1`` makes clusters of ``cluster_m`` blocks over adjacent row tiles:
    ``cluster_dims=(1, cluster_m, 1)``, or ``(cluster_m, 1, 1)`` in the ``"flat"`` layout.

    ``splits > 1`` (split-K): the grid's batch extent is ``batch · splits`` and its index
    is ``bzk = sk · batch + bz`` (the scratch's leading index), bound to ``sk`` (the K split)
    and ``bz`` (the batch).
    """
    dims = ", ".join(str(d) for d in grid.dims)
    cluster = ""
    if cluster_m > 1:
        cluster = (f", cluster_dims=({cluster_m}, 1, 1)" if grid.layout == "flat"
                   else f", cluster_dims=(1, {cluster_m}, 1)")
    z = "bz" if splits == 1 else "bzk"
    names = {"xyz": f"(bx, by, {z})", "xz": "(bxz, by)", "flat": "bxyz"}[grid.layout]
    e(f"with T.Kernel({dims}, threads={threads}{cluster}) as {names}:")
    e.indent()
    nb, mb = grid.n_blocks, grid.m_blocks
    if grid.layout == "xz":
        e(f"bx = bxz % {nb}")
        e(f"{z} = bxz // {nb}")
    elif grid.layout == "flat":
        e(f"by = bxyz % {mb}")
        e(f"bx = bxyz // {mb} % {nb}")
        e(f"{z} = bxyz // {mb * nb}")
    if splits > 1:
        if grid.batch % splits:
            raise LoweringError(f"a grid of {grid.batch} batches is not split {splits} ways")
        e(f"sk = bzk // {grid.batch // splits}")
        e(f"bz = bzk % {grid.batch // splits}")

"""Fields on uniform grids as channels-first tensors ``[B, C, *grid_shape]``.

Grid tensors are in the node order of :func:`meshop.data.grid_points` (first axis slowest);
:func:`grid_tensor` and :func:`node_tensor` convert to and from the ``[N, C]`` node features of a
batch of equal grids, :func:`interpolate_grid` resamples onto another grid over the same box and
:func:`sample_grid` evaluates at any points. Domains without ``grid_shape`` are refused with an
error that points to the mesh path.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from meshop._pyg import Data, to_dense_batch
from meshop.data.batching import grid_shape_of, num_samples


def grid_tensor(x: Tensor, data: Data) -> Tensor:
    """Node values ``[N, C]`` of a grid domain (or a batch of equal grids) as ``[B, C, *shape]``.

    Raises:
        MeshError: ``data`` has no ``grid_shape`` (use the mesh path) or mixes grid shapes.
    """
    shape = grid_shape_of(data)
    return x.view(num_samples(data), *shape, x.shape[-1]).movedim(-1, 1)


def node_tensor(x: Tensor) -> Tensor:
    """``[B, C, *shape]`` back to node values ``[B * prod(shape), C]`` (first axis slowest)."""
    return x.movedim(1, -1).reshape(-1, x.shape[1])


def interpolate_grid(x: Tensor, size: Sequence[int]) -> Tensor:
    """(Bi)linear interpolation of ``[B, C, *shape]`` onto a ``size`` grid over the same box.

    ``align_corners=True``: both grids include the box corners, as :func:`meshop.data.grid_points`
    does, so a linear field is reproduced exactly (the CiNN restrictions and prolongations).
    """
    size = tuple(int(s) for s in size)
    if tuple(x.shape[2:]) == size:
        return x
    mode = {1: "linear", 2: "bilinear", 3: "trilinear"}[len(size)]
    return F.interpolate(x, size=size, mode=mode, align_corners=True)


def sample_grid(
    field: Tensor, pos: Tensor, query_pos: Tensor, query_batch: Tensor | None = None
) -> Tensor:
    """Values of grid fields at any points, by (bi)linear interpolation (1D or 2D grids).

    Args:
        field: ``[B, C, *shape]`` values on each sample's grid.
        pos: ``[B, dim, *shape]`` the grid coordinates (each sample's box is read from them).
        query_pos: ``[Nq, dim]`` points; outside the box the border value is used.
        query_batch: ``[Nq]`` sample of each point (sorted), or None for one sample.

    Returns:
        ``[Nq, C]``
    """
    dim = pos.shape[1]
    flat = pos.flatten(2)
    lo, hi = flat.min(-1).values, flat.max(-1).values  # [B, dim]
    if query_batch is None:
        query_batch = torch.zeros(len(query_pos), dtype=torch.long, device=query_pos.device)
    unit = 2 * (query_pos - lo[query_batch]) / (hi - lo)[query_batch] - 1
    unit, mask = to_dense_batch(unit, query_batch, batch_size=field.shape[0])  # [B, nq, dim]
    if dim == 1:  # as a 1 x L image: x along the grid, y = 0
        field, unit = field[:, :, None, :], torch.cat([unit, torch.zeros_like(unit)], dim=-1)
    else:  # grid_sample reads (x, y) = (last axis, first axis)
        unit = unit.flip(-1)
    out = F.grid_sample(
        field, unit[:, None], mode="bilinear", padding_mode="border", align_corners=True
    )  # [B, C, 1, nq]
    return out[:, :, 0].transpose(1, 2)[mask]


__all__ = ["grid_tensor", "interpolate_grid", "node_tensor", "sample_grid"]

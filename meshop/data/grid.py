"""Fields on uniform grids as channels-first tensors ``[B, C, *grid_shape]``.

Grid tensors are in the node order of :func:`meshop.data.grid_points` (first axis slowest);
:func:`grid_tensor` and :func:`node_tensor` convert to and from the ``[N, C]`` node features of a
batch of equal grids, :func:`interpolate_grid` resamples onto another grid over the same box and
:func:`sample_grid` evaluates at any points, :func:`roll_grid` shifts a sample's fields circularly
over its grid. Domains without ``grid_shape`` are refused with an error that points to the mesh
path.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from meshop._pyg import Data, to_dense_batch
from meshop.data.batching import grid_shape_of, num_samples
from meshop.errors import MeshError


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


def roll_grid(data: Data, shifts: Sequence[int], keep_x: Sequence[int] = ()) -> Data:
    """A copy of one grid sample whose fields ``x`` and ``y`` are rolled circularly by ``shifts``
    nodes along the grid's axes (``torch.roll``: the value at node ``i`` moves to node ``i + k``,
    modulo the axis' size); the coordinates and everything else stay where they are.

    On a domain that is periodic along every axis (the nodes ``j / n`` of the unit interval, the
    end 1 being node 0) this is the translation of the fields by ``k / n``, exact for a
    translation-invariant problem: rolling by ``k`` then by ``n - k`` gives the sample back.

    Args:
        data: one sample with ``grid_shape``, ``x`` (optional) and ``y`` at its grid nodes.
        shifts: one number of nodes per grid axis.
        keep_x: channels of ``x`` that stay in place (input channels that are functions of the
            coordinates, not fields).

    Raises:
        MeshError: ``data`` has no ``grid_shape``, its fields are not on its grid nodes (query
            points), or ``shifts`` has not one entry per axis.
    """
    shape = grid_shape_of(data)
    shifts = tuple(int(k) for k in shifts)
    if len(shifts) != len(shape):
        raise MeshError(f"roll_grid: {len(shifts)} shifts for a grid of {len(shape)} axes {shape}")
    nodes = math.prod(shape)
    out = copy.copy(data)
    for key in ("x", "y"):
        values = getattr(data, key, None)
        if values is None:
            continue
        if values.dim() != 2 or len(values) != nodes:
            raise MeshError(
                f"roll_grid: '{key}' has shape {tuple(values.shape)}, not one row per node of the "
                f"{' x '.join(map(str, shape))} grid (samples with query points cannot be rolled)"
            )
        dims = tuple(range(2, 2 + len(shape)))
        rolled = node_tensor(torch.roll(grid_tensor(values, data), shifts, dims))
        if key == "x" and len(keep_x):
            keep = torch.as_tensor(list(keep_x), dtype=torch.long, device=values.device)
            rolled[:, keep] = values[:, keep]
        setattr(out, key, rolled)
    return out


__all__ = ["grid_tensor", "interpolate_grid", "node_tensor", "roll_grid", "sample_grid"]

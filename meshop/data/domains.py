"""Domains without files: point clouds from arrays, and uniform grids in 1D, 2D and 3D."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from meshop._pyg import Data
from meshop.errors import FieldError, MeshError


def _tensor(values, name: str) -> torch.Tensor:
    t = torch.as_tensor(np.asarray(values) if not torch.is_tensor(values) else values)
    t = t.to(torch.float32)
    if not torch.isfinite(t).all():
        raise MeshError(f"{name} contains NaN or Inf; clean the data before building a domain")
    return t


def _node_field(values, n: int, name: str) -> torch.Tensor:
    t = _tensor(values, name)
    if t.shape[:1] != (n,):
        raise FieldError(f"{name} has shape {tuple(t.shape)}, expected one row per node ({n})")
    return t.reshape(n, -1)


def from_points(
    pos,
    x=None,
    y=None,
    *,
    weight=None,
    query_pos=None,
    params=None,
) -> Data:
    """A point-cloud domain from arrays.

    Args:
        pos: [N, dim] coordinates.
        x: [N] or [N, C_in] input fields.
        y: [N] or [N, C_out] targets at ``pos`` or, if given, [Nq, C_out] at ``query_pos``.
        weight: [N] quadrature weights; default ``1/N`` (a point cloud has no cells to measure).
        query_pos: [Nq, dim] points where the output is wanted.
        params: [P] constant per-sample parameters.
    """
    pos = _tensor(pos, "pos")
    if pos.ndim == 1:
        pos = pos[:, None]
    if pos.ndim != 2 or len(pos) == 0:
        raise MeshError(f"pos must be a non-empty [N, dim] array, got shape {tuple(pos.shape)}")
    n = len(pos)
    data = Data(pos=pos)
    data.weight = (
        torch.full((n,), 1.0 / n) if weight is None else _node_field(weight, n, "weight").view(-1)
    )
    if x is not None:
        data.x = _node_field(x, n, "x")
    if query_pos is not None:
        query_pos = _tensor(query_pos, "query_pos")
        if query_pos.ndim == 1 and pos.shape[1] == 1:
            query_pos = query_pos[:, None]
        if query_pos.ndim != 2 or query_pos.shape[1] != pos.shape[1]:
            raise MeshError(
                f"mixed dimensions: query_pos has shape {tuple(query_pos.shape)} but pos is "
                f"{pos.shape[1]}D; give query points with {pos.shape[1]} coordinates"
            )
        data.query_pos = query_pos
    if y is not None:
        data.y = _node_field(y, len(query_pos) if query_pos is not None else n, "y")
    if params is not None:
        data.params = _tensor(params, "params").reshape(1, -1)
    return data


def grid_points(shape: Sequence[int], bounds: Sequence[tuple[float, float]] | None = None):
    """Node coordinates [prod(shape), len(shape)] of a uniform grid, first axis slowest.

    This is C order (``indexing="ij"``): node ``(i, j)`` of a 2D grid is row ``i * W + j``, so a
    field
    ``x`` [H * W, C] of one sample is ``x.view(H, W, C)`` and a batch ``x.view(B, H, W, C)``.
    Endpoints are included (``linspace``), as in the FNO and Galerkin Transformer data.
    """
    shape = tuple(int(s) for s in shape)
    if not 1 <= len(shape) <= 3 or min(shape) < 2:
        raise MeshError(f"grid shape must have 1 to 3 axes of at least 2 nodes, got {shape}")
    bounds = list(bounds) if bounds is not None else [(0.0, 1.0)] * len(shape)
    if len(bounds) != len(shape):
        raise MeshError(f"{len(bounds)} bounds given for a {len(shape)}D grid shape {shape}")
    axes = [torch.linspace(float(lo), float(hi), s) for (lo, hi), s in zip(bounds, shape)]
    return torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1).reshape(-1, len(shape))


def uniform_grid(
    shape: Sequence[int],
    x=None,
    y=None,
    *,
    bounds: Sequence[tuple[float, float]] | None = None,
    params=None,
) -> Data:
    """A uniform-grid domain (``grid_shape`` set) on ``bounds`` (default the unit box).

    Node order is documented in :func:`grid_points`. Fields may be given as [N, C], [N] or on the
    grid itself ([*shape] or [*shape, C]). Every node has weight ``|box| / N``: exactly the
    ``1/n`` of
    the Galerkin Transformer on the unit box.
    """
    pos = grid_points(shape, bounds)
    n = len(pos)
    measure = 1.0
    for lo, hi in bounds if bounds is not None else [(0.0, 1.0)] * len(shape):
        measure *= float(hi) - float(lo)
    data = Data(pos=pos, weight=torch.full((n,), measure / n))
    data.grid_shape = tuple(int(s) for s in shape)
    if x is not None:
        data.x = _node_field(torch.as_tensor(x).reshape(n, -1), n, "x")
    if y is not None:
        data.y = _node_field(torch.as_tensor(y).reshape(n, -1), n, "y")
    if params is not None:
        data.params = _tensor(params, "params").reshape(1, -1)
    return data

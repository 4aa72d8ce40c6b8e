"""Domains without files: point clouds from arrays, and uniform grids in 1D, 2D and 3D."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from meshop._pyg import Data
from meshop.errors import ConfigError, FieldError, MeshError


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


#: the quadrature weights a uniform grid can give its nodes (:func:`uniform_grid`)
GRID_WEIGHTS = ("equal", "cells")


def _grid_weights(
    shape: tuple[int, ...], bounds: Sequence[tuple[float, float]], weights: str
) -> torch.Tensor:
    """The [prod(shape)] quadrature weights ``weights`` (:data:`GRID_WEIGHTS`) of a grid's nodes,
    in :func:`grid_points`' order; both sum to the box's measure."""
    if weights not in GRID_WEIGHTS:
        raise ConfigError(
            f"unknown grid weights {weights!r}; choose one of {', '.join(map(repr, GRID_WEIGHTS))}"
        )
    if weights == "equal":
        measure = math.prod(float(hi) - float(lo) for lo, hi in bounds)
        return torch.full((math.prod(shape),), measure / math.prod(shape))
    weight = torch.ones((), dtype=torch.float64)
    for (lo, hi), s in zip(bounds, shape):
        h = (float(hi) - float(lo)) / (s - 1)
        axis = torch.full((s,), h, dtype=torch.float64)
        axis[[0, -1]] = h / 2  # the trapezoidal rule: the end nodes' cells end at the boundary
        weight = torch.outer(weight.flatten(), axis)
    return weight.flatten().to(torch.float32)


def uniform_grid(
    shape: Sequence[int],
    x=None,
    y=None,
    *,
    bounds: Sequence[tuple[float, float]] | None = None,
    params=None,
    weights: str = "equal",
) -> Data:
    """A uniform-grid domain (``grid_shape`` set) on ``bounds`` (default the unit box).

    Node order is documented in :func:`grid_points`. Fields may be given as [N, C], [N] or on the
    grid itself ([*shape] or [*shape, C]).

    Args:
        shape: nodes per axis (1 to 3 axes of at least 2 nodes).
        x: input fields, [N, C], [N], [*shape] or [*shape, C].
        y: targets, the same layouts.
        bounds: ``(lo, hi)`` of each axis; default ``(0, 1)``.
        params: [P] constant per-sample parameters.
        weights: the nodes' quadrature weights, both summing to the box's measure ``|box|``.
            ``"equal"``: ``|box| / N`` at every node, the ``1/n`` of the Galerkin Transformer on
            the unit box (its grid path relies on it); the nodes on the boundary then carry whole
            cells, half outside the domain, and that strip thins as the grid refines.
            ``"cells"``: each node's cells within the domain, the trapezoidal rule
            :math:`w = \\prod_i h_i / 2^{b_i}` with :math:`h_i` the step of axis :math:`i` and
            :math:`b_i` 1 on its first and last node, else 0 (halves on the edges, quarters at
            the corners of a 2D grid): exact for functions linear in each coordinate, and the
            same integral on every grid of the box, so that quadrature-weighted models (ONO, the
            Transolver) see the same means on finer grids.
    """
    pos = grid_points(shape, bounds)
    n = len(pos)
    shape = tuple(int(s) for s in shape)
    bounds = list(bounds) if bounds is not None else [(0.0, 1.0)] * len(shape)
    data = Data(pos=pos, weight=_grid_weights(shape, bounds, weights))
    data.grid_shape = shape
    if x is not None:
        data.x = _node_field(torch.as_tensor(x).reshape(n, -1), n, "x")
    if y is not None:
        data.y = _node_field(torch.as_tensor(y).reshape(n, -1), n, "y")
    if params is not None:
        data.params = _tensor(params, "params").reshape(1, -1)
    return data

"""Integrals of node fields with the mesh's own quadrature: over the domain and over named groups.

The domain integral of a field :math:`f` given at the nodes is :math:`\\sum_i w_i f_i` with the
lumped-mass weights :math:`w_i` of the top-dimensional cells (:mod:`meshop.data.weights`); over a
named group (a gmsh physical group or cell set: a boundary curve, a wall surface, a region) the
weights are the lumped mass of the group's own cells (lengths of its lines, areas of its
triangles, ...). On simplices this is exact for fields that are linear on every cell: the
integral of the piecewise-linear interpolant. A point cloud without cells is integrated with the
density-based :func:`~meshop.data.weights.knn_weights`, as :func:`~meshop.data.read_mesh` weights
it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import meshio
import numpy as np
import torch

from meshop.data.mesh_io import group_cells, read_meshio
from meshop.data.weights import lumped_mass_weights
from meshop.errors import FieldError

#: the key of the whole domain in :func:`mesh_integrals`
DOMAIN = "domain"


def integrate(values: torch.Tensor | np.ndarray, weight: torch.Tensor | np.ndarray):
    """``sum_i weight_i values_i``: the integral of node values [N] or [N, C] (-> scalar or [C])."""
    if values.shape[0] != weight.shape[0]:
        raise FieldError(
            f"{values.shape[0]} values but {weight.shape[0]} quadrature weights; give one value "
            "per mesh node"
        )
    if torch.is_tensor(values):
        w = torch.as_tensor(weight, dtype=values.dtype, device=values.device)
        return torch.einsum("n,n...->...", w, values)
    return np.einsum("n,n...->...", np.asarray(weight, dtype=np.float64), values)


def group_weights(
    mesh: meshio.Mesh, name: str, drop_zero_z: bool = True, source: str = "<meshio.Mesh>"
) -> np.ndarray:
    """Quadrature weights [N] of the named group's cells: ``integrate(f, w)`` is the integral of
    ``f`` over the group (a boundary curve's length element, a surface's area element, ...).

    Raises:
        FieldError: the mesh has no cell group of that name (the message lists those it has).
    """
    groups = group_cells(mesh)
    if name not in groups:
        raise FieldError(
            f"{source}: mesh has no cell group '{name}'; its groups are {sorted(groups)} "
            "(gmsh physical groups and cell sets; node sets have no cells to integrate over)"
        )
    return lumped_mass_weights(
        _points(mesh, drop_zero_z), groups[name], source=f"{source}, group '{name}'"
    )


def _points(mesh: meshio.Mesh, drop_zero_z: bool) -> np.ndarray:
    points = np.asarray(mesh.points, dtype=np.float64)
    if drop_zero_z and points.shape[1] == 3 and np.all(points[:, 2] == 0.0):
        points = points[:, :2]
    return points


def mesh_integrals(
    mesh: meshio.Mesh | str | os.PathLike,
    fields: Mapping[str, torch.Tensor | np.ndarray],
    groups: Sequence[str] = (),
) -> dict[str, dict[str, float | list[float]]]:
    """Integrals of node fields over the mesh's domain and over named groups.

    Args:
        mesh: the mesh the fields live on (a ``meshio.Mesh`` or any file meshio reads).
        fields: ``{name: [N] or [N, C]}`` values at the mesh's nodes (e.g. predictions).
        groups: names of groups to integrate over as well (see :func:`group_weights`).

    Returns:
        ``{"domain": {name: value}, group: {name: value}, ...}``; a vector field's value is the
        list of its components' integrals.

    Example:
        >>> mesh_integrals("wing.vtu", {"pressure": p}, groups=["wall"])  # doctest: +SKIP
        {'domain': {'pressure': 0.41}, 'wall': {'pressure': 0.12}}
    """
    source = "<meshio.Mesh>"
    if not isinstance(mesh, meshio.Mesh):
        source, mesh = str(mesh), read_meshio(mesh)
    cells = [(block.type, np.asarray(block.data)) for block in mesh.cells]
    points = _points(mesh, True)
    weights = {DOMAIN: lumped_mass_weights(points, cells, source=source, point_weights="knn")}
    for name in groups:
        weights[name] = group_weights(mesh, name, source=source)
    out: dict[str, dict[str, float | list[float]]] = {}
    for where, w in weights.items():
        out[where] = {}
        for name, values in fields.items():
            if torch.is_tensor(values):
                values = values.detach().cpu().double().numpy()
            value = integrate(np.asarray(values, dtype=np.float64), w)
            out[where][name] = value.tolist() if np.ndim(value) else float(value)
    return out

"""Meshes in and out: meshio files and arrays <-> PyG ``Data`` domains.

A domain carries (see docs/domains.md):

- ``pos`` [N, dim] float32 node coordinates (a 3D file whose z column is all zero gives dim = 2);
- ``x`` [N, C_in] / ``y`` [N, C_out]: the selected point fields, stacked in the order asked for;
- ``weight`` [N]: lumped-mass quadrature weights of the top-dimensional cells (``1/N`` without
  cells);
- ``face`` [3, F]: triangles; every other cell block as ``cell_index_<type>`` [nodes per cell, M]
  (both are shifted by the node offset when PyG batches samples);
- ``params`` [1, P]: optional constant per-sample parameters;
- ``source``: the file the domain came from.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import meshio
import numpy as np
import torch

from meshop._pyg import Data
from meshop.data.weights import (
    cell_dimension,
    cell_measures,
    lumped_mass_weights,
    top_dimensional_cells,
)
from meshop.errors import FieldError, FileExistsMeshopError, MeshError, MeshReadError

CELL_PREFIX = "cell_index_"
_FieldNames = str | Sequence[str] | None


def _names(fields: _FieldNames) -> list[str]:
    if fields is None:
        return []
    return [fields] if isinstance(fields, str) else list(fields)


def _check_finite(array: np.ndarray, what: str, source: str) -> None:
    if not np.all(np.isfinite(array)):
        bad = np.argwhere(~np.isfinite(array))[0].tolist()
        raise MeshError(
            f"{source}: {what} contains NaN or Inf (first at index {bad}); "
            "clean the simulation output before loading it"
        )


def _as_columns(
    values: np.ndarray, n: int, name: str, source: str, trim_z: bool = False
) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    if values.shape[:1] != (n,):
        raise FieldError(
            f"{source}: field '{name}' has shape {values.shape}, expected one value per node ({n})"
        )
    values = values.reshape(n, -1)
    _check_finite(values, f"field '{name}'", source)
    if trim_z and values.shape[1] == 3 and np.all(values[:, 2] == 0.0):
        values = values[:, :2]  # a 2D vector stored as 3D, like the points
    return values


def _cell_data_to_nodes(
    points: np.ndarray, mesh: meshio.Mesh, name: str, source: str
) -> np.ndarray:
    """Measure-weighted average over the top-dimensional cells around each node."""
    n = len(points)
    _, blocks = top_dimensional_cells([(b.type, b.data) for b in mesh.cells])
    block_ids = [i for i, b in enumerate(mesh.cells) if any(b.data is c for _, c in blocks)]
    total, mass = None, np.zeros(n)
    for i in block_ids:
        block = mesh.cells[i]
        values = np.asarray(mesh.cell_data[name][i], dtype=np.float64).reshape(len(block.data), -1)
        _check_finite(values, f"cell field '{name}'", source)
        share = cell_measures(points, block.type, block.data) / block.data.shape[1]
        total = np.zeros((n, values.shape[1])) if total is None else total
        for corner in range(block.data.shape[1]):
            np.add.at(total, block.data[:, corner], values * share[:, None])
            np.add.at(mass, block.data[:, corner], share)
    if total is None:
        raise FieldError(
            f"{source}: cell field '{name}' has no values on the top-dimensional cells"
        )
    return total / np.maximum(mass, np.finfo(float).tiny)[:, None]


def _field_columns(
    mesh: meshio.Mesh, points: np.ndarray, names: list[str], cell_data_to_nodes: bool, source: str
) -> np.ndarray | None:
    if not names:
        return None
    columns = []
    for name in names:
        if name in mesh.point_data:
            columns.append(
                _as_columns(mesh.point_data[name], len(points), name, source, points.shape[1] == 2)
            )
        elif cell_data_to_nodes and name in mesh.cell_data:
            columns.append(_cell_data_to_nodes(points, mesh, name, source))
        else:
            hint = ""
            if name in mesh.cell_data and not cell_data_to_nodes:
                hint = (
                    f" ('{name}' is cell data: pass cell_data_to_nodes=True to average it to nodes)"
                )
            raise FieldError(
                f"{source}: mesh has no point field '{name}'{hint}; "
                f"it has point fields {sorted(mesh.point_data)} "
                f"and cell fields {sorted(mesh.cell_data)}"
            )
    return np.concatenate(columns, axis=1)


def from_meshio(
    mesh: meshio.Mesh,
    inputs: _FieldNames = None,
    targets: _FieldNames = None,
    *,
    cell_data_to_nodes: bool = False,
    params: Sequence[float] | np.ndarray | torch.Tensor | None = None,
    drop_zero_z: bool = True,
    source: str = "<meshio.Mesh>",
) -> Data:
    """Turn a ``meshio.Mesh`` into a domain ``Data`` (see the module docstring for its fields).

    Args:
        mesh: the mesh, e.g. from ``meshio.read`` or built from solver arrays.
        inputs: point-data field name(s) stacked into ``x``.
        targets: point-data field name(s) stacked into ``y``.
        cell_data_to_nodes: also accept cell-data fields, averaged to nodes (weighted by cell
            measure).
        params: constant per-sample parameters, stored as ``params`` [1, P].
        drop_zero_z: store 3D points whose last coordinate is all zero as 2D.
        source: name used in error messages.
    """
    points = np.asarray(mesh.points, dtype=np.float64)
    if points.ndim != 2 or len(points) == 0:
        raise MeshError(f"{source}: the mesh is empty (no points); check the file or the exporter")
    _check_finite(points, "point coordinates", source)
    if drop_zero_z and points.shape[1] == 3 and np.all(points[:, 2] == 0.0):
        points = points[:, :2]
    cells = [(block.type, np.asarray(block.data, dtype=np.int64)) for block in mesh.cells]
    for cell_type, conn in cells:
        if conn.size and (conn.min() < 0 or conn.max() >= len(points)):
            raise MeshError(
                f"{source}: {cell_type} cells refer to nodes outside 0..{len(points) - 1}; "
                "the file is corrupt or was written with another node numbering"
            )
    weight = lumped_mass_weights(points, cells, source=source)

    data = Data(pos=torch.as_tensor(points, dtype=torch.float32))
    data.weight = torch.as_tensor(weight, dtype=torch.float32)
    x = _field_columns(mesh, points, _names(inputs), cell_data_to_nodes, source)
    y = _field_columns(mesh, points, _names(targets), cell_data_to_nodes, source)
    if x is not None:
        data.x = torch.as_tensor(x, dtype=torch.float32)
    if y is not None:
        data.y = torch.as_tensor(y, dtype=torch.float32)
    for cell_type, conn in cells:
        key = "face" if cell_type == "triangle" else CELL_PREFIX + cell_type
        block = torch.as_tensor(conn.T.copy(), dtype=torch.long)
        data[key] = torch.cat([data[key], block], dim=1) if key in data else block
    if params is not None:
        data.params = torch.as_tensor(np.asarray(params), dtype=torch.float32).reshape(1, -1)
    data.source = source
    return data


def read_mesh(
    path: str | os.PathLike,
    inputs: _FieldNames = None,
    targets: _FieldNames = None,
    *,
    cell_data_to_nodes: bool = False,
    params: Sequence[float] | np.ndarray | torch.Tensor | None = None,
    file_format: str | None = None,
    drop_zero_z: bool = True,
) -> Data:
    """Read any mesh file meshio reads (.msh, .vtu, .vtk, .xdmf, .inp, .med, ...) into a domain.

    Example:
        >>> data = read_mesh("plate.vtu", inputs=["load"], targets=["sigma_vm"])  # doctest: +SKIP

    Raises:
        MeshReadError: the file is missing or meshio cannot read it.
        FieldError: a requested field does not exist (the message lists those that do).
        MeshError: empty mesh, NaN/Inf, degenerate cells, mixed dimensions.
    """
    path = Path(path)
    if not path.is_file():
        raise MeshReadError(f"mesh file '{path}' does not exist (working directory: {Path.cwd()})")
    try:
        mesh = meshio.read(path, file_format=file_format)
    except (Exception, SystemExit) as exc:  # meshio raises many types, even SystemExit
        raise MeshReadError(
            f"cannot read mesh file '{path}': {type(exc).__name__}: {exc}. meshio reads e.g. "
            ".msh, .vtu, .vtk, .xdmf, .inp, .med, .obj, .ply, .stl; pass file_format=... "
            "if the extension does not tell the format"
        ) from exc
    return from_meshio(
        mesh,
        inputs,
        targets,
        cell_data_to_nodes=cell_data_to_nodes,
        params=params,
        drop_zero_z=drop_zero_z,
        source=str(path),
    )


def mesh_cells(data: Data) -> list[tuple[str, np.ndarray]]:
    """The connectivity stored on a domain, as meshio cell blocks (triangles first)."""
    cells = []
    if getattr(data, "face", None) is not None:
        cells.append(("triangle", data.face.t().cpu().numpy()))
    for key in data.keys():
        if key.startswith(CELL_PREFIX):
            cells.append((key[len(CELL_PREFIX) :], data[key].t().cpu().numpy()))
    return cells


def to_meshio(
    data: Data, fields: Mapping[str, torch.Tensor | np.ndarray] | None = None
) -> meshio.Mesh:
    """A ``meshio.Mesh`` of a domain with the given node fields as point data.

    Points are written in 3D (2D meshes get z = 0, which ``read_mesh`` drops again). A domain with
    no connectivity is written with one vertex cell per node so that every format and ParaView
    accept it.
    """
    pos = data.pos.detach().cpu().double().numpy()
    n = len(pos)
    points = np.zeros((n, 3))
    points[:, : pos.shape[1]] = pos
    cells = mesh_cells(data) or [("vertex", np.arange(n).reshape(-1, 1))]
    point_data = {}
    for name, values in (fields or {}).items():
        values = values.detach().cpu().numpy() if torch.is_tensor(values) else np.asarray(values)
        if values.shape[:1] != (n,):
            raise FieldError(
                f"field '{name}' has shape {tuple(values.shape)}, expected one row per node ({n})"
            )
        values = values.reshape(n, -1) if values.ndim > 1 else values
        if np.issubdtype(values.dtype, np.floating):
            values = values.astype(np.float64)  # exact for float32; some writers need float64
        if pos.shape[1] == 2 and values.ndim == 2 and values.shape[1] == 2:
            values = np.c_[values, np.zeros(n)]  # 2D vectors as 3D, as ParaView expects
        point_data[name] = values
    return meshio.Mesh(points, cells, point_data=point_data)


def _gmsh_entities(mesh: meshio.Mesh) -> None:
    """Give every cell block its own gmsh entity (dimension, block number), as gmsh 4.1 needs."""
    dims = [cell_dimension(b.type) or 0 for b in mesh.cells]
    node_entity = np.full(len(mesh.points), -1)
    for i in sorted(range(len(mesh.cells)), key=lambda i: dims[i]):
        nodes = np.unique(mesh.cells[i].data)
        free = nodes[node_entity[nodes] < 0]
        node_entity[free] = i
    top = int(np.argmax(dims))
    node_entity[node_entity < 0] = top
    mesh.point_data["gmsh:dim_tags"] = np.c_[np.asarray(dims)[node_entity], node_entity + 1]
    tags = [np.full(len(b.data), i + 1) for i, b in enumerate(mesh.cells)]
    mesh.cell_data["gmsh:geometrical"] = tags
    mesh.cell_data["gmsh:physical"] = [t.copy() for t in tags]


def write_mesh(
    path: str | os.PathLike,
    data: Data,
    fields: Mapping[str, torch.Tensor | np.ndarray] | None = None,
    *,
    overwrite: bool = False,
    file_format: str | None = None,
    **kwargs,
) -> Path:
    """Write a domain and node fields to any format meshio writes, so that ParaView opens it.

    The file is written to a temporary name beside the target and renamed, so a failed write never
    leaves a half-written file. XDMF is written with its data inline (one self-contained file).

    Args:
        path: output file; the extension picks the format unless ``file_format`` is given
            (e.g. ``"gmsh22"`` for gmsh 2.2 ASCII; ``.msh`` alone writes gmsh 4.1).
        data: the domain (its ``pos`` and connectivity are written).
        fields: ``{"name": tensor [N] or [N, k]}`` point fields.
        overwrite: replace an existing file (refused by default).
        **kwargs: passed to ``meshio.write`` (e.g. ``binary=False``).

    Raises:
        FileExistsMeshopError: ``path`` exists and ``overwrite`` is False.
    """
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsMeshopError(
            f"'{path}' already exists; pass overwrite=True to replace it or choose another name"
        )
    if not path.parent.is_dir():
        raise MeshReadError(f"cannot write '{path}': directory '{path.parent}' does not exist")
    mesh = to_meshio(data, fields)
    fmt = (file_format or path.suffix.lstrip(".")).lower()
    if fmt in {"msh", "gmsh", "gmsh22"}:
        _gmsh_entities(mesh)
        for name, values in list(mesh.point_data.items()):
            if name.startswith("gmsh:"):
                continue
            if values.ndim == 2 and values.shape[1] not in (1, 3, 9):
                raise FieldError(
                    f"gmsh stores fields with 1, 3 or 9 components; '{name}' has "
                    f"{values.shape[1]}: write it as separate fields or use .vtu"
                )
            # meshio's ASCII gmsh writer formats numpy scalars with repr(): give it Python floats
            mesh.point_data[name] = values.astype(object)
    is_xdmf = fmt in {"xdmf", "xmf"}
    if is_xdmf:
        kwargs.setdefault("data_format", "XML")
    if fmt in {"msh", "gmsh", "gmsh22"}:
        kwargs.setdefault("binary", False)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    try:
        meshio.write(tmp, mesh, file_format=file_format, **kwargs)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path

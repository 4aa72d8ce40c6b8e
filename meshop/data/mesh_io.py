"""Meshes in and out: meshio files and arrays <-> PyG ``Data`` domains.

A domain carries (see docs/domains.md):

- ``pos`` [N, dim] float32 node coordinates (a 3D file whose z column is all zero gives dim = 2);
- ``x`` [N, C_in] / ``y`` [N, C_out]: the selected point fields, stacked in the order asked for;
- ``weight`` [N]: lumped-mass quadrature weights of the top-dimensional cells (a point cloud
  without cells: estimated from the local point density, ``knn_weights``);
- ``face`` [3, F]: triangles; every other cell block as ``cell_index_<type>`` [nodes per cell, M]
  (both are shifted by the node offset when PyG batches samples);
- ``params`` [1, P]: optional constant per-sample parameters;
- ``source``: the file the domain came from.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

import meshio
import numpy as np
import torch

from meshop._pyg import Data
from meshop.data.vtu import read_vtu, write_vtu
from meshop.data.weights import (
    as_tensor_view,
    cell_dimension,
    cell_measures,
    lumped_mass_weights,
    top_dimensional_cells,
)
from meshop.errors import (
    ConfigError,
    FieldError,
    FileExistsMeshopError,
    MeshError,
    MeshReadError,
)

CELL_PREFIX = "cell_index_"
#: an input named ``group:<name>`` is 1 on the nodes of the file's group ``<name>``, else 0
GROUP_PREFIX = "group:"
#: ``groups="masks"`` stores the nodes of group ``<name>`` as ``data["group_<name>"]`` [N] bool
MASK_PREFIX = "group_"
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


def group_cells(mesh: meshio.Mesh) -> dict[str, list[tuple[str, np.ndarray]]]:
    """The named cell groups of a file: ``{name: [(cell type, connectivity [M, k]), ...]}``.

    Gmsh physical groups (``$PhysicalNames`` with the cells' physical tags) and meshio
    ``cell_sets`` (Abaqus element sets, MED families, ...), boundary groups (lines of a 2D mesh,
    triangles of a 3D one) and region groups alike.
    """
    groups: dict[str, list[tuple[str, np.ndarray]]] = {}
    physical = mesh.cell_data.get("gmsh:physical")
    for name, value in (mesh.field_data or {}).items():
        value = np.asarray(value).ravel()
        if physical is None or len(value) < 2:
            continue
        tag, dim = int(value[0]), int(value[1])
        blocks = [
            (block.type, np.asarray(block.data)[np.asarray(physical[i]) == tag])
            for i, block in enumerate(mesh.cells)
            if cell_dimension(block.type) == dim
        ]
        if any(len(conn) for _, conn in blocks):
            groups[name] = [(t, c) for t, c in blocks if len(c)]
    for name, per_block in (mesh.cell_sets or {}).items():
        if name.startswith("gmsh:") or name in groups:
            continue
        blocks = [
            (mesh.cells[i].type, np.asarray(mesh.cells[i].data)[np.asarray(ids, dtype=np.int64)])
            for i, ids in enumerate(per_block)
            if ids is not None and len(ids)
        ]
        if blocks:
            groups[name] = blocks
    return groups


def group_masks(mesh: meshio.Mesh) -> dict[str, np.ndarray]:
    """``{name: bool [N]}``: the nodes of each named group (cell groups, see :func:`group_cells`,
    and meshio ``point_sets`` such as Abaqus node sets), sorted by name."""
    n = len(mesh.points)
    masks = {}
    for name, blocks in group_cells(mesh).items():
        mask = np.zeros(n, dtype=bool)
        for _, conn in blocks:
            mask[conn.ravel()] = True
        masks[name] = mask
    for name, nodes in (mesh.point_sets or {}).items():
        if not name.startswith("gmsh:") and name not in masks:
            mask = np.zeros(n, dtype=bool)
            mask[np.asarray(nodes, dtype=np.int64)] = True
            masks[name] = mask
    return dict(sorted(masks.items()))


GROUPS = (None, "features", "masks")


def _with_groups(mesh: meshio.Mesh, inputs: _FieldNames, groups: str | None) -> list[str]:
    """The input names, with ``group:<name>`` for every group of the file when ``groups`` is
    ``"features"``."""
    if groups not in GROUPS:
        raise ConfigError(f"groups must be one of {GROUPS}, got {groups!r}")
    names = _names(inputs)
    if groups == "features":
        names += [GROUP_PREFIX + g for g in group_masks(mesh) if GROUP_PREFIX + g not in names]
    return names


def _field_columns(
    mesh: meshio.Mesh, points: np.ndarray, names: list[str], cell_data_to_nodes: bool, source: str
) -> np.ndarray | None:
    columns = _fields(mesh, points, names, cell_data_to_nodes, source)
    return np.concatenate(columns, axis=1) if columns else None


def _fields(
    mesh: meshio.Mesh, points: np.ndarray, names: list[str], cell_data_to_nodes: bool, source: str
) -> list[np.ndarray]:
    """Each named field as an array [N, components] at the nodes."""
    columns, masks = [], None
    for name in names:
        if name.startswith(GROUP_PREFIX) and name not in mesh.point_data:
            masks = group_masks(mesh) if masks is None else masks
            group = name[len(GROUP_PREFIX) :]
            if group not in masks:
                raise FieldError(
                    f"{source}: mesh has no group '{group}'; its groups are {sorted(masks)} "
                    "(gmsh physical groups, cell sets and point sets)"
                )
            columns.append(masks[group].astype(np.float64)[:, None])
        elif name in mesh.point_data:
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
    return columns


def _points(mesh: meshio.Mesh, drop_zero_z: bool, source: str) -> np.ndarray:
    points = np.asarray(mesh.points, dtype=np.float64)
    if points.ndim != 2 or len(points) == 0:
        raise MeshError(f"{source}: the mesh is empty (no points); check the file or the exporter")
    _check_finite(points, "point coordinates", source)
    if drop_zero_z and points.shape[1] == 3 and np.all(points[:, 2] == 0.0):
        points = points[:, :2]
    return points


def field_layout(
    mesh: meshio.Mesh,
    names: _FieldNames,
    *,
    cell_data_to_nodes: bool = False,
    groups: str | None = None,
    drop_zero_z: bool = True,
    source: str = "<meshio.Mesh>",
) -> list[tuple[str, int]]:
    """``[(name, components), ...]``: how :func:`from_meshio` stacks the named fields into ``x``
    or ``y`` (a scalar has 1 component, a vector of a 2D mesh 2, of a 3D mesh 3; ``groups`` as
    in :func:`from_meshio`).

    Example:
        >>> field_layout(mesh, ["load", "normals"])  # doctest: +SKIP
        [('load', 1), ('normals', 3)]
    """
    points = _points(mesh, drop_zero_z, source)
    names = _with_groups(mesh, names, groups)
    columns = _fields(mesh, points, names, cell_data_to_nodes, source)
    return [(name, int(c.shape[1])) for name, c in zip(names, columns)]


def from_meshio(
    mesh: meshio.Mesh,
    inputs: _FieldNames = None,
    targets: _FieldNames = None,
    *,
    cell_data_to_nodes: bool = False,
    params: Sequence[float] | np.ndarray | torch.Tensor | None = None,
    groups: str | None = None,
    point_weights: str = "knn",
    drop_zero_z: bool = True,
    source: str = "<meshio.Mesh>",
    weights: bool = True,
) -> Data:
    """Turn a ``meshio.Mesh`` into a domain ``Data`` (see the module docstring for its fields).

    Args:
        mesh: the mesh, e.g. from ``meshio.read`` or built from solver arrays.
        inputs: point-data field name(s) stacked into ``x``.
        targets: point-data field name(s) stacked into ``y``.
        cell_data_to_nodes: also accept cell-data fields, averaged to nodes (weighted by cell
            measure).
        params: constant per-sample parameters, stored as ``params`` [1, P].
        groups: the file's named groups (gmsh physical groups, cell and point sets: see
            :func:`group_masks`) as node data: ``"features"`` appends to ``x`` one 0/1 column
            ``group:<name>`` per group (sorted by name), marking the nodes that lie on it (which
            nodes are clamped, loaded, on the wall); ``"masks"`` stores each group's nodes as
            ``data["group_<name>"]`` [N] bool. A single group is also an input by the name
            ``"group:<name>"``.
        point_weights: weights of a point cloud (a file without cells of dimension >= 1):
            ``"knn"`` (local point density, :func:`meshop.data.weights.knn_weights`: integrals do
            not depend on where the cloud is denser) or ``"uniform"`` (``1/N``).
        drop_zero_z: store 3D points whose last coordinate is all zero as 2D.
        source: name used in error messages.
        weights: compute ``weight`` (False: the domain has none, for a model that reads none,
            such as the MLP baseline: on a 1e7-node mesh they take seconds).
    """
    input_names = _with_groups(mesh, inputs, groups)
    points = _points(mesh, drop_zero_z, source)
    cells = [(block.type, np.asarray(block.data, dtype=np.int64)) for block in mesh.cells]
    for cell_type, conn in cells:
        if conn.size and (conn.min() < 0 or conn.max() >= len(points)):
            raise MeshError(
                f"{source}: {cell_type} cells refer to nodes outside 0..{len(points) - 1}; "
                "the file is corrupt or was written with another node numbering"
            )
    data = Data(pos=torch.as_tensor(points, dtype=torch.float32))
    if weights:
        weight = lumped_mass_weights(points, cells, source=source, point_weights=point_weights)
        data.weight = torch.as_tensor(weight, dtype=torch.float32)
    x = _field_columns(mesh, points, input_names, cell_data_to_nodes, source)
    y = _field_columns(mesh, points, _names(targets), cell_data_to_nodes, source)
    if x is not None:
        data.x = torch.as_tensor(x, dtype=torch.float32)
    if y is not None:
        data.y = torch.as_tensor(y, dtype=torch.float32)
    for cell_type, conn in cells:
        key = "face" if cell_type == "triangle" else CELL_PREFIX + cell_type
        block = as_tensor_view(conn).t()  # [k, M], a view: mesh_cells gives the rows back
        data[key] = torch.cat([data[key], block], dim=1) if key in data else block
    if params is not None:
        data.params = torch.as_tensor(np.asarray(params), dtype=torch.float32).reshape(1, -1)
    if groups == "masks":
        for name, mask in group_masks(mesh).items():
            data[MASK_PREFIX + name] = torch.as_tensor(mask)
    data.source = source
    return data


def read_meshio(
    path: str | os.PathLike,
    file_format: str | None = None,
    fields: Collection[str] | None = None,
) -> meshio.Mesh:
    """``meshio.read`` with errors that say which file failed and what meshio said. ``fields``:
    of a ``.vtu`` file that :func:`~meshop.data.vtu.read_vtu` reads, only these point and cell
    data arrays are decoded (None: all); other files are read whole.

    Raises:
        MeshReadError: the file is missing or meshio cannot read it.
    """
    path = Path(path)
    if not path.is_file():
        raise MeshReadError(f"mesh file '{path}' does not exist (working directory: {Path.cwd()})")
    said = io.StringIO()  # meshio prints its reasons, then raises SystemExit
    mesh = None
    if path.suffix.lower() == ".vtu" and file_format in (None, "vtu"):
        # the common .vtu layout at a fraction of meshio's peak memory; anything else, a corrupt
        # file included, goes to meshio, whose message is the one to show
        with contextlib.suppress(Exception):
            mesh = read_vtu(path, fields)
    try:
        with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
            if mesh is None:
                mesh = meshio.read(path, file_format=file_format)
    except (Exception, SystemExit) as exc:
        reasons = [" ".join(said.getvalue().split())]
        if not isinstance(exc, SystemExit):
            reasons.append(f"{type(exc).__name__}: {exc}")
        raise MeshReadError(
            f"cannot read mesh file '{path}': meshio said: {' '.join(r for r in reasons if r)}. "
            "meshio reads e.g. "
            ".msh, .vtu, .vtk, .xdmf, .inp, .med, .obj, .ply, .stl; pass file_format=... "
            "if the extension does not tell the format"
        ) from (None if isinstance(exc, SystemExit) else exc)
    if said.getvalue().strip():
        sys.stderr.write(said.getvalue())  # warnings of a successful read
    return mesh


def read_mesh(
    path: str | os.PathLike,
    inputs: _FieldNames = None,
    targets: _FieldNames = None,
    *,
    cell_data_to_nodes: bool = False,
    params: Sequence[float] | np.ndarray | torch.Tensor | None = None,
    groups: str | None = None,
    point_weights: str = "knn",
    file_format: str | None = None,
    drop_zero_z: bool = True,
) -> Data:
    """Read any mesh file meshio reads (.msh, .vtu, .vtk, .xdmf, .inp, .med, ...) into a domain.

    Example:
        >>> data = read_mesh("plate.vtu", inputs=["load"], targets=["sigma_vm"])  # doctest: +SKIP
        >>> data = read_mesh("bracket.msh", targets=["u"], groups="features")  # doctest: +SKIP

    The keyword arguments are those of :func:`from_meshio`.

    Raises:
        MeshReadError: the file is missing or meshio cannot read it.
        FieldError: a requested field does not exist (the message lists those that do).
        MeshError: empty mesh, NaN/Inf, degenerate cells, mixed dimensions.
    """
    return from_meshio(
        read_meshio(path, file_format),
        inputs,
        targets,
        cell_data_to_nodes=cell_data_to_nodes,
        params=params,
        groups=groups,
        point_weights=point_weights,
        drop_zero_z=drop_zero_z,
        source=str(path),
    )


def split_fields(
    values: torch.Tensor | np.ndarray, layout: Sequence[tuple[str, int]]
) -> dict[str, torch.Tensor | np.ndarray]:
    """Columns [N, C] as named fields: ``[("p", 1), ("u", 3)]`` -> ``{"p": [N], "u": [N, 3]}``
    (the inverse of stacking fields into ``x`` or ``y``)."""
    total = sum(int(k) for _, k in layout)
    if values.shape[-1] != total:
        raise FieldError(
            f"{values.shape[-1]} channels do not match the fields "
            f"{[f'{n} ({k})' for n, k in layout]} ({total} channels)"
        )
    out, start = {}, 0
    for name, k in layout:
        out[name] = values[:, start] if k == 1 else values[:, start : start + k]
        start += k
    return out


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
    data: Data,
    fields: Mapping[str, torch.Tensor | np.ndarray] | None = None,
    compact: bool = False,
) -> meshio.Mesh:
    """A ``meshio.Mesh`` of a domain with the given node fields as point data.

    Points are written in 3D (2D meshes get z = 0, which ``read_mesh`` drops again). A domain with
    no connectivity is written with one vertex cell per node so that every format and ParaView
    accept it. Coordinates and floating-point fields are float64, connectivity int64, unless
    ``compact`` (for formats that store any width, such as ``.vtu``): coordinates and fields
    then keep their own precision (float32 for a domain read by meshop) and connectivity is
    int32 below 2^31 nodes, which halves the memory that writing a huge mesh takes.
    """
    pos = data.pos.detach().cpu().numpy()
    n = len(pos)
    real = pos.dtype if compact and pos.dtype in (np.float32, np.float64) else np.float64
    points = np.zeros((n, 3), dtype=real)
    points[:, : pos.shape[1]] = pos
    cells = mesh_cells(data) or [("vertex", np.arange(n).reshape(-1, 1))]
    if compact and n < 2**31:
        cells = [(kind, conn.astype(np.int32)) for kind, conn in cells]
    point_data = {}
    for name, values in (fields or {}).items():
        values = values.detach().cpu().numpy() if torch.is_tensor(values) else np.asarray(values)
        if values.shape[:1] != (n,):
            raise FieldError(
                f"field '{name}' has shape {tuple(values.shape)}, expected one row per node ({n})"
            )
        values = values.reshape(n, -1) if values.ndim > 1 else values
        if np.issubdtype(values.dtype, np.floating) and not compact:
            values = values.astype(np.float64)  # exact for float32; some writers need float64
        if pos.shape[1] == 2 and values.ndim == 2 and values.shape[1] == 2:
            # 2D vectors as 3D, as ParaView expects
            values = np.c_[values, np.zeros(n, dtype=values.dtype)]
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
    leaves a half-written file. A ``.vtu`` file is written by :func:`meshop.data.vtu.write_vtu`
    (uncompressed raw appended arrays streamed from the domain's: float32 coordinates and fields
    stay float32, connectivity is int32), unless meshio keyword arguments are given, which go to
    ``meshio.write`` (e.g. ``compression="zlib"`` for a smaller file). XDMF is written with its
    data inline (one self-contained file).

    Args:
        path: output file; the extension picks the format unless ``file_format`` is given
            (e.g. ``"gmsh22"`` for gmsh 2.2 ASCII; ``.msh`` alone writes gmsh 4.1).
        data: the domain (its ``pos`` and connectivity are written).
        fields: ``{"name": tensor [N] or [N, k]}`` point fields.
        overwrite: replace an existing file (refused by default).
        **kwargs: passed to ``meshio.write`` (e.g. ``binary=False``), which then writes a
            ``.vtu`` file too.

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
    fmt = (file_format or path.suffix.lstrip(".")).lower()
    mesh = None
    if fmt == "vtu" and not kwargs:
        point_data = {
            name: values.detach().cpu().numpy() if torch.is_tensor(values) else values
            for name, values in (fields or {}).items()
        }
    else:
        mesh = to_meshio(data, fields, compact=fmt == "vtu")
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
        # meshio reads the extension .msh as ANSYS first: name the format
        file_format = file_format or "gmsh"
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    try:
        if mesh is None:
            write_vtu(tmp, data.pos.detach().cpu().numpy(), mesh_cells(data), point_data)
        else:
            meshio.write(tmp, mesh, file_format=file_format, **kwargs)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path

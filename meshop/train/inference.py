"""Using a trained model: predictions on any mesh file, at mesh nodes or arbitrary query points."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from meshop._pyg import Data
from meshop.data import read_mesh, set_query_points, write_mesh
from meshop.errors import FieldError, FileExistsMeshopError, MeshError, MeshReadError
from meshop.train.checkpoint import load_model
from meshop.train.config import from_dict
from meshop.train.data import LatentMesh, check_compatible


def latent_of(ckpt: dict[str, Any]) -> LatentMesh:
    """The latent-mesh transform a checkpoint's model was trained with."""
    c = from_dict(ckpt["train_config"])
    return LatentMesh(c.latent_points, c.latent_grid, sampling=c.latent_sampling)


@torch.no_grad()
def predict(model: torch.nn.Module, ckpt: dict[str, Any], data: Data) -> torch.Tensor:
    """Predictions [N_query, C_out] of a checkpoint's model on one domain (physical units).

    The domain gets the latent mesh the model was trained with; its fields are checked against
    the training data's (dimension, input channels, parameters) first.
    """
    check_compatible(data, ckpt["data"], "the mesh")
    return model(latent_of(ckpt)(data))


def read_points(path: str | os.PathLike, pos_dim: int) -> np.ndarray:
    """Query points from a CSV file (one point per row, optional header line; a last column of
    zeros is dropped for 2D models) or from the nodes of any mesh file."""
    path = Path(path)
    if not path.is_file():
        raise MeshReadError(f"query file '{path}' does not exist (working directory: {Path.cwd()})")
    if path.suffix.lower() in (".csv", ".txt"):
        try:
            points = np.loadtxt(path, delimiter=",", ndmin=2)
        except ValueError:
            points = np.loadtxt(path, delimiter=",", ndmin=2, skiprows=1)
        if points.shape[1] == pos_dim + 1 and np.all(points[:, -1] == 0.0):
            points = points[:, :pos_dim]  # 2D points written with z = 0
    else:
        points = read_mesh(path).pos.numpy()
    if points.shape[1] != pos_dim:
        raise MeshError(
            f"query points in '{path}' have {points.shape[1]} coordinates but the model works on "
            f"{pos_dim}D domains"
        )
    return points


def write_points_csv(
    path: str | os.PathLike,
    points: np.ndarray,
    fields: dict[str, np.ndarray],
    overwrite: bool = False,
) -> Path:
    """Points and point values as CSV with a header (``x, y, name, ...``)."""
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsMeshopError(f"'{path}' already exists; pass --overwrite to replace it")
    coords = ["x", "y", "z"][: points.shape[1]]
    columns, header = [points], list(coords)
    for name, values in fields.items():
        values = np.asarray(values).reshape(len(points), -1)
        columns.append(values)
        header += (
            [name] if values.shape[1] == 1 else [f"{name}_{i}" for i in range(values.shape[1])]
        )
    np.savetxt(path, np.hstack(columns), delimiter=",", header=",".join(header), comments="")
    return path


def predict_file(
    checkpoint: str | os.PathLike,
    mesh: str | os.PathLike,
    out: str | os.PathLike,
    query: str | os.PathLike | None = None,
    params: Sequence[float] | None = None,
    overwrite: bool = False,
) -> tuple[Path, torch.Tensor]:
    """Read ``mesh`` (any meshio format), predict at its nodes or at ``query`` points (CSV or mesh
    file), write ``out``: a mesh file with the predictions as point data, or CSV for ``.csv``.

    Query points may lie anywhere, also outside the mesh the model was trained on; the model then
    extrapolates, and nothing guarantees the accuracy there.

    Returns:
        ``(written path, predictions [N_query, C_out])``.
    """
    model, ckpt = load_model(checkpoint)
    info = ckpt["data"]
    input_names = info.get("input_names", []) if info["x_channels"] else []
    data = read_mesh(mesh, inputs=input_names or None)
    if info["params_channels"]:
        if params is None:
            raise FieldError(
                f"the model was trained with {info['params_channels']} per-sample parameters; "
                "give them with --params v1,v2,..."
            )
        data.params = torch.as_tensor(np.asarray(params, dtype=np.float32)).reshape(1, -1)
    elif params is not None:
        raise FieldError("the model was trained without per-sample parameters; drop --params")
    query_mesh = None
    if query is not None:
        points = read_points(query, info["pos_dim"])
        set_query_points(data, points)
        if Path(query).suffix.lower() not in (".csv", ".txt"):
            query_mesh = read_mesh(query)
    pred = predict(model, ckpt, data)
    names = info.get("target_names") or [f"y{i}" for i in range(pred.shape[1])]
    fields = {name: pred[:, i] for i, name in enumerate(names)}
    out = Path(out)
    if out.suffix.lower() == ".csv":
        points = data.query_pos if query is not None else data.pos
        return write_points_csv(
            out, points.numpy(), {k: v.numpy() for k, v in fields.items()}, overwrite
        ), pred
    target_mesh = data
    if query is not None:
        target_mesh = query_mesh if query_mesh is not None else Data(pos=data.query_pos)
    elif getattr(data, "x", None) is not None:
        fields = {**{n: data.x[:, i] for i, n in enumerate(input_names)}, **fields}
    return write_mesh(out, target_mesh, fields, overwrite=overwrite), pred

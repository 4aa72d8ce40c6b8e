"""Query-point files, prediction CSVs and checkpoint field layouts (``meshop.train.inference``):
the parsing rules the docstrings promise, each on a file small enough to check by hand."""

import re

import meshio
import numpy as np
import pytest
import torch

from meshop.errors import FieldError, MeshError, MeshReadError
from meshop.train.data import LatentMesh
from meshop.train.inference import (
    checkpoint_fields,
    latent_of,
    prediction_integrals,
    read_inputs,
    read_points,
)
from tests.test_groups_integrals import gmsh_square


def test_csv_comments_may_be_indented_and_only_the_first_line_is_a_header(tmp_path):
    path = tmp_path / "points.csv"
    path.write_text("x,y\n   # an indented comment, x\n1,2\n")
    assert read_points(path, 2).tolist() == [[1, 2]]
    path.write_text("x,y\nu,v\n1,2\n")  # a second line of names is not a header
    message = (
        f"query file '{path}', line 2, column 1: 'u' is not a number; give one point per line as "
        "comma-separated numbers x,y[,z] (and optionally a first line of column names)"
    )
    with pytest.raises(MeshReadError, match=f"^{re.escape(message)}$"):
        read_points(path, 2)


def test_a_last_column_of_zeros_is_dropped_for_one_dimension_less(tmp_path):
    path = tmp_path / "points.txt"  # .txt reads as CSV too
    path.write_text("0.5,0.25,0\n1,2,0\n")
    assert read_points(path, 2).tolist() == [[0.5, 0.25], [1, 2]]
    assert read_points(path, 3).tolist() == [[0.5, 0.25, 0], [1, 2, 0]]  # z = 0 is a 3D point
    path.write_text("0.5,0.25,0\n1,2,3\n")  # not all zero: 3D points
    with pytest.raises(MeshError, match="have 3 coordinates but the model works on 2D domains"):
        read_points(path, 2)
    missing = tmp_path / "none.csv"
    with pytest.raises(MeshReadError, match=f"^query file '{re.escape(str(missing))}' does not"):
        read_points(missing, 2)


def test_the_latent_mesh_of_a_checkpoint_is_its_training_configurations():
    assert latent_of({"train_config": {"latent_grid": [3, 4]}}) == LatentMesh(None, (3, 4))
    random = {"latent_points": 7, "latent_sampling": "random"}
    assert latent_of({"train_config": random}) == LatentMesh(7, None, sampling="random")


def test_prediction_integrals_take_a_loaded_checkpoint_and_name_its_target_fields(tmp_path):
    path = tmp_path / "square.msh"
    meshio.write(path, gmsh_square(), file_format="gmsh22", binary=False)
    x, y = meshio.read(path).points[:, :2].T
    ckpt = {"data": {"x_channels": 1, "out_channels": 1, "target_fields": [["p", 1]]}}
    pred = torch.as_tensor(1 + 2 * x + 3 * y).view(-1, 1)
    result = prediction_integrals(ckpt, pred, path, groups=["top"])
    assert result["domain"]["p"] == pytest.approx(3.5)  # int of 1 + 2x + 3y over the unit square
    assert result["top"]["p"] == pytest.approx(5.0)


def test_checkpoint_fields_of_older_checkpoints_come_from_their_names():
    info = {"x_channels": 2, "out_channels": 3, "input_names": ["a", "b"], "target_names": "u"}
    ckpt = {"data": info}
    assert checkpoint_fields(ckpt, "input") == [("a", 1), ("b", 1)]
    assert checkpoint_fields(ckpt, "target") == [("u", 3)]  # one name for 3 channels: a vector
    info["x_channels"] = 0
    assert checkpoint_fields(ckpt, "input") == []


def test_inputs_come_from_cell_data_only_when_the_model_was_trained_so(tmp_path):
    # a unit square of two triangles, k = 1 on the lower one and 3 on the upper one
    points = np.array([[0.0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]])
    mesh = meshio.Mesh(points, [("triangle", np.array([[0, 1, 2], [0, 2, 3]]))])
    mesh.cell_data["k"] = [np.array([1.0, 3.0])]
    path = tmp_path / "square.vtu"
    mesh.write(path)
    info = {"pos_dim": 2, "x_channels": 1, "out_channels": 1, "params_channels": 0}
    info["input_fields"] = [["k", 1]]
    info["dataset_args"] = {"cell_data_to_nodes": True}
    data, layout = read_inputs({"data": info}, path)
    assert layout == [("k", 1)]
    assert data.x.view(-1).tolist() == [2.0, 1.0, 2.0, 3.0]  # each node: mean of its cells
    del info["dataset_args"]
    with pytest.raises(FieldError, match="'k'"):
        read_inputs({"data": info}, path)

"""Query-point files, prediction CSVs and checkpoint field layouts (``meshop.train.inference``):
the parsing rules the docstrings promise, each on a file small enough to check by hand."""

import re

import meshio
import numpy as np
import pytest
import torch

from meshop.cli import main
from meshop.data import write_mesh
from meshop.errors import FieldError, FileExistsMeshopError, MeshError, MeshReadError
from meshop.train.data import LatentMesh
from meshop.train.inference import (
    checkpoint_fields,
    latent_of,
    predict_file,
    prediction_integrals,
    read_inputs,
    read_points,
    write_points_csv,
)
from tests.helpers import decoded_arrays, gmsh_square, predict_case, square_mesh


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


def _square(tmp_path, name="square.vtu"):
    """A unit square of two triangles with point field ``a`` and cell field ``k``."""
    points = np.array([[0.0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]])
    mesh = meshio.Mesh(points, [("triangle", np.array([[0, 1, 2], [0, 2, 3]]))])
    mesh.point_data["a"] = np.array([1.0, 2.0, 3.0, 4.0])
    mesh.cell_data["k"] = [np.array([1.0, 3.0])]
    path = tmp_path / name
    mesh.write(path)
    return path


def _info(**kwargs):
    info = {"pos_dim": 2, "x_channels": 1, "out_channels": 1, "params_channels": 0}
    return {"data": {**info, **kwargs}}


def test_an_older_checkpoints_inputs_are_looked_up_in_point_cell_and_group_data(tmp_path):
    path = _square(tmp_path)
    cells = {"dataset_args": {"cell_data_to_nodes": True}}
    # an older checkpoint: one name per channel, no input_fields
    assert read_inputs(_info(input_names=["k"], **cells), path)[1] == [("k", 1)]
    assert read_inputs(_info(input_names=["a"], **cells), path)[1] == [("a", 1)]
    with pytest.raises(FieldError) as error:
        read_inputs(_info(input_names=["k"]), path)  # cell data only when trained so
    assert str(error.value) == (
        f"{path}: this checkpoint names its 1 input channels ['k'] (a checkpoint of an older "
        "meshop, which stored one name per channel) and the mesh has no field 'k'; its point "
        "fields are ['a']: name the fields that supply the inputs with --inputs NAME[,NAME...] "
        "(Python: inputs=[...])"
    )
    groups = tmp_path / "groups.msh"
    meshio.write(groups, gmsh_square(3), file_format="gmsh22", binary=False)
    data, layout = read_inputs(_info(input_names=["group:top"]), groups)
    assert layout == [("group:top", 1)] and data.x.sum() == 3  # the 3 nodes of the top side


def test_only_the_models_input_fields_are_decoded(tmp_path, monkeypatch):
    path = _square(tmp_path)
    mesh = meshio.read(path)
    mesh.point_data["junk"] = np.arange(4.0)  # a field the model does not read
    mesh.write(path)
    decoded = decoded_arrays(monkeypatch)
    info = {"pos_dim": 2, "x_channels": 1, "out_channels": 1, "params_channels": 0}
    data, layout = read_inputs({"data": {**info, "input_fields": [["a", 1]]}}, path)
    assert layout == [("a", 1)] and data.x.view(-1).tolist() == [1.0, 2.0, 3.0, 4.0]
    assert "a" in decoded and "junk" not in decoded and "k" not in decoded
    decoded.clear()
    with pytest.raises(FieldError, match=re.escape("point fields are ['a', 'junk']")):
        read_inputs({"data": {**info, "input_names": ["b"]}}, path)  # all read for the message
    assert "junk" in decoded


def test_a_missing_field_and_a_wrong_dimension_name_the_mesh_file(tmp_path):
    path = _square(tmp_path)
    with pytest.raises(FieldError, match=re.escape(str(path))):
        read_inputs(_info(input_fields=[["q", 1]]), path)
    with pytest.raises(MeshError) as error:
        read_inputs(_info(input_fields=[["a", 1]], pos_dim=3), path)
    assert str(error.value) == f"{path} is 2D but the model was trained on 3D domains"


def test_per_sample_parameters_are_read_as_one_float32_row(tmp_path):
    path = _square(tmp_path)
    ckpt = _info(input_fields=[["a", 1]], params_channels=2)
    data, _ = read_inputs(ckpt, path, params=[1.5, 2])
    assert data.params.dtype == torch.float32 and data.params.tolist() == [[1.5, 2.0]]
    with pytest.raises(FieldError) as error:
        read_inputs(ckpt, path)
    assert str(error.value) == (
        "the model was trained with 2 per-sample parameters; give them with --params v1,v2,..."
    )
    with pytest.raises(FieldError) as error:
        read_inputs(_info(input_fields=[["a", 1]]), path, params=[1.0])
    assert str(error.value) == (
        "the model was trained without per-sample parameters; drop --params"
    )
    with pytest.raises(FieldError, match=re.escape(f"{path} has 3 parameters but the model")):
        read_inputs(ckpt, path, params=[1, 2, 3])


def test_a_points_csv_is_never_overwritten_unless_asked(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("mine\n")
    points, fields = np.array([[0.0, 1.0]]), {"u": np.array([2.0])}
    with pytest.raises(FileExistsMeshopError) as error:
        write_points_csv(path, points, fields)
    assert str(error.value) == f"'{path}' already exists; pass --overwrite to replace it"
    assert path.read_text() == "mine\n"
    write_points_csv(path, points, fields, overwrite=True)
    assert path.read_text().splitlines()[0] == "x,y,u"


def test_predict_file_keeps_existing_outputs_unless_asked_and_writes_at_the_query_points(
    trained,
):
    root, run = trained
    data, a, _ = predict_case(6, 2.0)
    mesh = root / "infer.vtu"
    write_mesh(mesh, data, {"a": a}, overwrite=True)
    for out in (root / "kept.vtu", root / "kept.csv"):
        out.write_text("mine\n")
        with pytest.raises(FileExistsMeshopError):
            predict_file(run, mesh, out)
        assert out.read_bytes() == b"mine\n"
        predict_file(run, mesh, out, overwrite=True)
        assert out.read_bytes() != b"mine\n"  # a .vtu result is binary
    # query points from a .txt file: a mesh file of the points alone
    (root / "q.txt").write_text("0.5,0.5\n0.25,0.75\n")
    path, pred = predict_file(run, mesh, root / "q.vtu", query=root / "q.txt", overwrite=True)
    written = meshio.read(path)
    assert written.points[:, :2].tolist() == [[0.5, 0.5], [0.25, 0.75]]
    assert np.allclose(written.point_data["u"], pred[:, 0].numpy())
    # query points from a mesh file: the predictions on that mesh, with its cells
    query_mesh = root / "coarse.vtu"
    write_mesh(query_mesh, square_mesh(3), overwrite=True)
    path, pred = predict_file(run, mesh, root / "on_mesh.vtu", query=query_mesh, overwrite=True)
    written, coarse = meshio.read(path), meshio.read(query_mesh)
    assert len(pred) == len(coarse.points) == 9
    assert [c.data.tolist() for c in written.cells] == [c.data.tolist() for c in coarse.cells]
    assert np.allclose(written.point_data["u"], pred[:, 0].numpy())


def test_meshop_predict_in_chunks_writes_the_same_predictions(trained, capsys):
    root, run = trained
    data, a, _ = predict_case(12, 3.0)
    mesh = root / "chunked.vtu"
    write_mesh(mesh, data, {"a": a}, overwrite=True)
    written = {}
    for chunk in ("0", "7"):
        out = root / f"chunks_{chunk}.vtu"
        argv = ["predict", "--checkpoint", str(run), "--mesh", str(mesh), "--out", str(out)]
        assert main([*argv, "--chunk-nodes", chunk, "--overwrite"]) == 0
        written[chunk] = meshio.read(out).point_data["u"]
    assert np.allclose(written["0"], written["7"], rtol=1e-5, atol=1e-6)
    assert main([*argv, "--chunk-nodes", "-1"]) == 2
    assert "--chunk-nodes must be a number of nodes >= 0" in capsys.readouterr().err


def test_a_mesh_read_for_a_model_gets_quadrature_weights_only_when_the_model_reads_them(tmp_path):
    path = _square(tmp_path)
    for name, weighted in (("pit", True), ("galerkin", True), ("mlp", False), (None, True)):
        ckpt = _info(input_fields=[["a", 1]])
        if name is not None:
            ckpt["model_name"] = name
        data, _ = read_inputs(ckpt, path)
        assert ("weight" in data) == weighted, name
        if weighted:  # the square's two triangles lumped on their nodes
            assert data.weight.tolist() == pytest.approx([1 / 3, 1 / 6, 1 / 3, 1 / 6])
    # by configuration: the Galerkin Transformer on a latent mesh of its own reads them only
    # weighted; PiT unweighted reads none
    latent = {"latent_points": 2}
    for name, config, train, weighted in (
        ("galerkin", {}, latent, False),
        ("galerkin", {"weighted": True}, latent, True),
        ("galerkin", {}, {}, True),  # its latent mesh is the input mesh: the encoder's weights
        ("fourier", {"pos_dim": 1}, latent, True),  # the 1D grid path integrates with them
        ("pit", {"weighted": False}, latent, False),
        ("pit", {}, latent, True),
        ("ono", {}, latent, True),
    ):
        ckpt = _info(input_fields=[["a", 1]])
        ckpt.update(model_name=name, model_config=config, train_config=train)
        data, _ = read_inputs(ckpt, path)
        assert ("weight" in data) == weighted, (name, config, train)

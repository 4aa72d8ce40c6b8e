"""Vector fields keep their names and components from the files through training, the checkpoint
and prediction (command line and Python), and come back as one vector array per field."""

import json

import meshio
import numpy as np
import pytest
import torch

from meshop.cli import main
from meshop.data import field_layout, read_mesh, split_fields
from meshop.datasets import MeshFolder
from meshop.errors import FieldError
from meshop.models.registry import build_model
from meshop.train import checkpoint, prepare_data
from meshop.train.config import TrainConfig
from meshop.train.inference import predict, predict_fields, predict_file, read_inputs
from meshop.train.trainer import train


def bumpy_surface(n: int, height: float) -> meshio.Mesh:
    """A triangulated surface z = h sin(pi x) cos(pi y) over the unit square, embedded in 3D, with
    a scalar input 'load', a vector input 'normals' [N, 3] and targets 'pressure' (scalar) and
    'velocity' [N, 3]."""
    x, y = (a.ravel() for a in np.meshgrid(np.linspace(0, 1, n), np.linspace(0, 1, n)))
    z = height * np.sin(np.pi * x) * np.cos(np.pi * y)
    dzdx = height * np.pi * np.cos(np.pi * x) * np.cos(np.pi * y)
    dzdy = -height * np.pi * np.sin(np.pi * x) * np.sin(np.pi * y)
    normals = np.stack([-dzdx, -dzdy, np.ones_like(z)], 1)
    normals /= np.linalg.norm(normals, axis=1, keepdims=True)
    node = np.arange(n * n).reshape(n, n)
    a, b, c, d = node[:-1, :-1], node[:-1, 1:], node[1:, 1:], node[1:, :-1]
    tri = np.concatenate(
        [np.stack([a, b, c], -1).reshape(-1, 3), np.stack([a, c, d], -1).reshape(-1, 3)]
    )
    fields = {
        "load": x + height,
        "normals": normals,
        "pressure": z + x,
        "velocity": normals * (1.0 + y)[:, None],
    }
    return meshio.Mesh(np.stack([x, y, z], 1), [("triangle", tri)], point_data=fields)


INPUTS, TARGETS = ["load", "normals"], ["pressure", "velocity"]


@pytest.fixture
def surfaces(tmp_path):
    folder = tmp_path / "surfaces"
    folder.mkdir()
    for k in range(6):
        meshio.write(folder / f"car_{k}.vtu", bumpy_surface(5 + k % 2, 0.1 * (k + 1)))
    meshio.write(tmp_path / "new.vtu", bumpy_surface(7, 0.35))
    return folder


def cli(argv, capsys) -> str:
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert status == 0, err
    return out


def model_output(run, mesh_path):
    """The checkpoint's model applied directly to the mesh's stacked inputs [N, 4]."""
    model, ckpt = checkpoint.load_model(run)
    data = read_mesh(mesh_path, inputs=INPUTS)
    assert data.x.shape[1] == 4
    return predict(model, ckpt, data).numpy(), data


def test_mesh_folder_records_each_fields_name_and_components(surfaces):
    ds = MeshFolder(surfaces, inputs=INPUTS, targets=TARGETS, split="all", progress=False)
    assert ds.input_fields == [("load", 1), ("normals", 3)]
    assert ds.target_fields == [("pressure", 1), ("velocity", 3)]
    assert ds[0].x.shape[1] == 4 and ds[0].y.shape[1] == 4
    again = MeshFolder(surfaces, inputs=INPUTS, targets=TARGETS, split="all", progress=False)
    assert again.target_fields == ds.target_fields  # read back from the cache


def test_vector_fields_through_command_line_train_checkpoint_and_predict(
    surfaces, tmp_path, capsys
):
    run = tmp_path / "run"
    cli(
        [
            "train", "--dataset", "folder", "--data-dir", surfaces, "--model", "mlp",
            "--dataset-arg", f"inputs={json.dumps(INPUTS)}",
            "--dataset-arg", f"targets={json.dumps(TARGETS)}",
            "--epochs", 1, "--batch-size", 2, "--model-arg", "width=8",
            "--out", run, "--no-progress", "--no-figures",
        ],
        capsys,
    )  # fmt: skip
    info = checkpoint.load(run)["data"]
    assert info["input_fields"] == [["load", 1], ["normals", 3]]
    assert info["target_fields"] == [["pressure", 1], ["velocity", 3]]
    assert info["input_names"] == INPUTS and info["target_names"] == TARGETS
    expected, data = model_output(run, tmp_path / "new.vtu")

    cli(["predict", "--checkpoint", run, "--mesh", tmp_path / "new.vtu",
         "--out", tmp_path / "pred.vtu"], capsys)  # fmt: skip
    written = meshio.read(tmp_path / "pred.vtu")
    assert written.point_data["velocity"].shape == (49, 3)  # one vector array, not y1, y2, y3
    assert written.point_data["pressure"].shape == (49,)
    assert not {"y0", "y1", "x0"} & set(written.point_data)
    np.testing.assert_allclose(written.point_data["pressure"], expected[:, 0], rtol=1e-6)
    np.testing.assert_allclose(written.point_data["velocity"], expected[:, 1:4], rtol=1e-6)
    np.testing.assert_allclose(written.point_data["normals"], data.x[:, 1:4].numpy(), rtol=1e-6)

    cli(["predict", "--checkpoint", run, "--mesh", tmp_path / "new.vtu",
         "--out", tmp_path / "pred.csv"], capsys)  # fmt: skip
    lines = (tmp_path / "pred.csv").read_text().splitlines()
    assert lines[0] == "x,y,z,pressure,velocity_0,velocity_1,velocity_2"
    table = np.loadtxt(tmp_path / "pred.csv", delimiter=",", skiprows=1)
    np.testing.assert_allclose(table[:, 3:], expected, rtol=1e-5, atol=1e-6)


def test_vector_fields_through_python_train_checkpoint_and_predict(surfaces, tmp_path):
    train_set = MeshFolder(surfaces, inputs=INPUTS, targets=TARGETS, progress=False)
    model = build_model("mlp", in_channels=7, out_channels=4, pos_dim=3, width=8)
    config = TrainConfig(epochs=1, batch_size=2, progress=False)
    train(model, prepare_data(train_set, config=config), out_dir=tmp_path / "run")
    expected, _ = model_output(tmp_path / "run", tmp_path / "new.vtu")

    model, ckpt = checkpoint.load_model(tmp_path / "run")
    data, layout = read_inputs(ckpt, tmp_path / "new.vtu")
    assert layout == [("load", 1), ("normals", 3)]
    fields = predict_fields(model, ckpt, data)
    assert list(fields) == TARGETS and fields["velocity"].shape == (49, 3)
    np.testing.assert_allclose(fields["velocity"].numpy(), expected[:, 1:4], rtol=1e-6)

    path, pred = predict_file(tmp_path / "run", tmp_path / "new.vtu", tmp_path / "out.vtu")
    written = meshio.read(path)
    np.testing.assert_allclose(written.point_data["velocity"], expected[:, 1:4], rtol=1e-6)
    np.testing.assert_allclose(pred.numpy(), expected, rtol=1e-6)


def test_a_field_with_other_components_than_in_training_is_refused(surfaces, tmp_path):
    train_set = MeshFolder(surfaces, inputs=INPUTS, targets=TARGETS, progress=False)
    model = build_model("mlp", in_channels=7, out_channels=4, pos_dim=3, width=8)
    train(
        model,
        prepare_data(train_set, config=TrainConfig(epochs=1, progress=False)),
        out_dir=tmp_path / "run",
    )
    flat = bumpy_surface(5, 0.2)
    flat.point_data["normals"] = flat.point_data["normals"][:, :2]
    meshio.write(tmp_path / "flat.vtu", flat)
    with pytest.raises(FieldError, match="'normals' has 2 components but the model was trained"):
        predict_file(tmp_path / "run", tmp_path / "flat.vtu", tmp_path / "out.vtu")


def test_checkpoints_with_one_name_per_channel_still_load(surfaces, tmp_path):
    train_set = MeshFolder(surfaces, inputs=INPUTS, targets=TARGETS, progress=False)
    model = build_model("mlp", in_channels=7, out_channels=4, pos_dim=3, width=8)
    train(
        model,
        prepare_data(train_set, config=TrainConfig(epochs=1, progress=False)),
        out_dir=tmp_path / "run",
    )
    ckpt = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)
    for key, prefix in (("input", "x"), ("target", "y")):  # as older meshop versions wrote them
        del ckpt["data"][f"{key}_fields"]
        ckpt["data"][f"{key}_names"] = [f"{prefix}{i}" for i in range(4)]
    torch.save(ckpt, tmp_path / "old.pt")
    with pytest.raises(FieldError, match=r"one name per channel.*no field 'x0'.*--inputs"):
        predict_file(tmp_path / "old.pt", tmp_path / "new.vtu", tmp_path / "out.vtu")
    expected, _ = model_output(tmp_path / "run", tmp_path / "new.vtu")
    path, _ = predict_file(
        tmp_path / "old.pt", tmp_path / "new.vtu", tmp_path / "out.vtu", inputs=INPUTS
    )
    written = meshio.read(path)
    assert {"y0", "y1", "y2", "y3"} <= set(written.point_data)
    np.testing.assert_allclose(written.point_data["y2"], expected[:, 2], rtol=1e-6)


def test_field_layout_and_split_fields_are_inverse_to_stacking():
    mesh = bumpy_surface(4, 0.2)
    assert field_layout(mesh, TARGETS) == [("pressure", 1), ("velocity", 3)]
    y = torch.as_tensor(np.c_[mesh.point_data["pressure"], mesh.point_data["velocity"]])
    fields = split_fields(y, field_layout(mesh, TARGETS))
    assert fields["pressure"].shape == (16,) and fields["velocity"].shape == (16, 3)
    torch.testing.assert_close(fields["velocity"], y[:, 1:])
    with pytest.raises(FieldError, match="5 channels do not match"):
        split_fields(torch.zeros(3, 5), [("p", 1), ("u", 3)])

"""Named groups of a mesh file (gmsh physical groups, cell sets) as node features and masks, and
integrals of node fields over the domain and over a group, checked against analytic integrals."""

import json

import meshio
import numpy as np
import pytest
import torch

from meshop.cli import main
from meshop.data import (
    from_meshio,
    group_masks,
    group_weights,
    integrate,
    mesh_integrals,
    read_mesh,
)
from meshop.datasets import MeshFolder
from meshop.errors import ConfigError, FieldError
from meshop.models.registry import build_model
from meshop.train import checkpoint, prepare_data
from meshop.train.config import TrainConfig
from meshop.train.inference import predict_fields, predict_file, read_inputs
from meshop.train.trainer import train
from tests.helpers import gmsh_square

GROUPS = ["bottom", "left", "plate", "right", "top"]  # sorted by name


@pytest.fixture
def square_msh(tmp_path):
    path = tmp_path / "square.msh"
    meshio.write(path, gmsh_square(), file_format="gmsh22", binary=False)
    return path


def test_gmsh_physical_groups_become_one_hot_node_features(square_msh):
    data = read_mesh(square_msh, inputs=["u"], groups="features")
    assert data.x.shape == (36, 1 + len(GROUPS))
    x, y = data.pos[:, 0], data.pos[:, 1]
    expected = {"bottom": y == 0, "left": x == 0, "right": x == 1, "top": y == 1}
    for column, name in enumerate(GROUPS, start=1):
        want = expected.get(name, torch.ones(36, dtype=torch.bool))
        assert torch.equal(data.x[:, column].bool(), want), name
    corner = int(torch.nonzero((x == 0) & (y == 0))[0])
    assert data.x[corner, 1:].tolist() == [1, 1, 1, 0, 0]  # on bottom and left (and the plate)
    single = read_mesh(square_msh, inputs=["u", "group:top"])
    torch.testing.assert_close(single.x[:, 1], data.x[:, 5])


def test_groups_as_masks_and_from_cell_and_point_sets(square_msh):
    data = read_mesh(square_msh, groups="masks")
    assert torch.equal(data.group_top, data.pos[:, 1] == 1) and data.group_top.dtype == torch.bool
    mesh = gmsh_square()
    plain = meshio.Mesh(
        mesh.points,
        mesh.cells,
        cell_sets={"wall": [np.arange(5), np.array([], dtype=int)]},  # the bottom's 5 lines
        point_sets={"probe": np.array([7, 8])},
    )
    masks = group_masks(plain)
    assert list(masks) == ["probe", "wall"]
    assert np.flatnonzero(masks["wall"]).tolist() == list(range(6))
    assert np.flatnonzero(masks["probe"]).tolist() == [7, 8]
    assert from_meshio(plain, groups="features").x.shape == (36, 2)


def test_unknown_groups_and_options_are_refused(square_msh):
    with pytest.raises(FieldError, match=r"no group 'wall'.*\['bottom', 'left'"):
        read_mesh(square_msh, inputs=["group:wall"])
    with pytest.raises(ConfigError, match="groups must be one of"):
        read_mesh(square_msh, groups="onehot")
    with pytest.raises(FieldError, match=r"no cell group 'wall'.*'top'"):
        group_weights(meshio.read(square_msh), "wall")


def test_integrals_over_the_domain_and_groups_match_analytic_values(square_msh):
    mesh = meshio.read(square_msh)
    x, y = mesh.points[:, 0], mesh.points[:, 1]
    fields = {"f": 1 + 2 * x + 3 * y, "v": np.c_[x, y**2]}
    result = mesh_integrals(square_msh, fields, groups=["top", "left"])
    assert result["domain"]["f"] == pytest.approx(3.5)  # linear: exact
    assert result["top"]["f"] == pytest.approx(5.0)  # int_0^1 (4 + 2x) dx
    assert result["left"]["f"] == pytest.approx(2.5)  # int_0^1 (1 + 3y) dy
    assert result["domain"]["v"][0] == pytest.approx(0.5)
    assert result["domain"]["v"][1] == pytest.approx(1 / 3 + 0.2**2 / 6)  # trapezoid rule, h = 0.2
    assert result["left"]["v"][0] == pytest.approx(0.0)
    w = torch.as_tensor(group_weights(mesh, "top"))
    assert float(integrate(torch.ones(36, dtype=torch.float64), w)) == pytest.approx(1.0)


def test_integrals_on_a_3d_surface_and_a_tetrahedral_volume():
    t = np.linspace(0, 1, 5)
    import skfem

    box = skfem.MeshTet.init_tensor(t, t, t)
    tets = meshio.Mesh(box.p.T, [("tetra", box.t.T)])
    x, _, z = box.p
    result = mesh_integrals(tets, {"g": x + z, "one": np.ones_like(x)})
    assert result["domain"]["one"] == pytest.approx(1.0)
    assert result["domain"]["g"] == pytest.approx(1.0)
    tilted = meshio.Mesh(
        np.array([[0, 0, 0], [1, 0, 1], [0, 1, 0.0]]), [("triangle", np.array([[0, 1, 2]]))]
    )
    area = mesh_integrals(tilted, {"one": np.ones(3)})["domain"]["one"]
    assert area == pytest.approx(np.sqrt(2) / 2)  # triangle areas in 3D, not projections


def test_predict_integrate_reports_integrals_of_the_models_predictions(tmp_path, capsys):
    folder = tmp_path / "runs"
    folder.mkdir()
    for k in range(4):
        meshio.write(folder / f"case_{k}.msh", gmsh_square(5, shift=k), file_format="gmsh22")
    train_set = MeshFolder(
        folder, inputs=["u"], targets=["u"], pattern="*.msh", groups="features", progress=False
    )
    assert train_set.input_fields == [("u", 1)] + [(f"group:{g}", 1) for g in GROUPS]
    model = build_model("mlp", in_channels=8, out_channels=1, pos_dim=2, width=8)
    train(
        model,
        prepare_data(train_set, config=TrainConfig(epochs=1, progress=False)),
        out_dir=tmp_path / "run",
    )
    new = tmp_path / "new.msh"
    meshio.write(new, gmsh_square(7, shift=0.5), file_format="gmsh22")

    model, ckpt = checkpoint.load_model(tmp_path / "run")
    data, layout = read_inputs(ckpt, new)
    assert [n for n, _ in layout][1:] == [f"group:{g}" for g in GROUPS]
    pred = predict_fields(model, ckpt, data)["u"].numpy()
    expected = mesh_integrals(new, {"u": pred}, groups=["top"])

    argv = ["predict", "--checkpoint", tmp_path / "run", "--mesh", new,
            "--out", tmp_path / "p.vtu", "--integrate", "--group", "top"]  # fmt: skip
    assert main([str(a) for a in argv]) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["domain"]["u"] == pytest.approx(expected["domain"]["u"], rel=1e-6)
    assert printed["top"]["u"] == pytest.approx(expected["top"]["u"], rel=1e-6)
    _, same = predict_file(tmp_path / "run", new, tmp_path / "p2.vtu")
    np.testing.assert_allclose(same[:, 0].numpy(), pred, rtol=1e-6)

    np.savetxt(tmp_path / "q.csv", np.ones((2, 2)), delimiter=",")
    argv = ["predict", "--checkpoint", tmp_path / "run", "--mesh", new, "--query",
            tmp_path / "q.csv", "--out", tmp_path / "q_out.csv", "--integrate"]  # fmt: skip
    assert main([str(a) for a in argv]) == 2
    assert "--integrate needs a mesh" in capsys.readouterr().err
    argv = ["predict", "--checkpoint", tmp_path / "run", "--mesh", new,
            "--out", tmp_path / "p3.vtu", "--group", "top"]  # fmt: skip
    assert main([str(a) for a in argv]) == 2
    assert "needs --integrate" in capsys.readouterr().err
    argv = ["predict", "--checkpoint", tmp_path / "run", "--mesh", new,
            "--out", tmp_path / "p4.vtu", "--integrate", "--group", "wall"]  # fmt: skip
    assert main([str(a) for a in argv]) == 2
    assert "no cell group 'wall'" in capsys.readouterr().err
    assert not (tmp_path / "p4.vtu").exists()  # refused before anything was written

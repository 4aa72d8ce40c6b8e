"""meshop.train.demo: the demo's settings, the points it samples in a mesh, and everything a run
writes (summary, log, test meshes with their fields, predictions at new points, checkpoints)."""

import csv
import dataclasses
import json
import time

import meshio
import numpy as np
import pytest
import torch

from meshop._pyg import Data
from meshop.data import make_loader, set_query_points
from meshop.models.registry import build_model
from meshop.train import demo as D
from meshop.train import load_model
from meshop.train.demo import QUICK, DemoSettings, points_in_mesh, run_demo
from tests.helpers import TINY_DEMO

# the tiny PiT and MLP of test_runs_reproduce, trained and evaluated a little longer
TINY = dataclasses.replace(
    TINY_DEMO, num_test=3, epochs=2, lr=2e-3, eval_every=2, vtu_samples=2, new_points=7
)


def test_the_demo_settings_are_those_of_its_recorded_run():
    """The defaults are the run that benchmarks/results/demo.json records (and the README shows):
    its sizes, epochs and both models' parameter counts."""
    with open("benchmarks/results/demo.json") as f:
        recorded = json.load(f)
    s = DemoSettings()
    assert recorded["settings"] == {"num_train": s.num_train, "num_test": s.num_test, "epochs": 40}
    assert s.epochs == 40
    for name, kwargs in (("pit", s.pit), ("mlp", s.mlp)):
        model = build_model(name, in_channels=2, out_channels=1, pos_dim=2, **kwargs)
        assert sum(p.numel() for p in model.parameters()) == recorded["results"][name]["parameters"]
    assert (s.max_area, s.batch_size, s.lr, s.eval_every, s.latent_points) == (
        8e-4,
        2,
        5e-3,
        4,
        256,
    )
    assert (s.vtu_samples, s.new_points) == (4, 2000)
    assert s.pit["weighted"] is False  # the papers' unweighted attention
    assert s.pit["encoder_quantile"] == 0.02 and "encoder_k" not in s.pit  # the paper's field
    assert (QUICK.num_train, QUICK.num_test, QUICK.epochs, QUICK.new_points) == (8, 4, 2, 50)


ANGLE = 0.5  # radians: a rotated mesh, so that no edge lies along an axis


def square_mesh():
    """The unit square as two triangles and a thin triangle of area 1/100 beside it, rotated."""
    pos = torch.tensor([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0], [2.0, 0.0], [2.0, 0.02]])
    c, s = np.cos(ANGLE), np.sin(ANGLE)
    rotation = torch.tensor([[c, -s], [s, c]], dtype=torch.float32)
    face = torch.tensor([[0, 1, 2], [0, 2, 3], [1, 4, 5]]).T
    return Data(pos=pos @ rotation.T, face=face)


def barycentric_inside(points, corners):
    """Which points lie in the triangle ``corners`` [3, 2] (closed, to rounding)."""
    e = corners[1:] - corners[:1]
    lam = np.linalg.solve(e.T, (points - corners[0]).T).T
    return (lam >= -1e-9).all(1) & (lam.sum(1) <= 1 + 1e-9)


def test_points_in_mesh_are_uniform_in_the_domain_and_seeded():
    mesh = square_mesh()
    points = points_in_mesh(mesh, 20000, seed=3)
    assert points.shape == (20000, 2) and points.dtype == np.float64
    corners = mesh.pos[mesh.face.T].double().numpy()  # [3 triangles, 3, 2]
    inside = np.stack([barycentric_inside(points, tri) for tri in corners])
    assert inside.any(0).all()
    # a triangle is drawn with probability proportional to its area: 0.5 : 0.5 : 0.01 of 1.01
    fractions = inside.mean(1)
    np.testing.assert_allclose(fractions, [0.5 / 1.01, 0.5 / 1.01, 0.01 / 1.01], atol=0.012)
    assert fractions[2] == pytest.approx(0.01 / 1.01, abs=0.003)
    # uniform within a triangle: the mean of its points is its centroid
    for i in range(3):
        np.testing.assert_allclose(points[inside[i]].mean(0), corners[i].mean(0), atol=0.012)
    np.testing.assert_array_equal(
        points_in_mesh(mesh, 50, seed=3), points_in_mesh(mesh, 50, seed=3)
    )
    assert not np.array_equal(points_in_mesh(mesh, 50, seed=3), points_in_mesh(mesh, 50, seed=4))
    np.testing.assert_array_equal(points_in_mesh(mesh, 50), points_in_mesh(mesh, 50, seed=0))


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo")
    lines = []
    titles = {}
    start = time.perf_counter()
    with pytest.MonkeyPatch.context() as patch:
        for name in ("plot_loss_curve", "plot_sample"):
            real = getattr(D, name)

            def spy(*args, real=real, title=None, **kwargs):
                titles[args[-1].name] = title
                return real(*args, title=title, **kwargs)

            patch.setattr(D, name, spy)
        patch.chdir(root)  # the demo writes to runs/demo unless told otherwise
        summary = run_demo(
            data_dir=str(root / "data"),
            epochs=1,
            progress=False,
            log=lines.append,
            settings=TINY,
        )
    summary["measured_seconds"] = time.perf_counter() - start
    return root, summary, lines, titles


class Generated(Exception):
    """Raised by a stand-in dataset, to see what the demo asked for without training."""


def test_the_demo_asks_for_its_own_sizes_quick_ones_or_the_given_ones(monkeypatch, tmp_path):
    from meshop.datasets import elasticity

    asked = []

    def dataset(data_dir, split, num_train, num_test, max_area, progress):
        asked.append((data_dir, split, num_train, num_test, max_area, progress))
        raise Generated

    monkeypatch.setattr(elasticity, "Elasticity", dataset)
    for kwargs, s in (({}, DemoSettings()), ({"quick": True}, QUICK), ({"settings": TINY}, TINY)):
        asked.clear()
        with pytest.raises(Generated):
            run_demo(str(tmp_path / "out"), data_dir="here", log=lambda *_: None, **kwargs)
        assert asked == [("here", "train", s.num_train, s.num_test, s.max_area, True)]
    with pytest.raises(Generated):
        run_demo(str(tmp_path / "out"), progress=False, log=lambda *_: None)
    assert asked[-1] == (None, "train", 500, 100, 8e-4, False)


def test_the_demo_summary_and_log_report_both_models(demo):
    root, summary, lines, _ = demo
    out = root / "runs" / "demo"
    summary = {key: value for key, value in summary.items() if key != "measured_seconds"}
    assert json.loads((out / "summary.json").read_text()) == json.loads(json.dumps(summary))
    assert summary["total_seconds"] <= demo[1]["measured_seconds"]
    assert (out / "summary.json").read_text().startswith('{\n  "settings": {\n    "num_train": 4')
    assert summary["settings"] == {"num_train": 4, "num_test": 3, "epochs": 1}  # epochs given
    assert 0 < summary["data_seconds"] < summary["total_seconds"]
    assert list(summary["results"]) == ["pit", "mlp"]
    for name in ("pit", "mlp"):
        model, ckpt = load_model(out / name)
        r = summary["results"][name]
        assert r["parameters"] == sum(p.numel() for p in model.parameters())
        assert ckpt["epoch"] == 1
        assert r["test_rel_l2"] == ckpt["history"][-1]["test_rel_l2"]
        assert r["test_rel_l2_median"] == ckpt["history"][-1]["test_rel_l2_median"]
        assert 0 < r["train_seconds"] < summary["total_seconds"]
    pit, mlp = summary["results"]["pit"], summary["results"]["mlp"]
    assert lines[:2] == [
        "Elasticity: 4 train / 3 test samples (generated once, then cached)",
        f"training pit ({pit['parameters']:,} parameters) for 1 epochs",
    ]
    assert lines[2] == f"training mlp ({mlp['parameters']:,} parameters) for 1 epochs"
    assert lines[3:5] == ["", "model  parameters  test rel. L2   median  train time"]
    for line, (name, r) in zip(lines[5:7], summary["results"].items()):
        assert line == (
            f"{name:<6} {r['parameters']:>10,} {r['test_rel_l2']:>13.2%} "
            f"{r['test_rel_l2_median']:>8.2%} {r['train_seconds']:>10.0f}s"
        )
    assert lines[7] == f"total {summary['total_seconds']:.0f}s; results in runs/demo/"
    assert len(lines) == 8


def test_the_demo_trains_both_models_with_the_settings_and_the_data_they_name(demo):
    root, _, _, _ = demo
    for name, latent in (("pit", TINY.latent_points), ("mlp", None)):
        model, ckpt = load_model(root / "runs" / "demo" / name)
        config = ckpt["train_config"]
        assert (config["epochs"], config["batch_size"], config["lr"]) == (1, 2, 2e-3)
        assert (config["schedule"], config["clip"], config["eval_every"]) == ("cosine", 1.0, 2)
        assert config["progress"] is False  # as given
        assert (model.config["in_channels"], model.config["out_channels"]) == (2, 1)
        assert config["latent_points"] == latent
        assert ckpt["data"]["dataset"] == "elasticity"
        assert ckpt["data"]["dataset_args"] == {"num_train": 4, "num_test": 3, "max_area": 8e-3}
        assert ckpt["data"]["data_dir"] == str(root / "data")
        assert ckpt["data"]["target_names"] == ["von_mises"] and ckpt["data"]["input_names"] == []
    pit, _ = load_model(root / "runs" / "demo" / "pit")
    assert pit.config["width"] == 8 and pit.config["weighted"] is True  # the TINY settings
    mlp, _ = load_model(root / "runs" / "demo" / "mlp")
    assert mlp.config["width"] == 8


def test_the_demo_writes_test_meshes_with_targets_predictions_and_errors(demo):
    from meshop.datasets.elasticity import Elasticity
    from meshop.train.inference import latent_of

    root, _, _, _ = demo
    out = root / "runs" / "demo"
    test_set = Elasticity(str(root / "data"), "test", 4, 3, max_area=8e-3, progress=False)
    files = sorted(p.name for p in (out / "test_samples").iterdir())
    assert files == ["sample_000.vtu", "sample_001.vtu"]
    models = {name: load_model(out / name) for name in ("pit", "mlp")}
    for i in range(2):
        mesh = meshio.read(out / "test_samples" / f"sample_{i:03d}.vtu")
        data = test_set[i]
        np.testing.assert_allclose(mesh.points[:, :2], data.pos.numpy(), rtol=1e-6)
        target = data.y[:, 0].numpy()
        np.testing.assert_allclose(mesh.point_data["von_mises"], target, rtol=1e-6)
        for name, (model, ckpt) in models.items():
            with torch.no_grad():
                batch = next(iter(make_loader([latent_of(ckpt)(data)], 1)))
                pred = model.eval()(batch)[:, 0].numpy()
            np.testing.assert_allclose(mesh.point_data[f"{name}_prediction"], pred, atol=1e-5)
            np.testing.assert_allclose(mesh.point_data[f"{name}_error"], pred - target, atol=1e-5)
    figures = sorted(p.name for p in (out / "figures").iterdir())
    assert figures == ["loss_mlp.png", "loss_pit.png", "test_000_pit.png", "test_001_pit.png"]
    titles = demo[3]
    assert titles["loss_pit.png"] == "pit" and titles["loss_mlp.png"] == "mlp"
    model, ckpt = models["pit"]
    for i in range(2):
        data = test_set[i]
        with torch.no_grad():
            pred = model(next(iter(make_loader([latent_of(ckpt)(data)], 1))))
        err = float(torch.linalg.vector_norm(pred - data.y) / torch.linalg.vector_norm(data.y))
        assert titles[f"test_{i:03d}_pit.png"] == f"PiT, test sample {i}: relative L2 {err:.2%}"


def test_the_demo_predicts_at_new_points_of_a_test_mesh(demo):
    from meshop.datasets.elasticity import Elasticity
    from meshop.train.inference import latent_of

    root, _, _, _ = demo
    out = root / "runs" / "demo"
    sample = Elasticity(str(root / "data"), "test", 4, 3, max_area=8e-3, progress=False)[0]
    with open(out / "new_points.csv") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["x", "y", "von_mises"] and len(rows) == 1 + TINY.new_points
    table = np.array(rows[1:], dtype=np.float64)
    points = points_in_mesh(sample, TINY.new_points)
    np.testing.assert_allclose(table[:, :2], points, rtol=1e-6)
    model, ckpt = load_model(out / "pit")
    data = sample.clone()
    del data.y
    set_query_points(data, points)
    with torch.no_grad():
        pred = model.eval()(latent_of(ckpt)(data))[:, 0].numpy()
    np.testing.assert_allclose(table[:, 2], pred, rtol=1e-5, atol=1e-6)
    assert not np.isin(points, sample.pos.numpy()).all(1).any()  # no node of the mesh
    mesh = meshio.read(out / "new_points.vtu")
    np.testing.assert_allclose(mesh.points[:, :2], points, rtol=1e-6)
    np.testing.assert_allclose(mesh.point_data["von_mises"], pred, rtol=1e-5, atol=1e-6)

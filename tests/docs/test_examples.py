"""Every script in examples/ runs in its smoke mode (tiny sizes) and writes what it promises."""

import importlib.util
import math
from pathlib import Path

import meshio
import numpy as np
import pytest

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.py"))

#: files (relative to --out) each example must write, besides its checkpoints
WRITES = {
    "elasticity_pit": ["new_points.csv", "test_sample.vtu"],
    "airfoil_ono_pit": ["ono/metrics.jsonl", "pit/metrics.jsonl"],
    "darcy_galerkin": ["run/metrics.jsonl"],
    "burgers_galerkin_fourier": ["galerkin/metrics.jsonl", "fourier/metrics.jsonl"],
    "bring_your_own_meshes": ["prediction_nodes.vtu", "prediction_grid.vtu", "meshes/case_000.vtu"],
    "surface_meshes_3d": ["prediction_surface.vtu", "prediction_shell.csv", "meshes/case_000.vtu"],
    "split_one_mesh": ["prediction.vtu"],
}


def load(path: Path):
    spec = importlib.util.spec_from_file_location(f"example_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_use_case_has_an_example():
    assert {p.stem for p in EXAMPLES} == set(WRITES)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_runs_in_smoke_mode(path, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MESHOP_DATA", str(tmp_path / "data"))
    out = tmp_path / "out"
    results = load(path).main(["--smoke", "--out", str(out)])
    values = list(results.values()) if "test_rel_l2" not in results else [results["test_rel_l2"]]
    assert values and all(math.isfinite(v) and v > 0 for v in values)
    assert "relative L2" in capsys.readouterr().out
    assert list(out.rglob("checkpoint.pt"))
    for name in WRITES[path.stem]:
        assert (out / name).is_file(), name


def test_bring_your_own_meshes_predicts_on_a_grid_beyond_the_cells(tmp_path, monkeypatch):
    monkeypatch.setenv("MESHOP_DATA", str(tmp_path / "data"))
    load(EXAMPLES[0].with_name("bring_your_own_meshes.py")).main(
        ["--smoke", "--out", str(tmp_path)]
    )
    grid = meshio.read(tmp_path / "prediction_grid.vtu")
    assert grid.points[:, :2].min() < 0 and grid.points[:, :2].max() > 1  # outside the unit cell
    assert grid.point_data["u"].shape == (121,) and np.isfinite(grid.point_data["u"]).all()
    nodes = meshio.read(tmp_path / "prediction_nodes.vtu")
    assert {"f", "u"} <= set(nodes.point_data)


def test_surface_example_writes_vector_fields_on_the_sample_sphere(tmp_path, capsys):
    load(EXAMPLES[0].with_name("surface_meshes_3d.py")).main(["--smoke", "--out", str(tmp_path)])
    surface = meshio.read(tmp_path / "prediction_surface.vtu")
    assert surface.points.shape == (400, 3) and surface.point_data["velocity"].shape == (400, 3)
    header = (tmp_path / "prediction_shell.csv").read_text().splitlines()[0]
    assert header == "x,y,z,pressure,velocity_0,velocity_1,velocity_2"
    assert "integral of the pressure over the surface" in capsys.readouterr().out


def test_surface_example_trains_pits_pointwise_decoder_on_request(tmp_path, monkeypatch):
    import torch

    monkeypatch.setenv("MESHOP_DATA", str(tmp_path / "data"))
    example = load(EXAMPLES[0].with_name("surface_meshes_3d.py"))
    example.main(["--smoke", "--model", "pit", "--pointwise", "--out", str(tmp_path / "out")])
    (checkpoint,) = (tmp_path / "out").rglob("checkpoint.pt")
    config = torch.load(checkpoint, weights_only=False)["model_config"]
    assert config["pointwise"] is True

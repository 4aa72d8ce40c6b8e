"""benchmarks.accuracy.folder_zero_shot: the generated datasets written as mesh folders (a grid as
its quadrilaterals), trained on by ``meshop train --dataset folder`` and evaluated at finer levels
by ``meshop evaluate --all-files``."""

import json

import numpy as np
import torch

from benchmarks.accuracy import folder_zero_shot
from meshop.data import read_mesh, write_mesh
from meshop.data.domains import uniform_grid


def test_a_grid_sample_is_written_with_its_cells_weights(tmp_path):
    """Read back from its file, a grid sample has the quadrature weights of its cells (half and
    quarter cells at the edges and corners), as ``uniform_grid(weights="cells")`` gives them."""
    grid = uniform_grid((5, 7), weights="cells")
    path = write_mesh(tmp_path / "g.vtu", folder_zero_shot.as_mesh(grid), {"a": grid.pos[:, 0]})
    read = read_mesh(path)
    np.testing.assert_allclose(read.pos.numpy(), grid.pos.numpy(), atol=1e-7)
    np.testing.assert_allclose(read.weight.numpy(), grid.weight.numpy(), rtol=1e-5)
    assert read.cell_index_quad.shape == (4, 4 * 6)
    mesh = torch.zeros(3, 2)  # a mesh sample (no grid_shape) is written as it is
    assert folder_zero_shot.as_mesh(grid.__class__(pos=mesh)).pos is mesh


def test_folder_runs_are_evaluated_at_every_level(tmp_path):
    out, runs = tmp_path / "out", tmp_path / "runs"
    argv = ["--quick", "--datasets", "darcy", "--data-dir", str(tmp_path / "data")]
    folder_zero_shot.main([*argv, "--runs", str(runs), "--out", str(out)])
    (record,) = json.loads((out / "folder_zero_shot.json").read_text())["records"]
    assert record["levels"] == [6, 11, 21] and record["model"] == "mlp"
    assert record["mean_nodes"] == [36, 121, 441]  # the grids, n x n nodes
    assert all(0 < e < 10 for e in record["test_rel_l2"])
    assert "inputs=['a'], targets=['u']" in record["settings"]
    # the test folders hold every test sample of their level, the training folder the training
    # split; what the table shows is the record's errors and their ratios
    assert len(list((runs / "data" / "darcy" / "test-21").glob("*.vtu"))) == 2
    assert len(list((runs / "data" / "darcy" / "train").glob("*.vtu"))) == 4
    page = (out / "folder_zero_shot.md").read_text()
    e = record["test_rel_l2"]
    assert f"| MLP baseline | {e[0]:.4f} | {e[1]:.4f} | {e[2]:.4f} | {e[1] / e[0]:.2f} |" in page
    # --resume keeps the measured run: nothing is trained again
    (runs / "darcy-mlp-seed0" / "checkpoint.pt").unlink()
    folder_zero_shot.main([*argv, "--runs", str(runs), "--out", str(out), "--resume"])
    assert json.loads((out / "folder_zero_shot.json").read_text())["records"] == [record]
    assert not (runs / "darcy-mlp-seed0" / "checkpoint.pt").exists()
    # a setting over the folder rules: rows of their own, named with it, beside the defaults'
    folder_zero_shot.main([*argv, "--runs", str(runs), "--out", str(out), "--resume",
                           "--train-arg", "lr=0.002"])  # fmt: skip
    both = json.loads((out / "folder_zero_shot.json").read_text())["records"]
    assert both[0] == record and both[1]["train_args"] == ["lr=0.002"]
    assert "lr 0.002" in both[1]["settings"] and "lr 0.002" not in record["settings"]
    assert "| MLP baseline, lr=0.002 |" in (out / "folder_zero_shot.md").read_text()

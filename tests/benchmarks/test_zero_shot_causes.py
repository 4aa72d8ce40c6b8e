"""The table of what changes with the grid for a PiT on Darcy (benchmarks/accuracy/
zero_shot_causes.py)."""

import argparse
import json

import pytest
import torch

from benchmarks.accuracy import zero_shot_causes
from meshop.data import uniform_grid


def test_subgrid_is_the_coarser_grids_sample_of_the_same_fields():
    g = torch.Generator().manual_seed(0)
    fine = uniform_grid((9, 9), x=torch.randn(81, generator=g), y=torch.randn(81, generator=g))
    coarse = zero_shot_causes.subgrid(fine, 4)
    assert coarse.grid_shape == (3, 3)
    expected = uniform_grid((3, 3))
    torch.testing.assert_close(coarse.pos, expected.pos)
    torch.testing.assert_close(coarse.weight, expected.weight)
    grid = fine.x.view(9, 9)
    torch.testing.assert_close(coarse.x.view(3, 3), grid[::4, ::4])
    # bilinear upsampling of a linear field is exact
    linear = (2 * coarse.pos[:, :1] - coarse.pos[:, 1:]).contiguous()
    wanted = 2 * fine.pos[:, :1] - fine.pos[:, 1:]
    torch.testing.assert_close(zero_shot_causes.upsample(linear, coarse, fine), wanted)


@pytest.mark.parametrize(
    ("model", "small"),
    [("pit", {"width": 8, "layers": 1}), ("transolver", {"width": 8, "layers": 1, "slices": 4})],
)
def test_zero_shot_causes_runs_on_a_checkpoint_and_writes_its_tables(tmp_path, model, small):
    from benchmarks.lib.training_runs import run_config
    from meshop.train.run import train_run

    args = argparse.Namespace(quick=True, seed=0, data_dir=str(tmp_path / "data"))
    out = tmp_path / f"darcy-{model}"
    run = run_config("darcy", model, 1, out, args, {"model": {**small, "heads": 2}})
    train_run(run, figures=False, log=lambda *_: 0)
    zero_shot_causes.main([str(out), "--samples", "1", "--out", str(tmp_path / "results")])
    data = json.loads((tmp_path / "results" / "zero_shot_causes.json").read_text())
    rows = {r["variant"]: r["errors"] for r in data["records"] if "variant" in r}
    assert "as trained (every grid its own)" in rows
    for errors in rows.values():
        assert errors.keys() == {"6", "11", "21"}
    trained = rows["as trained (every grid its own)"]
    # on the training grid, the inputs and outputs held there are the model as trained
    held = [
        "input on the training grid, outputs at the finer nodes",
        "input on the finer grid, outputs at the training nodes",
        "input at as many farthest points of the finer grid as the training grid has",
        "training-grid prediction, interpolated",
    ]
    pit_only = [
        "latent nodes within 0.1 of the boundary encoded from the training grid",
        "the other latent nodes encoded from the training grid",
    ]
    assert all((name in rows) == (model == "pit") for name in pit_only)
    for name in held + pit_only * (model == "pit"):
        assert rows[name]["6"] == pytest.approx(trained["6"], rel=1e-5), name
    text = (tmp_path / "results" / "zero_shot_causes.md").read_text()
    assert text.startswith("## ") and "| 6x6 | 11x11 | 21x21 |" in text

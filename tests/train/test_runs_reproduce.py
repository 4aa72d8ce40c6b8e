"""Runs that the docs describe from the command line: the demo is seeded (two runs give the same
numbers, whatever the generators' states before), and `meshop evaluate --dataset-arg
resolution=...` evaluates a checkpoint zero-shot on a finer grid."""

import json

import numpy as np
import pytest
import torch

from meshop.data import make_loader
from meshop.datasets.registry import build_dataset
from meshop.train import checkpoint, load_model
from meshop.train.demo import DemoSettings, run_demo
from tests.helpers import TINY_DEMO, run_ok


def test_two_demo_runs_give_the_same_numbers(tmp_path):
    summaries = []
    for i in range(2):
        torch.manual_seed(100 + i)  # other generator states before each run
        np.random.seed(100 + i)  # noqa: NPY002
        summary = run_demo(
            str(tmp_path / f"demo{i}"),
            data_dir=str(tmp_path / f"data{i}"),  # the data is generated twice too
            progress=False,
            log=lambda *_: None,
            settings=TINY_DEMO,
        )
        summaries.append(summary)
    for name in ("pit", "mlp"):
        first, second = summaries[0]["results"][name], summaries[1]["results"][name]
        for key in ("parameters", "test_rel_l2", "test_rel_l2_median"):
            assert first[key] == second[key], (name, key)
        a, b = (
            checkpoint.load(tmp_path / "demo0" / name),
            checkpoint.load(tmp_path / "demo1" / name),
        )
        for key, value in a["state_dict"].items():
            assert torch.equal(value, b["state_dict"][key]), (name, key)
    csv = [(tmp_path / f"demo{i}" / "new_points.csv").read_text() for i in range(2)]
    assert csv[0] == csv[1]


def test_meshop_evaluate_with_a_resolution_dataset_arg_evaluates_on_the_finer_grid(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("MESHOP_DATA", str(tmp_path / "data"))
    run = tmp_path / "run"
    argv = ["train", "--dataset", "darcy", "--model", "galerkin", "--epochs", 1, "--batch-size", 2]
    argv += ["--dataset-arg", "num_train=2", "--dataset-arg", "num_test=2"]
    argv += ["--dataset-arg", "resolution=9", "--dataset-arg", "fine_resolution=17"]
    for arg in ("width=8", "heads=1", "layers=1", "spectral_width=4", "modes=2"):
        argv += ["--model-arg", arg]
    run_ok([*argv, "--out", run, "--no-progress", "--no-figures"], capsys)

    coarse = json.loads(run_ok(["evaluate", "--checkpoint", run], capsys))
    fine = json.loads(
        run_ok(["evaluate", "--checkpoint", run, "--dataset-arg", "resolution=17"], capsys)
    )
    assert coarse["mean_nodes"] == 81 and fine["mean_nodes"] == 289
    model, ckpt = load_model(run)
    args = {**ckpt["data"]["dataset_args"], "resolution": 17}
    test_set = build_dataset("darcy", "test", None, **args)
    errors = []
    with torch.no_grad():
        for batch in make_loader(list(test_set), 1):
            assert batch.pos.shape == (289, 2)
            pred = model(batch)
            errors.append(float((pred - batch.y).norm() / batch.y.norm()))
    assert fine["samples"] == 2
    assert fine["test_rel_l2"] == pytest.approx(np.mean(errors), rel=1e-5)
    assert fine["test_rel_l2"] != pytest.approx(coarse["test_rel_l2"], rel=1e-3)


def test_the_demo_trains_the_pit_form_its_quoted_figures_were_measured_with():
    """README and docs/training.md quote the demo run with the papers' unweighted attention."""
    settings = DemoSettings()
    assert settings.pit["weighted"] is False
    assert (settings.num_train, settings.epochs, settings.batch_size) == (500, 40, 2)

"""Predictions of a trained checkpoint through `predict`, `meshop predict` and `meshop evaluate`
equal the trained model's own output, in physical units, on the farthest-point latent mesh the
checkpoint was trained with. The reference is rebuilt by hand from the checkpoint's weights and
normaliser statistics."""

import json

import meshio
import numpy as np
import pytest
import torch

from meshop.data import add_latent_mesh, read_mesh, write_mesh
from meshop.datasets.registry import build_dataset
from meshop.models import PiT
from meshop.train import checkpoint, load_model
from meshop.train.inference import predict
from tests.helpers import PREDICT_LATENT, predict_case, run_ok


def reference(ckpt, data):
    """The trained model's output by hand: PiT on normalised inputs (x and every node set,
    isotropically) with the checkpoint's FPS latent mesh, decoded with the target statistics."""
    state = ckpt["state_dict"]
    model = PiT(**ckpt["model_config"])
    model.load_state_dict({k[6:]: v for k, v in state.items() if k.startswith("model.")})
    model.eval()
    assert ckpt["train_config"]["latent_points"] == PREDICT_LATENT
    data = add_latent_mesh(data.clone(), num_points=PREDICT_LATENT, seed=0)
    assert data.latent_pos.shape == (PREDICT_LATENT, 2)

    def norm(key, value):
        return (value - state[f"normalizers.{key}.mean"]) / (state[f"normalizers.{key}.std"] + 1e-6)

    data.x = norm("x", data.x)
    for key in ("pos", "latent_pos"):
        data[key] = norm("pos", data[key])
    with torch.no_grad():
        out = model(data)
    return out * (state["normalizers.y.std"] + 1e-6) + state["normalizers.y.mean"]


def test_predict_and_meshop_predict_return_the_models_own_output_in_physical_units(trained, capsys):
    root, run = trained
    data, a, u = predict_case(7, 2.5)
    write_mesh(root / "new.vtu", data, {"a": a})
    model, ckpt = load_model(run)
    new = read_mesh(root / "new.vtu", inputs=["a"])
    expected = reference(ckpt, new)
    exact = torch.as_tensor(u, dtype=torch.float32)[:, None]
    assert float((expected - exact).norm() / exact.norm()) < 0.05  # physical units, near u

    assert torch.allclose(predict(model, ckpt, new), expected, atol=1e-4)
    printed = run_ok(
        ["predict", "--checkpoint", run, "--mesh", root / "new.vtu", "--out", root / "p.vtu"],
        capsys,
    )
    assert f"({len(u)} points, 1 output channel)" in printed
    written = meshio.read(root / "p.vtu").point_data["u"]
    assert np.allclose(written, expected[:, 0].numpy(), atol=1e-4)


def test_meshop_evaluate_reports_the_relative_l2_of_the_models_own_output(trained, capsys):
    _, run = trained
    ckpt = checkpoint.load(run)
    info = ckpt["data"]
    test_set = build_dataset(info["dataset"], "test", info["data_dir"], **info["dataset_args"])
    errors = []
    for sample in test_set:
        pred = reference(ckpt, sample)
        errors.append(float((pred - sample.y).norm() / sample.y.norm()))
    evaluated = json.loads(run_ok(["evaluate", "--checkpoint", run], capsys))
    assert evaluated["samples"] == len(test_set) == 2
    assert evaluated["test_rel_l2"] == pytest.approx(np.mean(errors), rel=1e-4)
    assert evaluated["test_rel_l2_median"] == pytest.approx(np.median(errors), rel=1e-4)
    assert ckpt["history"][-1]["test_rel_l2"] == pytest.approx(np.mean(errors), rel=1e-4)

"""Scores and predictions are those of the model in evaluation mode: no dropout, running statistics
read, never updated. The model here is an ONO with attention dropout and the authors' batch
whitening, whose running moment a forward pass in training mode updates (as a BatchNorm would).
``per_sample_errors``, the Trainer's test error, ``predict`` and ``meshop predict`` are each
given the model in training mode and must return what the model returns in evaluation mode, leave
the running moment as it was and the model in the mode it was given in."""

import copy

import numpy as np
import pytest
import torch

from meshop.cli import main
from meshop.data import from_points, make_loader, write_mesh
from meshop.models import ONO
from meshop.train import (
    TrainConfig,
    Trainer,
    load_model,
    per_sample_errors,
    predict,
    predict_fields,
    predict_file,
    prepare_data,
    read_inputs,
    seed_everything,
)


def samples(count: int, seed: int = 0):
    """Point clouds of 12-17 nodes with y = 2 x + pos_1^2 from x = sin(3 pos_0)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(count):
        pos = torch.rand(12 + i % 6, 2, generator=g)
        x = torch.sin(3 * pos[:, :1])
        out.append(from_points(pos, x, 2 * x + pos[:, 1:] ** 2))
    return out


def noisy_model() -> ONO:
    """Dropout on, and a running moment that training-mode passes update."""
    seed_everything(0)
    return ONO(3, 1, 2, width=8, layers=2, k=2, heads=2, orthonormalize="batch", dropout=0.5)


def config(**changes) -> TrainConfig:
    base = dict(epochs=2, batch_size=4, lr=5e-2, schedule="constant", progress=False)
    return TrainConfig(**{**base, **changes})


def buffers(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: b.clone() for name, b in model.named_buffers()}


def assert_same_buffers(model, before):
    after = buffers(model)
    assert after.keys() == before.keys()
    for name, value in before.items():
        assert torch.equal(after[name], value), f"{name} changed"


def running_moments(model) -> list[torch.Tensor]:
    return [b for name, b in model.named_buffers() if name.endswith("running_moment")]


@torch.no_grad()
def eval_errors(model, dataset) -> np.ndarray:
    """The relative L2 error of every sample, from a copy of the model in evaluation mode."""
    model = copy.deepcopy(model).eval()
    errors = []
    for batch in make_loader(dataset, batch_size=1):
        pred = model(batch)
        errors.append(float(torch.linalg.norm(pred - batch.y) / torch.linalg.norm(batch.y)))
    return np.array(errors)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A trained Trainer (two epochs) and its run directory."""
    out = tmp_path_factory.mktemp("eval-mode") / "run"
    trainer = Trainer(
        noisy_model(), prepare_data(samples(8), samples(5, seed=1), config()), out_dir=out
    )
    trainer.fit()
    return trainer, out


def test_the_model_here_differs_between_training_and_evaluation_mode(run):
    trainer = copy.deepcopy(run[0])
    moments = [m.clone() for m in running_moments(trainer.model)]
    assert moments and not all(torch.equal(m, torch.eye(2)) for m in moments)  # trained
    batch = next(iter(make_loader(trainer.test_set, batch_size=5)))
    with torch.no_grad():
        evaluated = trainer.model.eval()(batch)
        trained_mode = trainer.model.train()(batch)
    assert (evaluated - trained_mode).abs().max() > 0.1 * evaluated.std()
    assert not all(torch.equal(a, b) for a, b in zip(moments, running_moments(trainer.model)))


@pytest.mark.parametrize("batch_size", [1, 3])
def test_per_sample_errors_are_the_eval_mode_errors_and_update_nothing(run, batch_size):
    trainer = run[0]
    model = trainer.model.train()
    before = buffers(model)
    expected = eval_errors(model, trainer.test_set)
    errors = per_sample_errors(model, trainer.test_set, batch_size=batch_size)
    np.testing.assert_allclose(errors, expected, rtol=1e-5)
    assert_same_buffers(model, before)
    assert model.training  # given in training mode, left so
    per_sample_errors(model.eval(), trainer.test_set)
    assert not model.training


def test_the_trainers_test_error_is_the_eval_mode_error_of_the_model_after_the_epoch(run):
    trainer = run[0]
    last = trainer.history[-1]
    expected = eval_errors(trainer.model, trainer.test_set)
    assert last["test_rel_l2"] == pytest.approx(expected.mean(), rel=1e-5)
    assert last["test_rel_l2_median"] == pytest.approx(np.median(expected), rel=1e-5)
    trainer.model.train()
    before = buffers(trainer.model)
    scores = trainer.evaluate()
    assert scores["test_rel_l2"] == pytest.approx(expected.mean(), rel=1e-5)
    assert_same_buffers(trainer.model, before)
    assert trainer.model.training
    other = samples(3, seed=2)
    expected = eval_errors(trainer.model, other)
    assert trainer.evaluate(other)["test_rel_l2"] == pytest.approx(expected.mean(), rel=1e-5)
    assert_same_buffers(trainer.model, before)


def test_predict_gives_the_eval_mode_answer_of_a_model_in_training_mode(run):
    model, ckpt = load_model(run[1])
    data = samples(1, seed=3)[0]
    with torch.no_grad():
        expected = copy.deepcopy(model).eval()(data)
    model.train()
    before = buffers(model)
    torch.testing.assert_close(predict(model, ckpt, data), expected)
    torch.testing.assert_close(predict_fields(model, ckpt, data)["y"], expected[:, 0])
    assert_same_buffers(model, before)
    assert model.training


def test_meshop_predict_writes_the_eval_mode_answer(run, tmp_path):
    model, ckpt = load_model(run[1])
    sample = samples(1, seed=3)[0]
    mesh = write_mesh(tmp_path / "cloud.vtu", sample, {"x": sample.x})
    data, _ = read_inputs(ckpt, mesh)  # as the command reads it (density-based weights)
    with torch.no_grad():
        expected = model.eval()(data)[:, 0].numpy()
    out = tmp_path / "pred.csv"
    argv = ["predict", "--checkpoint", run[1], "--mesh", mesh, "--out", out]
    assert main([str(a) for a in argv]) == 0
    predicted = np.loadtxt(out, delimiter=",", skiprows=1)[:, -1]  # columns x, y, then the field
    np.testing.assert_allclose(predicted, expected, rtol=1e-5, atol=1e-6)
    _, pred = predict_file(run[1], mesh, tmp_path / "pred.vtu")
    np.testing.assert_allclose(pred[:, 0].numpy(), expected, rtol=1e-5, atol=1e-6)

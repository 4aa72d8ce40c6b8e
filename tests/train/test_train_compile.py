"""``TrainConfig(compile=True)`` / ``meshop train --compile``: the steps run through torch.compile
and train the same model as eager steps."""

import torch

import meshop.train.trainer as trainer_module
from meshop.data import from_points
from meshop.models import MLPBaseline
from meshop.train import TrainConfig, Trainer, prepare_data, seed_everything


def samples(count: int):
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(count):
        pos = torch.rand(10, 2, generator=g)
        x = torch.sin(3 * pos[:, :1])
        out.append(from_points(pos, x, 2 * x + pos[:, 1:] ** 2))
    return out


def fit(compile: bool):
    seed_everything(0)
    model = MLPBaseline(in_channels=3, out_channels=1, pos_dim=2, width=8, layers=2)
    config = TrainConfig(
        epochs=2, batch_size=4, lr=1e-2, schedule="cosine", progress=False, compile=compile
    )
    trainer = Trainer(model, prepare_data(samples(8), samples(4), config))
    metrics = trainer.fit()
    return trainer, metrics


def test_compiled_training_matches_eager_training(monkeypatch):
    compiled = []
    original = torch.compile

    def spy(net, *args, **kwargs):
        compiled.append(net)
        return original(net, *args, **kwargs)

    monkeypatch.setattr(torch, "compile", spy)
    eager_trainer, eager = fit(False)
    trainer, metrics = fit(True)
    assert compiled == [trainer.model]  # the steps go through the compiled module
    assert trainer.net is not trainer.model
    assert abs(metrics["train_loss"] - eager["train_loss"]) <= 1e-5 * abs(eager["train_loss"])
    for a, b in zip(trainer.model.parameters(), eager_trainer.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_compile_without_inductor_says_why(monkeypatch):
    import pytest

    from meshop.errors import ConfigError

    def missing(name):
        raise ImportError(f"No module named {name!r}")

    monkeypatch.setattr(trainer_module.importlib, "import_module", missing)
    with pytest.raises(ConfigError, match="TorchInductor cannot be imported"):
        trainer_module.compile_model(torch.nn.Linear(2, 2))


def test_cli_compile_flag_sets_the_option(monkeypatch, tmp_path):
    from meshop import cli

    seen = {}

    def fake_train_run(run, **kwargs):
        seen.update(run.train)
        return {"epoch": 0}

    monkeypatch.setattr("meshop.train.run.train_run", fake_train_run)
    cli.main(["train", "--dataset", "darcy", "--model", "pit", "--compile", "--out", str(tmp_path)])
    assert seen.get("compile") is True

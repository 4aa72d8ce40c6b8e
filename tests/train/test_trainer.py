"""The training loop's bookkeeping: evaluation every ``eval_every`` epochs and at the end, the
rows of the metrics history, the log lines, the seeded generators and the errors of a run that
cannot start."""

import dataclasses
import random
import re
import sys

import numpy as np
import pytest
import torch

import meshop
from meshop.data import make_loader
from meshop.errors import ConfigError
from meshop.models.registry import build_model
from meshop.train import Trainer, checkpoint, seed_everything, train
from meshop.train.data import LatentMesh, prepare_data
from meshop.train.metrics import per_sample_errors
from meshop.train.trainer import training_loss
from tests.helpers import quiet, tiny_model, toy_samples


def test_the_test_split_is_evaluated_every_eval_every_epochs_and_after_the_last():
    trainer = Trainer(
        tiny_model(), prepare_data(toy_samples(8), toy_samples(4, 1), quiet(epochs=5, eval_every=2))
    )
    trainer.fit()
    evaluated = [row["epoch"] for row in trainer.history if "test_rel_l2" in row]
    assert evaluated == [2, 4, 5]
    assert [row["epoch"] for row in trainer.history] == [1, 2, 3, 4, 5]
    last = trainer.history[-1]
    assert last["lr"] == trainer.optimizer.param_groups[0]["lr"]
    assert last["samples_per_second"] == pytest.approx(8 / last["epoch_seconds"], rel=1e-6)
    assert last["test_rel_l2"] == pytest.approx(trainer.evaluate()["test_rel_l2"])


def test_the_training_loss_of_an_epoch_is_the_mean_over_its_samples():
    trainer = Trainer(
        tiny_model(), prepare_data(toy_samples(6), config=quiet(epochs=1, batch_size=6))
    )
    losses = []
    with torch.no_grad():  # before the epoch's single step
        for sample in trainer.train_set:
            one = next(iter(make_loader([sample], 1)))
            losses.append(float(training_loss(trainer.model(one), one, trainer.config)))
    row = trainer.fit()
    assert row["train_loss"] == pytest.approx(np.mean(losses), rel=1e-5)
    assert "test_rel_l2" not in row


def test_fit_logs_one_line_per_epoch_when_asked(capsys):
    Trainer(
        tiny_model(),
        prepare_data(toy_samples(4), toy_samples(2, 1), quiet(epochs=2, progress=True)),
    ).fit()
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("epoch")]
    assert len(lines) == 2 and lines[1].startswith("epoch 2  train_loss ")
    assert "test_rel_l2 " in lines[1] and "samples_per_second " in lines[1]
    Trainer(
        tiny_model(), prepare_data(toy_samples(4), config=quiet(epochs=1, progress=False))
    ).fit()
    assert "epoch" not in capsys.readouterr().out


def test_seed_everything_seeds_torch_numpy_and_random():
    seed_everything(5)
    drawn = torch.rand(2), np.random.rand(2), random.random()  # noqa: NPY002
    seed_everything(5)
    assert torch.equal(drawn[0], torch.rand(2))
    assert np.array_equal(drawn[1], np.random.rand(2))  # noqa: NPY002
    assert drawn[2] == random.random()
    np.random.seed(5)  # noqa: NPY002 (the generators seed_everything seeds, seeded directly)
    random.seed(5)
    assert np.array_equal(drawn[1], np.random.rand(2)) and drawn[2] == random.random()  # noqa: NPY002
    seed_everything(2**32 + 5)  # numpy's seeds stop at 2**32: the same numpy draws
    assert np.array_equal(drawn[1], np.random.rand(2))  # noqa: NPY002


def test_a_run_that_cannot_start_says_why():
    with pytest.raises(ConfigError, match="the training split is empty"):
        Trainer(tiny_model(), prepare_data([], config=quiet()))


def test_train_returns_the_model_in_eval_mode_with_the_last_metrics():
    model, metrics = train(
        tiny_model(), prepare_data(toy_samples(4), toy_samples(2, 1), quiet(epochs=1))
    )
    assert not model.training and metrics["epoch"] == 1 and "test_rel_l2" in metrics


def test_a_checkpoint_names_its_format_version_and_the_meshop_that_wrote_it(tmp_path):
    Trainer(
        tiny_model(), prepare_data(toy_samples(4), config=quiet(epochs=1)), out_dir=tmp_path
    ).fit()
    saved = checkpoint.load(tmp_path)
    assert saved["version"] == checkpoint.VERSION
    assert saved["meshop_version"] == meshop.__version__


def test_resuming_another_model_or_another_size_names_both(tmp_path):
    Trainer(
        tiny_model(), prepare_data(toy_samples(4), config=quiet(epochs=1)), out_dir=tmp_path
    ).fit()
    other = build_model("mlp", in_channels=4, out_channels=1, pos_dim=2, width=8)
    with pytest.raises(ConfigError, match=r"differs from the checkpoint's \(Error\(s\) in loading"):
        Trainer(other, prepare_data(toy_samples(4), config=quiet(epochs=2)), out_dir=tmp_path).fit(
            resume=True
        )
    pit = build_model("pit", in_channels=4, out_channels=1, pos_dim=2, width=8, heads=1)
    with pytest.raises(
        ConfigError,
        match=r"cannot resume: the checkpoint holds a 'mlp' model, this run trains 'pit'",
    ):
        Trainer(pit, prepare_data(toy_samples(4), config=quiet(epochs=2)), out_dir=tmp_path).fit(
            resume=True
        )


def test_each_process_resumes_its_own_generator_states(tmp_path):
    """Rank r restores the r-th saved state; a rank beyond the saved ones the first."""
    trainer = Trainer(
        tiny_model(), prepare_data(toy_samples(4), config=quiet(epochs=1)), out_dir=tmp_path
    )
    trainer.fit()
    saved = torch.load(trainer.checkpoint_path, weights_only=True)
    states = []
    for seed in (11, 12):
        torch.manual_seed(seed)
        states.append(checkpoint.rng_state())
    saved["rng"] = states
    torch.save(saved, trainer.checkpoint_path)
    for rank, expected in ((1, 12), (2, 11), (0, 11)):
        trainer.ctx = dataclasses.replace(trainer.ctx, rank=rank)
        trainer.load_checkpoint(trainer.checkpoint_path)
        drawn = torch.rand(3)
        torch.manual_seed(expected)
        assert torch.equal(drawn, torch.rand(3)), rank


def test_train_writes_its_run_with_meta_and_resumes_only_when_asked(tmp_path):
    data = prepare_data(toy_samples(4), toy_samples(2, 1), quiet(epochs=1), {"dataset": "toy"})
    _, first = train(tiny_model(), data, out_dir=tmp_path)
    saved = checkpoint.load(tmp_path)
    assert saved["data"]["dataset"] == "toy" and saved["epoch"] == 1
    _, last = train(tiny_model(1), data, quiet(epochs=2), tmp_path, resume=True)
    history = checkpoint.load(tmp_path)["history"]
    assert [row["epoch"] for row in history] == [1, 2]
    assert history[0] == first and history[1] == last
    train(tiny_model(), data, out_dir=tmp_path)  # a new run over the old one
    assert [row["epoch"] for row in checkpoint.load(tmp_path)["history"]] == [1]


def test_evaluate_scores_the_dataset_it_is_given_else_the_test_split():
    trainer = Trainer(
        tiny_model(), prepare_data(toy_samples(4), toy_samples(3, 1), quiet(epochs=1))
    )
    other = toy_samples(5, 2)
    errors = per_sample_errors(trainer.model, other)
    given = trainer.evaluate(other)
    assert given["test_rel_l2"] == pytest.approx(errors.mean(), rel=1e-6)
    assert given["test_rel_l2_median"] == pytest.approx(np.median(errors), rel=1e-6)
    own = per_sample_errors(trainer.model, trainer.test_set).mean()
    assert trainer.evaluate()["test_rel_l2"] == pytest.approx(own, rel=1e-6)
    assert abs(own - errors.mean()) > 1e-3


def test_the_epoch_loss_sums_every_batch_and_fit_starts_afresh_unless_resuming(tmp_path):
    trainer = Trainer(
        tiny_model(), prepare_data(toy_samples(7), config=quiet(epochs=1, batch_size=3))
    )
    trainer.step = lambda batch: float(batch.num_graphs)  # a loss of n on a batch of n samples
    row = trainer.fit()
    assert row["train_loss"] == pytest.approx((9 + 9 + 1) / 7)  # batches of 3, 3 and 1
    assert 0 < row["epoch_seconds"] < 60
    Trainer(
        tiny_model(), prepare_data(toy_samples(4), config=quiet(epochs=1)), out_dir=tmp_path
    ).fit()
    again = Trainer(
        tiny_model(), prepare_data(toy_samples(4), config=quiet(epochs=2)), out_dir=tmp_path
    )
    calls = []
    again.train_epoch = lambda: calls.append(again.epoch) or {"train_loss": 1.0}
    again.fit()  # not resume=True: both epochs from the start
    assert calls == [0, 1]


def test_the_progress_bar_counts_epochs_and_shows_the_running_loss(capsys, monkeypatch):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    trainer = Trainer(
        tiny_model(), prepare_data(toy_samples(4), config=quiet(epochs=2, progress=True))
    )
    trainer.step = lambda batch: 0.123456
    trainer.fit()
    out, err = capsys.readouterr()
    assert "epoch 1/2" in err and "epoch 2/2" in err
    assert "batch/s" in err or "s/batch" in err
    assert "loss=0.1235" in err
    rates = [float(r) for r in re.findall(r"samples_s=([0-9.]+)", err)]
    assert rates and min(rates) > 1.0
    assert "epoch 1  train_loss 0.1235  samples_per_second " in out  # 4 significant digits


def test_the_progress_bar_rate_counts_the_samples_of_every_process(capsys, monkeypatch):
    """Under torchrun each process sees ``1 / world_size`` of the samples; the bar on rank 0 shows
    the rate of all of them (a clock that ticks one second per reading makes rates exact)."""
    from meshop.train import trainer as trainer_module
    from meshop.train.distributed import DistContext

    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(trainer_module, "all_reduce_sum", lambda values, ctx: list(values))
    rates = {}
    for world_size in (1, 3):
        trainer = Trainer(
            tiny_model(), prepare_data(toy_samples(6), config=quiet(progress=True, batch_size=3))
        )
        trainer.ctx = DistContext(world_size=world_size)  # rank 0 of world_size processes
        trainer.step = lambda batch: 0.5
        ticks = iter(range(100))
        monkeypatch.setattr(trainer_module.time, "perf_counter", lambda t=ticks: float(next(t)))
        capsys.readouterr()
        trainer.train_epoch()
        rates[world_size] = re.findall(r"samples_s=([0-9.]+)", capsys.readouterr().err)
    assert rates[1][-1] == "3.0"  # 6 samples, the second batch read 2 s after the start
    assert rates[3][-1] == "9.0"


class Named(list):
    """A list of samples that names its fields, as datasets do."""

    input_names = ("a",)
    target_names = ("u",)


def test_the_trainer_gives_every_sample_the_configured_latent_mesh_and_records_field_names():
    train_set, test_set = Named(toy_samples(3)), toy_samples(2, 1)
    trainer = Trainer(tiny_model(), prepare_data(train_set, test_set, quiet(latent_points=5)))
    assert trainer.latent == LatentMesh(5, None, sampling="fps")
    assert all(len(s.latent_pos) == 5 for s in [*trainer.train_set, *trainer.test_set])
    assert trainer.meta["input_fields"] == [["a", 1]]
    assert trainer.state()["data"]["target_names"] == ["u"]
    assert trainer.state()["history"] == []  # a run saved before its first epoch
    config = quiet(latent_grid=(3, 2), latent_sampling="random")
    assert Trainer(tiny_model(), prepare_data(train_set, config=config)).latent == LatentMesh(
        None, (3, 2), sampling="random"
    )
    config = quiet(latent_points=4, latent_sampling="random")
    assert Trainer(tiny_model(), prepare_data(train_set, config=config)).latent == LatentMesh(
        4, None, sampling="random"
    )


class Pointwise(torch.nn.Module):
    """A model without a ``config`` (not built by the registry)."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)

    def forward(self, data):
        return self.lin(torch.cat([data.x, data.pos, data.params[data.batch]], dim=-1))


def test_one_training_sample_and_a_model_without_config_train():
    row = Trainer(Pointwise(), prepare_data(toy_samples(1), config=quiet(epochs=1))).fit()
    assert row["epoch"] == 1 and np.isfinite(row["train_loss"])


def test_the_errors_of_a_run_that_cannot_start_are_whole_sentences():
    with pytest.raises(ConfigError, match="^the training split is empty$"):
        Trainer(tiny_model(), prepare_data([], config=quiet()))
    model = tiny_model()
    model.config["periodic"] = [1.0, 1.0]
    with pytest.raises(ConfigError) as caught:
        Trainer(model, prepare_data(toy_samples(2), config=quiet(normalize_pos=True)))
    assert str(caught.value) == (
        "the model has a periodic box in data units, which normalize_pos would rescale; "
        "train it with normalize_pos = false"
    )


def _order(trainer, epoch):
    """The order in which ``trainer`` visits its training samples in ``epoch``."""
    trainer.sampler.set_epoch(epoch)
    return [int(i) for i in trainer.loader.sampler]


def test_every_epoch_shuffles_the_samples_with_the_configured_seed():
    trainer = Trainer(
        tiny_model(), prepare_data(toy_samples(16), config=quiet(seed=3, num_workers=2))
    )
    assert trainer.loader.num_workers == 2  # built only: no worker starts here
    orders = [_order(trainer, epoch) for epoch in range(3)]
    assert all(sorted(order) == list(range(16)) for order in orders)
    assert orders[0] != list(range(16)) and orders[0] != orders[1] != orders[2]
    assert _order(trainer, 1) == orders[1]  # seeded by (seed, epoch)
    other = Trainer(tiny_model(), prepare_data(toy_samples(16), config=quiet(seed=4)))
    assert _order(other, 0) != orders[0]


def test_compile_runs_the_steps_through_torch_compile():
    # torch.compile wraps the module at once and compiles at the first call: nothing runs here
    trainer = Trainer(tiny_model(), prepare_data(toy_samples(4), config=quiet(compile=True)))
    assert trainer.net is not trainer.model and trainer.net._orig_mod is trainer.model


def test_compile_where_torch_cannot_says_why(monkeypatch):
    from meshop.train import trainer as trainer_module

    monkeypatch.delattr(torch, "compile")
    with pytest.raises(ConfigError) as error:
        trainer_module.compile_model(torch.nn.Linear(2, 2))
    assert str(error.value) == (
        f"compile=True needs torch.compile (torch >= 2.0); torch {torch.__version__}"
    )
    monkeypatch.undo()

    def missing(name):
        raise ImportError(f"No module named {name!r}")

    monkeypatch.setattr(trainer_module.importlib, "import_module", missing)
    with pytest.raises(ConfigError) as error:
        trainer_module.compile_model(torch.nn.Linear(2, 2))
    assert str(error.value) == (
        "compile=True: TorchInductor cannot be imported (No module named 'torch._inductor'); "
        "train with compile=False"
    )


def test_the_global_batch_must_split_evenly_over_the_processes(monkeypatch):
    from meshop.train import trainer as trainer_module
    from meshop.train.distributed import DistContext

    monkeypatch.setattr(trainer_module, "setup", lambda device: DistContext(world_size=3))
    with pytest.raises(ConfigError) as error:
        Trainer(tiny_model(), prepare_data(toy_samples(4), config=quiet(batch_size=4)))
    assert str(error.value) == (
        "batch_size 4 is the global batch and must be divisible by the number of processes (3)"
    )


def test_models_trained_on_the_same_prepared_data_train_as_if_alone(tmp_path):
    """Prepared once, the data trains a second model as it trains the first, and as data
    prepared for one model alone: the normalisers are copied, not shared."""
    train_set, test_set = Named(toy_samples(6)), toy_samples(3, 1)
    config = quiet(epochs=2, latent_points=5)
    alone = Trainer(
        tiny_model(),
        prepare_data(train_set, test_set, config, {"dataset": "toy"}),
        out_dir=tmp_path / "alone",
    )
    alone.fit()
    data = prepare_data(train_set, test_set, config, {"dataset": "toy"})
    runs = [Trainer(tiny_model(), data, out_dir=tmp_path / name) for name in ("first", "again")]
    for trainer in runs:
        trainer.fit()
        assert trainer.config is config and trainer.latent == alone.latent
        assert trainer.model.normalizers["y"] is not data.normalizers["y"]
        for key, value in alone.model.state_dict().items():
            assert torch.equal(trainer.model.state_dict()[key], value), key
        loss = [row["train_loss"] for row in trainer.history]
        assert loss == [row["train_loss"] for row in alone.history]
        assert trainer.history[-1]["test_rel_l2"] == alone.history[-1]["test_rel_l2"]
        assert trainer.state()["data"] == alone.state()["data"]


def test_the_trainer_takes_prepared_data_only_with_a_configuration_that_prepares_alike():
    with pytest.raises(TypeError) as caught:
        Trainer(tiny_model(), toy_samples(4), toy_samples(2, 1), quiet())
    assert str(caught.value) == (
        "Trainer(model, data, config, out_dir) takes prepared data and a TrainConfig, got list "
        "and list: prepare the splits first, data = meshop.train.prepare_data(train_set, "
        "test_set, config, meta)"
    )
    data = prepare_data(toy_samples(4), config=quiet(latent_points=5))
    with pytest.raises(TypeError, match="got PreparedData and list: prepare the splits first"):
        Trainer(tiny_model(), data, toy_samples(2, 1))
    with pytest.raises(ConfigError, match="^the data was prepared with latent_points=5, which"):
        Trainer(tiny_model(), data, config=quiet(latent_points=6))
    assert Trainer(tiny_model(), data, config=quiet(latent_points=5, epochs=7)).config.epochs == 7
    assert Trainer(tiny_model(), data).config is data.config

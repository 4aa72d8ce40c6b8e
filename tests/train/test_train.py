"""The training loop: optimisation, schedules, normalisers, metrics log, checkpoints and resume."""

import json
import math

import pytest
import torch

from meshop.data import from_points, make_loader, uniform_grid
from meshop.errors import ConfigError, MeshReadError
from meshop.models.mlp_baseline import MLPBaseline
from meshop.train import (
    LatentMesh,
    NormalizedModel,
    TrainConfig,
    Trainer,
    build_optimizer,
    build_scheduler,
    checkpoint,
    fit_normalizers,
    load_config,
    load_model,
    prepare_data,
    relative_h1,
    seed_everything,
)
from meshop.train.metrics import read_metrics
from tests.helpers import parameters, quiet, tiny_model, toy_samples


def test_train_config_rejects_unknown_keys_with_a_suggestion():
    with pytest.raises(ConfigError, match=r"unknown key 'epoch'.*did you mean 'epochs'"):
        TrainConfig().replace(epoch=3)
    with pytest.raises(ConfigError, match="schedule must be one of"):
        TrainConfig(schedule="linear")


def test_load_config_reads_the_toml_tables_and_names_the_file_on_errors(tmp_path):
    good = tmp_path / "run.toml"
    good.write_text(
        '[run]\ndataset = "elasticity"\nmodel = "pit"\n[train]\nepochs = 7\nlr = 5e-4\n'
        "[model]\nwidth = 32\n[dataset]\nnum_train = 10\n"
    )
    run = load_config(good)
    assert (run.dataset, run.model) == ("elasticity", "pit")
    assert run.train_config({"epochs": 100, "batch_size": 2}) == TrainConfig(
        epochs=7, lr=5e-4, batch_size=2
    )
    assert run.model_args == {"width": 32} and run.dataset_args == {"num_train": 10}
    bad = tmp_path / "bad.toml"
    bad.write_text("[train]\nlearning_rate = 1e-3\n")
    with pytest.raises(ConfigError, match=r"bad.toml' \[train\]"):
        load_config(bad)
    bad.write_text("[optim]\nlr = 1\n")
    with pytest.raises(ConfigError, match="unknown key 'optim'"):
        load_config(bad)


def test_onecycle_schedule_starts_and_ends_at_lr_over_div_factor_and_peaks_at_pct_start():
    model = torch.nn.Linear(2, 2)
    config = TrainConfig(lr=1e-3, schedule="onecycle")
    opt = build_optimizer(model, config)
    sched = build_scheduler(opt, config, total_steps=100)
    lrs = []
    for _ in range(100):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs[0] == pytest.approx(1e-7)
    assert max(lrs) == pytest.approx(1e-3) and lrs.index(max(lrs)) in (29, 30)
    assert lrs[-1] == pytest.approx(1e-7, rel=0.05)


def test_cosine_schedule_anneals_from_lr_to_zero():
    model = torch.nn.Linear(2, 2)
    config = TrainConfig(lr=1e-3, schedule="cosine", optimizer="adamw", weight_decay=1e-5)
    opt = build_optimizer(model, config)
    assert isinstance(opt, torch.optim.AdamW)
    sched = build_scheduler(opt, config, total_steps=10)
    lrs = []
    for _ in range(10):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs[0] == pytest.approx(1e-3)
    assert lrs[5] == pytest.approx(0.5e-3)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.0, abs=1e-12)


def test_adam_is_plain_adam_with_l2_weight_decay_not_adamw():
    config = TrainConfig(optimizer="adam", weight_decay=1e-2)
    optimizer = build_optimizer(torch.nn.Linear(2, 2), config)
    assert type(optimizer) is torch.optim.Adam
    assert optimizer.param_groups[0]["weight_decay"] == 1e-2


@pytest.mark.parametrize("name", ["adam", "adamw"])
def test_the_optimiser_takes_the_fused_kernel_and_updates_as_the_unfused_one(name):
    from meshop.train.optim import fusable

    torch.manual_seed(0)
    config = TrainConfig(optimizer=name, lr=1e-2, weight_decay=1e-2)
    models = [torch.nn.Linear(3, 2).double() for _ in range(2)]
    models[1].load_state_dict(models[0].state_dict())
    fused = build_optimizer(models[0], config)
    assert fused.param_groups[0]["fused"] is True
    cls = torch.optim.AdamW if name == "adamw" else torch.optim.Adam
    plain = cls(models[1].parameters(), lr=1e-2, weight_decay=1e-2, foreach=False)
    for _ in range(5):
        x = torch.randn(4, 3, dtype=torch.float64)
        for model, opt in zip(models, (fused, plain)):
            opt.zero_grad()
            model(x).square().sum().backward()
            opt.step()
    for a, b in zip(models[0].parameters(), models[1].parameters()):
        torch.testing.assert_close(a, b)
    assert fusable([]) is None  # no parameters: PyTorch's choice
    assert fusable([torch.zeros(2), torch.zeros(2, dtype=torch.int64)]) is None
    assert fusable([torch.zeros(2, device="meta")]) is None  # a device without the kernel


def test_onecycle_schedule_peaks_after_the_configured_fraction_of_steps():
    opt = build_optimizer(torch.nn.Linear(2, 2), TrainConfig(lr=1e-3))
    sched = build_scheduler(opt, TrainConfig(lr=1e-3, pct_start=0.6), total_steps=100)
    lrs = []
    for _ in range(100):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs.index(max(lrs)) in (59, 60)


def test_constant_schedule_keeps_lr_and_a_run_of_zero_steps_counts_as_one():
    model = torch.nn.Linear(2, 2)
    opt = build_optimizer(model, TrainConfig(lr=1e-3))
    sched = build_scheduler(opt, TrainConfig(lr=1e-3, schedule="constant"), total_steps=5)
    lrs = []
    for _ in range(5):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs == [pytest.approx(1e-3)] * 5
    opt = build_optimizer(model, TrainConfig(lr=1e-3))
    sched = build_scheduler(opt, TrainConfig(lr=1e-3, schedule="cosine"), total_steps=0)
    assert sched.T_max == 1


def test_training_reduces_the_test_error_and_logs_every_epoch(tmp_path):
    train_set, test_set = toy_samples(16), toy_samples(8, seed=1)
    trainer = Trainer(
        tiny_model(), prepare_data(train_set, test_set, quiet(epochs=8)), out_dir=tmp_path
    )
    before = trainer.evaluate()["test_rel_l2"]
    metrics = trainer.fit()
    assert metrics["test_rel_l2"] < 0.5 * before
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["epoch"] for r in rows] == list(range(1, 9))
    for key in ("train_loss", "test_rel_l2", "test_rel_l2_median", "lr", "samples_per_second"):
        assert all(math.isfinite(r[key]) for r in rows), key


def test_metrics_log_can_be_csv(tmp_path):
    Trainer(
        tiny_model(),
        prepare_data(toy_samples(8), toy_samples(4, 1), quiet(metrics_format="csv")),
        out_dir=tmp_path,
    ).fit()
    rows = read_metrics(tmp_path / "metrics.csv")
    assert [r["epoch"] for r in rows] == [1.0, 2.0, 3.0]
    assert rows[-1]["test_rel_l2"] > 0


def test_normalisers_are_fitted_on_the_train_split_and_stored_in_the_checkpoint(tmp_path):
    train_set = toy_samples(8)
    Trainer(
        tiny_model(), prepare_data(train_set, toy_samples(4, 1), quiet(epochs=1)), out_dir=tmp_path
    ).fit()
    ckpt = checkpoint.load(tmp_path)
    state = ckpt["state_dict"]
    ys = torch.cat([s.y for s in train_set])
    assert torch.allclose(state["normalizers.y.mean"], ys.mean(0))
    assert torch.allclose(state["normalizers.y.std"], ys.std(0, unbiased=False), rtol=1e-5)
    params = torch.cat([s.params for s in train_set])
    assert torch.allclose(state["normalizers.params.mean"], params.mean(0))
    for key in ("optimizer", "scheduler", "rng", "train_config", "history", "model_config"):
        assert key in ckpt
    assert ckpt["epoch"] == 1 and ckpt["model_name"] == "mlp"


def test_a_loaded_checkpoint_predicts_like_the_trained_model(tmp_path):
    test_set = toy_samples(4, 1)
    trainer = Trainer(
        tiny_model(), prepare_data(toy_samples(8), test_set, quiet(epochs=2)), out_dir=tmp_path
    )
    trainer.fit()
    model, ckpt = load_model(tmp_path / "checkpoint.pt")
    batch = next(iter(make_loader(test_set, 4)))
    with torch.no_grad():
        assert torch.allclose(model(batch), trainer.model.eval()(batch))
    assert ckpt["data"]["in_channels"] == 4 and ckpt["data"]["params_channels"] == 1


def test_checkpoints_are_written_atomically(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint.pt"
    checkpoint.save_atomic({"format": checkpoint.FORMAT, "epoch": 1}, path)

    def broken_save(obj, f):
        f.write(b"half a checkpoint")
        raise RuntimeError("killed while writing")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(RuntimeError, match="killed"):
        checkpoint.save_atomic({"format": checkpoint.FORMAT, "epoch": 2}, path)
    monkeypatch.undo()
    assert checkpoint.load(path)["epoch"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]


def test_a_run_killed_mid_epoch_and_resumed_ends_like_an_uninterrupted_run(tmp_path, monkeypatch):
    train_set, test_set = toy_samples(12), toy_samples(4, 1)
    config = quiet(epochs=4, schedule="onecycle", clip=0.5)
    full = Trainer(
        tiny_model(), prepare_data(train_set, test_set, config), out_dir=tmp_path / "full"
    )
    full_metrics = full.fit()

    # kill the second run in its third epoch (3 steps per epoch: after 7 steps)
    steps = {"n": 0}
    original_step = Trainer.step

    def dying_step(self, batch):
        steps["n"] += 1
        if steps["n"] == 8:
            raise KeyboardInterrupt("killed")
        return original_step(self, batch)

    monkeypatch.setattr(Trainer, "step", dying_step)
    with pytest.raises(KeyboardInterrupt):
        Trainer(
            tiny_model(), prepare_data(train_set, test_set, config), out_dir=tmp_path / "killed"
        ).fit()
    monkeypatch.undo()
    assert checkpoint.load(tmp_path / "killed")["epoch"] == 2

    seed_everything(123)  # the resumed process starts from another RNG state
    resumed = Trainer(
        tiny_model(seed=5), prepare_data(train_set, test_set, config), out_dir=tmp_path / "killed"
    )
    resumed_metrics = resumed.fit(resume=True)
    assert torch.allclose(parameters(resumed.model), parameters(full.model), atol=1e-6)
    for key in ("train_loss", "test_rel_l2", "test_rel_l2_median"):
        assert resumed_metrics[key] == pytest.approx(full_metrics[key], rel=1e-5)
    rows = read_metrics(tmp_path / "killed" / "metrics.jsonl")
    assert [r["epoch"] for r in rows] == [1, 2, 3, 4]


def test_resuming_with_another_model_says_so(tmp_path):
    Trainer(
        tiny_model(), prepare_data(toy_samples(4), config=quiet(epochs=1)), out_dir=tmp_path
    ).fit()
    other = MLPBaseline(4, 1, 2, width=8)
    with pytest.raises(ConfigError, match="cannot resume"):
        Trainer(other, prepare_data(toy_samples(4), config=quiet(epochs=2)), out_dir=tmp_path).fit(
            resume=True
        )


def test_loading_a_missing_or_foreign_checkpoint_says_what_is_wrong(tmp_path):
    with pytest.raises(MeshReadError, match="does not exist"):
        checkpoint.load(tmp_path / "nope.pt")
    torch.save({"weights": torch.zeros(2)}, tmp_path / "other.pt")
    with pytest.raises(MeshReadError, match="not a meshop checkpoint"):
        checkpoint.load(tmp_path / "other.pt")


def test_relative_h1_is_exact_for_linear_fields_on_triangles_and_grids():
    # target 2x + 3y, prediction off by x: |grad e|^2 / |grad t|^2 = 1 / 13 on any domain
    grid = uniform_grid((9, 7))
    x, y = grid.pos[:, :1], grid.pos[:, 1:]
    target, pred = 2 * x + 3 * y, 3 * x + 3 * y
    assert float(relative_h1(pred, target, grid)) == pytest.approx(math.sqrt(1 / 13), rel=1e-5)
    mesh = from_points(grid.pos)
    i, j = torch.meshgrid(torch.arange(8), torch.arange(6), indexing="ij")
    corner = (i * 7 + j).flatten()
    mesh.face = torch.cat(
        [
            torch.stack([corner, corner + 7, corner + 8]),
            torch.stack([corner, corner + 8, corner + 1]),
        ],
        dim=1,
    )
    assert float(relative_h1(pred, target, mesh)) == pytest.approx(math.sqrt(1 / 13), rel=1e-5)


def test_relative_h1_uses_each_samples_grid_spacing_in_a_batch():
    fine = uniform_grid((33,), bounds=[(0.0, 1.0)])
    wide = uniform_grid((33,), bounds=[(0.0, 2.0)])
    batch = next(iter(make_loader([fine, wide], 2)))
    target = torch.sin(torch.pi * batch.pos)  # |u'|^2 integrates to pi^2/2 on [0, 1] and on [0, 2]
    pred = target + batch.pos
    expected = [math.sqrt(1.0 / (math.pi**2 / 2)), math.sqrt(2.0 / (math.pi**2))]
    assert float(relative_h1(pred, target, batch)) == pytest.approx(sum(expected) / 2, rel=0.02)


def test_relative_h1_refuses_point_clouds():
    cloud = toy_samples(1)[0]
    with pytest.raises(ConfigError, match="uniform grid or a 2D triangle mesh"):
        relative_h1(cloud.y, cloud.y, cloud)


def test_the_h1_penalty_trains_on_grids(tmp_path):
    samples = []
    for k in range(8):
        grid = uniform_grid((6, 6))
        grid.x = torch.sin((1 + k % 3) * grid.pos[:, :1])
        grid.y = grid.x * grid.pos[:, 1:]
        samples.append(grid)
    model = MLPBaseline(3, 1, 2, width=8)
    metrics = Trainer(
        model, prepare_data(samples, samples[:2], quiet(epochs=2, h1_weight=0.5)), out_dir=tmp_path
    ).fit()
    assert math.isfinite(metrics["train_loss"])
    assert json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])["epoch"] == 1


def test_position_normalisation_makes_training_independent_of_the_unit_of_length(tmp_path):
    def rescaled(samples, scale, shift):
        out = []
        for s in samples:
            s = s.clone()
            s.pos = s.pos * scale + shift
            out.append(s)
        return out

    train_set, test_set = toy_samples(8), toy_samples(4, 1)
    runs = []
    for scale, shift in ((1.0, 0.0), (1000.0, -250.0)):
        trainer = Trainer(
            tiny_model(),
            prepare_data(
                rescaled(train_set, scale, shift), rescaled(test_set, scale, shift), quiet(epochs=2)
            ),
        )
        runs.append((trainer.fit(), parameters(trainer.model.model)))
    assert torch.allclose(runs[0][1], runs[1][1], atol=1e-4)
    assert runs[0][0]["test_rel_l2"] == pytest.approx(runs[1][0]["test_rel_l2"], rel=1e-3)


def test_the_position_normaliser_maps_every_node_set_with_one_isotropic_scale():
    data = from_points(torch.stack([torch.linspace(0, 4, 9), torch.linspace(0, 1, 9)], 1))
    data.latent_pos, data.query_pos = data.pos[::2], torch.tensor([[2.0, 0.5]])
    normalizer = fit_normalizers([data], pos=True)["pos"]
    std = math.sqrt((data.pos.var(0, unbiased=False)).mean())
    assert torch.allclose(normalizer.std, torch.full((2,), std))
    seen = {}

    class Spy(torch.nn.Module):
        def forward(self, d):
            seen.update(pos=d.pos, latent_pos=d.latent_pos, query_pos=d.query_pos)
            return torch.zeros(1, 1)

    NormalizedModel(Spy(), {"pos": normalizer})(data)
    assert torch.allclose(seen["query_pos"], torch.zeros(1, 2), atol=1e-6)  # the centre
    assert torch.allclose(seen["latent_pos"], seen["pos"][::2])
    assert torch.allclose(
        torch.cdist(seen["pos"], seen["pos"]), torch.cdist(data.pos, data.pos) / std, atol=1e-5
    )


def test_a_periodic_model_refuses_position_normalisation():
    model = tiny_model()
    model.config["periodic"] = 1.0  # a box length in data units, as PiT's periodic=
    with pytest.raises(ConfigError, match="normalize_pos = false"):
        Trainer(model, prepare_data(toy_samples(4), config=quiet()))
    Trainer(model, prepare_data(toy_samples(4), config=quiet(normalize_pos=False)))


def test_random_latent_nodes_follow_the_mesh_refinement_and_fps_spreads_them():
    g = torch.Generator().manual_seed(0)
    dense = torch.rand(900, 2, generator=g) * 0.1  # a refined corner: 90 % of the nodes
    sparse = torch.rand(100, 2, generator=g)
    data = from_points(torch.cat([dense, sparse]))
    in_corner = {}
    for sampling in ("random", "fps"):
        latent = LatentMesh(num_points=50, sampling=sampling)(data)
        assert getattr(data, "latent_pos", None) is None  # the sample itself is left alone
        rows = (latent.latent_pos[:, None] == data.pos[None]).all(-1)
        assert rows.any(1).all() and rows.sum() == 50  # 50 distinct mesh nodes
        assert torch.equal(
            LatentMesh(num_points=50, sampling=sampling)(data).latent_pos, latent.latent_pos
        )
        in_corner[sampling] = int((latent.latent_pos < 0.1).all(1).sum())
    assert in_corner["random"] > 35 and in_corner["fps"] < 15

"""meshop.train.run: a whole run as `meshop train` / `evaluate` / `plot` make it, on tiny Darcy
data: what it writes, the presets under explicit settings, its errors, and the figures."""

import dataclasses
import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from meshop.data import make_loader
from meshop.datasets.registry import build_dataset
from meshop.errors import ConfigError, FieldError
from meshop.train import run as R
from meshop.train.checkpoint import load_model
from meshop.train.config import RunConfig
from meshop.train.presets import preset

TINY = {"num_train": 3, "num_test": 2, "resolution": 9, "fine_resolution": 17, "progress": False}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One MLP trained on tiny Darcy data through train_run, with its log lines."""
    root = tmp_path_factory.mktemp("run")
    lines = []
    run = RunConfig(
        dataset="darcy",
        model="mlp",
        out=str(root / "run"),
        data_dir=str(root / "data"),
        train={"epochs": 2, "batch_size": 2, "progress": False},
        model_args={"width": 8},
        dataset_args=TINY,
    )
    # a model preset for the pair, so that the run must merge it under the explicit settings
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(R, "preset", with_model_preset)
        metrics = R.train_run(run, figures=True, log=lines.append)
    return root, run, metrics, lines


PRESET_CALLS = []


def with_model_preset(dataset, model, data=None):
    PRESET_CALLS.append((dataset, model))
    defaults = preset(dataset, model, data)
    defaults["model"] = {**defaults["model"], "layers": 3, "width": 16}
    return defaults


def test_train_run_writes_the_run_and_logs_what_it_trains(trained):
    root, _, metrics, lines = trained
    out = root / "run"
    saved = json.loads((out / "run.json").read_text())
    assert saved["dataset"] == "darcy" and saved["model"] == "mlp"
    assert saved["metrics"] == json.loads(json.dumps(metrics))
    assert (out / "run.json").read_text().startswith('{\n  "dataset": "darcy",\n  "model"')
    assert PRESET_CALLS == [("darcy", "mlp")]  # the pair's preset, resolved once
    # the pair's preset under the explicit settings
    defaults = with_model_preset("darcy", "mlp")
    assert saved["model_args"] == {**defaults["model"], "width": 8}
    assert saved["model_args"]["layers"] == 3
    assert saved["train"]["epochs"] == 2 and saved["train"]["batch_size"] == 2
    for key, value in defaults["train"].items():
        if key not in ("epochs", "batch_size"):
            assert saved["train"][key] == value
    model, ckpt = load_model(out)
    assert (model.config["layers"], model.config["width"]) == (3, 8)
    parameters = sum(p.numel() for p in model.parameters())
    assert lines[0].startswith("settings:\n  model             mlp: ")
    assert "layers=3" in lines[0] and "width=8" in lines[0]
    assert lines[1:] == [
        f"training mlp ({parameters:,} parameters) on darcy: 3 train / 2 test samples -> {out}",
        json.dumps({k: v for k, v in metrics.items() if k != "lr"}),
    ]
    data = ckpt["data"]
    assert data["dataset"] == "darcy" and data["data_dir"] == str(root / "data")
    assert data["dataset_args"] == {**defaults["dataset"], **TINY}
    assert data["target_names"] and data["input_names"]
    assert sorted(p.name for p in (out / "figures").iterdir()) == [
        "loss.png",
        "test_000.png",
        "test_001.png",
    ]


def test_evaluate_run_scores_the_test_split_and_takes_other_dataset_options(trained):
    root, _, metrics, _ = trained
    result = R.evaluate_run(root / "run")
    assert result["samples"] == 2 and result["mean_nodes"] == 81
    assert result["test_rel_l2"] == pytest.approx(metrics["test_rel_l2"], rel=1e-5)
    assert R.evaluate_run(root / "run", batch_size=1)["test_rel_l2"] == pytest.approx(
        result["test_rel_l2"], rel=1e-5
    )
    finer = R.evaluate_run(root / "run", dataset_args={"resolution": 17})
    assert finer["mean_nodes"] == 289 and finer["samples"] == 2
    one = R.evaluate_run(root / "run", dataset_args={"num_test": 1})
    assert one["samples"] == 1


def test_empty_splits_are_refused(trained, tmp_path, monkeypatch):
    """A dataset whose split is empty (a folder with too few files) stops the run with a reason."""
    root, _, _, _ = trained
    monkeypatch.setattr(R, "build_dataset", lambda *args, **kwargs: [])
    with pytest.raises(ConfigError, match="^the test split is empty; check the dataset's size"):
        R.evaluate_run(root / "run")
    monkeypatch.setattr(R, "resolve_dataset", lambda *args: (lambda split, **kwargs: [], {}))
    empty = RunConfig(
        dataset="darcy",
        model="mlp",
        out=str(tmp_path / "run"),
        train={"epochs": 1, "progress": False},
        dataset_args=TINY,
    )
    with pytest.raises(ConfigError, match="^dataset 'darcy' has an empty train split; check"):
        R.train_run(empty, log=lambda *_: None)
    assert not (tmp_path / "run").exists()


def test_evaluate_run_reads_the_data_from_another_folder_when_told(trained, tmp_path):
    root, _, _, _ = trained
    result = R.evaluate_run(root / "run", data_dir=str(tmp_path / "elsewhere"))
    assert (tmp_path / "elsewhere").exists()  # generated there, the same seeded samples
    assert result["test_rel_l2"] == pytest.approx(R.evaluate_run(root / "run")["test_rel_l2"])


def test_plot_run_draws_the_loss_and_test_samples_with_their_errors(trained, tmp_path, monkeypatch):
    root, _, _, _ = trained
    titles, logged = [], []
    real = R.plot_sample

    def spy(data, pred, path, title=None, **kw):
        titles.append(title)
        return real(data, pred, path, title=title, **kw)

    monkeypatch.setattr(R, "plot_sample", spy)
    written = R.plot_run(root / "run", samples=3, out=tmp_path / "figs", log=logged.append)
    names = ["loss.png", "test_000.png", "test_001.png"]  # only 2 test samples exist
    assert written == [tmp_path / "figs" / n for n in names]
    assert logged == [f"wrote {p}" for p in written]
    model, ckpt = load_model(root / "run")
    test_set = build_dataset("darcy", "test", str(root / "data"), **ckpt["data"]["dataset_args"])
    with torch.no_grad():
        for i, data in enumerate(make_loader(list(test_set), 1)):
            err = float((model(data) - data.y).norm() / data.y.norm())
            assert titles[i] == f"test sample {i}: relative L2 {err:.2%}"
    assert R.plot_run(root / "run", samples=0, out=tmp_path / "f0", log=logged.append) == [
        tmp_path / "f0" / "loss.png"
    ]


def test_runs_that_cannot_start_say_why(tmp_path, trained):
    with pytest.raises(ConfigError, match=r"^give a dataset and a model \(--dataset NAME"):
        R.train_run(RunConfig(dataset="darcy", model=None))
    with pytest.raises(ConfigError, match="give a dataset and a model"):
        R.train_run(RunConfig(dataset=None, model="mlp"))
    # a checkpoint trained in Python, not on a named dataset
    root, _, _, _ = trained
    _, ckpt = load_model(root / "run")
    ckpt["data"]["dataset"] = None
    with pytest.raises(ConfigError) as error:
        R._test_split(ckpt, None, {})
    assert str(error.value) == (
        "this checkpoint was not trained through `meshop train` on a named dataset; "
        "evaluate it in Python with meshop.train.metrics.per_sample_errors"
    )


def test_load_splits_in_one_process_gives_both_splits(tmp_path):
    run = RunConfig(dataset="darcy", model="mlp", data_dir=str(tmp_path), dataset_args=TINY)
    train_set, test_set = R.load_splits(R.plan_run(run))
    assert (len(train_set), len(test_set)) == (3, 2)
    np.testing.assert_array_equal(train_set[0].pos.shape, (81, 2))


def test_load_splits_reads_on_rank_zero_before_the_other_processes(monkeypatch):
    """Rank 0 generates (or reads) the splits, then every other process finds them cached."""
    events = []
    monkeypatch.setattr(R, "barrier", lambda ctx: events.append("barrier"))
    plan = R.plan_run(RunConfig(dataset="darcy", model="mlp", dataset_args=TINY))
    plan = dataclasses.replace(plan, dataset_class=lambda split, **k: events.append(split) or [0])
    for rank, expected in (
        (0, ["train", "test", "barrier", "barrier"]),
        (1, ["barrier", "train", "test", "barrier"]),
        (3, ["barrier", "train", "test", "barrier"]),
    ):
        events.clear()
        splits = R.load_splits(dataclasses.replace(plan, ctx=SimpleNamespace(rank=rank)))
        assert events == expected and splits == ([0], [0])


def test_train_run_defaults_start_afresh_draw_figures_quietly_and_keep_no_data_dir(
    tmp_path, monkeypatch, capsys
):
    """Without options a run starts afresh (resume passed through only when asked), draws its
    figures without printing, and records no data folder when none was given (the data root
    then decides); one training sample is enough."""
    monkeypatch.setenv("MESHOP_DATA", str(tmp_path / "data"))
    resumed = []
    real_fit = R.Trainer.fit

    def fit(self, resume=False):
        resumed.append(resume)
        return real_fit(self, resume=resume)

    monkeypatch.setattr(R.Trainer, "fit", fit)
    run = RunConfig(
        dataset="darcy",
        model="mlp",
        out=str(tmp_path / "run"),
        train={"epochs": 1, "progress": False},
        model_args={"width": 8},
        dataset_args={**TINY, "num_train": 1},
    )
    R.train_run(run, log=lambda *_: None)
    assert capsys.readouterr().out == ""
    assert sorted(p.name for p in (tmp_path / "run" / "figures").iterdir()) == [
        "loss.png",
        "test_000.png",
        "test_001.png",
    ]
    _, ckpt = load_model(tmp_path / "run")
    assert ckpt["data"]["data_dir"] is None
    run.train["epochs"] = 2
    R.train_run(run, resume=True, figures=False, log=lambda *_: None)
    assert resumed == [False, True]


def test_evaluate_run_rebuilds_the_checkpoints_latent_mesh(tmp_path):
    """A PiT trained on a farthest-point latent mesh is scored on the same kind of latent mesh."""
    from meshop.train.data import prepare
    from meshop.train.inference import latent_of
    from meshop.train.metrics import per_sample_errors

    run = RunConfig(
        dataset="darcy",
        model="pit",
        out=str(tmp_path / "run"),
        data_dir=str(tmp_path / "data"),
        train={"epochs": 1, "progress": False, "latent_points": 12, "latent_grid": None},
        model_args={"width": 8, "layers": 1},
        dataset_args=TINY,
    )
    R.train_run(run, figures=False, log=lambda *_: None)
    result = R.evaluate_run(tmp_path / "run")
    model, ckpt = load_model(tmp_path / "run")
    test_set = build_dataset(
        "darcy", "test", str(tmp_path / "data"), **ckpt["data"]["dataset_args"]
    )
    with_latent = per_sample_errors(model, prepare(test_set, latent_of(ckpt)))
    without = per_sample_errors(model, prepare(test_set, None))
    assert result["test_rel_l2"] == pytest.approx(float(with_latent.mean()), rel=1e-6)
    # one epoch of training: the model is near its start, but the latent mesh still shows
    assert float(without.mean()) != pytest.approx(float(with_latent.mean()), rel=1e-5)


def test_evaluate_run_names_the_test_data_that_does_not_fit_the_model(trained, monkeypatch):
    root, _, _, _ = trained
    real = R.build_dataset

    def wider(*args, **kwargs):  # one more input channel than the model was trained with
        samples = list(real(*args, **kwargs))
        for data in samples:
            data.x = torch.cat([data.x, data.x], dim=1)
        return samples

    monkeypatch.setattr(R, "build_dataset", wider)
    with pytest.raises(FieldError, match="^the test data has 2 input field channels but the model"):
        R.evaluate_run(root / "run")


def test_the_test_split_of_a_checkpoint_without_dataset_options(trained, monkeypatch):
    """Checkpoints that stored no dataset options get the dataset's defaults and the overrides."""
    root, _, _, _ = trained
    _, ckpt = load_model(root / "run")
    del ckpt["data"]["dataset_args"]
    calls = []
    monkeypatch.setattr(R, "build_dataset", lambda *a, **k: calls.append((a, k)) or [])
    R._test_split(ckpt, None, {"resolution": 9})
    assert calls == [(("darcy", "test", str(root / "data")), {"resolution": 9})]


def test_plot_run_draws_two_test_samples_by_default_under_the_models_name(
    trained, tmp_path, monkeypatch
):
    root, _, _, _ = trained
    real_split, real_curve = R._test_split, R.plot_loss_curve
    titles = []
    monkeypatch.setattr(R, "_test_split", lambda c, d, o: real_split(c, d, {"num_test": 4}))
    monkeypatch.setattr(
        R,
        "plot_loss_curve",
        lambda history, path, title=None: titles.append(title) or real_curve(history, path, title),
    )
    written = R.plot_run(root / "run", out=tmp_path / "figs", log=lambda *_: None)
    assert [p.name for p in written] == ["loss.png", "test_000.png", "test_001.png"]
    assert titles == [load_model(root / "run")[1]["model_name"]]


def test_a_run_without_test_samples_trains_and_reports_no_test_error(tmp_path, monkeypatch):
    """A split of no test samples (a folder of few files) is left out, not scored as NaN."""
    real = R.load_splits
    monkeypatch.setattr(R, "load_splits", lambda plan: (real(plan)[0], []))
    run = RunConfig(
        dataset="darcy",
        model="mlp",
        out=str(tmp_path / "run"),
        data_dir=str(tmp_path / "data"),
        train={"epochs": 1, "progress": False},
        model_args={"width": 8},
        dataset_args=TINY,
    )
    metrics = R.train_run(run, figures=False, log=lambda *_: None)
    assert metrics["epoch"] == 1 and not any(key.startswith("test") for key in metrics)


def test_a_run_prepares_its_data_once_and_builds_the_model_for_it(tmp_path, monkeypatch):
    real, calls = R.prepare_data, []

    def counted(*args, **kwargs):
        calls.append(real(*args, **kwargs))
        return calls[-1]

    monkeypatch.setattr(R, "prepare_data", counted)
    run = RunConfig(
        dataset="darcy",
        model="mlp",
        out=str(tmp_path / "run"),
        data_dir=str(tmp_path / "data"),
        train={"epochs": 1, "progress": False},
        model_args={"width": 8},
        dataset_args={**TINY, "num_train": 1},
    )
    R.train_run(run, figures=False, log=lambda *_: None)
    assert len(calls) == 1
    model, ckpt = load_model(tmp_path / "run")
    assert ckpt["data"] == {**calls[0].info, **calls[0].meta}
    assert model.model.config["in_channels"] == calls[0].info["in_channels"]
    assert ckpt["data"]["dataset"] == "darcy" and ckpt["data"]["target_names"]


def test_meshop_train_plans_once_then_loads_prepares_builds_and_fits_in_that_order(
    tmp_path, monkeypatch, capsys
):
    """The command resolves its plan once (the registries, the preset and the process group are
    looked up there only), then loads, prepares, builds and fits, each once, in that order."""
    from meshop.cli import main

    calls = []

    def spy(name, real):
        def recorded(*args, **kwargs):
            calls.append(name)
            return real(*args, **kwargs)

        return recorded

    steps = ["plan_run", "model_class", "resolve_dataset", "preset", "setup", "settings_report"]
    steps += ["load_splits", "prepare_data", "seeded_model", "build_dataset"]
    for name in steps:
        monkeypatch.setattr(R, name, spy(name, getattr(R, name)))
    monkeypatch.setattr(R.Trainer, "__init__", spy("Trainer", R.Trainer.__init__))
    monkeypatch.setattr(R.Trainer, "fit", spy("fit", R.Trainer.fit))
    argv = ["train", "--dataset", "darcy", "--model", "mlp", "--out", tmp_path / "run"]
    argv += ["--data-dir", tmp_path / "data", "--num-train", 3, "--num-test", 2, "--epochs", 1]
    argv += ["--dataset-arg", "resolution=9", "--dataset-arg", "fine_resolution=17"]
    argv += ["--dataset-arg", "progress=false", "--no-progress", "--no-figures"]
    assert main([str(a) for a in argv]) == 0
    plan = ["plan_run", "model_class", "resolve_dataset", "preset", "setup", "settings_report"]
    assert calls == [*plan, "load_splits", "prepare_data", "seeded_model", "Trainer", "fit"]
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "settings:" and out[-2].startswith("training mlp (")
    assert json.loads(out[-1])["epoch"] == 1


def test_a_model_class_named_by_its_path_trains_like_its_registered_name(tmp_path):
    run = RunConfig(
        dataset="darcy",
        model="meshop.models.mlp_baseline:MLPBaseline",
        out=str(tmp_path / "run"),
        data_dir=str(tmp_path / "data"),
        train={"epochs": 1, "progress": False},
        dataset_args=TINY,
    )
    lines = []
    R.train_run(run, figures=False, log=lines.append)
    assert lines[0].startswith("settings:\n  model             meshop.models.mlp_baseline:")
    assert load_model(tmp_path / "run")[1]["model_name"] == "mlp"

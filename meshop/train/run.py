"""Whole runs, as the ``meshop`` command does them: train a named model on a named dataset,
evaluate a checkpoint, draw its figures."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import torch

from meshop.data import make_loader
from meshop.datasets.registry import build_dataset, dataset_entry
from meshop.errors import ConfigError
from meshop.models.registry import build_model, model_entry
from meshop.train.checkpoint import load_model
from meshop.train.config import RunConfig
from meshop.train.data import check_compatible, prepare, prepare_data
from meshop.train.distributed import barrier, setup
from meshop.train.inference import latent_of
from meshop.train.metrics import per_sample_errors, per_sample_table, summarize, write_table
from meshop.train.plots import plot_loss_curve, plot_sample
from meshop.train.presets import DataSummary, preset, summarize_data
from meshop.train.trainer import Trainer, seed_everything


def load_splits(name: str, data_dir: str | None, args: dict[str, Any]) -> dict[str, Any]:
    """The named dataset's train and test splits; in a distributed run rank 0 generates (or reads)
    them first, so that the other processes find them cached."""
    ctx = setup()
    out = {}
    for turn in (0, 1):
        if (ctx.rank == 0) == (turn == 0):
            out = {s: build_dataset(name, s, data_dir, **args) for s in ("train", "test")}
        barrier(ctx)
    return out


def folder_summary(run: RunConfig) -> DataSummary | None:
    """The summary of a folder run's training meshes that its defaults are scaled to
    (:func:`meshop.train.presets.folder_rules`); None for the generated datasets."""
    if run.dataset != "folder":
        return None
    args = {**preset(run.dataset, run.model)["dataset"], **run.dataset_args}
    return summarize_data(build_dataset(run.dataset, "train", run.data_dir, **args))


def build_trainer(
    run: RunConfig, out: str | os.PathLike, test: bool = True, log=print
) -> tuple[Trainer, dict[str, Any]]:
    """The :class:`Trainer` that ``meshop train`` makes for ``run``: the pair's preset under the
    run's settings (scaled to the meshes of a folder), its splits read (or generated), the data
    prepared (the test split only when ``test``), the model built from the seeded state. Returns
    it with ``{"model_args", "load_s", "prepare_s"}``: the model's arguments (which
    :func:`train_run` records) and the seconds of reading the splits and of preparing the
    data."""
    if not run.dataset or not run.model:
        raise ConfigError(
            "give a dataset and a model (--dataset NAME --model NAME, or [run] in --config)"
        )
    dataset_entry(run.dataset)
    model_entry(run.model)
    defaults = preset(run.dataset, run.model)
    dataset_args = {**defaults["dataset"], **run.dataset_args}
    ctx = setup(run.train_config(defaults["train"]).device)
    start = time.perf_counter()
    splits = load_splits(run.dataset, run.data_dir, dataset_args)
    loaded = time.perf_counter()
    train_set, test_set = splits["train"], splits["test"]
    if len(train_set) == 0:
        raise ConfigError(
            f"dataset '{run.dataset}' has an empty train split; check its size options"
        )
    if run.dataset == "folder":  # the defaults scaled to the user's meshes
        defaults = preset(run.dataset, run.model, summarize_data(train_set))
    config = run.train_config(defaults["train"])
    model_args = {**defaults["model"], **run.model_args}
    data = prepare_data(
        train_set,
        test_set if test and len(test_set) else None,
        config,
        meta={
            "dataset": run.dataset,
            "dataset_args": dataset_args,
            "data_dir": str(run.data_dir) if run.data_dir else None,
        },
    )
    prepared = time.perf_counter()
    seed_everything(config.seed)
    model = build_model(
        run.model,
        in_channels=data.info["in_channels"],
        out_channels=data.info["out_channels"],
        pos_dim=data.info["pos_dim"],
        **model_args,
    )
    if ctx.is_main:
        parameters = sum(p.numel() for p in model.parameters())
        log(
            f"training {run.model} ({parameters:,} parameters) on {run.dataset}: "
            f"{len(train_set)} train / {len(test_set)} test samples -> {out}"
        )
    trainer = Trainer(model, data, config=config, out_dir=out)
    return trainer, {
        "model_args": model_args,
        "load_s": loaded - start,
        "prepare_s": prepared - loaded,
    }


def train_run(
    run: RunConfig, resume: bool = False, figures: bool = True, log=print
) -> dict[str, Any]:
    """Train ``run.model`` on ``run.dataset`` (with the pair's preset under the explicit settings),
    write ``run.out`` (checkpoint, metrics, figures) and return the final metrics."""
    out = Path(run.out or f"runs/{run.dataset}-{run.model}")
    trainer, details = build_trainer(run, out, log=log)
    ctx, config, model_args = trainer.ctx, trainer.config, details["model_args"]
    metrics = trainer.fit(resume=resume)
    if ctx.is_main:
        (out / "run.json").write_text(
            json.dumps(
                {
                    "dataset": run.dataset,
                    "model": run.model,
                    "train": config.to_dict(),
                    "model_args": model_args,
                    "metrics": metrics,
                },
                indent=2,
                default=str,
            )
        )
        if figures:
            plot_run(out, log=lambda *_: None)
    return metrics


def _test_split(ckpt: dict[str, Any], data_dir: str | None, overrides: dict[str, Any]):
    info = ckpt["data"]
    if not info.get("dataset"):
        raise ConfigError(
            "this checkpoint was not trained through `meshop train` on a named dataset; "
            "evaluate it in Python with meshop.train.metrics.per_sample_errors"
        )
    args = {**info.get("dataset_args", {}), **overrides}
    root = data_dir if data_dir is not None else info.get("data_dir")
    return build_dataset(info["dataset"], "test", root, **args)  # one process: no barrier


def evaluate_run(
    checkpoint: str | os.PathLike,
    data_dir: str | None = None,
    dataset_args: dict[str, Any] | None = None,
    batch_size: int = 8,
    per_sample: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """Relative L2 (mean, median) of a checkpoint on its dataset's test split, optionally with other
    dataset options (e.g. another grid resolution: zero-shot super-resolution; ``split="all"``:
    every sample, such as every file of another folder); ``per_sample``: a CSV file for the error
    of every sample (:func:`~meshop.train.metrics.per_sample_table`)."""
    model, ckpt = load_model(checkpoint)
    test_set = _test_split(ckpt, data_dir, dataset_args or {})
    if len(test_set) == 0:
        raise ConfigError("the test split is empty; check the dataset's size options")
    check_compatible(test_set[0], ckpt["data"], "the test data")
    latent = latent_of(ckpt)
    errors = per_sample_errors(model, prepare(test_set, latent), batch_size)  # lazy stays lazy
    rows = per_sample_table(test_set, errors)
    if per_sample is not None:
        write_table(per_sample, rows)
    nodes = sum(row["nodes"] for row in rows) / len(rows)
    return {"samples": len(errors), **summarize(errors), "mean_nodes": nodes}


def plot_run(
    run_dir: str | os.PathLike, samples: int = 2, out: str | os.PathLike | None = None, log=print
) -> list[Path]:
    """The loss curve and ``samples`` test predictions of a run as PNGs in ``run_dir/figures``."""
    model, ckpt = load_model(run_dir)
    figures = Path(out) if out is not None else Path(ckpt["path"]).parent / "figures"
    written = [plot_loss_curve(ckpt["history"], figures / "loss.png", title=ckpt["model_name"])]
    if samples > 0 and ckpt["data"].get("dataset"):
        test_set = _test_split(ckpt, None, {})
        latent = latent_of(ckpt)
        loader = make_loader([latent(test_set[i]) for i in range(min(samples, len(test_set)))], 1)
        with torch.no_grad():
            for i, data in enumerate(loader):
                pred = model(data)
                err = float(
                    torch.linalg.vector_norm(pred - data.y) / torch.linalg.vector_norm(data.y)
                )
                written.append(
                    plot_sample(
                        data,
                        pred,
                        figures / f"test_{i:03d}.png",
                        title=f"test sample {i}: relative L2 {err:.2%}",
                    )
                )
    for path in written:
        log(f"wrote {path}")
    return written

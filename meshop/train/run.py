"""Whole runs, as the ``meshop`` command does them: train a named model on a named dataset,
evaluate a checkpoint, draw its figures.

``meshop train`` (:func:`train_run`) resolves everything once into a :class:`RunPlan`
(:func:`plan_run`), then loads, prepares, builds and fits, in that order.
"""

from __future__ import annotations

import json
import os
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from meshop.arguments import check_arguments, defaults, show
from meshop.data import make_loader
from meshop.datasets.registry import build_dataset, resolve_dataset
from meshop.errors import ConfigError
from meshop.models.registry import model_class
from meshop.train.checkpoint import load_model
from meshop.train.config import RunConfig, TrainConfig, from_dict
from meshop.train.data import PreparedData, check_compatible, prepare, prepare_data
from meshop.train.distributed import DistContext, barrier, setup
from meshop.train.inference import latent_of
from meshop.train.metrics import per_sample_errors, per_sample_table, summarize, write_table
from meshop.train.plots import plot_loss_curve, plot_sample
from meshop.train.presets import DataSummary, preset, summarize_data
from meshop.train.split import check_launch
from meshop.train.trainer import Trainer, seed_everything

#: the model parameters that ``meshop train`` sets from the data
FROM_DATA = dict.fromkeys(["in_channels", "out_channels", "pos_dim"], "it is read from the data")
#: why ``meshop train`` takes no dataset option ``split``
SPLIT = (
    "`meshop train` trains on the train split and tests on the test split (their sizes are "
    "dataset options, such as num_test or test_fraction)"
)


@dataclass(frozen=True)
class RunPlan:
    """What a ``meshop train`` run resolves before it reads its data (:func:`plan_run`), so that
    loading, preparing, building and fitting look nothing up again. ``dataset_args`` and
    ``model_args`` are the pair's preset under the explicit options (what the checkpoint and
    run.json record); ``dataset_kwargs`` adds the data folder as the class's folder argument;
    ``summary`` is a folder's, whose defaults are scaled to it (else None); ``ctx`` is the
    process's place in a distributed run and its device."""

    dataset: str
    model: str
    out: Path
    data_dir: str | None
    dataset_class: type
    dataset_args: dict[str, Any]
    dataset_kwargs: dict[str, Any]
    summary: DataSummary | None
    model_class: type[nn.Module]
    model_args: dict[str, Any]
    config: TrainConfig
    ctx: DistContext


def plan_run(run: RunConfig) -> RunPlan:
    """The :class:`RunPlan` of ``run``: the explicit options checked against what they go to
    (:func:`meshop.arguments.check_arguments`) before any data is read, the pair's preset under
    them (for a folder, scaled to its first training meshes), the process in its group.

    Raises:
        ConfigError: an option of a wrong name, type or value; no dataset or no model; no
            ``data_dir`` for a dataset that needs one; ``split_mesh`` without torchrun.
    """
    check_arguments(TrainConfig, run.train, "the training configuration")
    explicit = from_dict(run.train)  # the explicit values' ranges and choices
    if explicit.split_mesh:  # before any data is read (presets never set it)
        check_launch(setup(explicit.device))
    model_cls = model_class(run.model) if run.model else None
    if model_cls is not None:
        check_arguments(model_cls, run.model_args, f"model '{run.model}'", FROM_DATA)
    if run.dataset:
        fixed = {"split": SPLIT}  # and the data folder
        dataset_cls, kwargs = resolve_dataset(run.dataset, run.data_dir, run.dataset_args, fixed)
    if not run.dataset or not run.model:
        raise ConfigError(
            "give a dataset and a model (--dataset NAME --model NAME, or [run] in --config)"
        )
    summary = None
    if run.dataset == "folder":  # the defaults scaled to the user's meshes (no dataset presets)
        summary = summarize_data(dataset_cls(split="train", **kwargs))
    chosen = preset(run.dataset, run.model, summary)
    config = run.train_config(chosen["train"])
    model_args = {**chosen["model"], **run.model_args}
    return RunPlan(
        dataset=run.dataset,
        model=run.model,
        out=Path(run.out or f"runs/{run.dataset}-{run.model}"),
        data_dir=str(run.data_dir) if run.data_dir else None,
        dataset_class=dataset_cls,
        dataset_args={**chosen["dataset"], **run.dataset_args},
        dataset_kwargs={**chosen["dataset"], **kwargs},
        summary=summary,
        model_class=model_cls,
        model_args=model_args,
        config=config,
        ctx=setup(config.device),
    )


def settings_report(plan: RunPlan) -> str:
    """The settings a plan resolved, one topic a line: model and size, receptive fields, latent
    mesh, optimiser, schedule, epochs and batch, dataset (for a folder, the summary of its meshes
    that the defaults are scaled to)."""
    config = plan.config
    model_args = {**defaults(plan.model_class, FROM_DATA), **plan.model_args}
    fields = ("quantile", "k", "radius")
    receptive = {k: v for k, v in model_args.items() if k.rpartition("_")[2] in fields}

    def listed(values: dict[str, Any]) -> str:
        return ", ".join(f"{k}={show(v)}" for k, v in values.items()) or "none"

    if config.latent_grid is not None:
        latent = f"a {' x '.join(map(str, config.latent_grid))} grid over each sample"
    elif config.latent_points is not None:
        latent = f"{config.latent_points} nodes of each sample ({config.latent_sampling})"
        if config.latent_resample:
            latent += ", a new one every epoch in training"
    else:
        latent = "none (the input mesh)"
    if not getattr(plan.model_class, "uses_latent_mesh", True):  # no Operator: may use one
        latent = f"not used by {plan.model}"
    schedule = config.schedule
    if schedule == "onecycle":
        schedule += (
            f": lr / {config.div_factor:g} -> lr at {config.pct_start:.0%} of the steps -> "
            f"lr / {config.div_factor * config.final_div_factor:g}"
        )
    lines = {
        "model": f"{plan.model}: "
        + listed({k: v for k, v in model_args.items() if k not in receptive}),
        "receptive fields": listed({k: v for k, v in receptive.items() if v is not None}),
        "latent mesh": latent,
        "optimiser": f"{config.optimizer}, lr {config.lr:g}, weight decay "
        f"{config.weight_decay:g}, gradient clipping {config.clip or 'none'}",
        "schedule": schedule,
        "training": f"epochs {config.epochs}, batch {config.batch_size}, seed {config.seed}"
        + (", random periodic shifts" if config.periodic_shift else "")
        + (
            f", every sample's nodes split over {plan.ctx.world_size} processes"
            if config.split_mesh
            else ""
        ),
        "dataset": f"{plan.dataset}: " + listed(plan.dataset_args),
    }
    if plan.summary is not None:
        lines["data"] = f"{plan.summary} (the defaults above are scaled to it)"
    width = max(map(len, lines))
    return "settings:\n" + "\n".join(
        textwrap.fill(f"  {k:<{width}}  {v}", 88, subsequent_indent=" " * (width + 4))
        for k, v in lines.items()
    )


def load_splits(plan: RunPlan) -> tuple[Any, Any]:
    """The plan's train and test splits; in a distributed run rank 0 generates (or reads) them
    first, so that the other processes find them cached. An empty train split raises
    :class:`ConfigError`."""
    splits: tuple[Any, ...] = ()
    for turn in (0, 1):
        if (plan.ctx.rank == 0) == (turn == 0):
            splits = tuple(
                plan.dataset_class(split=s, **plan.dataset_kwargs) for s in ("train", "test")
            )
        barrier(plan.ctx)
    if len(splits[0]) == 0:
        raise ConfigError(
            f"dataset '{plan.dataset}' has an empty train split; check its size options"
        )
    return splits


def seeded_model(plan: RunPlan, data: PreparedData) -> nn.Module:
    """The plan's model for the shapes of ``data``, built from the seeded state."""
    seed_everything(plan.config.seed)
    return plan.model_class(**plan.model_args, **{key: data.info[key] for key in FROM_DATA})


def build_trainer(plan: RunPlan, test: bool = True, log=print) -> tuple[Trainer, dict[str, float]]:
    """The :class:`Trainer` of a plan: its splits loaded (:func:`load_splits`), prepared
    (:func:`~meshop.train.data.prepare_data`; the test split only when ``test`` and not empty),
    the model built for them (:func:`seeded_model`). Returns it with the seconds of loading and
    of preparing, ``{"load_s", "prepare_s"}``."""
    start = time.perf_counter()
    train_set, test_set = load_splits(plan)
    loaded = time.perf_counter()
    meta = {"dataset": plan.dataset, "dataset_args": plan.dataset_args, "data_dir": plan.data_dir}
    data = prepare_data(train_set, test_set if test and len(test_set) else None, plan.config, meta)
    prepared = time.perf_counter()
    model = seeded_model(plan, data)
    if plan.ctx.is_main:
        parameters = sum(p.numel() for p in model.parameters())
        log(
            f"training {plan.model} ({parameters:,} parameters) on {plan.dataset}: "
            f"{len(train_set)} train / {len(test_set)} test samples -> {plan.out}"
        )
    trainer = Trainer(model, data, out_dir=plan.out)
    return trainer, {"load_s": loaded - start, "prepare_s": prepared - loaded}


def train_run(
    run: RunConfig, resume: bool = False, figures: bool = True, log=print
) -> dict[str, Any]:
    """Train ``run.model`` on ``run.dataset`` as ``meshop train`` does: plan (:func:`plan_run`),
    load, prepare and build (:func:`build_trainer`), fit; write the run folder (checkpoint,
    metrics, ``run.json``, figures) and return the final metrics. The main process logs the
    settings (:func:`settings_report`), what it trains, and the final metrics as JSON."""
    plan = plan_run(run)
    if plan.ctx.is_main:
        log(settings_report(plan))
    trainer, _ = build_trainer(plan, log=log)
    metrics = trainer.fit(resume=resume)
    if plan.ctx.is_main:
        (plan.out / "run.json").write_text(
            json.dumps(
                {
                    "dataset": plan.dataset,
                    "model": plan.model,
                    "train": plan.config.to_dict(),
                    "model_args": plan.model_args,
                    "metrics": metrics,
                },
                indent=2,
                default=str,
            )
        )
        if figures:
            plot_run(plan.out, log=lambda *_: None)
        log(json.dumps({k: v for k, v in metrics.items() if k != "lr"}, indent=None))
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

"""Preset tuning: one (dataset, model) pair trained with ``--set`` settings over its preset on the
accuracy table's splits for a fixed number of epochs, appended to ``results/tuning.jsonl``.

    python -m benchmarks.accuracy.tune elasticity pit --epochs 30 --set train.batch_size=4
    python -m benchmarks.accuracy.tune elasticity galerkin --epochs 195 --zero-shot --reuse \
        --set model.k=null --set model.quantile=0.016
    python -m benchmarks.accuracy.tune --table > benchmarks/results/tuning.md
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

from benchmarks.accuracy.model_table import REFINED, REFINEMENTS
from benchmarks.lib.common import RESULTS, append_line, machine, markdown_table
from benchmarks.lib.training_runs import NAMES, parse_settings, run_config
from meshop.errors import MeshReadError
from meshop.train import load_model
from meshop.train.run import evaluate_run, train_run

LOG = RESULTS / "tuning.jsonl"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dataset", nargs="?")
    p.add_argument("model", nargs="?")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="PART.KEY=VALUE",
        help="a setting over the preset; PART is train, model or dataset",
    )
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--runs", type=Path, default=Path("runs/tuning"))
    p.add_argument("--log", type=Path, default=LOG)
    p.add_argument("--table", action="store_true", help="print the trials of --log")
    p.add_argument(
        "--zero-shot",
        action="store_true",
        help="also evaluate on the dataset's 2x and 4x finer test meshes (Elasticity, DarcyMesh)",
    )
    p.add_argument(
        "--reuse",
        action="store_true",
        help="evaluate the run folder's checkpoint when it holds this trial's epochs and "
        "settings, instead of training again",
    )
    args = p.parse_args(argv)
    args.quick = False  # the table's split sizes (training_runs.dataset_options)
    return args


def trial(args) -> dict:
    torch.set_num_threads(args.threads)
    name = "-".join([args.dataset, args.model, *(s.replace("/", "_") for s in args.set)])
    out = args.runs / name[:120]
    settings = parse_settings(args.set)
    run = run_config(args.dataset, args.model, args.epochs, out, args, settings)
    load = os.getloadavg()[0]
    start = time.perf_counter()
    reused = args.reuse and trained_already(out, args.epochs, args.seed, settings)
    if reused:  # its test error evaluated here, as training would have
        test = evaluate_run(out, args.data_dir, batch_size=4)["test_rel_l2"]
    else:
        test = train_run(run, figures=False, log=lambda *_: None)["test_rel_l2"]
    net, ckpt = load_model(out)
    history = ckpt["history"]
    trial = dict(dataset=args.dataset, model=args.model, epochs=args.epochs, settings=args.set)
    trial.update(parameters=sum(p.numel() for p in net.parameters()))
    trial.update(test_rel_l2=test, train_loss=history[-1].get("train_loss"))
    trial.update(train_seconds=sum(h["epoch_seconds"] for h in history))
    if reused:
        trial.update(reused=str(out))
    else:
        trial.update(wall_seconds=time.perf_counter() - start, load_average=load)
    if args.zero_shot and args.dataset in REFINED:
        trial["refinement"] = {0: test} | {
            level: evaluate_run(out, args.data_dir, {"refinement": level}, batch_size=4)[
                "test_rel_l2"
            ]
            for level in REFINEMENTS
        }
    return trial | dict(date=machine()["date"], threads=args.threads, seed=args.seed)


def trained_already(out: Path, epochs: int, seed: int, settings: dict) -> bool:
    """Whether ``out`` holds a checkpoint of ``epochs`` epochs of training seed ``seed`` whose
    model and training configurations have ``settings``' values."""
    try:
        _, ckpt = load_model(out)
    except MeshReadError:
        return False
    model, train = ckpt["model_config"], ckpt["train_config"]
    same = len(ckpt["history"]) == epochs and train.get("seed") == seed
    same &= all(model.get(k, object()) == v for k, v in settings["model"].items())
    return same and all(train.get(k, object()) == v for k, v in settings["train"].items())


INTRO = """# Preset trials on the mesh datasets

Every trial of `benchmarks/accuracy/tune.py`: one model trained on one dataset (200 training / 50
test samples unless the settings give others; seed 0 and one thread unless the settings column names
others) for the epochs given, with the settings listed over the preset of the time. The budgets are
in epochs, so a trial reruns exactly; the training times were measured while other jobs shared the
2-core machine (load: the one-minute load average at the start), so they are longer than alone.
Before these trials the presets were: PiT batch 8, lr 1e-3, no clipping on Elasticity and Airfoil,
lr 3e-3 on DarcyMesh (batch 2); the Galerkin Transformer at the paper's 2D size (width 128, 6
layers, both paths built) and ONO at width 128 with 8 layers. A trial marked "reused" evaluated a
run of the same epochs and settings trained before (`--reuse`: its training time is that run's; a
preset row may be a seed of the accuracy table's runs), and `--zero-shot` adds the errors on the 2x
and 4x finer test meshes. The presets now hold the best settings found
(`meshop/train/presets.py`), so a row of a setting that became the preset reruns as `preset`
today. Regenerate this page with
`python -m benchmarks.accuracy.tune --table > benchmarks/results/tuning.md`.
"""


def table(path: Path) -> str:
    trials = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    parts = [INTRO]
    for dataset, model in dict.fromkeys((t["dataset"], t["model"]) for t in trials):
        mine = [t for t in trials if (t["dataset"], t["model"]) == (dataset, model)]
        finer = any("refinement" in t for t in mine)
        rows = [
            [
                label(t),
                t["epochs"],
                f"{t['parameters']:,}",
                f"{t['test_rel_l2']:.4f}",
                *([zero_shot(t)] if finer else []),
                f"{t['train_seconds']:.0f} s",
                f"{t['load_average']:.1f}" if "load_average" in t else "reused",
            ]
            for t in mine
        ]
        headers = "settings over the preset|epochs|parameters|test rel. L2|"
        headers += "2x / 4x finer (zero-shot)|" * finer + "training|load"
        parts += [
            f"## {NAMES.get(model, model)} on {dataset}",
            "",
            markdown_table(headers, rows),
            "",
        ]
    return "\n".join(parts)


def label(trial: dict) -> str:
    """A trial's settings over the preset, with its seed and torch threads where they are not
    the trials' defaults (seed 0, one thread): two seeds of the same settings are two rows. A
    reused run's threads are not named: the record holds the evaluating command's."""
    seed = trial.get("seed", 0)
    threads = 1 if "reused" in trial else trial.get("threads", 1)
    named = [f"seed {seed}"] * (seed != 0) + [f"{threads} threads"] * (threads != 1)
    return ", ".join(trial["settings"] + named) or "preset"


def zero_shot(trial: dict) -> str:
    """A trial's errors on the 2x and 4x finer meshes and their ratios to the training
    meshes' ("-" when not evaluated)."""
    errors = list(trial.get("refinement", {}).values())
    if len(errors) < 3:
        return "-"
    fine, finest = errors[1] / errors[0], errors[2] / errors[0]
    return f"{errors[1]:.4f} / {errors[2]:.4f} ({fine:.2f}x / {finest:.2f}x)"


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.table:
        print(table(args.log))
        return
    if not args.dataset or not args.model:
        raise SystemExit("give a dataset and a model, or --table")
    record = trial(args)
    append_line(args.log, record)
    print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()

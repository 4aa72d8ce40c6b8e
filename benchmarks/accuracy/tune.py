"""Preset tuning: one (dataset, model) pair trained with ``--set`` settings over its preset on the
accuracy table's splits for a fixed number of epochs, appended to ``results/tuning.jsonl``.

    python -m benchmarks.accuracy.tune elasticity pit --epochs 30 --set train.batch_size=4
    python -m benchmarks.accuracy.tune --table > benchmarks/results/tuning.md
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

from benchmarks.lib.common import RESULTS, append_line, machine, markdown_table
from benchmarks.lib.training_runs import NAMES, parse_settings, run_config
from meshop.train import load_model
from meshop.train.run import train_run

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
    args = p.parse_args(argv)
    args.quick = False  # the table's split sizes (training_runs.dataset_options)
    return args


def trial(args) -> dict:
    torch.set_num_threads(args.threads)
    name = "-".join([args.dataset, args.model, *(s.replace("/", "_") for s in args.set)])
    out = args.runs / name[:120]
    run = run_config(args.dataset, args.model, args.epochs, out, args, parse_settings(args.set))
    load = os.getloadavg()[0]
    start = time.perf_counter()
    metrics = train_run(run, figures=False, log=lambda *_: None)
    net, ckpt = load_model(out)
    history = ckpt["history"]
    trial = dict(dataset=args.dataset, model=args.model, epochs=args.epochs, settings=args.set)
    trial.update(parameters=sum(p.numel() for p in net.parameters()))
    trial.update(test_rel_l2=metrics["test_rel_l2"], train_loss=history[-1].get("train_loss"))
    trial.update(train_seconds=sum(h["epoch_seconds"] for h in history))
    trial.update(wall_seconds=time.perf_counter() - start, load_average=load)
    return trial | dict(date=machine()["date"], threads=args.threads, seed=args.seed)


INTRO = """# Preset trials on the mesh datasets

Every trial of `benchmarks/accuracy/tune.py`: one model trained on one dataset (200 training / 50
test samples, seed 0, one thread) for the epochs given, with the settings listed over the preset of
the time. The budgets are in epochs, so a trial reruns exactly; the training times were measured
while other jobs shared the 2-core machine (load: the one-minute load average at the start), so
they are longer than alone. Before these trials the presets were: PiT batch 8, lr 1e-3, no
clipping on Elasticity and Airfoil, lr 3e-3 on DarcyMesh (batch 2); the Galerkin Transformer at
the paper's 2D size (width 128, 6 layers, both paths built) and ONO at width 128 with 8 layers.
The presets now hold the best settings found (`meshop/train/presets.py`), so a row of a setting
that became the preset reruns as `preset` today. Regenerate this page with
`python -m benchmarks.accuracy.tune --table > benchmarks/results/tuning.md`.
"""


def table(path: Path) -> str:
    trials = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    parts = [INTRO]
    for dataset, model in dict.fromkeys((t["dataset"], t["model"]) for t in trials):
        rows = [
            [
                ", ".join(t["settings"]) or "preset",
                t["epochs"],
                f"{t['parameters']:,}",
                f"{t['test_rel_l2']:.4f}",
                f"{t['train_seconds']:.0f} s",
                f"{t['load_average']:.1f}",
            ]
            for t in trials
            if (t["dataset"], t["model"]) == (dataset, model)
        ]
        headers = "settings over the preset|epochs|parameters|test rel. L2|training|load"
        parts += [
            f"## {NAMES.get(model, model)} on {dataset}",
            "",
            markdown_table(headers, rows),
            "",
        ]
    return "\n".join(parts)


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

"""ONO in evaluation mode against training mode, per way of orthonormalising the eigenfunctions.

A model trained with batch statistics predicts, in evaluation mode, with something else; this
script measures how much that costs. For each dataset and each ``orthonormalize`` of
:class:`meshop.nn.OrthogonalAttention` it trains one ONO (the authors' small configuration:
width 64, 4 stages, k = 16, 4 heads, linear feature attention; Adam 1e-3 with one-cycle, batch 4,
the meshop training loop with its normalisers) and then measures, on the test split, the mean
per-sample relative L2 error

- in evaluation mode (what ``meshop evaluate`` and ``meshop predict`` do), and again after a
  save -> load round trip of the run's checkpoint (the two must agree exactly);
- in training mode under ``torch.no_grad()``, the test split in batches of 4 in order (the
  moments the model was trained with: batch moments of 4 samples);

and, for ``"batch"`` models, two repairs of the running moment that need no retraining:

- ``precise``: the running moment replaced by the population moment of the final weights, the
  mean of the per-sample moments over the whole training split (as "precise BatchNorm" does);
  every running average of the moment (any momentum) estimates this quantity, with lag;
- ``own moment``: every test sample whitened with its own moment (a batch of one in training
  mode).

Datasets: Elasticity (meshes of different sizes, lumped-mass weights; the cavity's Fourier
coefficients are removed from the samples, so the model sees only the mesh) and Darcy on a
uniform 16 x 16 grid (every sample the same nodes and weights). The errors are reproducible for a
seed (epochs, not wall-clock budgets); times are reported as measured, on a loaded machine.

    python -m benchmarks.accuracy.ono_eval            # Elasticity 500/100, Darcy 400/100
    python -m benchmarks.accuracy.ono_eval --quick    # smoke test (tiny sizes, 1 epoch)
    python -m benchmarks.accuracy.ono_eval --datasets elasticity --use-train 200 --use-test 50
    python -m benchmarks.accuracy.ono_eval --merge benchmarks/results/ono_eval_*_batch.json ...
"""

from __future__ import annotations

import argparse
import copy
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.lib.common import RESULTS, markdown_table, progress, write_results

MODES = ("batch", "sample")
ONO_CONFIG = dict(width=64, layers=4, k=16, heads=4, feature_attention="linear")
EVAL_BATCH = 4


def parse(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["elasticity", "darcy"])
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--num-train", type=int, default=None, help="default 500 (Darcy 400)")
    parser.add_argument("--num-test", type=int, default=100)
    parser.add_argument(
        "--use-train", type=int, default=None, help="train on the first N training samples only"
    )
    parser.add_argument(
        "--use-test", type=int, default=None, help="test on the first N test samples only"
    )
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one epoch")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--name", default="ono_eval", help="result files <out>/<name>.{md,json}")
    parser.add_argument(
        "--merge",
        nargs="+",
        type=Path,
        default=None,
        help="no training: one table from the records of these result files (runs split over "
        "processes, e.g. one per --modes)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.num_train, args.num_test, args.epochs = 8, 4, 1
    return args


def load_dataset(name: str, num_train: int | None, num_test: int):
    """Train and test samples; Elasticity without its cavity coefficients (mesh only)."""
    if name == "elasticity":
        from meshop.datasets.elasticity import Elasticity

        n = num_train or 500
        splits = [
            Elasticity(split=s, num_train=n, num_test=num_test, max_area=8e-4)
            for s in ("train", "test")
        ]
    elif name == "darcy":
        from meshop.datasets.darcy import Darcy

        n = num_train or 400
        splits = [
            Darcy(split=s, num_train=n, num_test=num_test, resolution=16, fine_resolution=61)
            for s in ("train", "test")
        ]
    else:
        raise SystemExit(f"unknown dataset {name!r}: elasticity or darcy")
    out = []
    for split in splits:
        samples = [split[i] for i in range(len(split))]
        for d in samples:
            if "params" in d:
                del d.params
        out.append(samples)
    return out


@torch.no_grad()
def errors_in_batches(model, samples, batch_size=EVAL_BATCH) -> np.ndarray:
    """Per-sample relative L2 of ``model`` in its current mode (not switched), batches in order."""
    from meshop.data import make_loader
    from meshop.train.losses import relative_lp

    errors = []
    for batch in make_loader(samples, batch_size=batch_size):
        pred = model(batch)
        errors.append(relative_lp(pred, batch.y, batch.batch, 2, batch.num_graphs, "none"))
    return torch.cat(errors).numpy()


def attention_layers(model):
    from meshop.nn import OrthogonalAttention

    return [m for m in model.modules() if isinstance(m, OrthogonalAttention)]


@torch.no_grad()
def set_population_moment(model, samples, batch_size=EVAL_BATCH) -> None:
    """Running moments := mean of the per-sample moments over ``samples`` (precise BatchNorm):
    a cumulative average, each batch weighted by its number of samples."""
    from meshop.data import make_loader

    layers = attention_layers(model)
    for layer in layers:
        layer.reset_running_stats()
    model.train()
    seen = 0
    for batch in make_loader(samples, batch_size=batch_size):
        for layer in layers:
            layer.momentum = batch.num_graphs / (seen + batch.num_graphs)
        model(batch)
        seen += batch.num_graphs
    model.eval()


def condition(model) -> float:
    """Largest condition number of the layers' running moments."""
    return max(float(torch.linalg.cond(layer.running_moment)) for layer in attention_layers(model))


def run_case(dataset: str, mode: str, train_set, test_set, args) -> dict:
    from meshop.models import ONO
    from meshop.train import TrainConfig
    from meshop.train.checkpoint import load_model
    from meshop.train.data import prepare_data
    from meshop.train.trainer import Trainer, seed_everything

    config = TrainConfig(
        epochs=args.epochs,
        batch_size=args.batch_size,
        optimizer="adam",
        lr=1e-3,
        schedule="onecycle",
        seed=args.seed,
        eval_every=args.epochs,
        progress=False,
        device="cpu",
    )
    start = time.perf_counter()
    data = prepare_data(train_set, test_set, config)
    seed_everything(args.seed)
    sizes = data.info["in_channels"], data.info["out_channels"], data.info["pos_dim"]
    model = ONO(*sizes, orthonormalize=mode, **ONO_CONFIG)
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = Trainer(model, data, out_dir=run_dir)
        metrics = trainer.fit()
        seconds = time.perf_counter() - start
        trained = trainer.model.eval()
        eval_errors = errors_in_batches(trained, test_set)
        loaded, _ = load_model(run_dir)
        loaded_errors = errors_in_batches(loaded, test_set)
    train_mode = copy.deepcopy(trained).train()  # its running moments move: work on a copy
    record = {
        "dataset": dataset,
        "orthonormalize": mode,
        "num_train": len(train_set),
        "num_test": len(test_set),
        "nodes": [min(d.num_nodes for d in test_set), max(d.num_nodes for d in test_set)],
        "epochs": args.epochs,
        "train_loss": metrics["train_loss"],
        "eval": float(eval_errors.mean()),
        "eval_after_load": float(loaded_errors.mean()),
        "load_max_abs_diff": float(np.abs(eval_errors - loaded_errors).max()),
        "train_mode": float(errors_in_batches(train_mode, test_set).mean()),
        "seconds": seconds,
    }
    if mode == "batch":
        precise = copy.deepcopy(trained)
        record["running_cond"] = condition(trained)
        set_population_moment(precise, train_set)
        record["precise_cond"] = condition(precise)
        record["precise"] = float(errors_in_batches(precise, test_set).mean())
        own = copy.deepcopy(trained)
        for layer in attention_layers(own):
            layer.orthonormalize = "sample"
        record["own_moment"] = float(errors_in_batches(own, test_set).mean())
    return record


def fmt(x) -> str:
    return "-" if x is None else f"{x:.4f}"


def tables(records) -> tuple[str, str]:
    """The errors of each trained model, and the repairs of the ``batch`` models with the training
    times (two tables, so that each fits the width of a page)."""
    errors, repairs = [], []
    for r in records:
        form = f"`{r['orthonormalize']}`"
        errors.append(
            [
                r["dataset"],
                f"{r['num_train']}/{r['num_test']}",
                f"{r['nodes'][0]}-{r['nodes'][1]}",
                form,
                fmt(r["train_loss"]),
                fmt(r["eval"]),
                fmt(r["train_mode"]),
                f"{r['eval'] / r['train_mode']:.2f}",
            ]
        )
        repairs.append(
            [
                r["dataset"],
                form,
                fmt(r["eval"]),
                fmt(r.get("precise")),
                fmt(r.get("own_moment")),
                f"{r['seconds']:.0f} s",
            ]
        )
    return (
        markdown_table(
            [
                "dataset",
                "train/test",
                "nodes",
                "orthonormalize",
                "train loss (last epoch)",
                "test, eval mode",
                "test, train mode (no_grad, batches of 4)",
                "eval / train mode",
            ],
            errors,
        ),
        markdown_table(
            [
                "dataset",
                "orthonormalize",
                "test, eval mode",
                "eval, precise population moment",
                "eval, own moment per sample",
                "training time (measured under load)",
            ],
            repairs,
        ),
    )


def main(argv=None) -> None:
    args = parse(argv)
    torch.set_num_threads(args.threads)
    records = []
    for path in args.merge or []:
        records += json.loads(path.read_text())["records"]
    for dataset in args.datasets if args.merge is None else []:
        progress(f"{dataset}: loading (generated and cached on first use)")
        train_set, test_set = load_dataset(dataset, args.num_train, args.num_test)
        train_set, test_set = train_set[: args.use_train], test_set[: args.use_test]
        for mode in args.modes:
            progress(f"{dataset}: training ONO, orthonormalize={mode!r}")
            record = run_case(dataset, mode, train_set, test_set, args)
            progress(f"  {record}")
            records.append(record)
    epochs = sorted({r["epochs"] for r in records})
    notes = (
        "Mean per-sample relative L2 on the test split. ONO(width=64, layers=4, k=16, heads=4, "
        "feature_attention='linear'), Adam 1e-3 one-cycle, batch 4, "
        f"{', '.join(map(str, epochs))} epochs, seed {args.seed}. Precise population moment and "
        "own moment: repairs of a `batch` model without retraining (see the script's docstring)."
    )
    if args.merge:
        notes += " Records measured by the runs of " + ", ".join(
            f"`{path.name}`" for path in args.merge
        )
        notes += " (each file's header names its command)."
    errors, repairs = tables(records)
    write_results(
        args.name,
        "ONO: evaluation mode against training mode",
        args,
        {"Test errors": notes + "\n\n" + errors, "Repairs of a `batch` model": repairs},
        records,
    )


if __name__ == "__main__":
    main()

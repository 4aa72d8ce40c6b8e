"""ONO in evaluation mode against training mode, per way of orthonormalising the eigenfunctions.

For each dataset (Elasticity without its cavity coefficients, Darcy on a 16 x 16 grid) and each
``orthonormalize`` of :class:`meshop.nn.OrthogonalAttention` it trains one ONO (width 64, 4
stages, k = 16, 4 heads, linear feature attention; Adam 1e-3 one-cycle, batch 4) and measures the
mean per-sample relative L2 on the test split in evaluation mode (again after a save -> load round
trip of the checkpoint: the two must agree), in training mode under ``torch.no_grad()`` (batches
of 4 in order: the moments the model was trained with), and for ``"batch"`` models after two
repairs of the running moment that need no retraining:

- ``precise``: the running moment replaced by the population moment of the final weights, the
  mean of the per-sample moments over the whole training split (as "precise BatchNorm" does);
- ``own moment``: every test sample whitened with its own moment (a batch of one in training
  mode).

    python -m benchmarks.accuracy.ono_eval            # Elasticity 500/100, Darcy 400/100
    python -m benchmarks.accuracy.ono_eval --quick    # smoke test (tiny sizes, 1 epoch)
    python -m benchmarks.accuracy.ono_eval --datasets elasticity --use-train 200 --use-test 50
    python -m benchmarks.accuracy.ono_eval --merge benchmarks/results/ono_eval_*_batch.json ...
"""

from __future__ import annotations

import copy
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.lib.common import markdown_table, parser, progress, write_results
from meshop.data import make_loader
from meshop.models import ONO
from meshop.nn import OrthogonalAttention
from meshop.train import TrainConfig
from meshop.train.checkpoint import load_model
from meshop.train.data import prepare_data
from meshop.train.losses import relative_lp
from meshop.train.trainer import Trainer, seed_everything

MODES = ("batch", "sample")
ONO_CONFIG = dict(width=64, layers=4, k=16, heads=4, feature_attention="linear")
EVAL_BATCH = 4


def parse(argv=None):
    p = parser(__doc__.splitlines()[0], "tiny sizes, one epoch")
    p.add_argument("--datasets", nargs="+", default=["elasticity", "darcy"])
    p.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    p.add_argument("--num-train", type=int, default=None, help="default 500 (Darcy 400)")
    p.add_argument("--num-test", type=int, default=100)
    p.add_argument("--use-train", type=int, default=None, help="the first N training samples")
    p.add_argument("--use-test", type=int, default=None, help="the first N test samples")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--name", default="ono_eval", help="result files <out>/<name>.{md,json}")
    merge = "no training: one table from the records of these result files"
    p.add_argument("--merge", nargs="+", type=Path, default=None, help=merge)
    args = p.parse_args(argv)
    if args.quick:
        args.num_train, args.num_test, args.epochs = 8, 4, 1
    return args


def load_dataset(name: str, num_train: int | None, num_test: int):
    """Train and test samples; Elasticity without its cavity coefficients (mesh only)."""
    if name == "elasticity":
        from meshop.datasets.elasticity import Elasticity

        options = dict(num_train=num_train or 500, num_test=num_test, max_area=8e-4)
        splits = [Elasticity(split=s, **options) for s in ("train", "test")]
    elif name == "darcy":
        from meshop.datasets.darcy import Darcy

        options = dict(num_train=num_train or 400, num_test=num_test, resolution=16)
        splits = [Darcy(split=s, **options, fine_resolution=61) for s in ("train", "test")]
    else:
        raise SystemExit(f"unknown dataset {name!r}: elasticity or darcy")
    out = [[split[i] for i in range(len(split))] for split in splits]
    for d in (d for samples in out for d in samples if "params" in d):
        del d.params
    return out


@torch.no_grad()
def errors_in_batches(model, samples, batch_size=EVAL_BATCH) -> np.ndarray:
    """Per-sample relative L2 of ``model`` in its current mode (not switched), batches in order."""
    errors = []
    for batch in make_loader(samples, batch_size=batch_size):
        pred = model(batch)
        errors.append(relative_lp(pred, batch.y, batch.batch, 2, batch.num_graphs, "none"))
    return torch.cat(errors).numpy()


def attention_layers(model):
    return [m for m in model.modules() if isinstance(m, OrthogonalAttention)]


@torch.no_grad()
def set_population_moment(model, samples, batch_size=EVAL_BATCH) -> None:
    """Running moments := mean of the per-sample moments over ``samples`` (precise BatchNorm):
    a cumulative average, each batch weighted by its number of samples."""
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
    options = dict(optimizer="adam", lr=1e-3, schedule="onecycle", progress=False, device="cpu")
    epochs = dict(epochs=args.epochs, eval_every=args.epochs)
    config = TrainConfig(**epochs, batch_size=args.batch_size, seed=args.seed, **options)
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
        loaded_errors = errors_in_batches(load_model(run_dir)[0], test_set)
    train_mode = copy.deepcopy(trained).train()  # its running moments move: work on a copy
    nodes = [d.num_nodes for d in test_set]
    record = {"dataset": dataset, "orthonormalize": mode, "num_train": len(train_set)}
    record.update(num_test=len(test_set), nodes=[min(nodes), max(nodes)], epochs=args.epochs)
    record.update(train_loss=metrics["train_loss"], eval=float(eval_errors.mean()))
    record["eval_after_load"] = float(loaded_errors.mean())
    record["load_max_abs_diff"] = float(np.abs(eval_errors - loaded_errors).max())
    record["train_mode"] = float(errors_in_batches(train_mode, test_set).mean())
    record["seconds"] = seconds
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
        ratio = f"{r['eval'] / r['train_mode']:.2f}"
        nodes = f"{r['nodes'][0]}-{r['nodes'][1]}"
        losses = [fmt(r[k]) for k in ("train_loss", "eval", "train_mode")]
        errors.append(
            [r["dataset"], f"{r['num_train']}/{r['num_test']}", nodes, form, *losses, ratio]
        )
        repaired = [fmt(r.get(k)) for k in ("eval", "precise", "own_moment")]
        repairs.append([r["dataset"], form, *repaired, f"{r['seconds']:.0f} s"])
    headers = "dataset|train/test|nodes|orthonormalize|train loss (last epoch)|test, eval mode|"
    headers += "test, train mode (no_grad, batches of 4)|eval / train mode"
    repaired = "dataset|orthonormalize|test, eval mode|eval, precise population moment|"
    repaired += "eval, own moment per sample|training time (measured under load)"
    return markdown_table(headers, errors), markdown_table(repaired, repairs)


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
        names = ", ".join(f"`{path.name}`" for path in args.merge)
        notes += f" Records measured by the runs of {names} (each file's header names its command)."
    errors, repairs = tables(records)
    sections = {"Test errors": notes + "\n\n" + errors, "Repairs of a `batch` model": repairs}
    write_results(args.name, "ONO: evaluation mode against training mode", args, sections, records)


if __name__ == "__main__":
    main()

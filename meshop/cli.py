"""The ``meshop`` command: train, evaluate, predict, plot, demo, and lists of datasets and models.

Errors in arguments, files, fields or configurations print one line ``meshop: error: ...`` and exit
with status 2; ``--debug`` shows the full traceback instead. Distributed training runs the same
command under torchrun: ``torchrun --nproc_per_node 2 -m meshop.cli train ...``.

The line is parsed before anything heavy is imported: each command imports torch, PyG and the
parts of meshop it needs when it runs, so ``--help`` and argument errors import none of them.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from meshop.errors import ConfigError, MeshopError


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line like every other meshop error."""

    def error(self, message: str):
        raise ConfigError(f"{message} (see `{self.prog} --help`)")


def parse_value(text: str) -> Any:
    """A TOML value (``64``, ``1e-3``, ``true``, ``[16, 16]``, ``"name"``), else the bare string."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        try:
            import tomli as tomllib
        except ImportError:
            return text
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def parse_assignments(items: Sequence[str] | None, flag: str) -> dict[str, Any]:
    """``["width=64", "heads=2"]`` -> ``{"width": 64, "heads": 2}``."""
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"{flag} expects KEY=VALUE, got '{item}'")
        out[key.strip().replace("-", "_")] = parse_value(value.strip())
    return out


# flags of `meshop train` that set TrainConfig fields (flag name -> field name)
TRAIN_FLAGS = {
    "epochs": int,
    "batch_size": int,
    "lr": float,
    "optimizer": str,
    "weight_decay": float,
    "schedule": str,
    "clip": float,
    "loss": str,
    "h1_weight": float,
    "seed": int,
    "eval_every": int,
    "latent_points": int,
    "num_workers": int,
    "device": str,
}


def _add_train(sub) -> None:
    p = sub.add_parser(
        "train",
        help="train a model on a dataset",
        description="Train a model on a dataset, checkpointing every epoch into --out.",
    )
    p.add_argument("--config", help="TOML file with [run], [train], [model], [dataset] tables")
    p.add_argument("--dataset", help="dataset name (see `meshop datasets`)")
    p.add_argument("--model", help="model name (see `meshop models`)")
    p.add_argument("--out", help="run directory (default runs/DATASET-MODEL)")
    p.add_argument("--data-dir", help="data root, folder of meshes, or folder of standard files")
    for name, kind in TRAIN_FLAGS.items():
        p.add_argument(f"--{name.replace('_', '-')}", type=kind, dest=name)
    p.add_argument("--num-train", type=int, help="training samples (dataset option num_train)")
    p.add_argument("--num-test", type=int, help="test samples (dataset option num_test)")
    p.add_argument("--model-arg", action="append", metavar="KEY=VALUE", help="model option")
    p.add_argument(
        "--dataset-arg",
        action="append",
        metavar="KEY=VALUE",
        help="""dataset option, the value in TOML syntax; a folder's fields: --dataset-arg """
        """'inputs=["load"]' --dataset-arg 'targets=["u", "p"]'""",
    )
    p.add_argument(
        "--train-arg",
        action="append",
        metavar="KEY=VALUE",
        help="any other training setting (a TrainConfig field, e.g. latent_grid=[16, 16])",
    )
    p.add_argument("--resume", action="store_true", help="continue from --out/checkpoint.pt")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument(
        "--compile", action="store_true", help="training steps through torch.compile (slow start)"
    )
    p.add_argument(
        "--split-mesh",
        action="store_true",
        help="under torchrun, every process trains on its own part of each sample's nodes "
        "(one mesh over the processes) instead of on other samples",
    )
    p.add_argument("--no-figures", action="store_true", help="do not draw figures at the end")
    _add_threads(p)


def _add_threads(p) -> None:
    """``--threads N`` of train, evaluate and predict (:func:`_set_threads` applies it)."""
    p.add_argument("--threads", type=int, help="CPU threads per process (torch.set_num_threads)")


def _set_threads(args) -> None:
    """``torch.set_num_threads(args.threads)`` when ``--threads`` was given."""
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)


def cmd_train(args) -> int:
    from meshop.train.config import RunConfig, load_config
    from meshop.train.run import train_run

    _set_threads(args)
    run = load_config(args.config) if args.config else RunConfig()
    for key in ("dataset", "model", "out", "data_dir"):
        if getattr(args, key) is not None:
            setattr(run, key, getattr(args, key))
    run.train.update(parse_assignments(args.train_arg, "--train-arg"))
    run.train.update({k: getattr(args, k) for k in TRAIN_FLAGS if getattr(args, k) is not None})
    if args.no_progress:
        run.train["progress"] = False
    if args.compile:
        run.train["compile"] = True
    if args.split_mesh:
        run.train["split_mesh"] = True
    run.model_args.update(parse_assignments(args.model_arg, "--model-arg"))
    run.dataset_args.update(parse_assignments(args.dataset_arg, "--dataset-arg"))
    for key in ("num_train", "num_test"):
        if getattr(args, key) is not None:
            run.dataset_args[key] = getattr(args, key)
    train_run(run, resume=args.resume, figures=not args.no_figures)
    return 0


#: the files ``meshop evaluate --out`` writes
SUMMARY, PER_SAMPLE = "summary.json", "per_sample.csv"


def _add_evaluate(sub) -> None:
    p = sub.add_parser(
        "evaluate",
        help="relative L2 of a checkpoint on its test split, or on every file of a folder",
        description="Relative L2 (mean, median) of a checkpoint on its dataset's test split, or "
        "with --all-files on every sample (e.g. every file of another folder of meshes); "
        "--dataset-arg changes dataset options, e.g. a finer grid (zero-shot super-resolution).",
    )
    p.add_argument("--checkpoint", required=True, help="checkpoint.pt or a run directory")
    p.add_argument("--data-dir", help="data root or folder (default: the one used in training)")
    p.add_argument("--dataset-arg", action="append", metavar="KEY=VALUE", help="dataset option")
    p.add_argument(
        "--all-files",
        action="store_true",
        help='every sample, not the test split (the dataset option split="all"; folder datasets)',
    )
    p.add_argument(
        "--out",
        help=f"folder for {SUMMARY} (the printed summary) and {PER_SAMPLE} (the error of every "
        "sample, with its file)",
    )
    p.add_argument("--batch-size", type=int, default=8)
    _add_threads(p)


def cmd_evaluate(args) -> int:
    from pathlib import Path

    from meshop.train.run import evaluate_run

    _set_threads(args)
    dataset_args = parse_assignments(args.dataset_arg, "--dataset-arg")
    if args.all_files:
        if "split" in dataset_args:
            raise ConfigError("give --all-files or --dataset-arg split=..., not both")
        dataset_args["split"] = "all"
    out = Path(args.out) if args.out is not None else None
    metrics = evaluate_run(
        args.checkpoint,
        data_dir=args.data_dir,
        dataset_args=dataset_args,
        batch_size=args.batch_size,
        per_sample=out / PER_SAMPLE if out is not None else None,
    )
    if out is not None:
        (out / SUMMARY).write_text(json.dumps(metrics, indent=2) + "\n")
    print(json.dumps(metrics))
    return 0


def _add_predict(sub) -> None:
    p = sub.add_parser(
        "predict",
        help="predict on a mesh file, at its nodes or at query points",
        description="Read any mesh file meshio reads, predict at its nodes or at --query points "
        "(CSV or mesh file; points may lie outside the training domain), write a mesh file "
        "(point data, for ParaView) or CSV.",
    )
    p.add_argument("--checkpoint", required=True, help="checkpoint.pt or a run directory")
    p.add_argument("--mesh", required=True, help="input mesh (.vtu, .msh, .vtk, .xdmf, ...)")
    p.add_argument("--query", help="query points: CSV (x,y[,z] per row) or a mesh file")
    p.add_argument("--out", required=True, help="output file: a mesh format or .csv")
    p.add_argument(
        "--params",
        help="per-sample parameters, comma separated in the training order, only for a model "
        "trained with them (Airfoil: angle of attack, Mach; shape_params=true datasets: the shape "
        "parameters first); the meshes of Elasticity and the Darcy datasets need none",
    )
    p.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    p.add_argument(
        "--inputs",
        help="the mesh's fields that supply the model's inputs, comma separated "
        "(default: the names used in training)",
    )
    p.add_argument(
        "--integrate",
        action="store_true",
        help="print the integral of each predicted field over the mesh (its own quadrature) as "
        "JSON; with --query, the query must be a mesh file",
    )
    p.add_argument(
        "--group",
        action="append",
        metavar="NAME",
        help="with --integrate: integrate over this named group of the mesh too (a gmsh "
        "physical group or cell set, e.g. a wall); repeatable",
    )
    p.add_argument(
        "--chunk-nodes",
        type=int,
        metavar="N",
        help="evaluate the model on chunks of N nodes: the same predictions in memory bounded by "
        "the chunk (default: chunks of 16384 nodes for meshes of more than 131072 nodes, fewer "
        "when memory is short; 0: never chunk)",
    )
    p.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar (shown on stderr when it is a terminal: the nodes the model's "
        "layers have gone through)",
    )
    p.add_argument(
        "--no-estimate",
        action="store_true",
        help="skip the estimate of the time and memory printed before the prediction: it runs "
        "the model on subsets of the mesh, a large share of the prediction's time for the "
        "fastest models on a million nodes",
    )
    p.add_argument(
        "--quadratic-ok",
        action="store_true",
        help="predict with a model whose cost grows with the square of the nodes also on a mesh "
        "of more than 200,000 nodes (refused by default, with its estimated time)",
    )
    _add_threads(p)


def cmd_predict(args) -> int:
    from meshop.train.inference import predict_file

    _set_threads(args)
    if args.group and not args.integrate:
        raise ConfigError("--group NAME needs --integrate")
    if args.chunk_nodes is not None and args.chunk_nodes < 0:
        raise ConfigError(
            f"--chunk-nodes must be a number of nodes >= 0 (0: never chunk), got {args.chunk_nodes}"
        )
    if args.integrate and args.query is not None and args.query.lower().endswith((".csv", ".txt")):
        raise ConfigError(
            "--integrate needs a mesh: predict at the nodes of --mesh, or give --query as a mesh "
            "file (points in a CSV file have no cells to integrate over)"
        )
    where = args.query if args.query is not None else args.mesh
    if args.group:  # before predicting, so that a wrong name writes no file
        from meshop.data import group_weights, read_meshio

        mesh = read_meshio(where)
        for name in args.group:
            group_weights(mesh, name, source=where)

    params = None
    if args.params is not None:
        try:
            params = [float(v) for v in args.params.split(",") if v.strip()]
        except ValueError as exc:
            raise ConfigError(
                f"--params expects comma-separated numbers, got '{args.params}'"
            ) from exc
    path, pred = predict_file(
        args.checkpoint,
        args.mesh,
        args.out,
        query=args.query,
        params=params,
        overwrite=args.overwrite,
        inputs=[n.strip() for n in args.inputs.split(",")] if args.inputs else None,
        chunk_nodes=args.chunk_nodes,
        progress=not args.no_progress,
        quadratic_ok=args.quadratic_ok,
        report=print,
        estimate=not args.no_estimate,
    )
    channels = "1 output channel" if pred.shape[1] == 1 else f"{pred.shape[1]} output channels"
    print(f"wrote {path} ({pred.shape[0]} points, {channels})")
    if args.integrate:
        from meshop.train.inference import prediction_integrals

        print(json.dumps(prediction_integrals(args.checkpoint, pred, where, args.group or [])))
    return 0


def _add_plot(sub) -> None:
    p = sub.add_parser(
        "plot",
        help="figures of a run: loss curve, test predictions",
        description="PNG figures of a run: the loss curve and input/target/prediction/error of "
        "test samples.",
    )
    p.add_argument("--checkpoint", required=True, help="checkpoint.pt or a run directory")
    p.add_argument("--samples", type=int, default=2, help="number of test samples to draw")
    p.add_argument("--out", help="figure directory (default: figures/ beside the checkpoint)")


def cmd_plot(args) -> int:
    from meshop.train.run import plot_run

    plot_run(args.checkpoint, samples=args.samples, out=args.out)
    return 0


def _add_demo(sub) -> None:
    p = sub.add_parser(
        "demo",
        help="Elasticity: train PiT and an MLP baseline on the CPU, write runs/demo",
        description="Generate (or load the cached) Elasticity dataset, train PiT and an MLP "
        "baseline the same way, print their test relative L2, write checkpoints, .vtu files, "
        "figures and predictions at new points into --out.",
    )
    p.add_argument("--out", default="runs/demo", help="output directory (default runs/demo)")
    p.add_argument("--quick", action="store_true", help="a tiny version (< 1 minute)")
    p.add_argument(
        "--data-dir",
        help="data root (default $MESHOP_DATA, else datasets/ of a clone, else ~/.cache/meshop)",
    )
    p.add_argument("--epochs", type=int, help="override the number of epochs")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument(
        "--threads",
        type=int,
        help="CPU threads (default 1 unless OMP_NUM_THREADS is set: the demo's models are small, "
        "and on a busy machine more threads can be many times slower)",
    )


def cmd_demo(args) -> int:
    import os

    import torch

    from meshop.train.demo import run_demo

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    elif "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)
    run_demo(
        out=args.out,
        quick=args.quick,
        data_dir=args.data_dir,
        epochs=args.epochs,
        progress=not args.no_progress,
    )
    return 0


def cmd_datasets(args) -> int:
    from meshop.datasets.registry import DATASETS

    for name, entry in DATASETS.items():
        print(f"{name:<17} {entry.description}  [models: {', '.join(entry.models)}]")
    return 0


def cmd_models(args) -> int:
    from meshop.models.registry import MODELS

    for name, entry in MODELS.items():
        print(f"{name:<11} {entry.description}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="meshop",
        description="Neural operators on arbitrary meshes: train, evaluate, predict, plot, demo.",
    )
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    _add_train(sub)
    _add_evaluate(sub)
    _add_predict(sub)
    _add_plot(sub)
    _add_demo(sub)
    sub.add_parser("datasets", help="list the datasets")
    sub.add_parser("models", help="list the models")
    return parser


COMMANDS = {
    "train": cmd_train,
    "evaluate": cmd_evaluate,
    "predict": cmd_predict,
    "plot": cmd_plot,
    "demo": cmd_demo,
    "datasets": cmd_datasets,
    "models": cmd_models,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``meshop`` console script; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]  # accepted anywhere on the line
    try:
        args = build_parser().parse_args(argv)
        if args.command is None:
            build_parser().print_help()
            return 2
        return COMMANDS[args.command](args)
    except (MeshopError, OSError) as exc:
        if debug:
            raise
        print(f"meshop: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("meshop: interrupted", file=sys.stderr)
        return 130
    finally:
        if "torch.distributed" in sys.modules:  # else no process group was joined
            from meshop.train.distributed import teardown

            teardown()


if __name__ == "__main__":
    sys.exit(main())

"""Accuracy on meshes of up to a million nodes: one model trained on DarcyMesh on every node and on
a random fraction of the nodes per step, evaluated zero-shot on the same test domains meshed up to
16 times finer than the training meshes.

The model is PiT with its DarcyMesh preset (``meshop train --dataset darcy-mesh --model pit``:
width 64, 256 farthest-point latent nodes, 2 % and 5 % quantile receptive fields, Adam 5e-3 with
cosine annealing, batch 2). Of the CPU presets it learns DarcyMesh best
(``benchmarks/results/accuracy.md``: its error is a third of the next operator's after the table's
epochs), and its quantile receptive fields cover the same area of the domain on any mesh, so its
error did not grow on the 2x and 4x finer test meshes there: the model to ask how far zero-shot
evaluation goes.

Two runs train on the same samples (``--train-refinement``, by default level 1: 2x finer than the
accuracy table's training meshes, about 2,600 to 4,200 nodes) with the same seed (the same initial
weights and sample order) and the same epochs:

- ``every node``: every step on whole meshes;
- ``node fraction``: every step on a new random ``--node-fraction`` of each sample's nodes with the
  quadrature weights rescaled (``TrainConfig.node_fraction``): a quarter of the nodes of level 1
  is about the density of level 0, and each step costs about that much.

Both are then evaluated, without retraining, on the test samples at the training refinement and
at every finer level up to ``--finest`` (level 5: triangles 1024 times smaller than level 0's,
0.65 to 1.1 million nodes per mesh), each level's first ``--num-test`` test samples (the same
domains and fields on every level; a few at the finest, whose generation takes minutes per
sample). The models evaluate a mesh of more than 131,072 nodes in chunks by themselves
(``NormalizedModel``; ``--chunk-nodes`` sets the chunk).

Every step runs in a fresh process (:func:`benchmarks.lib.common.run_case`), one torch thread,
two at a time (``--jobs``; the two runs train side by side, under the same load): the generation
of each level (time and peak memory of the project's solver: Triangle meshes and scikit-fem, P2
up to level 3, P1 above), each training run and each evaluation (time per mesh, latent mesh
included, and peak memory above the loaded test meshes). Reported per level: the mean test
relative L2 of both models over the level's test samples and over the first ``num_test`` of the
finest level (the same meshes on every level), the nodes per mesh and the times. The machine's
load average is recorded when each step starts.

    python -m benchmarks.accuracy.large_mesh_zero_shot           # the full run (46 min, loaded)
    python -m benchmarks.accuracy.large_mesh_zero_shot --quick   # smoke test: tiny, seconds
    python -m benchmarks.accuracy.large_mesh_zero_shot --tables-from RESULTS.json  # redraw

The generated data is cached in the data root (``--data-dir``, else ``$MESHOP_DATA``, else
``datasets/``); checkpoints go to ``--runs`` (default ``runs/large_mesh_zero_shot``).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from benchmarks.lib.common import (
    RESULTS,
    fmt_mb,
    fmt_time,
    markdown_table,
    progress,
    run_case,
    write_results,
)
from benchmarks.lib.training_runs import run_config

NAME = "large_mesh_zero_shot"
DATASET, MODEL = "darcy-mesh", "pit"
#: the full run: training refinement, finest level, training samples, epochs, and the test
#: samples of each level from the training refinement to the finest
FULL = dict(
    train_refinement=1,
    finest=5,
    num_train=200,
    epochs=30,
    num_test="50,50,10,4,3",
    chunk_nodes=None,
)
#: --quick: tiny meshes (max_area 0.01, a few dozen nodes at level 0), one epoch, chunks of 64
#: nodes so that the chunked evaluation runs too
QUICK = dict(train_refinement=0, finest=2, num_train=4, epochs=1, num_test="2,2,2", chunk_nodes=64)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny meshes, one epoch (smoke test)")
    parser.add_argument("--train-refinement", type=int, default=None, help="default: 1")
    parser.add_argument("--finest", type=int, default=None, help="finest test level (default 5)")
    parser.add_argument("--num-train", type=int, default=None, help="default: 200")
    parser.add_argument("--epochs", type=int, default=None, help="default: 30")
    parser.add_argument(
        "--num-test",
        default=None,
        help="comma-separated test samples of each level, from the training refinement to the "
        "finest (default: 50,50,10,4,3)",
    )
    parser.add_argument(
        "--node-fraction", type=float, default=0.25, help="the second run's fraction of the nodes"
    )
    parser.add_argument(
        "--chunk-nodes",
        type=int,
        default=None,
        help="evaluate in chunks of this many nodes (default: the models' own, chunks of 65,536 "
        "nodes above 131,072)",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default: 1)")
    parser.add_argument(
        "--jobs",
        type=int,
        default=2,
        help="steps side by side, each in its own process (default 2: the two runs at once)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--timeout", type=float, default=3600.0, help="seconds allowed to one step (default 3600)"
    )
    parser.add_argument("--data-dir", default=None, help="data root of the generated datasets")
    parser.add_argument("--runs", type=Path, default=Path(f"runs/{NAME}"))
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder of the result files")
    parser.add_argument(
        "--tables-from",
        type=Path,
        default=None,
        help="measure nothing: redraw the tables of a large_mesh_zero_shot.json",
    )
    args = parser.parse_args(argv)
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.levels = list(range(args.train_refinement, args.finest + 1))
    counts = [int(n) for n in str(args.num_test).split(",") if n]
    if len(counts) != len(args.levels) or min(counts) < 1:
        parser.error(
            f"--num-test needs one positive count per level {args.levels[0]} to {args.levels[-1]} "
            f"({len(args.levels)} counts), got {args.num_test!r}"
        )
    args.num_test = dict(zip(args.levels, counts))
    if not 0 < args.node_fraction < 1:
        parser.error(f"--node-fraction must be in (0, 1), got {args.node_fraction}")
    return args


def runs(args) -> dict[str, float]:
    """The two training runs: their names and node fractions."""
    return {"every node": 1.0, "node fraction": args.node_fraction}


def training_run(args, fraction: float):
    """The ``RunConfig`` of one training run: the pair's preset, the benchmark's sizes."""
    train = {"eval_every": args.epochs}  # the test error once, after the last epoch
    if fraction < 1:
        train["node_fraction"] = fraction
    dataset = {
        "num_train": args.num_train,
        "num_test": args.num_test[args.train_refinement],
        "refinement": args.train_refinement,
    }
    out = args.runs / ("every-node" if fraction == 1 else f"fraction-{fraction:g}")
    return run_config(DATASET, MODEL, args.epochs, out, args, {"train": train, "dataset": dataset})


def dataset_args(args) -> dict:
    """The DarcyMesh options of the training split, as ``meshop train`` completes them."""
    from meshop.train.presets import preset

    return {**preset(DATASET, MODEL)["dataset"], **training_run(args, 1.0).dataset_args}


# -- the steps, each run in a fresh process by run_case ----------------------------------------


def generation_case(device: str, data_dir: str, split: str, options: dict, listing: str):
    """Generate (or read) one split; the nodes of its samples and whether it was generated go to
    the JSON file ``listing``."""
    from meshop.datasets.registry import build_dataset

    def step():
        start = time.time()
        dataset = build_dataset(DATASET, split, data_dir, **options)
        generated = Path(dataset.processed_paths[0]).stat().st_mtime >= start
        nodes = [int(dataset[i].num_nodes) for i in range(len(dataset))]
        Path(listing).write_text(json.dumps({"nodes": nodes, "generated": generated}))

    return step


def training_case(device: str, run):
    """One training run, as ``meshop train`` does it."""
    from meshop.train.run import train_run

    return lambda: train_run(run, figures=False, log=lambda *_: None)


def evaluation_case(
    device: str, checkpoint: str, data_dir: str, overrides: dict, chunk_nodes, listing: str
):
    """The per-sample test errors of a checkpoint on its test split with ``overrides`` (another
    refinement), one mesh at a time: the test meshes are read before the step; the step makes
    their latent meshes and evaluates (in chunks above the model's limit) and writes the errors,
    the nodes and the chunk to the JSON file ``listing``."""
    from meshop.datasets.registry import build_dataset
    from meshop.train import load_model
    from meshop.train.data import prepare
    from meshop.train.inference import latent_of
    from meshop.train.metrics import per_sample_errors

    model, ckpt = load_model(checkpoint)
    if chunk_nodes is not None:
        model.chunk_nodes = chunk_nodes
    options = {**ckpt["data"]["dataset_args"], **overrides, "progress": False}
    test_set = build_dataset(DATASET, "test", data_dir, **options)
    meshes = [test_set[i] for i in range(len(test_set))]

    def step():
        errors = per_sample_errors(model, prepare(meshes, latent_of(ckpt)), batch_size=1)
        largest = max(meshes, key=lambda d: d.num_nodes)
        result = {
            "errors": errors.tolist(),
            "nodes": [int(d.num_nodes) for d in meshes],
            "chunk_nodes": model.chunk_for(largest),
        }
        Path(listing).write_text(json.dumps(result))

    return step


def measured(prepare, params: dict, args, listing: Path | None = None) -> dict:
    """``run_case`` of one step (timed once, one call), with what the step wrote to ``listing``
    (a JSON file, given to the step as its ``listing`` argument) and the load average before."""
    load = os.getloadavg()[0]
    if listing is not None:
        listing.unlink(missing_ok=True)
        params = {**params, "listing": str(listing)}
    result = run_case(
        prepare,
        params,
        device="cpu",
        threads=args.threads,
        timeout=args.timeout,
        min_time=0.0,
    )
    if "error" in result:
        raise SystemExit(f"{prepare.__name__} {params}: {result['error']}")
    found = json.loads(listing.read_text()) if listing is not None else {}
    return {**result, **found, "load_average": load}


# -- the measurement -------------------------------------------------------------------------


def side_by_side(function, items: list, jobs: int) -> list:
    """``[function(item) for item in items]``, ``jobs`` at a time (each item's steps run in their
    own processes, so threads suffice here)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max(1, jobs)) as pool:
        return list(pool.map(function, items))


def generate(args, records: list[dict]) -> None:
    """Every split the runs read, the finest first (the longest; ``--jobs`` at a time): each
    level's test samples and the training split (with the training level's test samples, which
    ``meshop train`` evaluates)."""
    options = dataset_args(args)
    splits = [("test", level) for level in reversed(args.levels)]
    splits.append(("train", args.train_refinement))

    def one(split_level: tuple[str, int]) -> dict:
        split, level = split_level
        extra = {"refinement": level}
        if split == "test":
            extra["num_test"] = args.num_test[level]
        progress(f"generating the {split} split at refinement {level}")
        params = {"data_dir": args.data_dir, "split": split, "options": {**options, **extra}}
        listing = args.runs / f"generated-{split}-{level}.json"
        record = measured(generation_case, params, args, listing)
        progress(f"  {split} {level}: {len(record['nodes'])} samples, {fmt_time(record['time_s'])}")
        return {"kind": "generation", "split": split, "refinement": level, **record}

    found = side_by_side(one, splits, args.jobs)
    records += sorted(found, key=lambda r: (r["split"] == "test", r["refinement"]))


def train(args, records: list[dict]) -> None:
    """The two runs, side by side with ``--jobs 2``."""
    from meshop.train import load_model

    def one(name_fraction: tuple[str, float]) -> dict:
        name, fraction = name_fraction
        run = training_run(args, fraction)
        progress(f"training {MODEL} on {DATASET} ({name})")
        result = measured(training_case, {"run": run}, args)
        net, ckpt = load_model(run.out)
        history = ckpt["history"]
        progress(f"  {name}: trained in {fmt_time(sum(h['epoch_seconds'] for h in history))}")
        return {
            "kind": "training",
            "run": name,
            "node_fraction": fraction,
            "refinement": args.train_refinement,
            "num_train": args.num_train,
            "seed": args.seed,
            "epochs": len(history),
            "parameters": sum(p.numel() for p in net.parameters()),
            "train_seconds": sum(h["epoch_seconds"] for h in history),
            "epoch_seconds": [h["epoch_seconds"] for h in history],
            "test_rel_l2": history[-1]["test_rel_l2"],
            "checkpoint": str(run.out),
            **result,
        }

    records += side_by_side(one, list(runs(args).items()), args.jobs)


def evaluate(args, records: list[dict], level: int) -> None:
    """Both trained models on the test samples of one level, side by side with ``--jobs 2``."""
    trained = [r for r in records if r["kind"] == "training"]

    def one(run: dict) -> dict:
        progress(f"evaluating {run['run']} at refinement {level}")
        params = {
            "checkpoint": run["checkpoint"],
            "data_dir": args.data_dir,
            "overrides": {"refinement": level, "num_test": args.num_test[level]},
            "chunk_nodes": args.chunk_nodes,
        }
        listing = args.runs / f"evaluated-{Path(run['checkpoint']).name}-{level}.json"
        result = measured(evaluation_case, params, args, listing)
        errors = result["errors"]
        progress(f"  {run['run']} at {level}: relative L2 {sum(errors) / len(errors):.4f}")
        return {
            "kind": "evaluation",
            "run": run["run"],
            "node_fraction": run["node_fraction"],
            "refinement": level,
            "samples": len(errors),
            "test_rel_l2": sum(errors) / len(errors),
            **result,
        }

    records += side_by_side(one, trained, args.jobs)


# -- the tables ------------------------------------------------------------------------------


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def _nodes(nodes: list[int]) -> str:
    return f"{_mean(nodes):,.0f} ({min(nodes):,} to {max(nodes):,})"


def _pair(a: str, b: str) -> str:
    return f"{a} / {b}"


def tables(records: list[dict], wall_seconds: float | None = None) -> dict[str, str]:
    """The error table, the cost table, the training table and what they show."""
    trained = [r for r in records if r["kind"] == "training"]
    names = [r["run"] for r in trained]
    full, fraction = trained
    evaluated = {(r["run"], r["refinement"]): r for r in records if r["kind"] == "evaluation"}
    generated = {(r["split"], r["refinement"]): r for r in records if r["kind"] == "generation"}
    levels = sorted({level for _, level in evaluated})
    common = min(evaluated[names[0], level]["samples"] for level in levels)
    train_level = full["refinement"]
    label = f"a fraction {fraction['node_fraction']:g} of the nodes"

    def level_name(level: int) -> str:
        finer = 2 ** (level - train_level)
        return f"{level} (training)" if level == train_level else f"{level} ({finer}x finer)"

    def first(run: str, level: int) -> float:
        return _mean(evaluated[run, level]["errors"][:common])

    error_rows = []
    for level in levels:
        a, b = (evaluated[name, level] for name in names)
        error_rows.append(
            [
                level_name(level),
                _nodes(a["nodes"]),
                a["samples"],
                f"{a['test_rel_l2']:.4f}",
                f"{b['test_rel_l2']:.4f}",
                f"{b['test_rel_l2'] / a['test_rel_l2']:.2f}",
                _pair(f"{first(names[0], level):.4f}", f"{first(names[1], level):.4f}")
                + f" ({first(names[1], level) / first(names[0], level):.2f})",
            ]
        )
    errors = markdown_table(
        [
            "refinement",
            "nodes per mesh (mean, range)",
            "test meshes",
            "every node",
            label,
            "ratio",
            f"the first {common} meshes: every node / fraction (ratio)",
        ],
        error_rows,
    )

    cost_rows = []
    for level in levels:
        gen = generated.get(("test", level))
        a, b = (evaluated[name, level] for name in names)
        cost_rows.append(
            [
                level_name(level),
                fmt_time(gen["time_s"] / len(gen["nodes"]))
                if gen and gen["generated"]
                else "cached",
                fmt_mb(gen["peak_mb"]) if gen and gen["generated"] else "-",
                _pair(*(fmt_time(r["time_s"] / r["samples"]) for r in (a, b))),
                _pair(*(fmt_mb(r["peak_mb"]) for r in (a, b))),
                f"{a['chunk_nodes']:,}" if a["chunk_nodes"] else "whole",
            ]
        )
    costs = markdown_table(
        [
            "refinement",
            "generation per mesh",
            "generation peak memory",
            "evaluation per mesh: every node / fraction",
            "evaluation peak memory",
            "chunks of (nodes)",
        ],
        cost_rows,
    )

    train_nodes = generated[("train", train_level)]["nodes"]
    training_rows = [
        [
            r["run"],
            f"{_mean(train_nodes) * r['node_fraction']:,.0f}",
            r["epochs"],
            fmt_time(r["train_seconds"]),
            fmt_time(side_by_side_epoch(r, trained)),
            fmt_time(r["time_s"]),
            fmt_mb(r["peak_mb"]),
            f"{r['test_rel_l2']:.4f}",
            f"{r['load_average']:.1f}",
        ]
        for r in trained
    ]
    training = markdown_table(
        [
            "run",
            "nodes per sample per step (mean)",
            "epochs",
            "training (epochs)",
            "per epoch while both trained",
            "whole run",
            "peak memory",
            f"test rel. L2 at refinement {train_level}",
            "load",
        ],
        training_rows,
    )
    caption = (
        f"{MODEL_TITLE} trained at refinement {train_level} on {full['num_train']} samples of "
        f"{min(train_nodes):,} to {max(train_nodes):,} nodes, {full['epochs']} epoch(s), seed "
        f"{full['seed']}"
    )
    return {
        f"Mean test relative L2 per refinement ({caption})": errors,
        "Training: every node against a fraction of the nodes per step": training,
        "Generation and evaluation per refinement": costs,
        "What the tables show": findings(records, common, wall_seconds),
    }


MODEL_TITLE = "PiT (DarcyMesh preset)"


def side_by_side_epoch(run: dict, trained: list[dict]) -> float | None:
    """Mean time of the epochs of ``run`` that ended before either run ended (both runs then
    trained side by side, under the same load); None without the epochs' times."""
    if any("epoch_seconds" not in r for r in trained):
        return None
    both = min(r["train_seconds"] for r in trained)
    ended, times = 0.0, []
    for seconds in run["epoch_seconds"]:
        ended += seconds
        if ended > both * (1 + 1e-9):
            break
        times.append(seconds)
    return _mean(times) if times else None


def findings(records: list[dict], common: int, wall_seconds: float | None) -> str:
    """The comparison in words, computed from the records."""
    trained = [r for r in records if r["kind"] == "training"]
    full, part = trained
    evaluated = {(r["run"], r["refinement"]): r for r in records if r["kind"] == "evaluation"}
    levels = sorted({level for _, level in evaluated})
    low, high = levels[0], levels[-1]

    def first(run: str, level: int) -> float:
        return _mean(evaluated[run, level]["errors"][:common])

    fraction = f"a fraction {part['node_fraction']:g} of the nodes"
    at_low = evaluated[part["run"], low]["test_rel_l2"] / evaluated[full["run"], low]["test_rel_l2"]
    same = [first(part["run"], level) / first(full["run"], level) for level in levels]
    text = [
        f"Trained on {fraction} per step, the model's mean test error at the training "
        f"refinement is {at_low:.2f}x the full-mesh model's on the "
        f"{evaluated[full['run'], low]['samples']} test meshes, and {min(same):.2f}x to "
        f"{max(same):.2f}x on the first {common} test domains at refinements {low} to {high}."
    ]
    epochs = [side_by_side_epoch(r, trained) for r in trained]
    if None not in epochs:
        text.append(
            f"While the two runs trained side by side, an epoch on {fraction} took "
            f"{epochs[1] / epochs[0]:.2f}x the time of an epoch on every node (whole runs: "
            f"{part['train_seconds'] / full['train_seconds']:.2f}x, the one that ended last "
            "trained its last epochs alone)."
        )
    for run, on in ((full, "every node"), (part, fraction)):
        nodes = _mean(evaluated[run["run"], high]["nodes"][:common])
        growth = first(run["run"], high) / first(run["run"], low)
        text.append(
            f"On the first {common} test domains, the model trained on {on} has at refinement "
            f"{high} ({nodes:,.0f} nodes per mesh) {growth:.2f}x its error at refinement {low}."
        )
    loads = [r["load_average"] for r in records if "load_average" in r]
    text.append(
        f"The machine's one-minute load average was {min(loads):.1f} to {max(loads):.1f} when "
        "the steps started (2 cores: above 2, other jobs shared them; the times are then upper "
        "bounds, the errors are not affected)"
        + (f"; the whole command took {wall_seconds / 60:.1f} min." if wall_seconds else ".")
    )
    return " ".join(text)


TITLE = "Zero-shot accuracy on meshes of up to a million nodes: every node against a fraction"


def main(argv=None) -> None:
    from meshop.datasets.base import data_root

    args = parse_args(argv)
    if args.tables_from is not None:
        data = json.loads(args.tables_from.read_text())
        records = data["records"]
        wall = next((r["wall_seconds"] for r in records if r["kind"] == "command"), None)
        write_results(NAME, TITLE, args, tables(records, wall), records, data["machine"])
        return
    # the fork server of the steps keeps the environment it started with: name the data root
    args.data_dir = str(data_root(args.data_dir))
    args.runs.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    records: list[dict] = []
    generate(args, records)
    train(args, records)
    for level in args.levels:
        evaluate(args, records, level)
    elapsed = time.perf_counter() - start
    records.append({"kind": "command", "wall_seconds": elapsed})
    write_results(NAME, TITLE, args, tables(records, elapsed), records)


if __name__ == "__main__":
    main()

"""Accuracy on meshes of up to a million nodes: PiT trained on DarcyMesh on every node and on a
random fraction of the nodes per step, evaluated zero-shot on the same test domains meshed up to
16 times finer; every step in a fresh process, ``--jobs`` at a time, one torch thread.

    python -m benchmarks.accuracy.large_mesh_zero_shot           # the full run (46 min, loaded)
    python -m benchmarks.accuracy.large_mesh_zero_shot --quick   # smoke test: tiny, seconds
    python -m benchmarks.accuracy.large_mesh_zero_shot --tables-from RESULTS.json  # redraw
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks.lib import common
from benchmarks.lib.training_runs import run_config
from meshop.datasets.base import data_root
from meshop.datasets.registry import build_dataset
from meshop.train import load_model
from meshop.train.data import prepare
from meshop.train.inference import latent_of
from meshop.train.metrics import per_sample_errors
from meshop.train.presets import preset
from meshop.train.run import train_run

NAME = "large_mesh_zero_shot"
TITLE = "Zero-shot accuracy on meshes of up to a million nodes: every node against a fraction"
DATASET, MODEL, MODEL_TITLE = "darcy-mesh", "pit", "PiT (DarcyMesh preset)"
#: the full run: training refinement, finest level, training samples, epochs, and the test
#: samples of each level from the training refinement to the finest
FULL = dict(train_refinement=1, finest=5, num_train=200, epochs=30, num_test="50,50,10,4,3")
#: --quick: tiny meshes (max_area 0.01, a few dozen nodes at level 0), one epoch, chunks of 64
#: nodes so that the chunked evaluation runs too
QUICK = dict(train_refinement=0, finest=2, num_train=4, epochs=1, num_test="2,2,2", chunk_nodes=64)


def parse_args(argv=None):
    p = common.parser(__doc__.splitlines()[0], "tiny meshes, one epoch (smoke test)")
    p.add_argument("--train-refinement", type=int, default=None, help="default: 1")
    p.add_argument("--finest", type=int, default=None, help="finest test level (default 5)")
    p.add_argument("--num-train", type=int, default=None, help="default: 200")
    p.add_argument("--epochs", type=int, default=None, help="default: 30")
    p.add_argument("--num-test", default=None, help="test samples of each level (50,50,10,4,3)")
    p.add_argument("--node-fraction", type=float, default=0.25, help="the second run's fraction")
    p.add_argument("--chunk-nodes", type=int, default=None, help="default: the models' own")
    p.add_argument("--jobs", type=int, default=2, help="steps side by side (default 2)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds allowed to one step")
    p.add_argument("--data-dir", default=None, help="data root of the generated datasets")
    p.add_argument("--runs", type=Path, default=Path(f"runs/{NAME}"))
    p.add_argument("--tables-from", type=Path, default=None, help="redraw the tables of a JSON")
    args = p.parse_args(argv)
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.levels = list(range(args.train_refinement, args.finest + 1))
    counts = [int(n) for n in str(args.num_test).split(",") if n]
    if len(counts) != len(args.levels) or min(counts) < 1:
        p.error(
            f"--num-test needs one positive count per level {args.levels[0]} to {args.levels[-1]} "
            f"({len(args.levels)} counts), got {args.num_test!r}"
        )
    args.num_test = dict(zip(args.levels, counts))
    if not 0 < args.node_fraction < 1:
        p.error(f"--node-fraction must be in (0, 1), got {args.node_fraction}")
    return args


def training_run(args, fraction: float):
    """The ``RunConfig`` of one training run: the pair's preset, the benchmark's sizes."""
    train = {"eval_every": args.epochs}  # the test error once, after the last epoch
    if fraction < 1:
        train["node_fraction"] = fraction
    dataset = {"num_train": args.num_train, "num_test": args.num_test[args.train_refinement]}
    dataset["refinement"] = args.train_refinement
    out = args.runs / ("every-node" if fraction == 1 else f"fraction-{fraction:g}")
    return run_config(DATASET, MODEL, args.epochs, out, args, {"train": train, "dataset": dataset})


# -- the steps, each run in a fresh process by run_case ----------------------------------------


def generation_case(device: str, data_dir: str, split: str, options: dict, listing: str):
    """Generate (or read) one split; the nodes of its samples and whether it was generated go to
    the JSON file ``listing``."""

    def step():
        start = time.time()
        dataset = build_dataset(DATASET, split, data_dir, **options)
        generated = Path(dataset.processed_paths[0]).stat().st_mtime >= start
        nodes = [int(dataset[i].num_nodes) for i in range(len(dataset))]
        Path(listing).write_text(json.dumps({"nodes": nodes, "generated": generated}))

    return step


def training_case(device: str, run):
    """One training run, as ``meshop train`` does it."""
    return lambda: train_run(run, figures=False, log=lambda *_: None)


def evaluation_case(
    device: str, checkpoint: str, data_dir: str, overrides: dict, chunk_nodes, listing
):
    """A checkpoint's per-sample errors on its test split with ``overrides`` (read before the
    step), one mesh at a time, into the JSON file ``listing`` with the nodes and the chunk."""
    model, ckpt = load_model(checkpoint)
    if chunk_nodes is not None:
        model.chunk_nodes = chunk_nodes
    options = {**ckpt["data"]["dataset_args"], **overrides, "progress": False}
    test_set = build_dataset(DATASET, "test", data_dir, **options)
    meshes = [test_set[i] for i in range(len(test_set))]

    def step():
        errors = per_sample_errors(model, prepare(meshes, latent_of(ckpt)), batch_size=1)
        largest = max(meshes, key=lambda d: d.num_nodes)
        result = {"errors": errors.tolist(), "nodes": [int(d.num_nodes) for d in meshes]}
        result["chunk_nodes"] = model.chunk_for(largest)
        Path(listing).write_text(json.dumps(result))

    return step


def measured(prepare, params: dict, args, listing: Path | None = None) -> dict:
    """``run_case`` of one step (timed once, one call), with what the step wrote to ``listing``
    (a JSON file, given to the step as its ``listing`` argument) and the load average before."""
    load = os.getloadavg()[0]
    if listing is not None:
        listing.unlink(missing_ok=True)
        params = {**params, "listing": str(listing)}
    result = common.run_case(
        prepare, params, device="cpu", threads=args.threads, timeout=args.timeout, min_time=0.0
    )
    if "error" in result:
        raise SystemExit(f"{prepare.__name__} {params}: {result['error']}")
    found = json.loads(listing.read_text()) if listing is not None else {}
    return {**result, **found, "load_average": load}


def side_by_side(function, items: list, jobs: int) -> list:
    """``[function(item) for item in items]``, ``jobs`` at a time (each item's steps run in their
    own processes, so threads suffice here)."""
    with ThreadPoolExecutor(max(1, jobs)) as pool:
        return list(pool.map(function, items))


def generate(args) -> list[dict]:
    """Every split the runs read, the finest first (the longest; ``--jobs`` at a time): each
    level's test samples and the training split (with the training level's test samples, which
    ``meshop train`` evaluates)."""
    options = {**preset(DATASET, MODEL)["dataset"], **training_run(args, 1.0).dataset_args}
    splits = [("test", level) for level in reversed(args.levels)]

    def one(split_level: tuple[str, int]) -> dict:
        split, level = split_level
        extra = {"refinement": level}
        if split == "test":
            extra["num_test"] = args.num_test[level]
        common.progress(f"generating the {split} split at refinement {level}")
        params = {"data_dir": args.data_dir, "split": split, "options": {**options, **extra}}
        listing = args.runs / f"generated-{split}-{level}.json"
        record = measured(generation_case, params, args, listing)
        seconds = common.fmt_time(record["time_s"])
        common.progress(f"  {split} {level}: {len(record['nodes'])} samples, {seconds}")
        return {"kind": "generation", "split": split, "refinement": level, **record}

    found = side_by_side(one, [*splits, ("train", args.train_refinement)], args.jobs)
    return sorted(found, key=lambda r: (r["split"] == "test", r["refinement"]))


def train(args) -> list[dict]:
    """The two runs (every node, and the node fraction), side by side with ``--jobs 2``."""

    def one(name_fraction: tuple[str, float]) -> dict:
        name, fraction = name_fraction
        run = training_run(args, fraction)
        common.progress(f"training {MODEL} on {DATASET} ({name})")
        result = measured(training_case, {"run": run}, args)
        net, ckpt = load_model(run.out)
        seconds = [h["epoch_seconds"] for h in ckpt["history"]]
        common.progress(f"  {name}: trained in {common.fmt_time(sum(seconds))}")
        record = {"kind": "training", "run": name, "node_fraction": fraction}
        record.update(refinement=args.train_refinement, num_train=args.num_train, seed=args.seed)
        record.update(epochs=len(seconds), parameters=sum(p.numel() for p in net.parameters()))
        record.update(train_seconds=sum(seconds), epoch_seconds=seconds)
        record.update(test_rel_l2=ckpt["history"][-1]["test_rel_l2"], checkpoint=str(run.out))
        return {**record, **result}

    runs = [("every node", 1.0), ("node fraction", args.node_fraction)]
    return side_by_side(one, runs, args.jobs)


def evaluate(args, trained: list[dict], level: int) -> list[dict]:
    """Both trained models on the test samples of one level, side by side with ``--jobs 2``."""

    def one(run: dict) -> dict:
        common.progress(f"evaluating {run['run']} at refinement {level}")
        overrides = {"refinement": level, "num_test": args.num_test[level]}
        params = {"checkpoint": run["checkpoint"], "data_dir": args.data_dir}
        params.update(overrides=overrides, chunk_nodes=args.chunk_nodes)
        listing = args.runs / f"evaluated-{Path(run['checkpoint']).name}-{level}.json"
        result = measured(evaluation_case, params, args, listing)
        error = common.mean(result["errors"])
        common.progress(f"  {run['run']} at {level}: relative L2 {error:.4f}")
        record = {"kind": "evaluation", "run": run["run"], "node_fraction": run["node_fraction"]}
        record.update(refinement=level, samples=len(result["errors"]), test_rel_l2=error)
        return {**record, **result}

    return side_by_side(one, trained, args.jobs)


# -- the tables ------------------------------------------------------------------------------


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
    return common.mean(times) if times else None


class Tables:
    """The records of one run, by kind, and what the tables read of them."""

    def __init__(self, records: list[dict]):
        self.records = records
        self.trained = [r for r in records if r["kind"] == "training"]
        self.names = [r["run"] for r in self.trained]
        self.evaluated = {
            (r["run"], r["refinement"]): r for r in records if r["kind"] == "evaluation"
        }
        self.generated = {
            (r["split"], r["refinement"]): r for r in records if r["kind"] == "generation"
        }
        self.levels = sorted({level for _, level in self.evaluated})
        self.common = min(self.evaluated[self.names[0], level]["samples"] for level in self.levels)
        self.fraction = f"a fraction {self.trained[1]['node_fraction']:g} of the nodes"

    def first(self, run: str, level: int) -> float:
        """The mean error of ``run`` on the first meshes, which every level has."""
        return common.mean(self.evaluated[run, level]["errors"][: self.common])

    def level_name(self, level: int) -> str:
        train_level = self.trained[0]["refinement"]
        finer = 2 ** (level - train_level)
        return f"{level} (training)" if level == train_level else f"{level} ({finer}x finer)"

    def errors(self) -> str:
        rows = []
        for level in self.levels:
            a, b = (self.evaluated[name, level]["test_rel_l2"] for name in self.names)
            f, g = (self.first(name, level) for name in self.names)
            r = self.evaluated[self.names[0], level]
            nodes = f"{common.mean(r['nodes']):,.0f} ({min(r['nodes']):,} to {max(r['nodes']):,})"
            rows.append([self.level_name(level), nodes, r["samples"], f"{a:.4f}", f"{b:.4f}"])
            rows[-1] += [f"{b / a:.2f}", f"{f:.4f} / {g:.4f} ({g / f:.2f})"]
        headers = ["refinement", "nodes per mesh (mean, range)", "test meshes", "every node"]
        headers += [self.fraction, "ratio"]
        headers.append(f"the first {self.common} meshes: every node / fraction (ratio)")
        return common.markdown_table(headers, rows)

    def costs(self) -> str:
        rows, t, mb = [], common.fmt_time, common.fmt_mb
        for level in self.levels:
            gen = self.generated.get(("test", level))
            pair = [self.evaluated[name, level] for name in self.names]
            row = [self.level_name(level), "cached", "-"]
            if gen is not None and gen["generated"]:
                row[1:] = [t(gen["time_s"] / len(gen["nodes"])), mb(gen["peak_mb"])]
            row += [" / ".join(t(r["time_s"] / r["samples"]) for r in pair)]
            row += [" / ".join(mb(r["peak_mb"]) for r in pair)]
            chunk = pair[0]["chunk_nodes"]
            rows.append([*row, f"{chunk:,}" if chunk else "whole"])
        headers = "refinement|generation per mesh|generation peak memory|evaluation per mesh: "
        headers += "every node / fraction|evaluation peak memory|chunks of (nodes)"
        return common.markdown_table(headers, rows)

    def training(self) -> str:
        nodes = self.generated[("train", self.trained[0]["refinement"])]["nodes"]
        rows, t, mb = [], common.fmt_time, common.fmt_mb
        for r in self.trained:
            row = [r["run"], f"{common.mean(nodes) * r['node_fraction']:,.0f}", r["epochs"]]
            row += [t(r["train_seconds"]), t(side_by_side_epoch(r, self.trained)), t(r["time_s"])]
            row += [mb(r["peak_mb"]), f"{r['test_rel_l2']:.4f}"]
            rows.append([*row, f"{r['load_average']:.1f}"])
        headers = "run|nodes per sample per step (mean)|epochs|training (epochs)|per epoch while "
        headers += "both trained|whole run|peak memory|test rel. L2 at refinement "
        headers += f"{self.trained[0]['refinement']}|load"
        return common.markdown_table(headers, rows)


def tables(records: list[dict]) -> dict[str, str]:
    """The error table, the training table and the cost table (what they show is in
    docs/large_meshes.md)."""
    t = Tables(records)
    full, nodes = t.trained[0], t.generated[("train", t.trained[0]["refinement"])]["nodes"]
    caption = (
        f"{MODEL_TITLE} trained at refinement {full['refinement']} on {full['num_train']} samples "
        f"of {min(nodes):,} to {max(nodes):,} nodes, {full['epochs']} epoch(s), seed {full['seed']}"
    )
    return {
        f"Mean test relative L2 per refinement ({caption})": t.errors(),
        "Training: every node against a fraction of the nodes per step": t.training(),
        "Generation and evaluation per refinement": t.costs(),
    }


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.tables_from is not None:
        data = json.loads(args.tables_from.read_text())
        records = data["records"]
        common.write_results(NAME, TITLE, args, tables(records), records, data["machine"])
        return
    # the fork server of the steps keeps the environment it started with: name the data root
    args.data_dir = str(data_root(args.data_dir))
    args.runs.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    records = generate(args)
    records += train(args)
    trained = [r for r in records if r["kind"] == "training"]
    for level in args.levels:
        records += evaluate(args, trained, level)
    elapsed = time.perf_counter() - start
    records.append({"kind": "command", "wall_seconds": elapsed})
    common.write_results(NAME, TITLE, args, tables(records), records)


if __name__ == "__main__":
    main()

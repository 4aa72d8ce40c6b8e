"""Accuracy: every model on every generated dataset under a stated budget, with zero-shot
evaluation on finer grids and meshes.

Each (dataset, model) pair is trained the way ``meshop train`` does it (the model's and pair's
presets), on the same splits with the same seed, for a fixed number of epochs (:data:`EPOCHS`; the
operators on the mesh datasets get more, as their problems need more steps). The budget is in
epochs, not seconds, so that a rerun gives the same numbers on a busy or a slower machine; the
measured training time is reported beside them. ``--minutes`` gives every pair a time budget
instead (one epoch is timed first). Each run is then evaluated on the test split: mean and median
per-sample relative L2 (PiT trains Burgers with relative L1, as in its paper; the table reports
relative L2 for all), parameters, epochs and training time. The Darcy models trained on the coarse
grid are evaluated, without retraining, on the same test fields sampled 2x and 4x finer, and the
DarcyMesh models on the same test domains and fields meshed 2x and 4x finer.

    python -m benchmarks.accuracy.model_table --jobs 2           # the full table, 2 runs at a time
    python -m benchmarks.accuracy.model_table --jobs 2 --resume  # go on after an interruption
    python -m benchmarks.accuracy.model_table --quick            # smoke test: tiny data, 1 epoch
    python -m benchmarks.accuracy.model_table --datasets darcy --models pit,ono --minutes 5
    python -m benchmarks.accuracy.model_table --calibrate --jobs 2  # each pair's time per epoch
    python -m benchmarks.accuracy.model_table --equal-time 150 --seeds 0,1 \
        --single-seed darcy,burgers --jobs 2                    # the table of the README

``--equal-time SECONDS`` gives every pair the same training time as a number of epochs: the time
over the pair's CPU time per epoch frozen by ``--calibrate`` in ``epoch_seconds.json`` (the CPU
time of one thread is what the run itself costs, so a busy machine barely changes it), so the
table reruns exactly. ``--seeds`` trains every pair once per training seed on the same data (the
splits of ``--seed``) and reports the mean with the spread, so that a difference smaller than the
spread is not read as a win.

The generated data is cached in the data root (``--data-dir``, else ``$MESHOP_DATA``, else
``datasets/``) and generated before any training starts; checkpoints go to ``--runs`` (default
``runs/accuracy``).
"""

from __future__ import annotations

import argparse
import json
import os
import textwrap
import time
from pathlib import Path

from benchmarks.lib.common import (
    RESULTS,
    SECTION_END,
    SECTION_START,
    append_line,
    fmt_time,
    machine,
    markdown_table,
    progress,
)
from benchmarks.lib.training_runs import (
    DATASETS,
    NAMES,
    dataset_options,
    run_config,
    run_trainer,
)

#: epochs of each model on each dataset (default budget); the operators on the mesh datasets get
#: more (the mesh problems need more steps); the measured times are in the tables. PiT: 150
#: epochs on Elasticity (0.098 after 40, 0.064 after 150; 450 epochs gave 0.074 with a training
#: loss of 0.022: 200 samples are then overfitted; 1000 samples for 60 epochs gave 0.0559 with a
#: training loss of 0.044 in 18.5 min: `meshop train --dataset elasticity --model pit --dataset-arg
#: num_train=1000 --dataset-arg num_test=50 --epochs 60 --threads 1`), 100 on Airfoil (0.142
#: after 50, 0.105 after 100), 60 on DarcyMesh with 400 training samples (0.049; with 200, 100
#: epochs gave 0.051).
EPOCHS: dict[tuple[str, str], int] = {
    ("darcy", "pit"): 52,
    ("darcy", "galerkin"): 40,
    ("darcy", "fourier"): 39,
    ("darcy", "ono"): 30,
    ("darcy", "transolver"): 34,
    ("darcy", "mlp"): 304,
    ("burgers", "pit"): 67,
    ("burgers", "galerkin"): 53,
    ("burgers", "fourier"): 48,
    ("burgers", "ono"): 40,
    ("burgers", "transolver"): 64,
    ("burgers", "mlp"): 676,
    ("elasticity", "pit"): 150,
    ("elasticity", "galerkin"): 20,
    ("elasticity", "fourier"): 10,
    ("elasticity", "ono"): 20,
    ("elasticity", "transolver"): 30,
    ("elasticity", "mlp"): 100,
    ("airfoil", "pit"): 100,
    ("airfoil", "galerkin"): 10,
    ("airfoil", "fourier"): 5,
    ("airfoil", "ono"): 10,
    ("airfoil", "transolver"): 20,
    ("airfoil", "mlp"): 100,
    ("darcy-mesh", "pit"): 60,
    ("darcy-mesh", "galerkin"): 10,
    ("darcy-mesh", "fourier"): 5,
    ("darcy-mesh", "ono"): 10,
    ("darcy-mesh", "transolver"): 25,
    ("darcy-mesh", "mlp"): 100,
}
MODELS = ("pit", "galerkin", "fourier", "ono", "transolver", "mlp")
#: models evaluated at finer Darcy grids than they were trained on
SUPER_RESOLUTION_MODELS = ("pit", "galerkin", "fourier", "ono", "transolver")
#: refinement levels of the DarcyMesh test meshes evaluated without retraining (2x, 4x finer)
REFINEMENTS = (1, 2)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny data, one epoch (smoke test)")
    parser.add_argument("--datasets", default=",".join(DATASETS), help="comma-separated names")
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated names")
    parser.add_argument(
        "--minutes", type=float, default=None, help="a time budget per model instead of epochs"
    )
    parser.add_argument(
        "--epochs", type=int, default=None, help="these epochs for every model (default: EPOCHS)"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default: 1)")
    parser.add_argument(
        "--jobs", type=int, default=1, help="runs side by side, each in its own process"
    )
    parser.add_argument("--seed", type=int, default=0, help="the data's seed (and the training's)")
    parser.add_argument(
        "--seeds",
        default=None,
        help="comma-separated training seeds, each pair trained once per seed on the same data "
        "(default: --seed); the tables give the mean and the spread",
    )
    parser.add_argument(
        "--single-seed",
        default="",
        metavar="DATASETS",
        help="comma-separated datasets trained with the first of --seeds only (e.g. the grids, "
        "when a second seed is wanted on the mesh datasets)",
    )
    parser.add_argument(
        "--equal-time",
        type=float,
        default=None,
        metavar="SECONDS",
        help="every pair this much training time: epochs from the per-epoch times frozen in "
        f"{EPOCH_SECONDS} (--calibrate), so that reruns are exact",
    )
    parser.add_argument(
        "--calibrate",
        action="store_true",
        help=f"time an epoch of every pair (CPU time of one thread, the second epoch) and write "
        f"{EPOCH_SECONDS}, the times --equal-time divides; no table",
    )
    parser.add_argument("--data-dir", default=None, help="data root of the generated datasets")
    parser.add_argument("--runs", type=Path, default=Path("runs/accuracy"))
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder of the result files")
    parser.add_argument(
        "--tables-from", type=Path, default=None, help="only redraw the tables of an accuracy.json"
    )
    parser.add_argument(
        "--update",
        action="store_true",
        help="merge into the existing accuracy.json: these rows replace the rows of the same "
        "dataset and model and are noted with this command and date",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="reuse the records of pairs that an interrupted run of the same command finished "
        "(saved one per line in RUNS/records.jsonl as each pair ends)",
    )
    parser.add_argument(
        "--forget",
        default="",
        help="with --update: comma-separated datasets whose older rows are dropped (their "
        "dataset changed since they were measured)",
    )
    args = parser.parse_args(argv)
    args.seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else [args.seed]
    args.single_seed = [d for d in args.single_seed.split(",") if d]
    if sum(x is not None for x in (args.minutes, args.epochs, args.equal_time)) > 1:
        parser.error("give one budget: --minutes, --epochs or --equal-time")
    return args


#: the frozen per-epoch training times of every pair that ``--equal-time`` divides
EPOCH_SECONDS = "epoch_seconds.json"


def budget(args) -> str:
    """The budget of the table's header (also the key of ``--resume``'s saved records)."""
    if args.equal_time is not None:
        return (
            f"{args.equal_time:g} s of training (epochs: that time over the pair's CPU time per "
            f"epoch, frozen in benchmarks/results/{EPOCH_SECONDS})"
        )
    if args.minutes is not None:
        return f"{args.minutes:g} min of training"
    if args.epochs is not None or args.quick:
        return f"{args.epochs or 1} epochs"
    return "the epochs of the table (benchmarks/accuracy/model_table.py: EPOCHS)"


def super_resolutions(train_resolution: int, fine_resolution: int) -> list[int]:
    """The grids 2x and 4x finer than the training grid that sample the same fine fields."""
    out = []
    for factor in (2, 4):
        resolution = (train_resolution - 1) * factor + 1
        if (fine_resolution - 1) % (resolution - 1) == 0:
            out.append(resolution)
    return out


def epochs_in_budget(dataset: str, model: str, args) -> tuple[int, float]:
    """(epochs that fit the time budget, seconds of the timed first epoch)."""
    from meshop.train import load_model
    from meshop.train.run import train_run

    if args.equal_time is not None:
        seconds = frozen_epoch_seconds(args)[dataset, model]
        return max(1, round(args.equal_time / seconds)), seconds
    if args.minutes is None:
        if args.epochs is not None or args.quick:
            return args.epochs or 1, float("nan")
        return EPOCHS[dataset, model], float("nan")
    out = args.runs / "timing" / f"{dataset}-{model}"
    train_run(run_config(dataset, model, 1, out, args), figures=False, log=lambda *_: None)
    seconds = load_model(out)[1]["history"][0]["epoch_seconds"]
    return max(1, int(args.minutes * 60 // seconds)), seconds


def train_pair(dataset: str, model: str, args) -> dict:
    """Train one model on one dataset within the budget; its test error, size and time."""
    from meshop.train import load_model
    from meshop.train.run import train_run

    epochs, epoch_seconds = epochs_in_budget(dataset, model, args)
    load = os.getloadavg()[0]
    runs = {}
    for seed in seeds_of(dataset, args):
        out = args.runs / (f"{dataset}-{model}" + (f"-seed{seed}" if len(args.seeds) > 1 else ""))
        config = run_config(dataset, model, epochs, out, args, train_seed=seed)
        metrics = train_run(config, figures=False, log=lambda *_: None)
        net, ckpt = load_model(out)
        runs[seed] = {
            "test_rel_l2": metrics["test_rel_l2"],
            "test_rel_l2_median": metrics["test_rel_l2_median"],
            "train_seconds": sum(h["epoch_seconds"] for h in ckpt["history"]),
            "checkpoint": str(out),
        }
    first = runs[args.seeds[0]]
    record = {
        "dataset": dataset,
        "model": model,
        "epochs": epochs,
        "timed_epoch_seconds": epoch_seconds,
        "options": dataset_options(dataset, args),
        "parameters": sum(p.numel() for p in net.parameters()),
        "test_rel_l2": mean(r["test_rel_l2"] for r in runs.values()),
        "test_rel_l2_median": mean(r["test_rel_l2_median"] for r in runs.values()),
        "train_seconds": mean(r["train_seconds"] for r in runs.values()),
        "load_average": load,
        "checkpoint": first["checkpoint"],
    }
    if len(runs) > 1:
        errors = [r["test_rel_l2"] for r in runs.values()]
        record["seeds"] = runs
        record["spread"] = max(errors) - min(errors)
    return record


def seeds_of(dataset: str, args) -> list[int]:
    """The training seeds of ``dataset``'s pairs: ``--seeds``, or its first with
    ``--single-seed``."""
    return args.seeds[:1] if dataset in args.single_seed else args.seeds


def mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def checkpoints(record: dict) -> list[str]:
    """The checkpoints of a record: one per training seed."""
    if "seeds" in record:
        return [run["checkpoint"] for run in record["seeds"].values()]
    return [record["checkpoint"]]


def frozen_epoch_seconds(args) -> dict[tuple[str, str], float]:
    """The per-epoch training times of ``--calibrate``, read from ``--out``'s
    :data:`EPOCH_SECONDS` (a clear error when the file is absent)."""
    path = args.out / EPOCH_SECONDS
    if not path.exists():
        raise SystemExit(
            f"--equal-time needs {path}: run `python -m benchmarks.accuracy.model_table "
            "--calibrate` once on a quiet machine first"
        )
    return {
        (r["dataset"], r["model"]): r["epoch_seconds"]
        for r in json.loads(path.read_text())["records"]
    }


def calibrate_pair(dataset: str, model: str, args) -> dict:
    """The CPU time (one thread: the time the run itself took, whatever else shares the
    machine) of the second epoch of training ``model`` on ``dataset`` (the first fills the
    caches of neighbour lists and latent meshes)."""
    import tempfile

    import torch

    torch.set_num_threads(args.threads)
    progress(f"timing an epoch of {model} on {dataset}")
    run = run_config(dataset, model, 2, Path("unused"), args)
    with tempfile.TemporaryDirectory() as out:
        trainer, _ = run_trainer(run, out, test=False)
        trainer.train_epoch()
        start, wall = time.process_time(), time.perf_counter()
        trainer.train_epoch()
        seconds, wall = time.process_time() - start, time.perf_counter() - wall
    return {"dataset": dataset, "model": model, "epoch_seconds": seconds, "wall_seconds": wall}


def calibrate(pairs: list[tuple[str, str]], args) -> None:
    """Write :data:`EPOCH_SECONDS` (and its table) for ``pairs``, merged into the existing
    file's other pairs."""
    if args.jobs > 1 and len(pairs) > 1:
        with spawn_pool(args.jobs) as pool:
            records = list(pool.map(calibrate_pair, *zip(*pairs), [args] * len(pairs)))
    else:
        records = [calibrate_pair(d, m, args) for d, m in pairs]
    path = args.out / EPOCH_SECONDS
    info = {**machine(), "threads": args.threads, "seed": args.seed}
    for record in records:  # each pair with its own measurement: calibrations merge
        record.update(date=info["date"], command=info["command"], load=os.getloadavg()[0])
    old = json.loads(path.read_text())["records"] if path.exists() else []
    done = {(r["dataset"], r["model"]) for r in records}
    records = [r for r in old if (r["dataset"], r["model"]) not in done] + records
    args.out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"machine": info, "records": records}, indent=1) + "\n")
    write_epoch_table(path)


def write_epoch_table(path: Path) -> str:
    """The Markdown table (printed and written beside it) of an :data:`EPOCH_SECONDS` file."""
    data = json.loads(path.read_text())
    info, records = data["machine"], data["records"]
    rows = [
        [
            r["dataset"],
            NAMES[r["model"]],
            fmt_time(r["epoch_seconds"]),
            fmt_time(r["wall_seconds"]),
            r.get("date", "-"),
        ]
        for r in records
    ]
    commands = sorted({r.get("command", info["command"]) for r in records})
    text = "\n".join(
        [
            "## Training time per epoch of every pair (the equal-time table's divisor)",
            "",
            SECTION_START,
            f"Measured with {' and '.join(f'`{c}`' for c in commands)} on {info['cpu']}, "
            f"{info['threads']} torch thread(s): the second epoch of each pair on the table's "
            "training split, CPU time of the process (what the run itself costs, however busy "
            "the machine) and wall-clock time (longer than the CPU time where other jobs "
            "shared the cores).",
            "",
            markdown_table(
                ["dataset", "model", "CPU time per epoch", "wall-clock", "measured"], rows
            ),
            "",
            SECTION_END,
            "",
        ]
    )
    print(text, flush=True)
    path.with_suffix(".md").write_text(text)
    return text


def super_resolution(record: dict, args) -> dict:
    """Test error of a Darcy model on grids finer than its training grid."""
    from meshop.train.run import evaluate_run

    options = dataset_options("darcy", args)
    errors = {options["resolution"]: record["test_rel_l2"]}
    for resolution in super_resolutions(options["resolution"], options["fine_resolution"]):
        errors[resolution] = mean(
            evaluate_run(path, args.data_dir, {"resolution": resolution}, batch_size=4)[
                "test_rel_l2"
            ]
            for path in checkpoints(record)
        )
    return errors


def refinement_errors(record: dict, args) -> dict:
    """Test error of a DarcyMesh model on the same test domains and fields meshed 2x and 4x
    finer (``refinement`` 1 and 2), without retraining; level 0 is the training resolution."""
    from meshop.train.run import evaluate_run

    errors = {0: record["test_rel_l2"]}
    for level in REFINEMENTS:
        errors[level] = mean(
            evaluate_run(path, args.data_dir, {"refinement": level}, batch_size=4)["test_rel_l2"]
            for path in checkpoints(record)
        )
    return errors


def pair_record(dataset: str, model: str, args) -> dict:
    """Train one pair and evaluate it, zero-shot evaluations included (one process's job)."""
    import torch

    torch.set_num_threads(args.threads)
    progress(f"training {model} on {dataset}")
    record = train_pair(dataset, model, args)
    if dataset == "darcy" and model in SUPER_RESOLUTION_MODELS:
        record["super_resolution"] = super_resolution(record, args)
    if dataset == "darcy-mesh":
        record["refinement"] = refinement_errors(record, args)
    error, seconds = record["test_rel_l2"], record["train_seconds"]
    progress(f"  {model} on {dataset}: relative L2 {error:.4f}, trained in {seconds:.0f} s")
    return record


def generate(dataset: str, args) -> None:
    """Generate (or find cached) every split a pair of ``dataset`` reads, before runs side by side
    could generate the same files at once."""
    from meshop.datasets.registry import build_dataset
    from meshop.train.presets import preset

    options = {**preset(dataset, "mlp")["dataset"], **dataset_options(dataset, args)}
    options.update(seed=args.seed, progress=False)
    tests = [{}]
    if dataset == "darcy":
        tests += [
            {"resolution": r}
            for r in super_resolutions(options["resolution"], options["fine_resolution"])
        ]
    if dataset == "darcy-mesh":
        tests += [{"refinement": level} for level in REFINEMENTS]
    build_dataset(dataset, "train", args.data_dir, **options)
    for extra in tests:
        build_dataset(dataset, "test", args.data_dir, **{**options, **extra})


def spawn_pool(jobs: int):
    """``jobs`` worker processes, each started afresh (spawn: no copy of this process's torch
    threads or state)."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    return ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn"))


def generate_all(datasets: list[str], args) -> None:
    """Generate the datasets, ``args.jobs`` at a time (one process each: every dataset writes its
    own files), before any training starts."""
    for dataset in datasets:
        progress(f"generating {dataset}")
    if args.jobs > 1 and len(datasets) > 1:
        with spawn_pool(args.jobs) as pool:
            list(pool.map(generate, datasets, [args] * len(datasets)))
    else:
        for dataset in datasets:
            generate(dataset, args)
    progress("data ready")


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.tables_from is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        write_tables(args.tables_from, args.out / "accuracy.md")
        if args.out.resolve() == RESULTS:
            update_readme(json.loads(args.tables_from.read_text()))
        return
    from meshop.datasets.registry import dataset_entry

    datasets = [d for d in args.datasets.split(",") if d]
    wanted = [m for m in args.models.split(",") if m]
    pairs = [
        (dataset, model)
        for dataset in datasets
        for model in MODELS
        if model in wanted and model in dataset_entry(dataset).models
    ]
    start = time.perf_counter()
    generate_all(list(dict.fromkeys(d for d, _ in pairs)), args)
    if args.calibrate:
        calibrate(pairs, args)
        return
    log = args.runs / "records.jsonl"
    done = finished_records(log, pairs, args) if args.resume else {}
    if not args.resume:
        log.unlink(missing_ok=True)
    todo = longest_first([pair for pair in pairs if pair not in done], args)
    if args.jobs > 1 and len(todo) > 1:
        from concurrent.futures import as_completed

        with spawn_pool(args.jobs) as pool:
            futures = {pool.submit(pair_record, d, m, args): (d, m) for d, m in todo}
            for future in as_completed(futures):
                done[futures[future]] = save_record(log, future.result(), args)
    else:
        for d, m in todo:
            done[(d, m)] = save_record(log, pair_record(d, m, args), args)
    records = [done[pair] for pair in pairs]
    info = {**machine(), "threads": args.threads, "seed": args.seed, "budget": budget(args)}
    info["seeds"] = args.seeds
    if args.single_seed:
        info["single_seed"] = args.single_seed
    info.update(quick=args.quick, jobs=args.jobs, wall_seconds=time.perf_counter() - start)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.update and (args.out / "accuracy.json").exists():
        info, records = merged(args.out / "accuracy.json", info, records, args.forget)
    (args.out / "accuracy.json").write_text(
        json.dumps({"machine": info, "records": records}, indent=1, default=str) + "\n"
    )
    write_tables(args.out / "accuracy.json", args.out / "accuracy.md")
    if args.out.resolve() == RESULTS:  # the project's own results: the README follows them
        update_readme(json.loads((args.out / "accuracy.json").read_text()))


def longest_first(pairs: list[tuple[str, str]], args) -> list[tuple[str, str]]:
    """``pairs`` in the order that packs runs side by side best: longest first, by the time per
    epoch in the existing results (``--out``) times this run's epochs; pairs never measured go
    first (their time is unknown)."""
    path = args.out / "accuracy.json"
    old = json.loads(path.read_text())["records"] if path.exists() else []
    per_epoch = {(r["dataset"], r["model"]): r["train_seconds"] / r["epochs"] for r in old}

    def cost(pair: tuple[str, str]) -> float:
        if pair not in per_epoch:
            return float("inf")
        if args.minutes is not None or args.equal_time is not None:  # the same time for all
            return args.minutes or args.equal_time
        return per_epoch[pair] * ((args.epochs or 1) if args.epochs or args.quick else EPOCHS[pair])

    return sorted(pairs, key=cost, reverse=True)


def record_key(args) -> dict:
    """What a saved record must have been measured with to be reused by ``--resume``."""
    key = {"budget": budget(args), "threads": args.threads, "seed": args.seed, "quick": args.quick}
    if args.seeds != [args.seed]:
        key["seeds"] = args.seeds
    return key


def save_record(log: Path, record: dict, args) -> dict:
    """Append a finished pair's record to ``log`` (one JSON line), so that an interrupted table
    loses only the pairs still running."""
    append_line(log, {"key": record_key(args), "record": record})
    return record


def finished_records(log: Path, pairs: list[tuple[str, str]], args) -> dict:
    """The records in ``log`` of ``pairs`` measured with this command's budget, threads and seed
    (the last one of each pair; lines of other settings are ignored)."""
    if not log.exists():
        return {}
    found = {}
    for line in log.read_text().splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:  # a line cut short by the interruption
            continue
        record = entry["record"]
        pair = (record["dataset"], record["model"])
        trained = len(record.get("seeds", [None]))  # with --single-seed: one on its datasets
        if pair in pairs and entry["key"] == record_key(args):
            if trained == len(seeds_of(pair[0], args)):
                found[pair] = record
    if found:
        progress(f"resuming: {len(found)} of {len(pairs)} pairs already measured in {log}")
    return found


def merged(path: Path, info: dict, records: list[dict], forget: str) -> tuple[dict, list[dict]]:
    """The records of ``path`` with ``records`` in place of those of the same dataset and model
    (each noted as measured later, with its command, date and budget), less the older records of
    the datasets in ``forget``; the table keeps its first measurement's header."""
    old = json.loads(path.read_text())
    note = {
        "what": "measured",
        "date": info["date"],
        "command": info["command"],
        "why": f"(budget: {info['budget']}, {info['threads']} thread(s))",
    }
    new = {(r["dataset"], r["model"]): {**r, "rerun": note} for r in records}
    dropped = {d for d in forget.split(",") if d}
    kept = [
        r
        for r in old["records"]
        if (r["dataset"], r["model"]) not in new and r["dataset"] not in dropped
    ]
    if not kept:  # every row measured again: the new header holds for all of them
        return info, records
    return old["machine"], kept + list(new.values())


def fmt_error(error: float) -> str:
    return f"{error:.4f}" if error < 100 else f"{error:.1e}"


def with_spread(record: dict) -> str:
    """A record's mean test error, with half the range over its seeds when it has several."""
    text = fmt_error(record["test_rel_l2"])
    return text + (f" ± {fmt_error(record['spread'] / 2)}" if "spread" in record else "")


def summary_table(records: list[dict]) -> str:
    """Mean test relative L2 of every model (rows) on every dataset (columns), and the Darcy
    models' errors on the finer grids: the table the README shows (with several training seeds,
    the mean over the seeds ± half their range)."""
    datasets = list(dict.fromkeys(r["dataset"] for r in records))
    error = {(r["dataset"], r["model"]): with_spread(r) for r in records}
    finer = {
        r["model"]: list(r["super_resolution"].values())[1:]
        for r in records
        if "super_resolution" in r
    }
    headers = ["model", *(d.capitalize() for d in datasets)]
    if finer:
        grids = next(list(r["super_resolution"])[1:] for r in records if "super_resolution" in r)
        headers.append(f"Darcy {' / '.join(f'{g}x{g}' for g in grids)} (zero-shot)")
    refined = {r["model"]: list(r["refinement"].values())[1:] for r in records if "refinement" in r}
    if refined:
        headers.append("Darcy-mesh 2x / 4x finer (zero-shot)")
    rows = []
    for model in dict.fromkeys(
        r["model"] for r in sorted(records, key=lambda r: MODELS.index(r["model"]))
    ):
        row = [
            NAMES[model],
            *(error[d, model] if (d, model) in error else "-" for d in datasets),
        ]
        for zero_shot in (finer, refined):
            if zero_shot:
                errors = zero_shot.get(model)
                row.append(" / ".join(fmt_error(e) for e in errors) if errors else "-")
        rows.append(row)
    return markdown_table(headers, rows)


#: the README's accuracy section lies between these markers (written by :func:`update_readme`)
README = RESULTS.parent.parent / "README.md"
README_START = (
    "<!-- accuracy: generated by `python -m benchmarks.accuracy.model_table`, do not edit -->"
)
README_END = "<!-- end of the generated accuracy section -->"
#: the generated datasets on irregular meshes, in the order the findings name them
MESH_COLUMNS = ("darcy-mesh", "elasticity", "airfoil")
TITLES = {"darcy-mesh": "DarcyMesh", "elasticity": "Elasticity", "airfoil": "Airfoil"}


def _ratio(value: float) -> str:
    return f"{value:.1f}x" if value >= 1.95 else f"{value:.2f}x"


def findings(records: list[dict]) -> str:
    """What the table shows, computed from it: on each mesh dataset the best operator against
    the MLP baseline, the best DarcyMesh operator on the finer meshes, the models on finer grids."""
    error = {(r["dataset"], r["model"]): r["test_rel_l2"] for r in records}
    parts = []
    for dataset in MESH_COLUMNS:
        operators = [m for d, m in error if d == dataset and m != "mlp"]
        if not operators or (dataset, "mlp") not in error:
            continue
        best = min(operators, key=lambda m: error[dataset, m])
        mlp = error[dataset, "mlp"]
        parts.append(
            f"{_ratio(mlp / error[dataset, best])} on {TITLES[dataset]} ({NAMES[best]} "
            f"{error[dataset, best]:.4f} against {mlp:.4f})"
        )
    text = []
    if parts:
        text.append(
            "On the mesh datasets, where the geometry reaches the models only through the mesh, "
            f"the best operator's error is below the MLP baseline's by {_listed(parts)}."
        )
    refined = {r["model"]: list(r["refinement"].values()) for r in records if "refinement" in r}
    operators = [m for m in refined if m != "mlp" and ("darcy-mesh", m) in error]
    if operators:
        best = min(operators, key=lambda m: error["darcy-mesh", m])
        levels = refined[best]
        text.append(
            f"On the DarcyMesh test domains meshed 2x and 4x finer, {NAMES[best]}'s error is "
            f"{levels[1] / levels[0]:.2f}x and {levels[-1] / levels[0]:.2f}x its error at the "
            "training resolution."
        )
    text.append(baseline_losses(records))
    finer = {
        r["model"]: list(r["super_resolution"].values()) for r in records if "super_resolution" in r
    }
    if finer:
        growth = [e[1] / e[0] for e in finer.values() if len(e) > 1]
        text.append(
            f"On the 2x finer Darcy grid, every model's error is {min(growth):.2f}x to "
            f"{max(growth):.2f}x its error on the training grid."
        )
    return " ".join(text)


def baseline_losses(records: list[dict]) -> str:
    """The operators that do not beat the MLP baseline, on every dataset of the table: those
    whose mean error is at or above the MLP's, and (with several seeds) those below it by no more
    than the larger of the two seed spreads, which is no win."""
    by_pair = {(r["dataset"], r["model"]): r for r in records}
    above, tied = [], []
    for (dataset, model), r in by_pair.items():
        mlp = by_pair.get((dataset, "mlp"))
        if model == "mlp" or mlp is None:
            continue
        where = f"{NAMES[model]} on {dataset.capitalize()} ({r['test_rel_l2']:.4f} against "
        where += f"{mlp['test_rel_l2']:.4f})"
        spread = max(r.get("spread", 0.0), mlp.get("spread", 0.0))
        if r["test_rel_l2"] >= mlp["test_rel_l2"]:
            above.append(where)
        elif mlp["test_rel_l2"] - r["test_rel_l2"] <= spread:
            tied.append(where)
    if not above and not tied:
        return "Every operator's error is below the MLP baseline's on every dataset."
    text = []
    if above:
        text.append(f"At or above the MLP baseline's error: {_listed(above)}.")
    if tied:
        text.append(f"Below it by no more than the seed spread (no win): {_listed(tied)}.")
    return " ".join(text)


def _listed(items: list[str]) -> str:
    return ", ".join(items[:-1]) + (" and " if len(items) > 1 else "") + items[-1]


def budget_text(info: dict) -> str:
    """What every model got, in the README's words."""
    if info.get("budget", "the epochs of the table").startswith("the epochs of the table"):
        return "a fixed number of epochs per dataset"
    return info["budget"]


def readme_section(data: dict) -> str:
    """The README's accuracy section: how it was measured, the summary table and the findings,
    all from an ``accuracy.json``."""
    info, records = data["machine"], data["records"]
    sizes = {}
    for r in records:
        sizes.setdefault(r["dataset"], (r["options"]["num_train"], r["options"]["num_test"]))
    common = max(set(sizes.values()), key=list(sizes.values()).count)
    others = [f"{n} on {d.capitalize()}" for d, (n, _) in sizes.items() if (n, _) != common]
    took = (
        f"; the whole table took {info['wall_seconds'] / 60:.0f} min with {info['jobs']} runs side "
        "by side on the 2-core machine"
        if "wall_seconds" in info
        else ""
    )
    intro = (
        f"Accuracy: mean test relative L2 on {common[1]} test samples after training on "
        f"{common[0]}" + (f" ({', '.join(others)})" if others else "") + f" ({seeds_text(info)}, "
        f"one CPU thread per run), each model for {budget_text(info)}, measured "
        f"{info['date']}{took} (`{info['command']}`; epochs, times and the machine's load in "
        "[docs/benchmarks.md](docs/benchmarks.md)). The budget is in epochs, so the numbers rerun "
        "exactly on any machine. Every model receives per node the input field (if any), the "
        "coordinates and, on Airfoil, the flow conditions; on Burgers PiT and ONO also read u0's "
        "derivative, and ONO the coordinate's Fourier modes (their presets; "
        "benchmarks/results/burgers_inputs.md); the Elasticity cavity, "
        "the airfoil's shape and the DarcyMesh domain reach the models only through the mesh, so "
        "the pointwise MLP baseline cannot know the geometry. The zero-shot columns evaluate the "
        "models trained on the coarse Darcy grid on finer grids, and the DarcyMesh models on the "
        "same test domains and fields meshed 2x and 4x finer, without retraining."
    )
    prose = [textwrap.fill(text, 99, break_on_hyphens=False) for text in (intro, findings(records))]
    return "\n\n".join([README_START, prose[0], summary_table(records), prose[1], README_END])


def update_readme(data: dict, readme: Path = README) -> None:
    """Replace the README's accuracy section (between the markers) with :func:`readme_section`."""
    text = readme.read_text()
    start, end = text.find(README_START), text.find(README_END)
    if start < 0 or end < start:
        raise SystemExit(
            f"{readme} lacks the markers {README_START!r} ... {README_END!r} around its accuracy "
            "section; add them where the section belongs"
        )
    readme.write_text(text[:start] + readme_section(data) + text[end + len(README_END) :])


def seeds_text(info: dict) -> str:
    """The seeds of a table's header: the data's, and the training's when there are several."""
    seeds = info.get("seeds", [info["seed"]])
    if seeds == [info["seed"]]:
        return f"seed {info['seed']}"
    text = f"data seed {info['seed']}, training seeds {', '.join(map(str, seeds))}"
    single = [d.capitalize() for d in info.get("single_seed", [])]
    if single:
        text += f" ({' and '.join(single)}: seed {seeds[0]} only)"
    return text


def write_tables(results: Path, path: Path) -> str:
    """The Markdown tables of an ``accuracy.json`` (printed and written to ``path``)."""
    data = json.loads(results.read_text())
    info, records = data["machine"], data["records"]
    header = (
        f"Measured {info['date']} with `{info['command']}` on {info['cpu']} "
        f"({info['threads']} torch thread(s)), torch {info['torch']}, {seeds_text(info)}; "
        f"budget: {info['budget']} per model and dataset"
        + (
            f"; the whole command took {info['wall_seconds'] / 60:.1f} min with {info['jobs']} "
            "run(s) side by side"
            if "wall_seconds" in info
            else ""
        )
        + ". The load column is the machine's "
        "one-minute load average when a run started: above the core count, other jobs shared the "
        "cores and the training times are longer than alone (the errors are not affected where "
        "the budget is in epochs)."
    )
    parts = ["## Accuracy on the generated datasets", "", SECTION_START, header, ""]
    parts += ["### Mean test relative L2", "", summary_table(records), ""]
    for dataset in dict.fromkeys(r["dataset"] for r in records):
        seeded = any("seeds" in r for r in records if r["dataset"] == dataset)
        # a time budget (--equal-time, --minutes): the time per epoch that divided it
        timed = all(
            r.get("timed_epoch_seconds", float("nan")) > 0
            for r in records
            if r["dataset"] == dataset
        )
        rows = [
            [
                NAMES[r["model"]],
                f"{r['parameters']:,}",
                fmt_error(r["test_rel_l2"]),
                *(
                    [
                        " / ".join(fmt_error(run["test_rel_l2"]) for run in r["seeds"].values())
                        if "seeds" in r
                        else "-",
                        fmt_error(r["spread"]) if "spread" in r else "-",
                    ]
                    if seeded
                    else []
                ),
                fmt_error(r["test_rel_l2_median"]),
                r["epochs"],
                *([fmt_time(r["timed_epoch_seconds"])] if timed else []),
                fmt_time(r["train_seconds"]),
                f"{r['load_average']:.1f}" if "load_average" in r else "-",
            ]
            for r in records
            if r["dataset"] == dataset
        ]
        options = next(r["options"] for r in records if r["dataset"] == dataset)
        extra = {k: v for k, v in options.items() if k not in ("num_train", "num_test")}
        caption = (
            f"{dataset}: {options['num_train']} train / {options['num_test']} test samples"
            + (f" ({', '.join(f'{k}={v}' for k, v in extra.items())})" if extra else "")
        )
        headers = ["model", "parameters", "test rel. L2 (mean)"]
        if seeded:
            seeds = next(list(r["seeds"]) for r in records if "seeds" in r)
            headers += [f"seed {' / '.join(map(str, seeds))}", "spread"]
        headers += ["median", "epochs", *(["time per epoch"] if timed else [])]
        headers += ["training", "load"]
        parts += [f"### {caption}", ""]
        for r in records:  # rows measured again later, by another command
            if r["dataset"] == dataset and "rerun" in r:
                rerun = r["rerun"]
                parts += [
                    f"The {NAMES[r['model']]} row was {rerun.get('what', 'rerun')} at "
                    f"{rerun['date']} with "
                    f"`{rerun['command']}` {rerun['why']}.",
                    "",
                ]
        parts += [markdown_table(headers, rows), ""]
    finer = [r for r in records if "super_resolution" in r]
    if finer:
        grids = [int(g) for g in finer[0]["super_resolution"]]
        rows = [
            [NAMES[r["model"]], *(fmt_error(e) for e in r["super_resolution"].values())]
            for r in finer
        ]
        headers = ["model", f"{grids[0]}x{grids[0]} (training grid)"] + [
            f"{g}x{g} ({(g - 1) // (grids[0] - 1)}x finer)" for g in grids[1:]
        ]
        caption = "darcy zero-shot super-resolution: test rel. L2 on finer grids"
        parts += [f"### {caption}", "", markdown_table(headers, rows), ""]
    refined = [r for r in records if "refinement" in r]
    if refined:
        rows = [
            [NAMES[r["model"]], *(fmt_error(e) for e in r["refinement"].values())] for r in refined
        ]
        headers = ["model", "training meshes", "2x finer meshes", "4x finer meshes"]
        caption = "darcy-mesh zero-shot: the same test domains and fields on finer meshes"
        parts += [f"### {caption}", "", markdown_table(headers, rows), ""]
    parts += [SECTION_END, ""]
    text = "\n".join(parts)
    print(text, flush=True)
    path.write_text(text)
    return text


if __name__ == "__main__":
    main()

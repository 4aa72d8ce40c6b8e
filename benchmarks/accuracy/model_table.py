"""Accuracy: every model on every generated dataset under a stated budget, with zero-shot
evaluation on finer grids and meshes (docs/benchmarks.md, "Accuracy", describes the method). The
project's own result files (``--out`` left out) update the README's marked ``accuracy`` table.

    python -m benchmarks.accuracy.model_table --jobs 2           # the full table, 2 runs at a time
    python -m benchmarks.accuracy.model_table --jobs 2 --resume  # go on after an interruption
    python -m benchmarks.accuracy.model_table --quick            # smoke test: tiny data, 1 epoch
    python -m benchmarks.accuracy.model_table --calibrate --jobs 2  # each pair's time per epoch
    python -m benchmarks.accuracy.model_table --equal-time 150 --seeds 0,1 \
        --single-seed darcy,burgers --jobs 2                    # the table of the README
    python -m benchmarks.accuracy.model_table --equal-time 600 --seeds 0,1 \
        --datasets elasticity,airfoil,darcy-mesh --samples elasticity=1000/50 --jobs 2 \
        --name accuracy_600s                                    # the README's second table
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.lib import common
from benchmarks.lib.training_runs import (
    DATASETS,
    NAMES,
    dataset_options,
    parse_samples,
    run_config,
    run_trainer,
)
from meshop.datasets.registry import build_dataset, dataset_entry
from meshop.train import load_model
from meshop.train.presets import preset
from meshop.train.run import evaluate_run, train_run

MODELS = ("pit", "galerkin", "fourier", "ono", "transolver", "mlp")
#: epochs of each model (in the order of :data:`MODELS`) on each dataset (the default budget);
#: the operators on the mesh datasets get more (the mesh problems need more steps)
EPOCHS: dict[tuple[str, str], int] = {
    (dataset, model): epochs
    for dataset, row in {
        "darcy": (52, 40, 39, 30, 34, 304),
        "burgers": (67, 53, 48, 40, 64, 676),
        "elasticity": (150, 20, 10, 20, 30, 100),
        "airfoil": (100, 10, 5, 10, 20, 100),
        "darcy-mesh": (60, 10, 5, 10, 25, 100),
    }.items()
    for model, epochs in zip(MODELS, row)
}
#: refinement levels of the test meshes evaluated without retraining (2x, 4x finer) ...
REFINEMENTS = (1, 2)
#: ... on the datasets that have them (the same test samples meshed finer), and what stays the same
REFINED = {"elasticity": "cavities and loads", "darcy-mesh": "domains and fields"}
#: the frozen per-epoch training times of every pair that ``--equal-time`` divides
EPOCH_SECONDS = "epoch_seconds.json"
README = common.ROOT / "README.md"


def parse_args(argv=None) -> argparse.Namespace:
    p = common.parser(__doc__.splitlines()[0], "tiny data, one epoch (smoke test)")
    add = p.add_argument
    add("--datasets", default=",".join(DATASETS), help="comma-separated names")
    add("--models", default=",".join(MODELS), help="comma-separated names")
    add("--epochs", type=int, default=None, help="these epochs for every model")
    add("--equal-time", type=float, default=None, help=f"seconds per pair, from {EPOCH_SECONDS}")
    add("--calibrate", action="store_true", help=f"time an epoch of every pair: {EPOCH_SECONDS}")
    add("--jobs", type=int, default=1, help="runs side by side, one process each")
    add("--seed", type=int, default=0, help="the data's seed (and the training's)")
    add("--seeds", default=None, help="comma-separated training seeds (default: --seed)")
    add("--single-seed", default="", help="datasets trained with the first of --seeds only")
    add("--data-dir", default=None, help="data root of the generated datasets")
    add(
        "--samples",
        default="",
        help="other split sizes than the table's, e.g. elasticity=1000 or elasticity=1000/50 "
        "(training / test samples); --calibrate times an epoch of those splits",
    )
    add("--runs", type=Path, default=Path("runs/accuracy"))
    add("--tables-from", type=Path, default=None, help="redraw the tables of an accuracy.json")
    add(
        "--name",
        default="accuracy",
        help="the result files' name (default accuracy; e.g. accuracy_600s for a second budget, "
        "whose table goes to the README section of that name)",
    )
    add("--update", action="store_true", help="merge into the existing accuracy.json")
    add("--forget", default="", help="with --update: datasets whose older rows are dropped")
    add("--resume", action="store_true", help="reuse the pairs of RUNS/records.jsonl")
    args = p.parse_args(argv)
    args.seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else [args.seed]
    args.single_seed = [d for d in args.single_seed.split(",") if d]
    try:
        args.samples = parse_samples(args.samples)
    except ValueError as error:
        p.error(str(error))
    if args.epochs is not None and args.equal_time is not None:
        p.error("give one budget: --epochs or --equal-time")
    return args


def budget(args) -> str:
    """The budget of the table's header (also the key of ``--resume``'s saved records)."""
    if args.equal_time is not None:
        return (
            f"{args.equal_time:g} s of training (epochs: that time over the pair's CPU time per "
            f"epoch, frozen in benchmarks/results/{EPOCH_SECONDS})"
        )
    if args.epochs is not None or args.quick:
        return f"{args.epochs or 1} epochs"
    return "the epochs of the table (benchmarks/accuracy/model_table.py: EPOCHS)"


def super_resolutions(train_resolution: int, fine_resolution: int) -> list[int]:
    """The grids 2x and 4x finer than the training grid that sample the same fine fields."""
    finer = [(train_resolution - 1) * factor + 1 for factor in (2, 4)]
    return [r for r in finer if (fine_resolution - 1) % (r - 1) == 0]


def zero_shot_tests(dataset: str, args) -> list[dict]:
    """The dataset options of the test splits a pair is evaluated on without retraining."""
    if dataset == "darcy":
        options = dataset_options("darcy", args)
        finer = super_resolutions(options["resolution"], options["fine_resolution"])
        return [{"resolution": r} for r in finer]
    return [{"refinement": level} for level in REFINEMENTS] if dataset in REFINED else []


def epochs_in_budget(dataset: str, model: str, args) -> tuple[int, float]:
    """(epochs of the budget, the CPU time per epoch that divided a time budget)."""
    if args.equal_time is not None:
        train = dataset_options(dataset, args)["num_train"]
        seconds = frozen_epoch_seconds(args).get((dataset, model, train))
        if seconds is None:
            samples = f" --samples {dataset}={train}" if dataset in args.samples else ""
            raise SystemExit(
                f"no time per epoch of {model} on {dataset} with {train} training samples in "
                f"{args.out / EPOCH_SECONDS}: run `python -m benchmarks.accuracy.model_table "
                f"--calibrate --datasets {dataset} --models {model}{samples}` first"
            )
        return max(1, round(args.equal_time / seconds)), seconds
    if args.epochs is not None or args.quick:
        return args.epochs or 1, float("nan")
    return EPOCHS[dataset, model], float("nan")


def seeds_of(dataset: str, args) -> list[int]:
    """The training seeds of ``dataset``'s pairs: ``--seeds``, or its first with
    ``--single-seed``."""
    return args.seeds[:1] if dataset in args.single_seed else args.seeds


def train_pair(dataset: str, model: str, args) -> dict:
    """Train one model on one dataset within the budget; its test error, size and time."""
    epochs, epoch_seconds = epochs_in_budget(dataset, model, args)
    load = os.getloadavg()[0]
    runs = {}
    for seed in seeds_of(dataset, args):
        out = args.runs / (f"{dataset}-{model}" + (f"-seed{seed}" if len(args.seeds) > 1 else ""))
        config = run_config(dataset, model, epochs, out, args, train_seed=seed)
        metrics = train_run(config, figures=False, log=lambda *_: None)
        net, ckpt = load_model(out)
        runs[seed] = {k: metrics[k] for k in ("test_rel_l2", "test_rel_l2_median")}
        runs[seed]["train_seconds"] = sum(h["epoch_seconds"] for h in ckpt["history"])
        runs[seed]["checkpoint"] = str(out)
    record = dict(dataset=dataset, model=model, epochs=epochs, timed_epoch_seconds=epoch_seconds)
    record.update(options=dataset_options(dataset, args))
    record["parameters"] = sum(p.numel() for p in net.parameters())
    for key in ("test_rel_l2", "test_rel_l2_median", "train_seconds"):
        record[key] = common.mean(r[key] for r in runs.values())
    record.update(load_average=load, checkpoint=runs[args.seeds[0]]["checkpoint"])
    if len(runs) > 1:
        errors = [r["test_rel_l2"] for r in runs.values()]
        record["seeds"] = runs
        record["spread"] = max(errors) - min(errors)
    return record


def trained_samples(record: dict) -> int | None:
    """The training samples of a calibration record (those before ``--samples`` existed: the
    table's split; None for a dataset the table does not know)."""
    return record.get("num_train", DATASETS.get(record["dataset"], {}).get("num_train"))


def calibration_key(record: dict) -> tuple[str, str, int | None]:
    """What a calibration record times: its dataset, model and training samples."""
    return record["dataset"], record["model"], trained_samples(record)


def samples_text(record: dict) -> str:
    samples = trained_samples(record)
    return "-" if samples is None else f"{samples:,}"


def frozen_epoch_seconds(args) -> dict[tuple[str, str, int], float]:
    """The per-epoch training times of ``--calibrate`` by dataset, model and training samples,
    read from ``--out``'s :data:`EPOCH_SECONDS` (a clear error when the file is absent)."""
    path = args.out / EPOCH_SECONDS
    if not path.exists():
        raise SystemExit(
            f"--equal-time needs {path}: run `python -m benchmarks.accuracy.model_table "
            "--calibrate` once on a quiet machine first"
        )
    records = json.loads(path.read_text())["records"]
    return {calibration_key(r): r["epoch_seconds"] for r in records}


def calibrate_pair(dataset: str, model: str, args) -> dict:
    """The CPU time (one thread: the time the run itself took, whatever else shares the
    machine) of the second epoch of training ``model`` on ``dataset`` (the first fills the
    caches of neighbour lists and latent meshes)."""
    torch.set_num_threads(args.threads)
    common.progress(f"timing an epoch of {model} on {dataset}")
    run = run_config(dataset, model, 2, Path("unused"), args)
    with tempfile.TemporaryDirectory() as out:
        trainer, _ = run_trainer(run, out, test=False)
        trainer.train_epoch()
        start, wall = time.process_time(), time.perf_counter()
        trainer.train_epoch()
        seconds, wall = time.process_time() - start, time.perf_counter() - wall
    train = dataset_options(dataset, args)["num_train"]
    return {
        "dataset": dataset,
        "model": model,
        "num_train": train,
        "epoch_seconds": seconds,
        "wall_seconds": wall,
    }


def calibrate(pairs: list[tuple[str, str]], args) -> None:
    """Write :data:`EPOCH_SECONDS` (and its table) for ``pairs``, merged into the existing
    file's other pairs."""
    records = common.in_processes(calibrate_pair, [(d, m, args) for d, m in pairs], args.jobs)
    path = args.out / EPOCH_SECONDS
    info = {**common.machine(), "threads": args.threads, "seed": args.seed}
    for record in records:  # each pair with its own measurement: calibrations merge
        record.update(
            date=info["date"], command=info["command"], load=os.getloadavg()[0], cpu=info["cpu"]
        )
    before = json.loads(path.read_text()) if path.exists() else {"records": []}
    old = before["records"]
    for record in old:  # measured on the processor of the file's last calibration
        record.setdefault("cpu", before["machine"]["cpu"])
    done = {calibration_key(r) for r in records}
    records = [r for r in old if calibration_key(r) not in done] + records
    args.out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"machine": info, "records": records}, indent=1) + "\n")
    write_epoch_table(path)


def write_epoch_table(path: Path) -> str:
    """The Markdown table (printed and written beside it) of an :data:`EPOCH_SECONDS` file."""
    data = json.loads(path.read_text())
    info, records = data["machine"], data["records"]
    times = [[common.fmt_time(r[k]) for k in ("epoch_seconds", "wall_seconds")] for r in records]
    cpus = {r.get("cpu", info["cpu"]) for r in records}
    rows = [
        [r["dataset"], NAMES[r["model"]], samples_text(r), *t, r.get("date", "-")]
        + ([r.get("cpu", info["cpu"])] if len(cpus) > 1 else [])
        for r, t in zip(records, times)
    ]
    commands = sorted({r.get("command", info["command"]) for r in records})
    where = "the processor of each row" if len(cpus) > 1 else info["cpu"]
    header = (
        f"Measured with {' and '.join(f'`{c}`' for c in commands)} on {where}, "
        f"{info['threads']} torch thread(s): the second epoch of each pair on a training split "
        "of the row's samples, CPU time of the process (what the run itself costs, however busy "
        "the machine) and wall-clock time (longer than the CPU time where other jobs "
        "shared the cores)."
    )
    columns = "dataset|model|training samples|CPU time per epoch|wall-clock|measured" + (
        "|processor" * (len(cpus) > 1)
    )
    table = common.markdown_table(columns, rows)
    title = "Training time per epoch of every pair (the equal-time table's divisor)"
    text = common.results_text(title, header, {"": table})
    common.write_text(path.parent, path.stem, text)
    return text


def pair_record(dataset: str, model: str, args) -> dict:
    """Train one pair and evaluate it, zero-shot evaluations included (one process's job): the
    Darcy operators' errors per grid (``super_resolution``), the Elasticity and DarcyMesh models'
    per refinement (``refinement``; level 0 is the training resolution)."""
    torch.set_num_threads(args.threads)
    common.progress(f"training {model} on {dataset}")
    record = train_pair(dataset, model, args)
    field = "refinement" if dataset in REFINED else {"darcy": "super_resolution"}.get(dataset)
    if field and (dataset in REFINED or model != "mlp"):
        first = dataset_options("darcy", args)["resolution"] if dataset == "darcy" else 0
        errors = {first: record["test_rel_l2"]}
        runs = record.get("seeds", {"": record}).values()  # a checkpoint per training seed
        for test in zero_shot_tests(dataset, args):
            errors[next(iter(test.values()))] = common.mean(
                evaluate_run(run["checkpoint"], args.data_dir, test, batch_size=4)["test_rel_l2"]
                for run in runs
            )
        record[field] = errors
    error, seconds = record["test_rel_l2"], record["train_seconds"]
    common.progress(f"  {model} on {dataset}: relative L2 {error:.4f}, trained in {seconds:.0f} s")
    return record


def generate(dataset: str, args) -> None:
    """Generate (or find cached) every split a pair of ``dataset`` reads, before runs side by side
    could generate the same files at once."""
    options = {**preset(dataset, "mlp")["dataset"], **dataset_options(dataset, args)}
    options.update(seed=args.seed, progress=False)
    build_dataset(dataset, "train", args.data_dir, **options)
    for extra in [{}, *zero_shot_tests(dataset, args)]:
        build_dataset(dataset, "test", args.data_dir, **{**options, **extra})


def generate_all(datasets: list[str], args) -> None:
    """Generate the datasets, ``args.jobs`` at a time (one process each: every dataset writes its
    own files), before any training starts."""
    common.progress(f"generating {', '.join(datasets)}")
    common.in_processes(generate, [(dataset, args) for dataset in datasets], args.jobs)
    common.progress("data ready")


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.tables_from is not None:
        write_tables(args.tables_from, args.out / f"{args.name}.md")
        return

    wanted = [m for m in args.models.split(",") if m]
    pairs = [
        (dataset, model)
        for dataset in (d for d in args.datasets.split(",") if d)
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

        with common.spawn_pool(args.jobs) as pool:
            futures = {pool.submit(pair_record, d, m, args): (d, m) for d, m in todo}
            for future in as_completed(futures):
                done[futures[future]] = save_record(log, future.result(), args)
    else:
        for d, m in todo:
            done[(d, m)] = save_record(log, pair_record(d, m, args), args)
    records = [done[pair] for pair in pairs]
    info = {**common.machine(), "threads": args.threads, "seed": args.seed, "budget": budget(args)}
    info["seeds"] = args.seeds
    if args.single_seed:
        info["single_seed"] = args.single_seed
    info.update(quick=args.quick, jobs=args.jobs, wall_seconds=time.perf_counter() - start)
    if not todo:  # every pair read from an earlier run's records: this command trained none
        info["resumed"] = True
        del info["wall_seconds"]
    path = args.out / f"{args.name}.json"
    if args.update and path.exists():
        info, records = merged(path, info, records, args.forget)
    args.out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"machine": info, "records": records}, indent=1, default=str) + "\n")
    write_tables(path, args.out / f"{args.name}.md")


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
        if args.equal_time is not None:  # the same time for all
            return args.equal_time
        return per_epoch[pair] * ((args.epochs or 1) if args.epochs or args.quick else EPOCHS[pair])

    return sorted(pairs, key=cost, reverse=True)


def record_key(args) -> dict:
    """What a saved record must have been measured with to be reused by ``--resume``."""
    key = {"budget": budget(args), "threads": args.threads, "seed": args.seed, "quick": args.quick}
    if args.seeds != [args.seed]:
        key["seeds"] = args.seeds
    if args.samples:
        key["samples"] = args.samples
    return key


def save_record(log: Path, record: dict, args) -> dict:
    """Append a finished pair's record to ``log`` (one JSON line), so that an interrupted table
    loses only the pairs still running."""
    common.append_line(log, {"key": record_key(args), "record": record})
    return record


def finished_records(log: Path, pairs: list[tuple[str, str]], args) -> dict:
    """The records in ``log`` of ``pairs`` measured with this command's budget, threads and
    seeds (the last one of each pair; lines of other settings are ignored)."""
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
        common.progress(f"resuming: {len(found)} of {len(pairs)} pairs already measured in {log}")
    return found


def merged(path: Path, info: dict, records: list[dict], forget: str) -> tuple[dict, list[dict]]:
    """The records of ``path`` with ``records`` in place of those of the same dataset and model
    (each noted as measured later, with its command, date and budget), less the older records of
    the datasets in ``forget``; the table keeps its first measurement's header."""
    old = json.loads(path.read_text())
    note = {"what": "measured", "date": info["date"], "command": info["command"]}
    elsewhere = info.get("cpu") != old["machine"].get("cpu")
    on = f", on {info['cpu']}, not the table's {old['machine'].get('cpu')}" if elsewhere else ""
    note["why"] = f"(budget: {info['budget']}, {info['threads']} thread(s){on})"
    new = {(r["dataset"], r["model"]): {**r, "rerun": note} for r in records}
    dropped = {d for d in forget.split(",") if d}
    kept = [
        r
        for r in old["records"]
        if (r["dataset"], r["model"]) in new or r["dataset"] not in dropped
    ]
    if all((r["dataset"], r["model"]) in new for r in kept):
        return info, records  # every row measured again: the new header holds for all of them
    # a row measured again keeps its place (the tables' rows and columns keep their order)
    merged_records = [new.pop((r["dataset"], r["model"]), r) for r in kept]
    return old["machine"], merged_records + list(new.values())


def fmt_error(error: float) -> str:
    return f"{error:.4f}" if error < 100 else f"{error:.1e}"


def with_spread(record: dict) -> str:
    """A record's mean test error, with half the range over its seeds when it has several."""
    text = fmt_error(record["test_rel_l2"])
    return text + (f" ± {fmt_error(record['spread'] / 2)}" if "spread" in record else "")


def summary_table(records: list[dict]) -> str:
    """Mean test relative L2 of every model (rows) on every dataset (columns), and the zero-shot
    errors on finer grids and meshes: the table the README shows (with several training seeds,
    the mean over the seeds ± half their range)."""
    datasets = list(dict.fromkeys(r["dataset"] for r in records))
    error = {(r["dataset"], r["model"]): with_spread(r) for r in records}
    headers = ["model", *(d.capitalize() for d in datasets)]
    zero_shot = []
    columns = [("darcy", "super_resolution", "Darcy {} (zero-shot)")]
    columns += [(d, "refinement", f"{d.capitalize()} 2x / 4x finer (zero-shot)") for d in REFINED]
    for dataset, field, caption in columns:
        mine = [r for r in records if r["dataset"] == dataset and field in r]
        if mine:
            grids = list(mine[0][field])[1:]
            headers.append(caption.format(" / ".join(f"{g}x{g}" for g in grids)))
            zero_shot.append({r["model"]: list(r[field].values())[1:] for r in mine})
    rows = []
    for model in dict.fromkeys(
        r["model"] for r in sorted(records, key=lambda r: MODELS.index(r["model"]))
    ):
        row = [NAMES[model], *(error.get((d, model), "-") for d in datasets)]
        for finer in zero_shot:
            errors = finer.get(model)
            row.append(" / ".join(fmt_error(e) for e in errors) if errors else "-")
        rows.append(row)
    return common.markdown_table(headers, rows)


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


def rows_subject(names: list[str], rows: int) -> str:
    """Whose note it is: "Every row was", "The PiT row was", "The PiT, ONO and MLP rows were"
    (``names`` of the ``rows`` rows of a table)."""
    if len(names) == rows:
        return "Every row was"
    if len(names) == 1:
        return f"The {names[0]} row was"
    return f"The {', '.join(names[:-1])} and {names[-1]} rows were"


def dataset_table(records: list[dict], dataset: str) -> tuple[str, str]:
    """(caption, rows measured later and the table) of one dataset's records."""
    mine = [r for r in records if r["dataset"] == dataset]
    seeded = any("seeds" in r for r in mine)
    # a time budget (--equal-time): the time per epoch that divided it
    timed = all(r.get("timed_epoch_seconds", float("nan")) > 0 for r in mine)
    rows = []
    for r in mine:
        row = [NAMES[r["model"]], f"{r['parameters']:,}", fmt_error(r["test_rel_l2"])]
        if seeded:
            seeds = r.get("seeds", {}).values()
            row.append(" / ".join(fmt_error(run["test_rel_l2"]) for run in seeds) or "-")
            row.append(fmt_error(r["spread"]) if "spread" in r else "-")
        row += [fmt_error(r["test_rel_l2_median"]), r["epochs"]]
        row += [common.fmt_time(r["timed_epoch_seconds"])] if timed else []
        load = f"{r['load_average']:.1f}" if "load_average" in r else "-"
        rows.append([*row, common.fmt_time(r["train_seconds"]), load])
    options = mine[0]["options"]
    extra = ", ".join(f"{k}={v}" for k, v in options.items() if k not in ("num_train", "num_test"))
    caption = f"{dataset}: {options['num_train']} train / {options['num_test']} test samples"
    headers = ["model", "parameters", "test rel. L2 (mean)"]
    if seeded:
        seeds = next(list(r["seeds"]) for r in records if "seeds" in r)
        headers += [f"seed {' / '.join(map(str, seeds))}", "spread"]
    headers += ["median", "epochs", *(["time per epoch"] if timed else []), "training", "load"]
    notes: dict[str, list[str]] = {}  # rows measured again later, by another command
    for r in mine:
        if "rerun" in r:
            note = r["rerun"]
            text = (
                f"{note.get('what', 'rerun')} at {note['date']} with `{note['command']}` "
                f"{note['why']}.\n\n"
            )
            notes.setdefault(text, []).append(NAMES[r["model"]])
    reruns = [f"{rows_subject(names, len(mine))} {text}" for text, names in notes.items()]
    return caption + (f" ({extra})" if extra else ""), "".join(reruns) + common.markdown_table(
        headers, rows
    )


def write_tables(results: Path, path: Path) -> str:
    """The Markdown tables of an ``accuracy.json`` (printed and written to ``path``); for the
    project's own results, the README's table of the same name too (``accuracy``, or e.g.
    ``accuracy_600s`` for the second budget)."""
    data = json.loads(results.read_text())
    info, records = data["machine"], data["records"]
    header = (
        f"Measured {info['date']} with `{info['command']}`{common.at_commit(info)} "
        f"on {info['cpu']} "
        f"({info['threads']} torch thread(s)), torch {info['torch']}, {seeds_text(info)}; "
        f"budget: {info['budget']} per model and dataset"
        + (
            f"; the whole command took {info['wall_seconds'] / 60:.1f} min with {info['jobs']} "
            "run(s) side by side"
            if "wall_seconds" in info
            else ""
        )
        + (
            "; every pair was read from the records of an earlier run of the same budget and "
            "seeds (--resume): this command trained none, the commit is the redrawing one"
            if info.get("resumed")
            else ""
        )
        + ". The load column is the machine's one-minute load average when a run started: above "
        "the core count, other jobs shared the cores and the training times are longer than alone "
        "(the errors are not affected where the budget is in epochs)."
    )
    tables = {"Mean test relative L2": summary_table(records)}
    for dataset in dict.fromkeys(r["dataset"] for r in records):
        caption, table = dataset_table(records, dataset)
        tables[caption] = table
    finer = [r for r in records if "super_resolution" in r]
    if finer:
        grids = [int(g) for g in finer[0]["super_resolution"]]
        rows = [[NAMES[r["model"]], *map(fmt_error, r["super_resolution"].values())] for r in finer]
        headers = ["model", f"{grids[0]}x{grids[0]} (training grid)"]
        headers += [f"{g}x{g} ({(g - 1) // (grids[0] - 1)}x finer)" for g in grids[1:]]
        caption = "darcy zero-shot super-resolution: test rel. L2 on finer grids"
        tables[caption] = common.markdown_table(headers, rows)
    for dataset, same in REFINED.items():
        refined = [r for r in records if r["dataset"] == dataset and "refinement" in r]
        if refined:
            rows = [[NAMES[r["model"]], *map(fmt_error, r["refinement"].values())] for r in refined]
            headers = "model|training meshes|2x finer meshes|4x finer meshes"
            caption = f"{dataset} zero-shot: the same test {same} on finer meshes"
            tables[caption] = common.markdown_table(headers, rows)
    text = common.results_text("Accuracy on the generated datasets", header, tables)
    common.write_text(path.parent, path.stem, text)
    if path.parent.resolve() == common.RESULTS:  # the project's own results: the README follows
        common.replace_section(README, path.stem, summary_table(records))
    return text


if __name__ == "__main__":
    main()

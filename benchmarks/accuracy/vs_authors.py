"""Accuracy against the authors' code: meshop's Transolver and ONO (as ``ONO2``) and the authors'
models, imported from local clones (a model without one is skipped), trained alike on the same
grid data (Darcy 22 x 22, or ``--dataset burgers``) by meshop's trainer with seeds 0 and 1.

    python -m benchmarks.accuracy.vs_authors --transolver-dir ~/src/Transolver --ono-dir ~/src/ONO
    python -m benchmarks.accuracy.vs_authors --dataset burgers --models transolver \
        --transolver-dir ~/src/Transolver   # writes vs_authors_burgers.{md,json}
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import torch

from benchmarks.lib import common
from benchmarks.lib.authors import (
    REPOS,
    AuthorsCodeMissing,
    DenseModel,
    ono_class,
    transolver_class,
)
from benchmarks.lib.training_steps import ONO_AUTHORS
from meshop.datasets.registry import build_dataset
from meshop.models import ONO, Transolver
from meshop.train import TrainConfig, Trainer, seed_everything
from meshop.train.data import prepare_data

NAME = "vs_authors"
#: the data of each dataset: Darcy flow on a 22 x 22 grid (coefficient -> pressure), solved on a
#: 211 x 211 grid; Burgers on 256 points (u0 -> u(1)), the accuracy table's
DATA = {
    "darcy": dict(num_train=200, num_test=50, resolution=22, fine_resolution=211),
    "burgers": dict(num_train=200, num_test=50, resolution=256),
}
QUICK_DATA = {
    "darcy": dict(num_train=4, num_test=2, resolution=6, fine_resolution=41),
    "burgers": dict(num_train=4, num_test=2, resolution=32, fine_resolution=1024),
}
#: the spatial dimension of each dataset's nodes (every dataset here has one input field)
POS_DIM = {"darcy": 2, "burgers": 1}
#: the models' sizes: meshop's CPU presets (meshop.train.presets), also the speed benchmark's
SIZES = {
    "transolver": dict(width=64, layers=4, heads=4, slices=32, mlp_ratio=1),
    "ono": dict(width=64, layers=4, heads=4, k=16, mlp_ratio=1),
}
QUICK_SIZES = {
    "transolver": dict(width=16, layers=2, heads=2, slices=4, mlp_ratio=1),
    "ono": dict(width=16, layers=2, heads=2, k=4, mlp_ratio=1),
}
#: epochs of every run of a model (both implementations, both seeds)
EPOCHS = {"transolver": 60, "ono": 60}
#: the optimisation of both authors' scripts: AdamW (weight decay 1e-5), lr 1e-3, one-cycle with
#: PyTorch's defaults (from lr/25, peak at 30 %, to lr/25e4), gradient norm clipped at 0.1;
#: batch 4 as meshop's Darcy preset
TRAINING = dict(optimizer="adamw", weight_decay=1e-5, lr=1e-3, schedule="onecycle", pct_start=0.3)
TRAINING.update(div_factor=25.0, final_div_factor=1e4, clip=0.1, batch_size=4)
TITLES = {"transolver": "Transolver", "ono": "ONO"}
#: the options that name a clone of the authors' code, and what the recorded command shows instead
#: of the measuring machine's folder
CLONE_OPTIONS = {"transolver": "--transolver-dir", "ono": "--ono-dir"}
CLONE = "CLONE"


def parse_args(argv=None):
    p = common.parser(__doc__.splitlines()[0], "tiny data and models, one epoch")
    p.add_argument("--transolver-dir", type=Path, default=None, help="a clone of thuml/Transolver")
    p.add_argument("--ono-dir", type=Path, default=None, help="a clone of xzppp/ONO")
    p.add_argument("--models", default="transolver,ono", help="comma-separated names")
    p.add_argument("--dataset", choices=sorted(DATA), default="darcy", help="the grid data")
    p.add_argument("--ono-defaults", action="store_true", help="also meshop's ONO defaults")
    p.add_argument("--epochs", type=int, default=None, help="every run (default: EPOCHS)")
    p.add_argument("--seeds", default="0,1", help="comma-separated")
    p.add_argument("--data-dir", default=None, help="data root of the generated datasets")
    p.add_argument("--tables-from", type=Path, default=None, help="redraw a vs_authors.json")
    return p.parse_args(argv)


def result_name(dataset: str) -> str:
    """The result files' name: ``vs_authors`` on Darcy, ``vs_authors_<dataset>`` on the others."""
    return NAME if dataset == "darcy" else f"{NAME}_{dataset}"


def neutral_command(command: str) -> str:
    """``command`` with the folder after each of :data:`CLONE_OPTIONS` replaced by
    :data:`CLONE`: the recorded command names no folder of the measuring machine."""
    options = "|".join(re.escape(option) for option in CLONE_OPTIONS.values())
    return re.sub(rf"({options})(?:=|\s+)(?:'[^']*'|\"[^\"]*\"|[^\s`,;]+)", rf"\1 {CLONE}", command)


def authors_source(model: str, clone: Path | None) -> dict:
    """Which authors' code ran: its public repository and the commit the clone had checked out
    (None when the clone is not a git checkout)."""
    try:
        found = subprocess.run(
            ["git", "-C", str(Path(clone).expanduser()), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        commit = found.stdout.strip() if found.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {"repository": REPOS[TITLES[model]][0], "commit": commit or None}


def implementations(model: str, args) -> dict:
    """``{implementation: build()}`` of ``model``: meshop's (as the authors' model for ONO, and
    with meshop's defaults with ``--ono-defaults``) and the authors', imported from the clone
    (raises :class:`AuthorsCodeMissing` when it cannot be)."""
    s = (QUICK_SIZES if args.quick else SIZES)[model]
    dim = POS_DIM[args.dataset]
    sizes = dict(n_layers=s["layers"], n_hidden=s["width"], n_head=s["heads"])
    sizes.update(space_dim=dim, mlp_ratio=s["mlp_ratio"])
    if model == "transolver":
        authors = transolver_class(args.transolver_dir)
        options = dict(fun_dim=1, out_dim=1, slice_num=s["slices"])
        return {
            "meshop": lambda: Transolver(1 + dim, 1, dim, **s),
            "authors": lambda: DenseModel(authors(**sizes, **options), s),
        }
    authors = ono_class(args.ono_dir)

    def ours(**options):
        return lambda: ONO(1 + dim, 1, dim, feature_attention="linear", **s, **options)

    options = dict(orth=True, psi_dim=s["k"], momentum=0.9)
    out = {
        "meshop": ours(**ONO_AUTHORS),
        "authors": lambda: DenseModel(authors(**sizes, **options), s),
    }
    if args.ono_defaults:
        out["meshop (defaults)"] = ours()
    return out


def train_one(build, model: str, implementation: str, seed: int, prepared, epochs: int) -> dict:
    """Train one implementation with one seed; its test error, size and time."""
    options = dict(epochs=epochs, seed=seed, eval_every=epochs, progress=False, device="cpu")
    config = TrainConfig(**TRAINING, **options)
    seed_everything(seed)  # the initial weights
    net = build()
    load = os.getloadavg()[0]
    trainer = Trainer(net, prepared, config=config)
    last = trainer.fit()
    record = {"model": model, "implementation": implementation, "seed": seed, "epochs": epochs}
    record["parameters"] = sum(p.numel() for p in net.parameters())
    record.update({k: last[k] for k in ("test_rel_l2", "test_rel_l2_median", "train_loss")})
    record["train_seconds"] = sum(h["epoch_seconds"] for h in trainer.history)
    record.update(load_average=load, load_average_end=os.getloadavg()[0])
    record["threads"] = torch.get_num_threads()
    common.progress(
        f"  {TITLES[model]}, {implementation}, seed {seed}: relative L2 {record['test_rel_l2']:.4f}"
        f" in {record['train_seconds']:.0f} s (load {load:.1f})"
    )
    return record


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.tables_from is not None:
        result = json.loads(args.tables_from.read_text())
        write(args.out, result_name(result["data"].get("dataset", "darcy")), result, redraw=True)
        return

    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    models = [m for m in args.models.split(",") if m]
    unknown = sorted(set(models) - set(SIZES))
    if unknown:
        raise SystemExit(f"unknown model(s) {unknown}; choose from {sorted(SIZES)}")
    seeds = [int(s) for s in args.seeds.split(",") if s]
    info = {**common.machine(), "threads": args.threads, "quick": args.quick}
    info["command"] = neutral_command(info["command"])
    result = {"machine": info, "data": {"dataset": args.dataset}, "training": TRAINING}
    result.update(sizes={}, records=[], skipped={}, authors={})
    prepared = None
    for model in models:
        try:
            builds = implementations(model, args)
        except AuthorsCodeMissing as missing:
            result["skipped"][model] = str(missing)
            common.progress(f"skipping the {TITLES[model]}: {missing}")
            continue
        clone = getattr(args, CLONE_OPTIONS[model].removeprefix("--").replace("-", "_"))
        result["authors"][model] = authors_source(model, clone)
        if prepared is None:
            common.progress(f"generating (or loading) the {args.dataset} data")
            options = (QUICK_DATA if args.quick else DATA)[args.dataset]
            options = dict(options, seed=0, progress=False)
            splits = [
                build_dataset(args.dataset, s, args.data_dir, **options) for s in ("train", "test")
            ]
            prepared = prepare_data(*splits, TrainConfig(**TRAINING, progress=False, device="cpu"))
            result["data"].update(options)
        result["sizes"][model] = (QUICK_SIZES if args.quick else SIZES)[model]
        epochs = args.epochs or (1 if args.quick else EPOCHS[model])
        common.progress(f"training the {TITLES[model]} ({', '.join(builds)}), {epochs} epochs")
        for seed in seeds:  # the implementations one after the other: alike loads
            for implementation, build in builds.items():
                record = train_one(build, model, implementation, seed, prepared, epochs)
                result["records"].append(record)
                info["wall_seconds"] = time.perf_counter() - start
                write(args.out, result_name(args.dataset), result, echo=False)
    info["wall_seconds"] = time.perf_counter() - start
    write(args.out, result_name(args.dataset), result)


def write(out: Path, name: str, result: dict, echo=True, redraw=False) -> None:
    """The result files ``<out>/<name>.md`` and, unless redrawn, ``.json``."""
    common.write_text(out, name, tables(result), None if redraw else result, echo)


def model_table(records: list[dict], model: str) -> str:
    """A model's table of its runs: per implementation, the errors, losses and times per seed."""
    runs: dict = {}
    for r in (r for r in records if r["model"] == model):
        runs.setdefault(r["implementation"], []).append(r)
    seeds = sorted({r["seed"] for rows in runs.values() for r in rows})
    rows = []
    for implementation, mine in runs.items():
        by_seed = {r["seed"]: r["test_rel_l2"] for r in mine}
        errors = [r["test_rel_l2"] for r in mine]
        row = [implementation, f"{mine[0]['parameters']:,}", mine[-1]["epochs"]]
        row += [f"{by_seed[s]:.4f}" if s in by_seed else "-" for s in seeds]
        row += [f"{common.mean(errors):.4f}", f"{max(errors) - min(errors):.4f}"]
        row.append(" / ".join(f"{r['train_loss']:.4f}" for r in mine))
        row.append(" / ".join(f"{r['train_seconds']:.0f} s" for r in mine))
        rows.append([*row, " / ".join(f"{r['load_average']:.1f}" for r in mine)])
    headers = ["implementation", "parameters", "epochs", *(f"seed {s}" for s in seeds)]
    headers += ["mean", "spread", "training loss (last epoch) per seed"]
    headers += ["training time per seed", "load"]
    return common.markdown_table(headers, rows)


def authors_text(sources: dict) -> str:
    """The sentence that says which authors' code ran (empty when none did)."""
    if not sources:
        return ""
    parts = []
    for model, source in sources.items():
        commit = source.get("commit")
        at = f"at commit {commit[:12]}" if commit else "at a commit that was not recorded"
        parts.append(f"the {TITLES[model]}'s from {source['repository']} {at}")
    return f"The authors' code ({CLONE} in the command: a local clone): {', '.join(parts)}. "


def tables(result: dict) -> str:
    info, records = result["machine"], result["records"]
    took = info.get("wall_seconds")
    header = (
        f"Measured {info['date']} with `{info['command']}`{common.at_commit(info)} "
        f"on {info['cpu']} "
        f"({info['cpu_cores']} cores, {info['threads']} torch thread(s)), torch {info['torch']}"
        + (f"; the whole command took {took / 60:.1f} min" if took is not None else "")
        + ". "
        + authors_text(result.get("authors", {}))
        + "Load: the machine's one-minute load average when each run started (above the "
        "core count, other jobs shared the cores: the times are longer than alone, the errors "
        "are not affected)."
    )
    sections = {}
    for model in dict.fromkeys([*(r["model"] for r in records), *result["skipped"]]):
        if model in result["skipped"]:
            sections[TITLES[model]] = f"Skipped: {result['skipped'][model]}."
            continue
        sizes = ", ".join(f"{k} {v}" for k, v in result["sizes"][model].items())
        sections[f"{TITLES[model]} ({sizes})"] = model_table(records, model)
    return common.results_text("Accuracy against the authors' code", header, sections)


if __name__ == "__main__":
    main()

"""Accuracy against the authors' code: the Transolver and ONO of meshop and of their authors' public
repositories, trained at the same settings on the same data with the same training loop.

For each model, the authors' model is imported from a local clone of their repository (never
copied into meshop; :mod:`benchmarks.lib.authors`) and trained next to meshop's model at the same
width, layers, heads, slices (Transolver) or eigenfunctions ``k`` (ONO), MLP ratio, optimiser,
learning-rate schedule, gradient clipping, epochs, batch size and data, with seeds 0 and 1. Both
run through meshop's :class:`~meshop.train.Trainer`: the same normalisers fitted on the training
split (inputs, coordinates, outputs), the same per-sample relative L2 loss, the same shuffling per
seed and the same evaluation (mean and median per-sample relative L2 on the test split), on one
torch thread. The authors' models take dense ``[B, N, C]`` batches, so the data is on a uniform
grid (every sample the same nodes, quadrature weights ``1/N``: meshop's integrals are then the
authors' unweighted sums over the nodes): Darcy flow in 2D by default, ``--dataset burgers`` the
1D viscous Burgers equation (u0 -> u at t = 1 on 256 points; the input is u0 alone, no derived
inputs, so that both implementations see the raw problem).

meshop's ONO is built with the options of the authors' ``ONO2`` (batch whitening with a running
moment, no value projection, the raw sum as inner product, linear attention without per-head
layer norms, coordinates or Q, K, V biases and with the queries' factor d_head^-1/2 in the
feature stream, a one-layer linear lift, a linear last stage, ``ONO2``'s initialisation of every
linear layer: ``ONO_AUTHORS`` of ``benchmarks/lib/training_steps.py``); meshop's defaults are one
more row with ``--ono-defaults``. (The first run of this script found the lift and the
initialisation missing from those options, set them in the benchmark as a row ``LIFTED``, and ONO
gained ``linear_encoder`` and ``authors_init`` from it; the first Burgers run found the
parameterisation of the linear attention wanting: ONO gained ``feature_qkv_bias`` and
``feature_query_scale``.)

    python -m benchmarks.accuracy.vs_authors --transolver-dir ~/src/Transolver --ono-dir ~/src/ONO
    python -m benchmarks.accuracy.vs_authors --quick --transolver-dir ~/src/Transolver
    python -m benchmarks.accuracy.vs_authors --dataset burgers --models transolver \
        --transolver-dir ~/src/Transolver   # writes vs_authors_burgers.{md,json}

A model whose clone is not given (or lacks the authors' file, or a package their module needs)
is skipped with a message naming what to pass; the result files say so too. Clones:
``git clone https://github.com/thuml/Transolver`` and ``git clone https://github.com/xzppp/ONO``;
the ONO module needs ``pip install einops linear-attention-transformer``.

The full run (8 runs of 60 epochs) took 16 min on the 2-core development machine with little else
running (the result file gives each run's time and load).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from benchmarks.lib.authors import AuthorsCodeMissing, DenseModel, ono_class, transolver_class
from benchmarks.lib.common import (
    RESULTS,
    SECTION_END,
    SECTION_START,
    machine,
    markdown_table,
    progress,
)
from benchmarks.lib.training_steps import ONO_AUTHORS

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
TRAINING = dict(
    optimizer="adamw",
    weight_decay=1e-5,
    lr=1e-3,
    schedule="onecycle",
    pct_start=0.3,
    div_factor=25.0,
    final_div_factor=1e4,
    clip=0.1,
    batch_size=4,
)
SEEDS = (0, 1)
TITLES = {"transolver": "Transolver", "ono": "ONO"}
#: the row of meshop's ONO with ``ONO2``'s one-layer lift and initialisation, set in the
#: benchmark before ONO had ``linear_encoder`` and ``authors_init`` (in older result files)
LIFTED = "meshop, ONO2's lift and init"
#: what the rows of a model's table are
ROWS = {
    "transolver": (
        "The authors' model adds a learned placeholder (width parameters, initialised uniform "
        "in [0, 1/width]) to the lifted features; meshop's Transolver has the same sum in the "
        "bias of its lift's second layer (initialised zero): the same function, width fewer "
        "parameters."
    ),
    "ono": (
        "meshop: meshop's ONO with the options of the authors' ONO2 (batch whitening with a "
        "running moment, no value projection, the sum as inner product, linear attention "
        "without per-head layer norms, coordinates or Q, K, V biases and with the factor "
        "d_head^-1/2 on the queries' softmax, a one-layer linear lift, a linear last stage, "
        "every linear layer truncated normal with std 0.02 and zero bias): ONO2 parameter for "
        "parameter; what remains is the precision of the whitening (meshop float64, the "
        "authors float32). In result files measured before ONO had feature_qkv_bias and "
        "feature_query_scale, meshop's Q, K, V projections have biases and the factor "
        "d_head^-1/2 is left to the output projection; in those measured before ONO had "
        f"linear_encoder and authors_init, the row '{LIFTED}' is that model (set in the "
        "benchmark) and the row 'meshop' lacks the lift and the initialisation."
    ),
}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--transolver-dir", type=Path, default=None, help="a clone of github.com/thuml/Transolver"
    )
    parser.add_argument(
        "--ono-dir", type=Path, default=None, help="a clone of github.com/xzppp/ONO"
    )
    parser.add_argument("--models", default="transolver,ono", help="comma-separated names")
    parser.add_argument(
        "--dataset",
        choices=sorted(DATA),
        default="darcy",
        help="the uniform-grid data (default: darcy; burgers writes vs_authors_burgers.*)",
    )
    parser.add_argument(
        "--ono-defaults", action="store_true", help="also train meshop's ONO with its defaults"
    )
    parser.add_argument("--epochs", type=int, default=None, help="every run (default: EPOCHS)")
    parser.add_argument("--seeds", default=",".join(map(str, SEEDS)), help="comma-separated")
    parser.add_argument("--quick", action="store_true", help="tiny data and models, one epoch")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default: 1)")
    parser.add_argument("--data-dir", default=None, help="data root of the generated datasets")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder of the result files")
    parser.add_argument(
        "--tables-from", type=Path, default=None, help="only redraw the tables of a vs_authors.json"
    )
    return parser.parse_args(argv)


def load_splits(args):
    from meshop.datasets.registry import build_dataset

    options = dict((QUICK_DATA if args.quick else DATA)[args.dataset], seed=0, progress=False)
    splits = [build_dataset(args.dataset, s, args.data_dir, **options) for s in ("train", "test")]
    return options, splits


def result_name(dataset: str) -> str:
    """The result files' name: ``vs_authors`` on Darcy, ``vs_authors_<dataset>`` on the others."""
    return NAME if dataset == "darcy" else f"{NAME}_{dataset}"


def implementations(model: str, args) -> dict:
    """``{implementation: build()}`` of ``model``: meshop's (as the authors' model for ONO, and
    with meshop's defaults with ``--ono-defaults``) and the authors', imported from the clone
    (raises :class:`AuthorsCodeMissing` when it cannot be)."""

    from meshop.models import ONO, Transolver

    s = (QUICK_SIZES if args.quick else SIZES)[model]
    dim = POS_DIM[args.dataset]
    if model == "transolver":
        authors = transolver_class(args.transolver_dir)

        def theirs():
            net = authors(
                space_dim=dim,
                n_layers=s["layers"],
                n_hidden=s["width"],
                n_head=s["heads"],
                mlp_ratio=s["mlp_ratio"],
                fun_dim=1,
                out_dim=1,
                slice_num=s["slices"],
            )
            return DenseModel(net, s)

        return {"meshop": lambda: Transolver(1 + dim, 1, dim, **s), "authors": theirs}
    authors = ono_class(args.ono_dir)

    def theirs():
        net = authors(
            space_dim=dim,
            n_layers=s["layers"],
            n_hidden=s["width"],
            n_head=s["heads"],
            mlp_ratio=s["mlp_ratio"],
            orth=True,
            psi_dim=s["k"],
            momentum=0.9,
        )
        return DenseModel(net, s)

    def ours(**options):
        return lambda: ONO(1 + dim, 1, dim, feature_attention="linear", **s, **options)

    out = {"meshop": ours(**ONO_AUTHORS), "authors": theirs}
    if args.ono_defaults:
        out["meshop (defaults)"] = ours()
    return out


def train_one(build, model: str, implementation: str, seed: int, prepared, epochs: int) -> dict:
    """Train one implementation with one seed; its test error, size and time."""
    import torch

    from meshop.train import TrainConfig, Trainer, seed_everything

    config = TrainConfig(
        **TRAINING, epochs=epochs, seed=seed, eval_every=epochs, progress=False, device="cpu"
    )
    seed_everything(seed)  # the initial weights
    net = build()
    load = os.getloadavg()[0]
    trainer = Trainer(net, prepared, config=config)
    last = trainer.fit()
    record = {
        "model": model,
        "implementation": implementation,
        "seed": seed,
        "epochs": epochs,
        "parameters": sum(p.numel() for p in net.parameters()),
        "test_rel_l2": last["test_rel_l2"],
        "test_rel_l2_median": last["test_rel_l2_median"],
        "train_loss": last["train_loss"],
        "train_seconds": sum(h["epoch_seconds"] for h in trainer.history),
        "load_average": load,
        "load_average_end": os.getloadavg()[0],
        "threads": torch.get_num_threads(),
    }
    progress(
        f"  {TITLES[model]}, {implementation}, seed {seed}: relative L2 {record['test_rel_l2']:.4f}"
        f" in {record['train_seconds']:.0f} s (load {load:.1f})"
    )
    return record


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.tables_from is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        result = json.loads(args.tables_from.read_text())
        text = tables(result)
        name = result_name(result["data"].get("dataset", "darcy"))
        (args.out / f"{name}.md").write_text(text)
        print(text, flush=True)
        return
    import torch

    from meshop.train import TrainConfig
    from meshop.train.data import prepare_data

    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    models = [m for m in args.models.split(",") if m]
    unknown = sorted(set(models) - set(SIZES))
    if unknown:
        raise SystemExit(f"unknown model(s) {unknown}; choose from {sorted(SIZES)}")
    seeds = [int(s) for s in args.seeds.split(",") if s]
    info = {**machine(), "threads": args.threads, "quick": args.quick}
    records, skipped, sizes = [], {}, {}
    data = None
    for model in models:
        try:
            builds = implementations(model, args)
        except AuthorsCodeMissing as missing:
            skipped[model] = str(missing)
            progress(f"skipping the {TITLES[model]}: {missing}")
            continue
        if data is None:
            progress(f"generating (or loading) the {args.dataset} data")
            options, (train, test) = load_splits(args)
            prepare = TrainConfig(**TRAINING, progress=False, device="cpu")
            data = options, prepare_data(train, test, prepare)
        sizes[model] = (QUICK_SIZES if args.quick else SIZES)[model]
        epochs = args.epochs or (1 if args.quick else EPOCHS[model])
        progress(f"training the {TITLES[model]} ({', '.join(builds)}), {epochs} epochs")
        for seed in seeds:  # the implementations one after the other: alike loads
            for implementation, build in builds.items():
                record = train_one(build, model, implementation, seed, data[1], epochs)
                records.append(record)
                info["wall_seconds"] = time.perf_counter() - start
                write(args, info, data[0] if data else None, sizes, records, skipped)
    info["wall_seconds"] = time.perf_counter() - start
    write(args, info, data[0] if data else None, sizes, records, skipped, final=True)


def write(args, info, options, sizes, records, skipped, final: bool = False) -> None:
    """The result files (``<out>/vs_authors.{md,json}``), rewritten after every run."""
    result = {
        "machine": info,
        "data": {"dataset": args.dataset, **(options or {})},
        "training": TRAINING,
        "sizes": sizes,
        "records": records,
        "skipped": skipped,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    name = result_name(args.dataset)
    (args.out / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
    text = tables(result)
    (args.out / f"{name}.md").write_text(text)
    if final:
        print(text, flush=True)


def spread(errors: list[float]) -> float:
    """The seed spread: the largest error less the smallest."""
    return max(errors) - min(errors)


def summary(records: list[dict]) -> dict:
    """``{(model, implementation): {"errors": [per seed], "seconds": [per seed], ...}}``."""
    out: dict = {}
    for r in records:
        entry = out.setdefault(
            (r["model"], r["implementation"]),
            {
                "errors": [],
                "seeds": [],
                "losses": [],
                "seconds": [],
                "loads": [],
                "parameters": r["parameters"],
            },
        )
        entry["errors"].append(r["test_rel_l2"])
        entry["losses"].append(r["train_loss"])
        entry["seeds"].append(r["seed"])
        entry["seconds"].append(r["train_seconds"])
        entry["loads"].append(r["load_average"])
        entry["epochs"] = r["epochs"]
    return out


def verdict(ours: dict, authors: dict) -> str:
    """A mean error against the authors', measured by the larger of the two seed spreads."""
    mine, theirs = (sum(e["errors"]) / len(e["errors"]) for e in (ours, authors))
    width = max(spread(ours["errors"]), spread(authors["errors"]))
    difference = mine - theirs
    relative = f"mean {difference / theirs:+.0%} against the authors'"
    if len(ours["errors"]) < 2 or len(authors["errors"]) < 2 or width == 0:
        return f"{relative}; one seed: no spread to judge by"
    if abs(difference) <= width:
        where = "within the seed spread"
    elif difference < 0:
        where = "better by more than the seed spread"
    else:
        where = "worse by more than the seed spread"
    return f"{relative}, {abs(difference) / width:.2f} times the larger seed spread: {where}"


def _power(value: float) -> str:
    """``1e-3`` for 0.001 (a setting, not a measured figure)."""
    return f"{value:.0e}".replace("e-0", "e-")


def tables(result: dict) -> str:
    info, records, options = result["machine"], result["records"], result["data"]
    header = (
        f"Measured {info['date']} with `{info['command']}` on {info['cpu']} "
        f"({info['cpu_cores']} cores, {info['threads']} torch thread(s)), torch {info['torch']}"
        + (
            f"; the whole command took {info['wall_seconds'] / 60:.1f} min"
            if "wall_seconds" in info
            else ""
        )
        + ". Load: the machine's one-minute load average when each run started (above the "
        "core count, other jobs shared the cores: the times are longer than alone, the errors "
        "are not affected)."
    )
    t = result["training"]
    n = options.get("resolution")
    if options.get("dataset", "darcy") == "darcy":
        data = (
            f"Darcy flow on a {n} x {n} grid ({options.get('num_train')} training and "
            f"{options.get('num_test')} test samples, solved on {options.get('fine_resolution')}"
            f" x {options.get('fine_resolution')})"
        )
        fields = "the coefficient, the coordinates and the pressure"
    else:
        data = (
            f"the 1D viscous Burgers equation on {n} points, u0 -> u at t = 1 "
            f"({options.get('num_train')} training and {options.get('num_test')} test samples)"
        )
        fields = "u0, the coordinate and u"
    setting = (
        f"{data}; every run: {t['optimizer']} (lr {_power(t['lr'])}, weight decay "
        f"{_power(t['weight_decay'])}), one-cycle schedule (div {t['div_factor']:g}, final div "
        f"{t['final_div_factor']:g}), gradient norm clipped at {t['clip']:g}, batch "
        f"{t['batch_size']}, per-sample relative L2 loss, Gaussian normalisers of {fields} "
        "fitted on the training split, meshop's trainer for both implementations. Test error: "
        "mean per-sample relative L2 on the test split; spread: the largest seed's error less "
        "the smallest."
    )
    parts = ["## Accuracy against the authors' code", "", SECTION_START, header, ""]
    if records:
        parts += [setting, ""]
    entries = summary(records)
    for model in dict.fromkeys([*(r["model"] for r in records), *result["skipped"]]):
        title = TITLES[model]
        if model in result["skipped"]:
            parts += [f"### {title}", "", f"Skipped: {result['skipped'][model]}.", ""]
            continue
        sizes = ", ".join(f"{k} {v}" for k, v in result["sizes"][model].items())
        seeds = sorted({s for (m, _), e in entries.items() if m == model for s in e["seeds"]})
        headers = [
            "implementation",
            "parameters",
            "epochs",
            *(f"seed {s}" for s in seeds),
            "mean",
            "spread",
            "training loss (last epoch) per seed",
            "training time per seed",
            "load",
        ]
        rows = []
        for (m, implementation), e in entries.items():
            if m != model:
                continue
            by_seed = dict(zip(e["seeds"], e["errors"], strict=True))
            rows.append(
                [
                    implementation,
                    f"{e['parameters']:,}",
                    e["epochs"],
                    *(f"{by_seed[s]:.4f}" if s in by_seed else "-" for s in seeds),
                    f"{sum(e['errors']) / len(e['errors']):.4f}",
                    f"{spread(e['errors']):.4f}",
                    " / ".join(f"{v:.4f}" for v in e["losses"]),
                    " / ".join(f"{s:.0f} s" for s in e["seconds"]),
                    " / ".join(f"{v:.1f}" for v in e["loads"]),
                ]
            )
        parts += [f"### {title} ({sizes})", "", markdown_table(headers, rows), ""]
        if model in ROWS:
            parts += [ROWS[model], ""]
        for (m, implementation), e in entries.items():
            if m == model and implementation != "authors" and (model, "authors") in entries:
                difference = verdict(e, entries[model, "authors"])
                parts += [f"{implementation}: {difference}.", ""]
    parts += [SECTION_END, ""]
    return "\n".join(parts)


if __name__ == "__main__":
    main()

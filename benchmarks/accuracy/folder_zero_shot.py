"""Zero-shot accuracy with the folder defaults: every model trained as a user with mesh files would
train it (``meshop train --dataset folder``, the folder rules picking its settings) on the
generated mesh datasets written as ``.vtu`` files, then evaluated by ``meshop evaluate
--all-files`` on the test samples at the training resolution and meshed 2x and 4x finer: Elasticity
and DarcyMesh at refinements 0, 1 and 2 (the same domains meshed again), the Darcy grid at 22x22,
43x43 and 85x85 (the accuracy table's columns; written as quadrilateral meshes). Each step runs the
command line in a fresh process on one thread, ``--jobs`` runs side by side.

    python -m benchmarks.accuracy.folder_zero_shot                  # every dataset and model
    python -m benchmarks.accuracy.folder_zero_shot --datasets darcy --models pit,mlp
    python -m benchmarks.accuracy.folder_zero_shot --quick          # smoke test: tiny, 1 epoch
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

from benchmarks.lib import common
from benchmarks.lib.training_runs import NAMES, dataset_options
from meshop._pyg import Data
from meshop.data import write_mesh
from meshop.datasets.registry import build_dataset

NAME = "folder_zero_shot"
TITLE = "Zero-shot accuracy with the folder defaults (`meshop train --dataset folder`)"
MODELS = ("pit", "galerkin", "fourier", "ono", "transolver", "mlp")
#: the datasets as folders: the input and target fields' names (written from ``x`` and ``y``),
#: how a finer level is asked for, and the three levels (training, 2x, 4x finer)
DATASETS = {
    "elasticity": dict(inputs=[], targets=["von_mises"], option="refinement", levels=[0, 1, 2]),
    "darcy-mesh": dict(inputs=["a"], targets=["u"], option="refinement", levels=[0, 1, 2]),
    "darcy": dict(inputs=["a"], targets=["u"], option="resolution", levels=[22, 43, 85]),
}
#: --quick: the Darcy grid's levels on its tiny fine grid (41 x 41)
QUICK_LEVELS = {"darcy": [6, 11, 21]}
TITLES = {"elasticity": "Elasticity", "darcy-mesh": "DarcyMesh", "darcy": "Darcy (grid)"}


def options(parser) -> None:
    parser.add_argument("--datasets", default=",".join(DATASETS), help="comma separated")
    parser.add_argument("--models", default=",".join(MODELS), help="comma separated")
    parser.add_argument(
        "--epochs",
        type=int,
        default=40,
        help="epochs of every run (default 40; the folder rules' own count is 100 or more)",
    )
    parser.add_argument("--seed", type=int, default=0, help="training seed")
    parser.add_argument("--jobs", type=int, default=1, help="runs side by side (default 1)")
    parser.add_argument("--data-dir", default=None, help="data root of the generated datasets")
    parser.add_argument("--runs", type=Path, default=Path(f"runs/{NAME}"), help="work folder")
    parser.add_argument("--resume", action="store_true", help="keep the runs already measured")
    parser.add_argument(
        "--train-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a training setting over the folder rules, for every model (its rows are named "
        "with it), e.g. latent_resample=false",
    )


def levels_of(dataset: str, args) -> list[int]:
    return (QUICK_LEVELS if args.quick else {}).get(dataset, DATASETS[dataset]["levels"])


def as_mesh(sample: Data) -> Data:
    """A sample's domain as a file stores it: a grid sample (``grid_shape``, no cells) gets its
    quadrilaterals, so that its quadrature weights come from cells as on any mesh file."""
    if "grid_shape" not in sample:
        return sample
    rows, cols = (int(v) for v in sample.grid_shape)
    index = np.arange(rows * cols).reshape(rows, cols)
    corners = [index[:-1, :-1], index[1:, :-1], index[1:, 1:], index[:-1, 1:]]
    domain = Data(pos=sample.pos)
    domain.cell_index_quad = torch.as_tensor(np.stack(corners, -1).reshape(-1, 4).T.copy())
    return domain


def export(dataset: str, split: str, level: int, folder: Path, args) -> int:
    """Write one split of ``dataset`` at ``level`` as ``.vtu`` files in ``folder`` (skipped when
    it is there); the mean nodes of its samples."""
    spec = DATASETS[dataset]
    done = folder / "nodes.json"
    if done.exists():
        return json.loads(done.read_text())["mean_nodes"]
    folder.mkdir(parents=True, exist_ok=True)
    settings = {**dataset_options(dataset, args), spec["option"]: level, "progress": False}
    samples = build_dataset(dataset, split, args.data_dir, **settings)
    nodes = []
    for i in range(len(samples)):
        sample = samples[i]
        fields = {name: sample.x[:, k] for k, name in enumerate(spec["inputs"])}
        fields.update({name: sample.y[:, k] for k, name in enumerate(spec["targets"])})
        write_mesh(folder / f"sample_{i:04d}.vtu", as_mesh(sample), fields, overwrite=True)
        nodes.append(int(sample.num_nodes))
    mean_nodes = float(np.mean(nodes))
    done.write_text(json.dumps({"mean_nodes": mean_nodes}))
    return mean_nodes


def meshop(*argv: str) -> str:
    """``python -m meshop ARGV`` in a new process; its output (stops the benchmark on failure)."""
    return common.run_python("-m", "meshop", *argv)["output"]


def measure(dataset: str, model: str, folders: dict, args) -> dict:
    """Train ``model`` on the training folder with the folder defaults, evaluate it at every
    level: its errors, and the settings the folder rules chose (as ``meshop train`` printed
    them)."""
    spec = DATASETS[dataset]
    variant = "".join(f"-{arg}" for arg in args.train_arg)
    run = args.runs / f"{dataset}-{model}-seed{args.seed}{variant}"
    argv = ["train", "--dataset", "folder", "--data-dir", str(folders["train"]), "--model", model]
    if spec["inputs"]:
        argv += ["--dataset-arg", f"inputs={json.dumps(spec['inputs'])}"]
    argv += ["--dataset-arg", f"targets={json.dumps(spec['targets'])}"]
    argv += ["--epochs", str(args.epochs), "--seed", str(args.seed), "--out", str(run)]
    argv += ["--no-progress", "--no-figures", "--threads", str(args.threads)]
    for arg in args.train_arg:
        argv += ["--train-arg", arg]
    common.progress(f"training {model} on the {dataset} folder")
    printed = meshop(*argv)
    settings = printed.split("settings:", 1)[-1].split("\ntraining ", 1)[0].strip("\n")
    errors, medians = [], []
    for level in levels_of(dataset, args):
        out = run / f"evaluated-{level}"
        meshop("evaluate", "--checkpoint", str(run), "--data-dir", str(folders[level]),
               "--all-files", "--threads", str(args.threads), "--out", str(out))  # fmt: skip
        summary = json.loads((out / "summary.json").read_text())
        errors.append(summary["test_rel_l2"])
        medians.append(summary["test_rel_l2_median"])
    common.progress(f"  {model} on {dataset}: " + " / ".join(f"{e:.4f}" for e in errors))
    return {
        "dataset": dataset,
        "model": model,
        "seed": args.seed,
        "epochs": args.epochs,
        "train_args": list(args.train_arg),
        "levels": levels_of(dataset, args),
        "mean_nodes": [folders["nodes"][level] for level in levels_of(dataset, args)],
        "test_rel_l2": errors,
        "test_rel_l2_median": medians,
        "settings": settings,
    }


def key_of(record: dict) -> tuple:
    """What makes two runs the same: dataset, model, seed, epochs and settings over the rules."""
    train_args = tuple(record.get("train_args", ()))
    return record["dataset"], record["model"], record["seed"], record["epochs"], train_args


def label(record: dict) -> str:
    """A row's name: the model's, with the settings it was trained with over the rules."""
    return NAMES[record["model"]] + "".join(f", {a}" for a in record.get("train_args", ()))


def main(argv=None) -> None:
    p = common.parser(__doc__.splitlines()[0], "tiny datasets, one epoch, the MLP (smoke test)")
    options(p)
    args = p.parse_args(argv)
    datasets = [d for d in args.datasets.split(",") if d]
    unknown = sorted(set(datasets) - set(DATASETS))
    if unknown:
        p.error(f"--datasets: {', '.join(unknown)} unknown; choose among {', '.join(DATASETS)}")
    models = common.chosen_models(p, args.models, MODELS)
    if args.quick:
        models, args.epochs = ["mlp"], 1
    log = args.runs / "records.jsonl"
    done = {}
    if args.resume and log.exists():
        for line in log.read_text().splitlines():
            record = json.loads(line)
            done[key_of(record)] = record
    for dataset in datasets:
        common.progress(f"writing {dataset} as mesh files")
        root = args.runs / "data" / dataset
        folders = {"train": root / "train", "nodes": {}}
        export(dataset, "train", levels_of(dataset, args)[0], folders["train"], args)
        for level in levels_of(dataset, args):
            folders[level] = root / f"test-{level}"
            folders["nodes"][level] = export(dataset, "test", level, folders[level], args)
        wanted = {m: (dataset, m, args.seed, args.epochs, tuple(args.train_arg)) for m in models}
        todo = [m for m in models if wanted[m] not in done]
        with ThreadPoolExecutor(max(1, args.jobs)) as pool:
            calls = [pool.submit(measure, dataset, m, folders, args) for m in todo]
            for record in (call.result() for call in calls):
                common.append_line(log, record)
                done[key_of(record)] = record
    # every run of these datasets in the work folder: the defaults' rows, then those with
    # settings over the rules (earlier commands of the same --runs, e.g. --train-arg ...)
    records = sorted(
        (r for r in done.values() if r["dataset"] in datasets),
        key=lambda r: (
            datasets.index(r["dataset"]),
            tuple(r.get("train_args", ())),
            MODELS.index(r["model"]),
        ),
    )
    common.write_results(NAME, TITLE, args, tables(records), records)


def tables(records: list[dict]) -> dict[str, str]:
    """Per dataset: each model's error at the three levels and the finer levels' ratios to the
    training level's; then the settings the folder rules chose."""
    out = {}
    for dataset in dict.fromkeys(r["dataset"] for r in records):
        mine = [r for r in records if r["dataset"] == dataset]
        first = mine[0]
        names = [f"{n:,.0f} nodes" for n in first["mean_nodes"]]
        headers = ["model", f"training ({names[0]})", f"2x finer ({names[1]})"]
        headers += [f"4x finer ({names[2]})", "2x / training", "4x / training"]
        rows = []
        for r in mine:
            e = r["test_rel_l2"]
            rows.append([label(r), *(f"{x:.4f}" for x in e)])
            rows[-1] += [f"{e[1] / e[0]:.2f}", f"{e[2] / e[0]:.2f}"]
        levels = "resolution" if DATASETS[dataset]["option"] == "resolution" else "refinement"
        caption = (
            f"{TITLES[dataset]}: mean test relative L2, {first['epochs']} epochs, seed "
            f"{first['seed']} ({levels} {', '.join(str(v) for v in first['levels'])})"
        )
        out[caption] = common.markdown_table(headers, rows)
    settings = "\n\n".join(
        f"{TITLES[r['dataset']]}, {label(r)}:\n\n```text\n{r['settings']}\n```" for r in records
    )
    out["The settings the folder rules chose"] = settings
    return out


if __name__ == "__main__":
    main()

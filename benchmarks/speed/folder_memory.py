"""Peak memory of one epoch of `meshop train --dataset folder` (an MLP of width 16, batch 1) over a
folder of ``--gb`` gigabytes of .vtu files written under ``--scratch`` (deleted unless ``--keep``):
lazy, with 2 DataLoader workers, on a tenth of the files, and every file cached in memory.

    python -m benchmarks.speed.folder_memory              # 2 GB folder (22 minutes on 2 busy cores)
    python -m benchmarks.speed.folder_memory --quick      # smoke test: a few small files
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import meshio
import numpy as np

from benchmarks.lib import common

#: the cases: their labels and the options added to the command (the in-memory cache's size is
#: the number of files)
CASES = {
    "lazy": ("lazy", []),
    "workers": ("lazy, 2 workers", ["--num-workers", "2"]),
    "tenth": ("lazy, 1/10 of the folder", ["--dataset-arg", 'pattern="case_*0.vtu"']),
    "in-memory": ("in memory (cache of every file)", ["--dataset-arg", "cache_size={files}"]),
}


def parse(argv=None):
    p = common.parser(__doc__.splitlines()[0], "a few small files (smoke test)")
    p.add_argument("--gb", type=float, default=2.0, help="size of the folder (default: 2)")
    p.add_argument("--nodes", type=int, default=250_000, help="nodes per mesh file")
    p.add_argument("--scratch", type=Path, default=common.ROOT / "datasets" / "folder_memory")
    p.add_argument("--keep", action="store_true", help="keep the folder afterwards")
    p.add_argument("--cases", default=",".join(CASES), help=f"a subset of {','.join(CASES)}")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per case")
    args = p.parse_args(argv)
    unknown = [key for key in args.cases.split(",") if key not in CASES]
    if unknown:
        p.error(f"unknown case(s) {unknown}; choose from {', '.join(CASES)}")
    if args.quick:
        args.gb, args.nodes = 0.002, 1000
    return args


def write_mesh(path: Path, nodes: int, seed: int) -> None:
    """A jittered triangulation of the unit square with the fields load, u [N, 2] and p."""
    rng = np.random.default_rng(seed)
    n = max(round(nodes**0.5), 2)
    t = np.linspace(0.0, 1.0, n)
    x, y = np.meshgrid(t, t, indexing="ij")
    points = np.column_stack([x.ravel(), y.ravel(), np.zeros(n * n)])
    inner = (points[:, :2] > 0).all(1) & (points[:, :2] < 1).all(1)
    points[inner, :2] += rng.uniform(-0.25, 0.25, (int(inner.sum()), 2)) / (n - 1)
    node = np.arange(n * n).reshape(n, n)
    a, b, c, d = node[:-1, :-1], node[1:, :-1], node[1:, 1:], node[:-1, 1:]
    triangles = np.concatenate(
        [np.stack([a, b, c], -1).reshape(-1, 3), np.stack([a, c, d], -1).reshape(-1, 3)]
    )
    amplitude, k = rng.uniform(0.5, 2.0), rng.uniform(1.0, 4.0)
    load = amplitude * np.sin(k * points[:, 0]) * np.cos(points[:, 1])
    u = np.column_stack([load * points[:, 1], np.cumsum(load) / len(load)])
    p = load**2 - points[:, 0]
    mesh = meshio.Mesh(points, [("triangle", triangles)], point_data={"load": load, "u": u, "p": p})
    meshio.write(path, mesh, binary=True, compression=None)


def write_folder(folder: Path, gb: float, nodes: int) -> list[Path]:
    """Mesh files in ``folder`` until they hold ``gb`` gigabytes."""
    folder.mkdir(parents=True, exist_ok=True)
    files, total = [], 0
    while total < gb * common.GB or len(files) < 10:
        path = folder / f"case_{len(files):04d}.vtu"
        if not path.is_file():  # a folder kept by --keep is reused: the files are deterministic
            write_mesh(path, nodes, seed=len(files))
        files.append(path)
        total += path.stat().st_size
    common.progress(f"wrote {len(files)} files, {total / common.GB:.2f} GB, in {folder}")
    return files


def _tree_pss(pid: int) -> int:
    """Proportional set size (bytes) of process ``pid`` and all its descendants: resident memory
    with each shared page divided among the processes that share it, so that DataLoader workers
    forked from the main process are not counted twice (0 once it is gone)."""
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        try:
            with open(f"/proc/{current}/smaps_rollup") as rollup:
                total += sum(int(line.split()[1]) * 1024 for line in rollup if line[:4] == "Pss:")
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as children:
                    todo += [int(c) for c in children.read().split()]
        except (OSError, ValueError):
            continue
    return total


def run_train(folder: Path, out: Path, threads: int, timeout: float, *extra: str) -> dict:
    """One epoch of ``meshop train`` on ``folder`` in a fresh process: its peak memory and time."""
    argv = [sys.executable, "-m", "meshop.cli", "train", "--dataset", "folder"]
    argv += ["--data-dir", str(folder), "--model", "mlp", "--epochs", "1", "--batch-size", "1"]
    argv += ["--model-arg", "width=16"]
    argv += ["--dataset-arg", 'inputs=["load"]', "--dataset-arg", 'targets=["u", "p"]']
    argv += ["--threads", str(threads), "--no-figures", "--no-progress", "--out", str(out)]
    path = os.pathsep.join([str(common.ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": str(threads)}
    run = common.run_process([*argv, *extra], env, timeout, _tree_pss)
    record = {"seconds": run["seconds"], "peak_mb": run["peak_mb"]}
    record["tree_peak_mb"] = run["sampled_peak_mb"]
    if run["exit_code"] != 0:
        last = run["output"].strip().splitlines()[-1:]
        record["error"] = f"exit code {run['exit_code']}: {last}"
    return record


def main(argv=None) -> list[dict]:
    args = parse(argv)
    records = []
    try:
        files = write_folder(args.scratch / "meshes", args.gb, args.nodes)
        for key in args.cases.split(","):
            label, extra = CASES[key]
            common.progress(f"case: {label}")
            chosen = [p for p in files if p.name.endswith("0.vtu")] if key == "tenth" else files
            size = sum(p.stat().st_size for p in chosen) / common.GB
            record = {"case": label, "files": len(chosen), "folder_gb": size}
            extra = [option.format(files=len(files)) for option in extra]
            out = args.scratch / "runs" / str(len(records))
            record |= run_train(args.scratch / "meshes", out, args.threads, args.timeout, *extra)
            common.progress(f"  {record}")
            records.append(record)
    finally:
        if not args.keep:
            shutil.rmtree(args.scratch, ignore_errors=True)
    rows = [
        [
            r["case"],
            r["files"],
            f"{r['folder_gb']:.2f} GB",
            common.fmt_mb(r.get("peak_mb")),
            common.fmt_mb(r.get("tree_peak_mb")),
            f"{r['seconds']:.0f} s",
            r.get("error", ""),
        ]
        for r in records
    ]
    headers = "case|files|folder|peak RSS (main)|peak PSS (with workers)|time|notes"
    caption = "One epoch of meshop train --dataset folder --model mlp (width 16, batch 1), "
    tables = {f"{caption}{args.nodes:,}-node meshes": common.markdown_table(headers, rows)}
    common.write_results(
        "folder_memory", "Training memory over a folder of meshes", args, tables, records
    )
    return records


if __name__ == "__main__":
    main()

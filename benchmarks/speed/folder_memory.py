"""Peak memory of `meshop train --dataset folder` over a folder of meshes larger than memory needs.

Writes a folder of ``--gb`` gigabytes of .vtu files (uncompressed binary, as many solvers write
them): jittered ``--nodes``-node triangulations of the unit square, each with a scalar input field
``load`` and the targets ``u`` (2 components) and ``p``. Then it runs one epoch of

    meshop train --dataset folder --data-dir FOLDER --model mlp --model-arg hidden_channels=16 \\
        --epochs 1 --batch-size 1 --dataset-arg 'inputs=["load"]' \\
        --dataset-arg 'targets=["u", "p"]' --threads 1 --no-figures --no-progress

in a fresh process per case and reports its peak resident memory. The model is small and the
batch one file, so that the peak shows what the data costs: a wider model or a larger batch adds
its activations whatever the dataset (with the default MLP, width 128, and batches of four
250,000-node meshes, the process passed 3 GB).

- ``lazy``: :class:`meshop.datasets.MeshFolder` as it is, one file read per sample on access;
- ``lazy, 2 workers``: the same with ``--num-workers 2`` (DataLoader workers read ahead);
- ``lazy, 1/10 of the folder``: every tenth file (``pattern``), to show that the peak does not
  grow with the folder;
- ``in memory``: ``--dataset-arg cache_size=N`` with N the number of files, which keeps every
  sample once read: the memory an in-memory dataset needs.

Two peaks are reported: the main process's resident-set high-water mark (``ru_maxrss`` of the
finished process, exact), and the peak of the proportional set size summed over the process and its
DataLoader workers (``Pss`` of ``/proc/PID/smaps_rollup``, shared pages divided among the processes
that share them; sampled every 0.2 s, so a shorter spike may be missed).

    python -m benchmarks.speed.folder_memory              # 2 GB folder (22 minutes on 2 busy cores)
    python -m benchmarks.speed.folder_memory --quick      # smoke test: a few small files

The folder is written under ``--scratch`` (default ``datasets/folder_memory``, ignored by git) and
deleted at the end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from benchmarks.lib.common import (
    GB,
    MB,
    RESULTS,
    ROOT,
    fmt_mb,
    markdown_table,
    progress,
    write_results,
)

#: the cases: a name and the options added to the command
CASES = {
    "lazy": [],
    "workers": ["--num-workers", "2"],
    "tenth": ["--dataset-arg", 'pattern="case_*0.vtu"'],  # every tenth file
    "in-memory": [],  # cache_size = the number of files, set below
}
LABELS = {
    "lazy": "lazy",
    "workers": "lazy, 2 workers",
    "tenth": "lazy, 1/10 of the folder",
    "in-memory": "in memory (cache of every file)",
}


def parse(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few small files (smoke test)")
    parser.add_argument("--gb", type=float, default=2.0, help="size of the folder (default: 2)")
    parser.add_argument("--nodes", type=int, default=250_000, help="nodes per mesh file")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default: 1)")
    parser.add_argument("--scratch", type=Path, default=ROOT / "datasets" / "folder_memory")
    parser.add_argument("--keep", action="store_true", help="keep the folder afterwards")
    parser.add_argument(
        "--cases", default=",".join(CASES), help=f"comma-separated subset of {','.join(CASES)}"
    )
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per case")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder of the result files")
    args = parser.parse_args(argv)
    unknown = [key for key in args.cases.split(",") if key not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {unknown}; choose from {', '.join(CASES)}")
    if args.quick:
        args.gb, args.nodes = 0.002, 1000
    return args


def write_mesh(path: Path, nodes: int, seed: int) -> None:
    """A jittered triangulation of the unit square with the fields load, u [N, 2] and p."""
    import meshio
    import numpy as np

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
    while total < gb * GB or len(files) < 10:
        path = folder / f"case_{len(files):04d}.vtu"
        if not path.is_file():  # a folder kept by --keep is reused: the files are deterministic
            write_mesh(path, nodes, seed=len(files))
        files.append(path)
        total += path.stat().st_size
    progress(f"wrote {len(files)} files, {total / GB:.2f} GB, in {folder}")
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
                for line in rollup:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1]) * 1024
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
    argv += ["--model-arg", "hidden_channels=16"]
    argv += ["--dataset-arg", 'inputs=["load"]', "--dataset-arg", 'targets=["u", "p"]']
    argv += ["--threads", str(threads), "--no-figures", "--no-progress", "--out", str(out)]
    argv += list(extra)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    env["OMP_NUM_THREADS"] = str(threads)
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    tree_peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            tree_peak[0] = max(tree_peak[0], _tree_pss(proc.pid))
            done.wait(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    output = []
    reader = threading.Thread(target=lambda: output.append(proc.stdout.read()), daemon=True)
    reader.start()
    deadline = start + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() > deadline:
            proc.kill()
            pid, status, usage = os.wait4(proc.pid, 0)
            break
        time.sleep(0.05)
    proc.returncode = os.waitstatus_to_exitcode(status)
    done.set()
    sampler.join()
    reader.join(10)
    seconds = time.perf_counter() - start
    text = output[0].decode(errors="replace") if output else ""
    record = {
        "seconds": seconds,
        "peak_mb": usage.ru_maxrss * 1024 / MB,  # Linux: kilobytes
        "tree_peak_mb": tree_peak[0] / MB,
    }
    if proc.returncode != 0:
        record["error"] = f"exit code {proc.returncode}: {text.strip().splitlines()[-1:]}"
    return record


def main(argv=None) -> list[dict]:
    args = parse(argv)
    folder = args.scratch / "meshes"
    runs = args.scratch / "runs"
    try:
        files = write_folder(folder, args.gb, args.nodes)
        records = []
        for key in args.cases.split(","):
            progress(f"case: {LABELS[key]}")
            extra = CASES[key] or (
                ["--dataset-arg", f"cache_size={len(files)}"] if key == "in-memory" else []
            )
            chosen = [p for p in files if p.name.endswith("0.vtu")] if key == "tenth" else files
            record = {
                "case": LABELS[key],
                "files": len(chosen),
                "folder_gb": sum(p.stat().st_size for p in chosen) / GB,
            }
            record |= run_train(
                folder, runs / str(len(records)), args.threads, args.timeout, *extra
            )
            progress(f"  {record}")
            records.append(record)
    finally:
        if not args.keep:
            shutil.rmtree(args.scratch, ignore_errors=True)
    rows = [
        [
            r["case"],
            r["files"],
            f"{r['folder_gb']:.2f} GB",
            fmt_mb(r.get("peak_mb")),
            fmt_mb(r.get("tree_peak_mb")),
            f"{r['seconds']:.0f} s",
            r.get("error", ""),
        ]
        for r in records
    ]
    headers = [
        "case",
        "files",
        "folder",
        "peak RSS (main)",
        "peak PSS (with workers)",
        "time",
        "notes",
    ]
    caption = (
        f"One epoch of meshop train --dataset folder --model mlp (width 16, batch 1), "
        f"{args.nodes:,}-node meshes"
    )
    write_results(
        "folder_memory",
        "Training memory over a folder of meshes",
        args,
        {caption: markdown_table(headers, rows)},
        records,
    )
    return records


if __name__ == "__main__":
    main()

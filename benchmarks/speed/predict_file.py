"""``meshop predict`` end to end on a large .vtu file: reading it with meshio, predicting in
chunks, writing the result; time and peak memory of the whole command against N, and the
memory :func:`meshop.train.inference.memory_estimate` expected.

The mesh is the unit square cut into ``s x s`` nodes and two triangles per cell (N = s^2 nodes,
about 2N triangles) with one input field ``a``, written by meshio as binary VTU (zlib). Each
model is first trained for one epoch by ``meshop train --dataset folder`` on eight small meshes
of the same fields, at the size ``meshop train`` gives it (PiT and the Galerkin Transformer with
``--latent-points 256``), so that the checkpoint is what a user has. Each prediction is one
``meshop predict --no-progress`` process: "peak" is its resident-set high-water mark
(``wait4``'s ``ru_maxrss``), "above start" that minus the peak of a process that only imports
meshop and loads the checkpoint (what :func:`~meshop.train.inference.memory_estimate` estimates),
"time" the wall time of the command (the interpreter's start included).

    python -m benchmarks.speed.predict_file                 # 1e6 nodes, every model
    python -m benchmarks.speed.predict_file --sizes 1e6,1e7 --models transolver
    python -m benchmarks.speed.predict_file --quick         # smoke test
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import meshio
import numpy as np

from benchmarks.lib.common import (
    MB,
    fmt_count,
    fmt_mb,
    fmt_time,
    markdown_table,
    parse_args,
    progress,
    write_results,
)

MODELS = ("pit", "galerkin", "ono", "transolver", "mlp")
#: the models given a latent mesh (their presets use the input mesh, N x N at scale)
LATENT = {"pit": 256, "galerkin": 256}


def square(side: int) -> meshio.Mesh:
    """The unit square with ``side x side`` nodes, two triangles per cell, and the fields ``a``
    and ``u``."""
    x = np.linspace(0.0, 1.0, side)
    points = np.stack(np.meshgrid(x, x, indexing="ij"), axis=-1).reshape(-1, 2)
    corner = (np.arange(side - 1)[:, None] * side + np.arange(side - 1)[None, :]).ravel()
    lower = np.stack([corner, corner + side, corner + side + 1], axis=1)
    upper = np.stack([corner, corner + side + 1, corner + 1], axis=1)
    a = np.sin(4 * points[:, 0]) * np.cos(3 * points[:, 1])
    return meshio.Mesh(
        points,
        [("triangle", np.concatenate([lower, upper]))],
        point_data={"a": a, "u": a + points[:, 0]},
    )


def meshop(*argv: str) -> tuple[float, float]:
    """Run ``meshop ARGV`` in a new process; its wall time (s) and peak resident set (MB)."""
    return python("-m", "meshop", *argv)


def python(*argv: str) -> tuple[float, float]:
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, *argv], stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"{' '.join(argv)} failed with status {status}")
    return elapsed, usage.ru_maxrss / 1024  # kB on Linux


def train(model: str, folder: Path, run: Path) -> None:
    argv = ["train", "--dataset", "folder", "--data-dir", str(folder), "--model", model]
    argv += ["--dataset-arg", 'inputs=["a"]', "--dataset-arg", 'targets=["u"]', "--epochs", "1"]
    argv += ["--batch-size", "4", "--out", str(run), "--no-progress", "--no-figures"]
    if model in LATENT:
        argv += ["--latent-points", str(LATENT[model])]
    meshop(*argv)


def main(argv=None) -> None:
    args = parse_args_with_sizes(argv)
    from meshop.train import load_model
    from meshop.train.inference import memory_estimate

    sizes = [int(float(s)) for s in args.sizes.split(",")] if not args.quick else [20_000]
    models = args.models.split(",") if not args.quick else ["transolver"]
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        folder = tmp / "train"
        folder.mkdir()
        for i in range(8):
            meshio.write(folder / f"case_{i}.vtu", square(12 + i))
        for n in sizes:
            side = round(n**0.5)
            path = tmp / f"square_{side}.vtu"
            meshio.write(path, square(side), compression="zlib")
            for model in models:
                run = tmp / f"run_{model}"
                if not run.exists():
                    progress(f"training {model} for one epoch")
                    train(model, folder, run)
                _, start = python("-c", f"from meshop.train import load_model; load_model('{run}')")
                net, ckpt = load_model(run)
                estimate = memory_estimate(net, ckpt, side * side)
                progress(f"{model}: predicting on {side * side:,} nodes")
                out = tmp / "out.vtu"
                argv = ["predict", "--checkpoint", str(run), "--mesh", str(path)]
                seconds, peak = meshop(*argv, "--out", str(out), "--overwrite", "--no-progress")
                records.append(
                    {
                        "model": model,
                        "nodes": side * side,
                        "file_mb": path.stat().st_size / MB,
                        "time_s": seconds,
                        "peak_mb": peak,
                        "above_start_mb": peak - start,
                        "estimate_mb": estimate.total / MB,
                        "chunk_nodes": estimate.chunk_nodes,
                    }
                )
    rows = [
        [
            r["model"],
            fmt_count(r["nodes"]),
            fmt_mb(r["file_mb"]),
            fmt_time(r["time_s"]),
            fmt_mb(r["peak_mb"]),
            fmt_mb(r["above_start_mb"]),
            fmt_mb(r["estimate_mb"]),
            f"{r['estimate_mb'] / r['above_start_mb']:.2f}",
        ]
        for r in records
    ]
    headers = ["model", "N", "file", "time", "peak", "above start", "estimate", "estimate / above"]
    tables = {
        "CPU, `meshop predict` on a triangle mesh (.vtu, zlib)": markdown_table(headers, rows)
    }
    write_results("predict_file", "`meshop predict` on a large mesh file", args, tables, records)


def parse_args_with_sizes(argv):
    import argparse

    own = argparse.ArgumentParser(add_help=False)
    own.add_argument("--sizes", default="1e6", help="node counts, comma separated (default: 1e6)")
    own.add_argument("--models", default=",".join(MODELS), help="models, comma separated")
    known, rest = own.parse_known_args(argv)
    args = parse_args(__doc__.splitlines()[0], rest)
    args.sizes, args.models = known.sizes, known.models
    return args


if __name__ == "__main__":
    main()

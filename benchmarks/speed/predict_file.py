"""``meshop predict`` end to end on a large .vtu file: time and peak memory of the command against
N, every model (trained for one epoch first), and the memory ``memory_estimate`` expected.

    python -m benchmarks.speed.predict_file                 # 1e6 nodes, every model
    python -m benchmarks.speed.predict_file --sizes 1e6,1e7 --models transolver
    python -m benchmarks.speed.predict_file --quick         # smoke test
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import meshio
import numpy as np

from benchmarks.lib import common
from meshop.train import load_model
from meshop.train.inference import memory_estimate

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
    cells = [("triangle", np.concatenate([lower, upper]))]
    return meshio.Mesh(points, cells, point_data={"a": a, "u": a + points[:, 0]})


def python(*argv: str) -> tuple[float, float]:
    """Run ``python ARGV`` in a new process; its wall time (s) and peak resident set (MB)."""
    run = common.run_process([sys.executable, *argv])
    if run["exit_code"] != 0:
        raise SystemExit(f"{' '.join(argv)} failed with status {run['exit_code']}")
    return run["seconds"], run["peak_mb"]


def train(model: str, folder: Path, run: Path) -> None:
    argv = ["train", "--dataset", "folder", "--data-dir", str(folder), "--model", model]
    argv += ["--dataset-arg", 'inputs=["a"]', "--dataset-arg", 'targets=["u"]', "--epochs", "1"]
    argv += ["--batch-size", "4", "--out", str(run), "--no-progress", "--no-figures"]
    if model in LATENT:
        argv += ["--latent-points", str(LATENT[model])]
    python("-m", "meshop", *argv)


def options(parser) -> None:
    parser.add_argument(
        "--sizes", default="1e6", help="node counts, comma separated (default: 1e6)"
    )
    parser.add_argument("--models", default=",".join(MODELS), help="models, comma separated")


def main(argv=None) -> None:
    args = common.parse_args(__doc__.splitlines()[0], argv, options)
    sizes = [int(float(s)) for s in args.sizes.split(",")] if not args.quick else [20_000]
    models = args.models.split(",") if not args.quick else ["transolver"]
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "train").mkdir()
        for i in range(8):
            meshio.write(tmp / "train" / f"case_{i}.vtu", square(12 + i))
        for n in sizes:
            side = round(n**0.5)
            path = tmp / f"square_{side}.vtu"
            meshio.write(path, square(side), compression="zlib")
            for model in models:
                run = tmp / f"run_{model}"
                if not run.exists():
                    common.progress(f"training {model} for one epoch")
                    train(model, tmp / "train", run)
                _, start = python("-c", f"from meshop.train import load_model; load_model('{run}')")
                net, ckpt = load_model(run)
                estimate = memory_estimate(net, ckpt, side * side)
                common.progress(f"{model}: predicting on {side * side:,} nodes")
                argv = ["predict", "--checkpoint", str(run), "--mesh", str(path)]
                argv += ["--out", str(tmp / "out.vtu"), "--overwrite", "--no-progress"]
                seconds, peak = python("-m", "meshop", *argv)
                record = {
                    "model": model,
                    "nodes": side * side,
                    "file_mb": path.stat().st_size / common.MB,
                }
                record.update(time_s=seconds, peak_mb=peak, above_start_mb=peak - start)
                record.update(
                    estimate_mb=estimate.total / common.MB, chunk_nodes=estimate.chunk_nodes
                )
                records.append(record)
    rows = [
        [
            r["model"],
            common.fmt_count(r["nodes"]),
            common.fmt_mb(r["file_mb"]),
            common.fmt_time(r["time_s"]),
            common.fmt_mb(r["peak_mb"]),
            common.fmt_mb(r["above_start_mb"]),
            common.fmt_mb(r["estimate_mb"]),
            f"{r['estimate_mb'] / r['above_start_mb']:.2f}",
        ]
        for r in records
    ]
    headers = "model|N|file|time|peak|above start|estimate|estimate / above"
    caption = "CPU, `meshop predict` on a triangle mesh (.vtu, zlib)"
    tables = {caption: common.markdown_table(headers, rows)}
    common.write_results(
        "predict_file", "`meshop predict` on a large mesh file", args, tables, records
    )


if __name__ == "__main__":
    main()

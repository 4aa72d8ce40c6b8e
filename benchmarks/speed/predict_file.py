"""``meshop predict`` end to end on a large .vtu file: time and peak memory of the command against
N, every model (trained for one epoch first by ``meshop train`` with the folder defaults), against
the time and peak memory it estimated before predicting, and where the time goes: starting (the
interpreter and the imports of torch, PyG and meshop, before ``meshop.cli.main`` is called), the
command itself (``main``, to the written file): reading (the checkpoint and the mesh), the
estimate's subsets, the model's chunked forward pass, writing.

    python -m benchmarks.speed.predict_file                 # 1e5, 1e6 and 2e6 nodes, every model
    python -m benchmarks.speed.predict_file --sizes 1e6,1e7 --models transolver
    python -m benchmarks.speed.predict_file --also 1e7:pit      # and PiT on 1e7 nodes
    python -m benchmarks.speed.predict_file --quick         # smoke test
"""

from __future__ import annotations

import itertools
import json
import tempfile
from pathlib import Path

import meshio
import numpy as np

from benchmarks.lib import common

MODELS = ("pit", "galerkin", "ono", "transolver", "mlp")
#: PiT's latent mesh (the folder rule would give the training meshes' quarter, 64 nodes)
LATENT = {"pit": 256}
#: ``meshop predict`` in a process that also prints, as its last line, the estimate it made, the
#: seconds of each phase (the model's chunked forward pass after the estimate's) and its peak (JSON)
PREDICT = """
import json, sys, time
import meshop.train.inference as inference
from meshop.cli import main

said, after_estimate, peaks, phases = {}, [0.0], [], {}
reset = inference._reset_peak

def phase(name, function):  # the seconds spent in a function, added to phases[name]
    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            phases[name] = phases.get(name, 0.0) + time.perf_counter() - start
    return timed

def high_water():
    with open("/proc/self/status") as status:
        return next(int(l.split()[1]) * 1024 for l in status if l.startswith("VmHWM"))

def resetting():  # the estimate resets the high-water mark: keep the peak before each reset
    peaks.append(high_water())
    return reset()

def recording(estimate):
    def estimated(*args, **kwargs):
        made = estimate(*args, **kwargs)
        said.update(vars(made))
        phases.pop("forward_s", None)  # the probe's passes are not the prediction's
        after_estimate[0] = time.perf_counter()
        return made
    return estimated

inference._reset_peak = resetting
inference.predict_in_chunks = phase("forward_s", inference.predict_in_chunks)
inference.estimate_prediction = phase("estimate_s", recording(inference.estimate_prediction))
inference.read_inputs = phase("read_s", inference.read_inputs)
inference.write_mesh = phase("write_s", inference.write_mesh)
inference.load_model = phase("load_s", inference.load_model)
began = time.perf_counter()
code = main(sys.argv[1:])
ended = time.perf_counter()
peak = max([*peaks, high_water()])
print(json.dumps({
    **said, **phases, "rest_s": ended - after_estimate[0], "peak_bytes": peak,
    "command_s": ended - began,
}))
sys.exit(code)
"""


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


def train(model: str, folder: Path, run: Path) -> None:
    argv = ["train", "--dataset", "folder", "--data-dir", str(folder), "--model", model]
    argv += ["--dataset-arg", 'inputs=["a"]', "--dataset-arg", 'targets=["u"]', "--epochs", "1"]
    argv += ["--batch-size", "4", "--out", str(run), "--no-progress", "--no-figures"]
    if model in LATENT:
        argv += ["--latent-points", str(LATENT[model])]
    common.run_python("-m", "meshop", *argv)


def options(parser) -> None:
    parser.add_argument(
        "--sizes", default="1e5,1e6,2e6", help="node counts, comma separated (default: 1e5,1e6,2e6)"
    )
    parser.add_argument("--models", default=",".join(MODELS), help="models, comma separated")
    parser.add_argument(
        "--also",
        default="",
        help="a size for some models only, after the others: N:MODEL[+MODEL...] (1e7:pit)",
    )


def main(argv=None) -> None:
    args = common.parse_args(__doc__.splitlines()[0], argv, options)
    sizes = [int(float(s)) for s in args.sizes.split(",")] if not args.quick else [20_000]
    models = args.models.split(",") if not args.quick else ["transolver"]
    cases = [(n, model) for n in sizes for model in models]
    for item in filter(None, args.also.split(",")):
        size, _, chosen = item.partition(":")
        cases += [(int(float(size)), model) for model in chosen.split("+")]
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "train").mkdir()
        for i in range(8):
            meshio.write(tmp / "train" / f"case_{i}.vtu", square(12 + i))
        for n in dict.fromkeys(n for n, _ in cases):
            side = round(n**0.5)
            path = tmp / f"square_{side}.vtu"
            meshio.write(path, square(side), compression="zlib")
            for model in [model for size, model in cases if size == n]:
                run = tmp / f"run_{model}"
                if not run.exists():
                    common.progress(f"training {model} for one epoch")
                    train(model, tmp / "train", run)
                common.progress(f"{model}: predicting on {side * side:,} nodes")
                argv = ["predict", "--checkpoint", str(run), "--mesh", str(path)]
                argv += ["--out", str(tmp / "out.vtu"), "--overwrite", "--no-progress"]
                argv += ["--threads", str(args.threads)]
                done = common.run_python("-c", PREDICT, *argv)
                lines = done["output"].strip().splitlines()
                said = json.loads(lines[-1])
                printed = [
                    line[line.index(word) :]
                    for line in lines
                    for word in ("predicting on", "predicted in")
                    if word in line
                ]
                records.append(
                    {
                        "model": model,
                        "nodes": side * side,
                        "file_mb": path.stat().st_size / common.MB,
                        "time_s": done["seconds"],
                        "command_s": said["command_s"],
                        "load_s": said["load_s"],
                        "read_s": said["read_s"],
                        "probe_s": said["estimate_s"],
                        "write_s": said.get("write_s", 0.0),
                        "forward_s": said["forward_s"],
                        "estimate_s": said["seconds"] + said["write_seconds"],
                        "rest_s": said["rest_s"],
                        "peak_mb": said["peak_bytes"] / common.MB,
                        "estimate_mb": said["memory"] / common.MB,
                        "probe_nodes": said["probe_nodes"],
                        "printed": printed,
                    }
                )
    phases = [
        [
            r["model"],
            common.fmt_count(r["nodes"]),
            common.fmt_mb(r["file_mb"]),
            common.fmt_time(r["time_s"]),
            common.fmt_time(r["time_s"] - r["command_s"]),
            common.fmt_time(r["command_s"]),
            common.fmt_time(r["load_s"] + r["read_s"]),
            common.fmt_time(r["probe_s"]),
            common.fmt_time(r["forward_s"]),
            common.fmt_time(r["write_s"]),
            f"{r['time_s'] / r['forward_s']:.2f}",
            f"{r['command_s'] / r['forward_s']:.2f}",
            f"{(r['command_s'] - r['probe_s']) / r['forward_s']:.2f}",
        ]
        for r in records
    ]
    estimates = [
        [
            r["model"],
            common.fmt_count(r["nodes"]),
            common.fmt_time(r["rest_s"]),
            common.fmt_time(r["estimate_s"]),
            f"{r['estimate_s'] / r['rest_s']:.2f}",
            common.fmt_mb(r["peak_mb"]),
            common.fmt_mb(r["estimate_mb"]),
            f"{r['estimate_mb'] / r['peak_mb']:.2f}",
        ]
        for r in records
    ]
    caption = "CPU, `meshop predict` on a triangle mesh (.vtu, zlib): where the time goes"
    tables = {
        caption: common.markdown_table(
            "model|N|file|time|starting|the command|reading|the estimate|forward|writing|"
            "time / forward|command / forward|command less the estimate / forward",
            phases,
        ),
        "The estimate printed before the prediction, against what followed": (
            common.markdown_table(
                "model|N|after the estimate|estimated|estimated / after|peak|estimated peak|"
                "estimated / peak",
                estimates,
            )
        ),
    }
    shown = max(
        (r for r in records if r["model"] == "pit" and r["nodes"] <= 10**6),
        key=lambda r: r["nodes"],
        default=records[-1] if records else None,
    )
    if shown is not None:
        caption = f"What `meshop predict` printed ({shown['model']}, {shown['nodes']:,} nodes)"
        tables[caption] = "```text\n" + "\n".join(shown["printed"]) + "\n```"
    growth = per_node_growth(records)
    if growth:
        tables["Peak memory per node between the two largest meshes"] = growth
    common.write_results(
        "predict_file", "`meshop predict` on a large mesh file", args, tables, records
    )


def per_node_growth(records: list[dict]) -> str:
    """Each model's peak memory growth per node between its consecutive mesh sizes from 1e6 nodes
    on (bytes), the file included: what a larger mesh costs beyond the fixed part."""
    rows = []
    for model in dict.fromkeys(r["model"] for r in records):
        mine = sorted((r for r in records if r["model"] == model), key=lambda r: r["nodes"])
        mine = [r for r in mine if r["nodes"] >= 10**6] or mine[-2:]
        for small, large in itertools.pairwise(mine):
            grown = (large["peak_mb"] - small["peak_mb"]) * common.MB
            grown /= large["nodes"] - small["nodes"]
            span = f"{common.fmt_count(small['nodes'])} -> {common.fmt_count(large['nodes'])}"
            rows.append([model, span, f"{grown:.0f}"])
    return common.markdown_table("model|nodes|bytes per node", rows) if rows else ""


if __name__ == "__main__":
    main()

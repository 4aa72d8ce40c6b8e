"""``meshop train --split-mesh`` on two processes (``torchrun``) against the same command on one
process: a folder of triangulated unit squares of N nodes each, one mesh a step (batch 1), one
torch thread per process, the models at the CPU preset sizes of ``split_mesh``. Per model: the
time of a training step (the median of every step after the first; start-up, reading the files
and the first step excluded), the time per step of the last epoch with its reading included, the
peak memory per process, the speed-up, and the losses of both runs, step by step, with the
parameters they end with.

    python -m benchmarks.speed.split_mesh_cli                  # PiT and the Transolver, 1e6 nodes
    python -m benchmarks.speed.split_mesh_cli --models pit --n 200000
    python -m benchmarks.speed.split_mesh_cli --quick          # smoke test

Each run is ``meshop train`` itself (``meshop.cli.main`` with the same arguments, under
``torchrun --nproc_per_node 2`` for the split), in a process that reads the clock and the peak
resident memory around every call of ``Trainer.step``; the steps themselves are untouched.
"""

from __future__ import annotations

import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

import meshio
import numpy as np

from benchmarks.lib import common
from benchmarks.lib.workloads import PRESET_LATENT, PRESET_MODELS

#: the models' arguments on the command line: the sizes of :data:`PRESET_MODELS`, which
#: ``benchmarks.speed.split_mesh`` measures (the folder defaults would scale PiT's fields)
MODEL_ARGS = {
    "pit": dict(width=64, heads=2, layers=4, encoder_quantile=0.01, decoder_quantile=0.01),
    "transolver": dict(width=64, layers=4, heads=4, slices=32),
}
#: what each model needs to split: PiT a latent mesh of the whole sample, the same everywhere
LATENT = {"pit": PRESET_LATENT}
#: nodes of a checkpointed chunk (the training default above 131,072 nodes when the table was
#: measured; 16,384 since), set explicitly so that both runs chunk alike whatever memory is free
CHUNK = 2**16


def square(side: int, phase: float) -> meshio.Mesh:
    """The unit square with ``side x side`` nodes, two triangles per cell, an input field ``a``
    and a target ``u``, both smooth and shifted by ``phase``."""
    x = np.linspace(0.0, 1.0, side, dtype=np.float32)
    points = np.stack(np.meshgrid(x, x, [0.0], indexing="ij"), axis=-1).reshape(-1, 3)
    corner = (np.arange(side - 1)[:, None] * side + np.arange(side - 1)[None, :]).ravel()
    lower = np.stack([corner, corner + side, corner + side + 1], axis=1)
    upper = np.stack([corner, corner + side + 1, corner + 1], axis=1)
    cells = [("triangle", np.concatenate([lower, upper]).astype(np.int32))]
    a = np.sin(4 * points[:, 0] + phase) * np.cos(3 * points[:, 1])
    u = a * (1 + points[:, 1]) + 0.5 * np.cos(2 * points[:, 0] - phase)
    return meshio.Mesh(points, cells, point_data={"a": a, "u": u})


def write_folder(folder: Path, n: int, samples: int) -> int:
    """``samples`` squares of about ``n`` nodes in ``folder``; returns their node count."""
    side = round(n**0.5)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(samples):
        meshio.write(folder / f"square_{i}.vtu", square(side, 0.7 * i))
    return side * side


def train_argv(model: str, folder: Path, run: Path, epochs: int, chunk: int) -> list[str]:
    """The arguments of ``meshop train`` for ``model`` on ``folder`` (no test split)."""
    argv = ["train", "--dataset", "folder", "--data-dir", str(folder), "--model", model]
    argv += ["--dataset-arg", 'inputs=["a"]', "--dataset-arg", 'targets=["u"]']
    argv += ["--dataset-arg", "test_fraction=0.0", "--epochs", str(epochs), "--batch-size", "1"]
    argv += ["--train-arg", f"chunk_nodes={chunk}", "--threads", "1"]
    for key, value in MODEL_ARGS[model].items():
        argv += ["--model-arg", f"{key}={value}"]
    if model in LATENT:
        argv += ["--latent-points", str(LATENT[model])]
    return [*argv, "--out", str(run), "--no-progress", "--no-figures"]


def worker(record: Path, argv: list[str]) -> int:
    """``meshop train ARGV`` in this process with every training step timed: the seconds and
    the loss of each call of ``Trainer.step`` and the peak resident memory in it, and the peak of
    the whole process, written to ``record/rank<RANK>.json``."""
    from meshop.cli import main
    from meshop.train.trainer import Trainer

    steps, step, before = [], Trainer.step, [0.0]

    def timed(trainer, batch) -> float:
        before.append(common._rss_mb("VmHWM"))  # the peak so far, which the reset forgets
        common._rss_mb("VmRSS", reset=True)  # the high-water mark from here
        start = time.perf_counter()
        loss = step(trainer, batch)
        seconds = time.perf_counter() - start
        steps.append({"seconds": seconds, "loss": loss, "peak_mb": common._rss_mb("VmHWM")})
        return loss

    Trainer.step = timed
    code = main(argv)
    peak_mb = max(*before, common._rss_mb("VmHWM"))
    rank = os.environ.get("RANK", "0")
    (record / f"rank{rank}.json").write_text(json.dumps({"steps": steps, "peak_mb": peak_mb}))
    return code


def run(model: str, processes: int, folder: Path, work: Path, args) -> dict:
    """One ``meshop train`` run of ``model`` on ``processes`` processes, its steps as the
    processes timed them (each step the slowest process's) and its epochs as the trainer logged
    them."""
    where = work / f"{model}_{processes}"
    record, out = where / "record", where / "run"
    record.mkdir(parents=True)
    argv = train_argv(model, folder, out, args.epochs, args.chunk)
    launch = [sys.executable]
    if processes > 1:
        argv.append("--split-mesh")
        launch += ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}"]
    launch += ["-m", "benchmarks.speed.split_mesh_cli", "--worker", str(record)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = common.run_process([*launch, *argv], env=env, timeout=args.timeout)
    if done["exit_code"] != 0:
        raise SystemExit(f"{model} on {processes} process(es) failed:\n{done['output'][-4000:]}")
    ranks = [json.loads(path.read_text()) for path in sorted(record.glob("rank*.json"))]
    seconds = [max(r["steps"][i]["seconds"] for r in ranks) for i in range(len(ranks[0]["steps"]))]
    epochs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    meshop = ["meshop", *argv]
    if processes > 1:
        meshop = ["torchrun", f"--nproc_per_node={processes}", "-m", "meshop.cli", *argv]
    return {
        "model": model,
        "processes": processes,
        "step_s": statistics.median(seconds[1:]),
        "steps_s": seconds,
        "epoch_step_s": epochs[-1]["epoch_seconds"] / args.samples if len(epochs) > 1 else None,
        "peak_mb": max(r["peak_mb"] for r in ranks),
        "step_peak_mb": max(s["peak_mb"] for r in ranks for s in r["steps"]),
        "losses": [s["loss"] for s in ranks[0]["steps"]],
        "wall_s": done["seconds"],
        "command": shlex.join(meshop).replace(str(out), "RUN").replace(str(folder), "FOLDER"),
        "run": out,
    }


def compare(one: dict, two: dict) -> dict:
    """How far the split run's losses and final parameters are from one process's: the largest
    relative difference of a step's loss and of a parameter (to the largest magnitude of that
    parameter tensor)."""
    import torch

    from meshop.train import checkpoint

    losses = max(abs(b - a) / abs(a) for a, b in zip(one["losses"], two["losses"], strict=True))
    first, second = (checkpoint.load(r["run"])["state_dict"] for r in (one, two))
    params = max(
        float((second[key] - value).abs().max() / value.abs().max().clamp_min(1e-30))
        for key, value in first.items()
        if torch.is_floating_point(value) and value.numel()
    )
    return {"loss_rel_diff": losses, "param_rel_diff": params}


def table(pair: list[dict], n: int) -> str:
    rows = [
        [
            str(r["processes"]),
            common.fmt_count(n),
            common.fmt_time(r["step_s"]),
            common.fmt_time(r["epoch_step_s"]),
            common.fmt_mb(r["peak_mb"]),
            common.fmt_mb(r["step_peak_mb"]),
            f"{pair[0]['step_s'] / r['step_s']:.2f}x",
            ", ".join(f"{loss:.6g}" for loss in r["losses"]),
        ]
        for r in pair
    ]
    headers = (
        "processes|N|training step|step with reading|peak memory per process|peak in a step|"
        "speed-up|loss per step"
    )
    return common.markdown_table(headers, rows)


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "--worker":
        raise SystemExit(worker(Path(argv[1]), argv[2:]))
    quick = "a tiny mesh in small chunks (a smoke test)"
    p = common.parser(__doc__.splitlines()[0], quick, threads=False)
    p.add_argument("--models", default="pit,transolver", help=f"comma-separated: {[*MODEL_ARGS]}")
    p.add_argument("--n", type=float, default=None, help="nodes per mesh (default 1e6; quick 1600)")
    p.add_argument("--samples", type=int, default=2, help="meshes in the folder (steps per epoch)")
    p.add_argument("--epochs", type=int, default=2, help="epochs (the steps after the first count)")
    p.add_argument("--chunk", type=int, help=f"nodes per chunk (default {CHUNK}; quick 512)")
    p.add_argument("--timeout", type=float, default=7200.0, help="seconds allowed to one run")
    args = p.parse_args(argv)
    models = common.chosen_models(p, args.models, MODEL_ARGS)
    if args.samples * args.epochs < 2:
        p.error("--samples times --epochs must be 2 or more: the first step is not timed")
    n = int(args.n) if args.n is not None else 1600 if args.quick else 1_000_000
    args.chunk = args.chunk if args.chunk is not None else 512 if args.quick else CHUNK
    records, tables = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        common.progress(f"writing {args.samples} meshes of {n:,} nodes")
        n = write_folder(work / "meshes", n, args.samples)
        for model in models:
            pair = []
            for processes in (1, 2):
                common.progress(f"{model}: meshop train on {processes} process(es), N={n:,}")
                pair.append(run(model, processes, work / "meshes", work, args))
            pair[1].update(compare(*pair))
            for r in pair:
                r.update(n=n, samples=args.samples, epochs=args.epochs, chunk=args.chunk)
                del r["run"]
            speedup = pair[0]["step_s"] / pair[1]["step_s"]
            caption = (
                f"{PRESET_MODELS[model]}: speed-up {speedup:.2f}x; two processes' losses "
                f"within {pair[1]['loss_rel_diff']:.1e} of one's, parameters after the last "
                f"step within {pair[1]['param_rel_diff']:.1e} (relative)"
            )
            tables[caption] = table(pair, n)
            records += pair
    args.threads = 1  # per process
    title = "One mesh on one and two processes through `meshop train --split-mesh`"
    common.write_results("split_mesh_cli", title, args, tables, records)


if __name__ == "__main__":
    main()

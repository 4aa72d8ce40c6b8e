"""One mesh on one and on two processes: the time of a training step.

One sample of N random nodes (one input field, quadrature weights ``1/N``), a model at its CPU
preset size (:data:`benchmarks.speed.large_meshes.MODELS`: the Transolver by default; PiT and
the Galerkin Transformer with 256 farthest-point latent nodes of the whole mesh, the same on
every process), one training step (forward in chunks of 65,536 nodes with every chunk
checkpointed, a mean-square loss, backward) per call:

- ``1 process``: the whole mesh on one process, ``model.forward_chunked``;
- ``2 processes``: ``torchrun --nproc_per_node 2``, each process with every other node, inside
  :func:`meshop.nn.chunked.split_mesh` (the layers' integrals summed over the processes; PiT and
  the Galerkin Transformer split their cross attention to the latent mesh and run the rest on
  every process), and the parameter gradients summed after the backward pass.

Each process runs one torch thread. The time is the fastest of ``--repeats`` steps after a first
one; the peak memory is each process's resident-set high-water mark. The speed-up is the one
process's time over the two processes'. The results go to ``split_mesh.{md,json}`` for the
Transolver alone, else to ``split_mesh_<models>.{md,json}``.

    python -m benchmarks.speed.split_mesh                      # the Transolver, 1e6 nodes (minutes)
    python -m benchmarks.speed.split_mesh --models transolver,pit --n 200000
    python -m benchmarks.speed.split_mesh --quick              # smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.lib.common import (
    fmt_count,
    fmt_mb,
    fmt_time,
    markdown_table,
    progress,
    write_results,
)
from benchmarks.speed.large_meshes import LATENT, MODELS, build

CHUNK = 2**16
#: the models this benchmark splits, as the large-mesh benchmark builds them
SPLIT_MODELS = {name: MODELS[name] for name in ("transolver", "pit", "galerkin")}
#: the models given a latent mesh
LATENT_MODELS = ("pit", "galerkin")


def worker(model_name: str, n: int, repeats: int, out: Path) -> None:
    """One process of a run: a training step on its part of the mesh, timed."""
    import resource

    import torch
    import torch.distributed as dist

    from meshop.data import farthest_point_sampling, from_points
    from meshop.nn.chunked import split_mesh

    torch.set_num_threads(1)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        dist.init_process_group("gloo")
    torch.manual_seed(0)
    pos = torch.rand(n, 2)
    mine = slice(rank, None, world)
    data = from_points(
        pos[mine], torch.sin(6 * pos[mine, :1]), weight=torch.full((n,), 1.0 / n)[mine]
    )
    if model_name in LATENT_MODELS:  # every process samples the whole mesh alike
        data.latent_pos = pos[farthest_point_sampling(pos, LATENT, seed=0)]
    model = build(model_name).train()

    def step() -> float:
        start = time.perf_counter()
        if world > 1:
            with split_mesh():
                out = model.forward_chunked(data, CHUNK)
        else:
            out = model.forward_chunked(data, CHUNK)
        out.square().sum().backward()
        if world > 1:
            for p in model.parameters():
                if p.grad is not None:
                    dist.all_reduce(p.grad)
        model.zero_grad(set_to_none=True)
        return time.perf_counter() - start

    step()
    seconds = min(step() for _ in range(repeats))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result = {"seconds": seconds, "peak_mb": peak}
    if world > 1:
        gathered = [None] * world
        dist.all_gather_object(gathered, result)
        dist.destroy_process_group()
    else:
        gathered = [result]
    if rank == 0:
        out.write_text(json.dumps(gathered))


def run(model: str, processes: int, n: int, repeats: int) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "result.json"
        task = ["-m", "benchmarks.speed.split_mesh", "--worker", model, str(n), str(repeats)]
        argv = [*task, str(out)]
        if processes > 1:
            argv = ["-m", "torch.distributed.run", "--standalone"]
            argv += [f"--nproc_per_node={processes}", *task, str(out)]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        subprocess.run([sys.executable, *argv], check=True, env=env)
        parts = json.loads(out.read_text())
    return {
        "model": model,
        "processes": processes,
        "n": n,
        "time_s": max(p["seconds"] for p in parts),
        "peak_mb": max(p["peak_mb"] for p in parts),
    }


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "--worker":
        worker(argv[1], int(argv[2]), int(argv[3]), Path(argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small mesh (a smoke test)")
    parser.add_argument(
        "--models",
        default="transolver",
        help=f"comma-separated, of {', '.join(SPLIT_MODELS)} (default: transolver)",
    )
    parser.add_argument("--n", type=float, default=None, help="nodes (default 1e6; 2e4 quick)")
    parser.add_argument("--repeats", type=int, default=3, help="timed steps (the fastest counts)")
    parser.add_argument("--out", type=Path, default=None, help="folder of the result files")
    args = parser.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = sorted(set(models) - set(SPLIT_MODELS))
    if unknown or not models:
        parser.error(f"unknown models {unknown}; choose from {', '.join(SPLIT_MODELS)}")
    n = int(args.n) if args.n is not None else 20_000 if args.quick else 1_000_000
    records, tables = [], {}
    for model in models:
        pair = []
        for processes in (1, 2):
            progress(f"{model}: {processes} process(es), N={n}")
            pair.append(run(model, processes, n, 1 if args.quick else args.repeats))
        speedup = pair[0]["time_s"] / pair[1]["time_s"]
        rows = [
            [
                f"{r['processes']}",
                fmt_count(r["n"]),
                fmt_time(r["time_s"]),
                fmt_mb(r["peak_mb"]),
                f"{pair[0]['time_s'] / r['time_s']:.2f}x",
            ]
            for r in pair
        ]
        headers = ["processes", "N", "training step", "peak memory per process", "speed-up"]
        caption = f"{SPLIT_MODELS[model]}: CPU, one thread per process, speed-up {speedup:.2f}x"
        tables[caption] = markdown_table(headers, rows)
        records += pair
    options = argparse.Namespace(threads=1, quick=args.quick, out=args.out)
    if options.out is None:
        from benchmarks.lib.common import RESULTS

        options.out = RESULTS
    write_results(
        "split_mesh" if models == ["transolver"] else "_".join(["split_mesh", *models]),
        "One mesh on one and two processes: training steps",
        options,
        tables,
        records,
    )


if __name__ == "__main__":
    main()

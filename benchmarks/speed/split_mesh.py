"""One mesh on one and on two processes (``torchrun``, ``split_mesh``): the time and peak memory of
a training step in checkpointed chunks, one torch thread per process; ``split_mesh.{md,json}`` for
the Transolver alone, else ``split_mesh_<models>.{md,json}``.

    python -m benchmarks.speed.split_mesh                      # the Transolver, 1e6 nodes (minutes)
    python -m benchmarks.speed.split_mesh --models transolver,pit --n 200000
    python -m benchmarks.speed.split_mesh --quick              # smoke test
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist

from benchmarks.lib import common
from benchmarks.lib.workloads import PRESET_LATENT, PRESET_MODELS, build_preset
from meshop.data import farthest_point_sampling, from_points
from meshop.nn.splitting import split_mesh

CHUNK = 2**16
#: the models this benchmark splits; PiT and the Galerkin Transformer get a latent mesh of the
#: whole mesh, the same on every process
SPLIT_MODELS = ("transolver", "pit", "galerkin")


def worker(model_name: str, n: int, repeats: int, out: Path) -> None:
    """One process of a run: a training step on its part of the mesh, timed."""
    torch.set_num_threads(1)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        dist.init_process_group("gloo")
    torch.manual_seed(0)
    pos = torch.rand(n, 2)
    mine = slice(rank, None, world)
    weight = torch.full((n,), 1.0 / n)[mine]
    data = from_points(pos[mine], torch.sin(6 * pos[mine, :1]), weight=weight)
    if model_name != "transolver":  # every process samples the whole mesh alike
        data.latent_pos = pos[farthest_point_sampling(pos, PRESET_LATENT, seed=0)]
    model = build_preset(model_name).train()

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
    result = {
        "seconds": seconds,
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    gathered = [result]
    if world > 1:
        gathered = [None] * world
        dist.all_gather_object(gathered, result)
        dist.destroy_process_group()
    if rank == 0:
        out.write_text(json.dumps(gathered))


def run(model: str, processes: int, n: int, repeats: int) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "result.json"
        argv = ["-m", "benchmarks.speed.split_mesh", "--worker", model, str(n), str(repeats)]
        argv.append(str(out))
        if processes > 1:
            launch = ["-m", "torch.distributed.run", "--standalone"]
            argv = [*launch, f"--nproc_per_node={processes}", *argv]
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
    p = common.parser(__doc__.splitlines()[0], "a small mesh (a smoke test)", threads=False)
    p.add_argument("--models", default="transolver", help=f"comma-separated, of {SPLIT_MODELS}")
    p.add_argument("--n", type=float, default=None, help="nodes (default 1e6; 2e4 quick)")
    p.add_argument("--repeats", type=int, default=3, help="timed steps (the fastest counts)")
    args = p.parse_args(argv)
    models = common.chosen_models(p, args.models, SPLIT_MODELS)
    n = int(args.n) if args.n is not None else 20_000 if args.quick else 1_000_000
    records, tables = [], {}
    for model in models:
        pair = []
        for processes in (1, 2):
            common.progress(f"{model}: {processes} process(es), N={n}")
            pair.append(run(model, processes, n, 1 if args.quick else args.repeats))
        rows = [
            [
                f"{r['processes']}",
                common.fmt_count(r["n"]),
                common.fmt_time(r["time_s"]),
                common.fmt_mb(r["peak_mb"]),
                f"{pair[0]['time_s'] / r['time_s']:.2f}x",
            ]
            for r in pair
        ]
        speedup = pair[0]["time_s"] / pair[1]["time_s"]
        caption = f"{PRESET_MODELS[model]}: CPU, one thread per process, speed-up {speedup:.2f}x"
        headers = "processes|N|training step|peak memory per process|speed-up"
        tables[caption] = common.markdown_table(headers, rows)
        records += pair
    args.threads = 1  # per process
    name = "_".join(["split_mesh", *models]) if models != ["transolver"] else "split_mesh"
    title = "One mesh on one and two processes: training steps"
    common.write_results(name, title, args, tables, records)


if __name__ == "__main__":
    main()

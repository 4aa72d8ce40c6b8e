"""One mesh on one and on two processes: the time of a training step of the Transolver.

One sample of N random nodes (one input field, quadrature weights ``1/N``), the Transolver at its
CPU preset size (width 64, 4 layers, 4 heads, 32 slices), one training step (forward in chunks of
65,536 nodes with every chunk checkpointed, a mean-square loss, backward) per call:

- ``1 process``: the whole mesh on one process, ``model.forward_chunked``;
- ``2 processes``: ``torchrun --nproc_per_node 2``, each process with every other node, inside
  :func:`meshop.nn.chunked.split_mesh` (the layers' integrals summed over the processes), and the
  parameter gradients summed after the backward pass.

Each process runs one torch thread. The time is the fastest of ``--repeats`` steps after a first
one; the peak memory is each process's resident-set high-water mark. The speed-up is the one
process's time over the two processes'.

    python -m benchmarks.speed.split_mesh            # 1e6 nodes (minutes)
    python -m benchmarks.speed.split_mesh --quick    # smoke test
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

CHUNK = 2**16


def worker(n: int, repeats: int, out: Path) -> None:
    """One process of a run: a training step on its part of the mesh, timed."""
    import resource

    import torch
    import torch.distributed as dist

    from meshop.data import from_points
    from meshop.models import Transolver
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
    model = Transolver(3, 1, 2, width=64, layers=4, heads=4, slices=32).train()

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


def run(processes: int, n: int, repeats: int) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "result.json"
        argv = ["-m", "benchmarks.speed.split_mesh", "--worker", str(n), str(repeats), str(out)]
        if processes > 1:
            argv = ["-m", "torch.distributed.run", "--standalone"]
            argv += [f"--nproc_per_node={processes}", "-m", "benchmarks.speed.split_mesh"]
            argv += ["--worker", str(n), str(repeats), str(out)]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        subprocess.run([sys.executable, *argv], check=True, env=env)
        parts = json.loads(out.read_text())
    return {
        "processes": processes,
        "n": n,
        "time_s": max(p["seconds"] for p in parts),
        "peak_mb": max(p["peak_mb"] for p in parts),
    }


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "--worker":
        worker(int(argv[1]), int(argv[2]), Path(argv[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small mesh (a smoke test)")
    parser.add_argument("--repeats", type=int, default=3, help="timed steps (the fastest counts)")
    parser.add_argument("--out", type=Path, default=None, help="folder of the result files")
    args = parser.parse_args(argv)
    n = 20_000 if args.quick else 1_000_000
    records = []
    for processes in (1, 2):
        progress(f"{processes} process(es), N={n}")
        records.append(run(processes, n, 1 if args.quick else args.repeats))
    speedup = records[0]["time_s"] / records[1]["time_s"]
    rows = [
        [
            f"{r['processes']}",
            fmt_count(r["n"]),
            fmt_time(r["time_s"]),
            fmt_mb(r["peak_mb"]),
            f"{records[0]['time_s'] / r['time_s']:.2f}x",
        ]
        for r in records
    ]
    headers = ["processes", "N", "training step", "peak memory per process", "speed-up"]
    table = markdown_table(headers, rows)
    options = argparse.Namespace(threads=1, quick=args.quick, out=args.out)
    if options.out is None:
        from benchmarks.lib.common import RESULTS

        options.out = RESULTS
    write_results(
        "split_mesh",
        "One mesh on one and two processes: Transolver training steps",
        options,
        {f"CPU, one thread per process, speed-up {speedup:.2f}x": table},
        records,
    )


if __name__ == "__main__":
    main()

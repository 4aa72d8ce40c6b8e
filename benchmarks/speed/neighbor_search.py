"""Latent-mesh construction (farthest point sampling) and neighbour search against N.

All four run on torch-cluster through :mod:`meshop.data`, on N random points of the unit square:

- ``fps``: :func:`meshop.data.farthest_point_sampling` of a 1024-node latent mesh;
- ``knn``: :func:`meshop.data.knn_index`, the 16 nearest of each of the N nodes;
- ``radius``: :func:`meshop.data.radius_index` with the radius that holds 16 nodes on average;
- ``quantile``: :func:`meshop.data.quantile_index`, PiT's 1% quantile field from each of 1024
  latent nodes to the N nodes (about N / 100 neighbours each, found by kNN).

    python -m benchmarks.speed.neighbor_search            # full table (a few minutes on one core)
    python -m benchmarks.speed.neighbor_search --quick    # smoke test
"""

from __future__ import annotations

import math

from benchmarks.lib.common import (
    devices,
    fmt_count,
    fmt_mb,
    fmt_time,
    markdown_table,
    parse_args,
    progress,
    result_of,
    run_cli_case,
    write_results,
)
from benchmarks.lib.settings import FIELD_K, FIELD_LATENT, FIELD_QUANTILE

OPERATIONS = {
    "fps": f"farthest point sampling of {FIELD_LATENT} nodes",
    "knn": f"{FIELD_K} nearest neighbours of every node",
    "radius": f"radius holding {FIELD_K} nodes on average, every node",
    "quantile": f"{FIELD_QUANTILE:.0%} quantile field of {FIELD_LATENT} targets",
}


def prepare(operation: str, n: int, device: str):
    import torch

    from meshop.data import farthest_point_sampling, knn_index, quantile_index, radius_index

    generator = torch.Generator().manual_seed(0)
    pos = torch.rand(n, 2, generator=generator).to(device)
    targets = torch.rand(FIELD_LATENT, 2, generator=generator).to(device)
    radius = math.sqrt(FIELD_K / (math.pi * n))
    calls = {
        "fps": lambda: farthest_point_sampling(pos, FIELD_LATENT),
        "knn": lambda: knn_index(pos, pos, FIELD_K),
        "radius": lambda: radius_index(pos, pos, radius, max_num_neighbors=8 * FIELD_K),
        "quantile": lambda: quantile_index(pos, targets, FIELD_QUANTILE),
    }
    return calls[operation]


def cases(quick: bool) -> list[tuple[str, int]]:
    sizes = [2000, 5000] if quick else [10**3, 10**4, 10**5, 10**6]
    return [(op, n) for op in OPERATIONS for n in sizes if not (op == "fps" and n <= FIELD_LATENT)]


def main(argv=None) -> None:
    args = parse_args(__doc__.splitlines()[0], argv)
    records = []
    for device in devices(args):
        for operation, n in cases(args.quick):
            progress(f"{device} {operation} N={n}")
            record = dict(device=device, operation=operation, n=n)
            record |= run_cli_case(prepare, dict(operation=operation, n=n), device, args)
            records.append(record)
    tables = {f"{device.upper()}": table(records, device) for device in devices(args)}
    write_results(
        "neighbors",
        "Latent meshes and neighbour search (torch-cluster) against N",
        args,
        tables,
        records,
    )


def table(records: list[dict], device: str) -> str:
    rows, previous = [], {}
    for r in records:
        if r["device"] != device:
            continue
        growth = "-"
        before = previous.get(r["operation"])
        if before is not None and "time_s" in r and "time_s" in before:
            growth = (
                f"{math.log(r['time_s'] / before['time_s']) / math.log(r['n'] / before['n']):.2f}"
            )
        previous[r["operation"]] = r
        rows.append(
            [
                OPERATIONS[r["operation"]],
                fmt_count(r["n"]),
                fmt_time(result_of(r, "time_s")),
                growth,
                fmt_mb(result_of(r, "peak_mb")),
                r.get("error", ""),
            ]
        )
    headers = ["operation", "N", "time", "growth exponent", "peak memory", "notes"]
    return markdown_table(headers, rows)


if __name__ == "__main__":
    main()

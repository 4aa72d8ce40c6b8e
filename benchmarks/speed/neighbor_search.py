"""Latent-mesh construction (farthest point sampling) and neighbour search against N: the
torch-cluster calls of :mod:`meshop.data` on N random points of the unit square.

    python -m benchmarks.speed.neighbor_search            # full table (a few minutes on one core)
    python -m benchmarks.speed.neighbor_search --quick    # smoke test
"""

from __future__ import annotations

import math

import torch

from benchmarks.lib import common
from benchmarks.lib.settings import FIELD_K, FIELD_LATENT, FIELD_QUANTILE
from meshop.data import farthest_point_sampling, knn_index, quantile_index, radius_index

OPERATIONS = {
    "fps": f"farthest point sampling of {FIELD_LATENT} nodes",
    "knn": f"{FIELD_K} nearest neighbours of every node",
    "radius": f"radius holding {FIELD_K} nodes on average, every node",
    "quantile": f"{FIELD_QUANTILE:.0%} quantile field of {FIELD_LATENT} targets",
}

HEADERS = "operation|N|time|growth exponent|peak memory|notes"


def prepare(operation: str, n: int, device: str):
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
    args = common.parse_args(__doc__.splitlines()[0], argv)
    records = []
    for device in common.devices(args):
        for operation, n in cases(args.quick):
            common.progress(f"{device} {operation} N={n}")
            record = dict(device=device, operation=operation, n=n)
            record |= common.run_cli_case(prepare, dict(operation=operation, n=n), device, args)
            records.append(record)
    tables = {
        device.upper(): common.scaling_table(records, device, "operation", OPERATIONS, HEADERS)
        for device in common.devices(args)
    }
    title = "Latent meshes and neighbour search (torch-cluster) against N"
    common.write_results("neighbors", title, args, tables, records)


if __name__ == "__main__":
    main()

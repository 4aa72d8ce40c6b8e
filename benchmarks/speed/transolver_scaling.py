"""Transolver's physics-attention (the paper's size) and model (its CPU preset) against the number
of nodes N, up to a million: forward passes in evaluation mode of one sample.

    python -m benchmarks.speed.transolver_scaling            # full table (minutes on one core)
    python -m benchmarks.speed.transolver_scaling --quick    # smoke test
"""

from __future__ import annotations

import torch

from benchmarks.lib import common
from benchmarks.lib.workloads import unit_square
from meshop.models import Transolver
from meshop.nn import PhysicsAttention

#: the paper's physics-attention (width 128, 8 heads, 64 slices)
LAYER = dict(channels=128, heads=8, slices=64)
#: the model as ``meshop train`` builds it on the CPU datasets (meshop.train.presets)
MODEL = dict(width=64, layers=4, heads=4, slices=32)
CASES = {
    "layer": "PhysicsAttention(128, heads=8, slices=64)",
    "model": "Transolver(width=64, layers=4, heads=4, slices=32)",
}

HEADERS = "module|N|time|time growth exponent|peak memory|memory growth exponent|notes"


def prepare(case: str, n: int, device: str):
    """Forward of the layer or the model on one sample of ``n`` random nodes."""
    torch.manual_seed(0)
    if case == "layer":
        module = PhysicsAttention(**LAYER).to(device).eval()
        x = torch.randn(n, LAYER["channels"], device=device)
        return torch.no_grad()(lambda: module(x, None))
    module = Transolver(3, 1, 2, **MODEL).to(device).eval()
    data = unit_square(n, device)
    return torch.no_grad()(lambda: module(data))


def sizes(quick: bool) -> list[int]:
    return [1000, 4000] if quick else [1000, 10_000, 100_000, 1_000_000]


def main(argv=None) -> None:
    args = common.parse_args(__doc__.splitlines()[0], argv)
    records = []
    for device in common.devices(args):
        for case in CASES:
            for n in sizes(args.quick):
                common.progress(f"{device} {case} N={n}")
                record = dict(device=device, case=case, n=n)
                record |= common.run_cli_case(prepare, dict(case=case, n=n), device, args)
                records.append(record)
    tables = {
        f"{device.upper()}, forward, one sample": common.scaling_table(
            records, device, "case", CASES, HEADERS
        )
        for device in common.devices(args)
    }
    title = "Transolver: time and memory against the number of nodes"
    common.write_results("transolver", title, args, tables, records)


if __name__ == "__main__":
    main()

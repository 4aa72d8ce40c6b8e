"""Transolver's physics-attention and model against the number of nodes N, up to a million.

Forward passes (evaluation mode, no gradients) of one sample of N nodes in the unit square:

- the layer at the paper's size: ``PhysicsAttention(128, heads=8, slices=64)``;
- the whole model at the size ``meshop train`` uses on the CPU datasets:
  ``Transolver(width=64, layers=4, heads=4, slices=32)`` on one input field and 2D coordinates.

Slicing and deslicing cost O(N H M D) time and hold O(N H M) slice weights; the attention among
the M slice tokens does not grow with N. The growth exponent between consecutive sizes shows it:
1 is linear. Peak memory is deterministic; times are measured on a shared machine (the fastest
call; see ``lib/common.py``).

    python -m benchmarks.speed.transolver_scaling            # full table (minutes on one core)
    python -m benchmarks.speed.transolver_scaling --quick    # smoke test
"""

from __future__ import annotations

from benchmarks.lib.common import (
    devices,
    fmt_count,
    fmt_mb,
    fmt_time,
    growth_exponent,
    markdown_table,
    parse_args,
    progress,
    result_of,
    run_cli_case,
    write_results,
)

#: the paper's physics-attention (width 128, 8 heads, 64 slices)
LAYER = dict(channels=128, heads=8, slices=64)
#: the model as ``meshop train`` builds it on the CPU datasets (meshop.train.presets)
MODEL = dict(width=64, layers=4, heads=4, slices=32)
#: the fields that name a case: its growth is measured against the same case's smaller N
CASE_KEYS = ("device", "case")
CASES = {
    "layer": "PhysicsAttention(128, heads=8, slices=64)",
    "model": "Transolver(width=64, layers=4, heads=4, slices=32)",
}


def prepare(case: str, n: int, device: str):
    """Forward of the layer or the model on one sample of ``n`` random nodes."""
    import torch

    from meshop.data import from_points
    from meshop.models import Transolver
    from meshop.nn import PhysicsAttention

    torch.manual_seed(0)
    if case == "layer":
        module = PhysicsAttention(**LAYER).to(device).eval()
        x = torch.randn(n, LAYER["channels"], device=device)

        def forward():
            return module(x, None)

    else:
        module = Transolver(3, 1, 2, **MODEL).to(device).eval()
        pos = torch.rand(n, 2, device=device)
        data = from_points(pos, torch.sin(6 * pos[:, :1]), weight=torch.full((n,), 1.0 / n))

        def forward():
            return module(data)

    def step():
        with torch.no_grad():
            forward()

    return step


def sizes(quick: bool) -> list[int]:
    return [1000, 4000] if quick else [1000, 10_000, 100_000, 1_000_000]


def main(argv=None) -> None:
    args = parse_args(__doc__.splitlines()[0], argv)
    records = []
    for device in devices(args):
        for case in CASES:
            for n in sizes(args.quick):
                progress(f"{device} {case} N={n}")
                record = dict(device=device, case=case, n=n)
                record |= run_cli_case(prepare, dict(case=case, n=n), device, args)
                records.append(record)
    tables = {
        f"{device.upper()}, forward, one sample": table(records, device) for device in devices(args)
    }
    write_results(
        "transolver",
        "Transolver: time and memory against the number of nodes",
        args,
        tables,
        records,
    )


def table(records: list[dict], device: str) -> str:
    rows = [
        [
            CASES[r["case"]],
            fmt_count(r["n"]),
            fmt_time(result_of(r, "time_s")),
            growth_exponent(records, r, "time_s", CASE_KEYS),
            fmt_mb(result_of(r, "peak_mb")),
            growth_exponent(records, r, "peak_mb", CASE_KEYS),
            r.get("error", ""),
        ]
        for r in records
        if r["device"] == device
    ]
    headers = [
        "module",
        "N",
        "time",
        "time growth exponent",
        "peak memory",
        "memory growth exponent",
        "notes",
    ]
    return markdown_table(headers, rows)


if __name__ == "__main__":
    main()

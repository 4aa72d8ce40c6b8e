"""Galerkin, linear, Fourier and softmax attention against the number of nodes n (the Galerkin
paper's Table 1 on CPU): one layer in the paper's Burgers setting, forward + backward.

    python -m benchmarks.speed.attention_cost            # full table (a minute or two on one core)
    python -m benchmarks.speed.attention_cost --quick    # smoke test
"""

from __future__ import annotations

import torch

from benchmarks.lib import common
from meshop import nn as mnn

CHANNELS, HEADS, BATCH = 96, 1, 4  # Galerkin Transformer, Burgers (Table 5)
NAMES = {
    "galerkin": "GalerkinAttention",
    "linear": "LinearAttention",
    "fourier": "FourierAttention",
    "softmax": "SoftmaxAttention",
}
#: n x n matrices (per B * n^2 entries) held at the peak by the quadratic attention
DEFAULT_K = 4.0
#: quadratic attentions at larger n are left out of the full run (time only)
MAX_QUADRATIC_N = 8192


def prepare(attention: str, n: int, device: str):
    """Forward + backward of one attention layer on a batch of ``BATCH`` 1D samples of n nodes."""
    torch.manual_seed(0)
    layer = getattr(mnn, NAMES[attention])(CHANNELS, pos_dim=1, heads=HEADS).to(device)
    x = torch.randn(BATCH * n, CHANNELS, device=device, requires_grad=True)
    pos = torch.linspace(0, 1, n, device=device).repeat(BATCH)[:, None]
    batch = torch.arange(BATCH, device=device).repeat_interleave(n)

    def step():
        layer.zero_grad(set_to_none=True)
        x.grad = None
        layer(x, pos, batch).square().mean().backward()

    return step


def sizes(quick: bool) -> list[int]:
    return [256, 512, 1024] if quick else [512, 2048, 8192, 32768]


def main(argv=None) -> None:
    args = common.parse_args(__doc__.splitlines()[0], argv)
    records = []
    for device in common.devices(args):
        for n in sizes(args.quick):
            for attention in NAMES:
                record = dict(device=device, attention=attention, n=n, elements=BATCH * n * n)
                quadratic, key = attention == "softmax", ("device", "attention")
                if quadratic and common.skip_dense(records, record, key, DEFAULT_K, args, "B*n^2"):
                    pass  # too much memory: the record says why
                elif quadratic and n > MAX_QUADRATIC_N:
                    record["skipped"] = f"skipped: O(n^2) time above n = {MAX_QUADRATIC_N}"
                else:
                    common.progress(f"{device} {attention} n={n}")
                    record |= common.run_cli_case(
                        prepare, dict(attention=attention, n=n), device, args
                    )
                records.append(record)
    tables = {
        f"{device.upper()}, forward + backward, batch {BATCH}": table(records, device)
        for device in common.devices(args)
    }
    title = f"Attention cost against n ({CHANNELS} channels, {HEADS} head, batch {BATCH})"
    common.write_results("linear_attention", title, args, tables, records)


def table(records: list[dict], device: str) -> str:
    mine = [r for r in records if r["device"] == device]
    galerkin = {r["n"]: r.get("time_s") for r in mine if r["attention"] == "galerkin"}
    rows = []
    for r in mine:
        growth = common.growth_exponent(records, r, same=("device", "attention"))
        row = [NAMES[r["attention"]], r["n"], common.fmt_time(r.get("time_s")), growth]
        row.append(common.fmt_ratio(r.get("time_s"), galerkin[r["n"]]))
        rows.append([*row, common.fmt_mb(r.get("peak_mb")), common.notes_of(r)])
    headers = "attention|n|time|growth exponent|vs Galerkin|peak memory|notes"
    return common.markdown_table(headers, rows)


if __name__ == "__main__":
    main()

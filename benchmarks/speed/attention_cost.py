"""Galerkin, linear, Fourier and softmax attention against the number of nodes n, the shape of the
Galerkin Transformer paper's Table 1 on CPU.

One attention layer of meshop (the Burgers setting of the paper: 96 channels, one head, the
coordinate appended, batch 4), forward + backward of a loss, at growing n: Galerkin, linear and
Fourier attention form a d x d matrix first (linear in n; Fourier's (Q K^T) V of eq. (5) is
computed as Q (K^T V), the same numbers up to rounding), softmax attention works with n x n
scores (quadratic in n, through fused scaled-dot-product attention).

    python -m benchmarks.speed.attention_cost            # full table (a minute or two on one core)
    python -m benchmarks.speed.attention_cost --quick    # smoke test
"""

from __future__ import annotations

from benchmarks.lib.common import (
    dense_estimate,
    devices,
    fmt_mb,
    fmt_time,
    growth_exponent,
    markdown_table,
    parse_args,
    progress,
    result_of,
    run_cli_case,
    skip_note,
    write_results,
)

CHANNELS, HEADS, BATCH = 96, 1, 4  # Galerkin Transformer, Burgers (Table 5)
ATTENTIONS = ("galerkin", "linear", "fourier", "softmax")
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
    import torch

    from meshop import nn as mnn

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
    args = parse_args(__doc__.splitlines()[0], argv)
    records = []
    for device in devices(args):
        for n in sizes(args.quick):
            for attention in ATTENTIONS:
                record = dict(device=device, attention=attention, n=n, elements=BATCH * n * n)
                quadratic = attention == "softmax"
                gb, k = dense_estimate(
                    records,
                    {"device": device, "attention": attention},
                    record["elements"],
                    DEFAULT_K,
                )
                if quadratic and device == "cpu" and gb > args.max_gb:
                    record["skipped"] = skip_note(gb, k, args.max_gb).replace(
                        "N_dst*N_src", "B*n^2"
                    )
                elif quadratic and n > MAX_QUADRATIC_N:
                    record["skipped"] = f"skipped: O(n^2) time above n = {MAX_QUADRATIC_N}"
                else:
                    progress(f"{device} {attention} n={n}")
                    record |= run_cli_case(prepare, dict(attention=attention, n=n), device, args)
                records.append(record)
    tables = {
        f"{device.upper()}, forward + backward, batch {BATCH}": table(records, device)
        for device in devices(args)
    }
    write_results(
        "linear_attention",
        f"Attention cost against n ({CHANNELS} channels, {HEADS} head, batch {BATCH})",
        args,
        tables,
        records,
    )


def table(records: list[dict], device: str) -> str:
    rows = []
    for r in records:
        if r["device"] != device:
            continue
        galerkin = next(
            s
            for s in records
            if s["device"] == device and s["attention"] == "galerkin" and s["n"] == r["n"]
        )
        ratio = (
            f"{r['time_s'] / galerkin['time_s']:.1f}x"
            if "time_s" in r and "time_s" in galerkin
            else "-"
        )
        rows.append(
            [
                NAMES[r["attention"]],
                r["n"],
                fmt_time(result_of(r, "time_s")),
                growth_exponent(records, r, same=("device", "attention")),
                ratio,
                fmt_mb(result_of(r, "peak_mb")),
                r.get("skipped") or r.get("error", ""),
            ]
        )
    headers = ["attention", "n", "time", "growth exponent", "vs Galerkin", "peak memory", "notes"]
    return markdown_table(headers, rows)


if __name__ == "__main__":
    main()

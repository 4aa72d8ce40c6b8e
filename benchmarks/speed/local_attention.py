"""Local position-attention: meshop (torch-cluster neighbour lists) against a dense mask.

meshop's :class:`~meshop.nn.LocalPositionAttention` finds each target's receptive field with
torch-cluster (kNN, or the quantile field of PiT eq. (10) reproduced exactly from kNN) and runs
the softmax over those edges only. The dense form, written here as the PiT authors' code does it,
builds the full distance matrix, a ``torch.quantile`` (or k-th smallest) threshold per row, a masked
softmax and an einsum. Both run the same layer (same weights); the script first checks that they
agree.

Two receptive fields:

- ``quantile``: PiT's encoder, from N input nodes onto a latent mesh of 1024 nodes with a 1%
  quantile (about N / 100 neighbours per latent node: edges grow linearly with N);
- ``knn``: local self-attention over the N nodes with the 8 nearest neighbours (8 N edges).

    python -m benchmarks.speed.local_attention            # full table (a few minutes on one core)
    python -m benchmarks.speed.local_attention --quick    # smoke test
"""

from __future__ import annotations

from benchmarks.lib.common import (
    comparison_table,
    dense_estimate,
    devices,
    parse_args,
    progress,
    run_cli_case,
    skip_note,
    write_results,
)
from benchmarks.lib.settings import LAYER_HEADS, LAYER_WIDTH, LOCAL_K, LOCAL_LATENT, LOCAL_QUANTILE

#: dense matrices held at the peak per N_dst * N_src entries, before any dense case measured it
DEFAULT_K = {False: 6.0, True: 10.0}


def dense_local_attention(v, pos_src, pos_dst, lam, quantile=None, k=None):
    """The papers' code: full squared-distance matrix, a per-row threshold (``torch.quantile``
    of the row, or its k-th smallest entry), masked softmax over the sources, einsum.

    Args:
        v: [N_src, H, C] values (source features times W^V).
        pos_src, pos_dst: [N_src, D], [N_dst, D] coordinates.
        lam: [H] positive bandwidths.
        quantile, k: the receptive field (one of them).

    Returns:
        [N_dst, H * C]
    """
    import torch

    dist = (pos_dst[:, None, :] - pos_src[None, :, :]).square().sum(-1)  # [N_dst, N_src]
    if quantile is not None:
        radius = torch.quantile(dist, quantile, dim=1, keepdim=True)
    else:
        radius = dist.topk(k, dim=1, largest=False).values[:, -1:]
    logits = (-lam[:, None, None] * dist).masked_fill(dist > radius, float("-inf"))
    attn = torch.softmax(logits, dim=-1)  # [H, N_dst, N_src]
    return torch.einsum("hij,jhc->ihc", attn, v).reshape(len(pos_dst), -1)


def build(field: str, n: int, device: str = "cpu", backward: bool = False, seed: int = 0):
    """The layer, source features and positions, and the target positions of ``field``."""
    import torch

    from meshop.nn import LocalPositionAttention

    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    receptive = {"quantile": LOCAL_QUANTILE} if field == "quantile" else {"k": LOCAL_K}
    layer = LocalPositionAttention(LAYER_WIDTH, LAYER_WIDTH, heads=LAYER_HEADS, **receptive).to(
        device
    )
    x = torch.randn(n, LAYER_WIDTH, generator=generator).to(device).requires_grad_(backward)
    pos_src = torch.rand(n, 2, generator=generator).to(device)
    pos_dst = (
        torch.rand(LOCAL_LATENT, 2, generator=generator).to(device) if field == "quantile" else None
    )
    return layer, x, pos_src, pos_dst


def forward(impl: str, field: str, layer, x, pos_src, pos_dst):
    if impl == "meshop":
        return layer(x, pos_src, pos_dst=pos_dst)
    v = layer.lin_v(x).view(len(x), layer.heads, layer.head_channels)
    target = pos_src if pos_dst is None else pos_dst
    return dense_local_attention(v, pos_src, target, layer.lam, **layer.field)


def prepare(impl: str, field: str, n: int, backward: bool, device: str):
    """One case: the step is a forward pass (no autograd) or forward + backward of a loss."""
    import torch

    layer, x, pos_src, pos_dst = build(field, n, device, backward)

    def step():
        if backward:
            layer.zero_grad(set_to_none=True)
            x.grad = None
            forward(impl, field, layer, x, pos_src, pos_dst).square().mean().backward()
        else:
            with torch.no_grad():
                forward(impl, field, layer, x, pos_src, pos_dst)

    return step


def check_agreement(n: int) -> float:
    """Largest difference between meshop and the dense form, both receptive fields."""
    import torch

    worst = 0.0
    for field in ("quantile", "knn"):
        layer, x, pos_src, pos_dst = build(field, n)
        with torch.no_grad():
            a = forward("meshop", field, layer, x, pos_src, pos_dst)
            b = forward("dense", field, layer, x, pos_src, pos_dst)
        worst = max(worst, float((a - b).abs().max()))
    if worst > 1e-4:
        raise SystemExit(f"meshop and the dense reference disagree by {worst:.2e}")
    return worst


def cases(quick: bool) -> list[tuple[str, int]]:
    if quick:
        return [("quantile", 1000), ("quantile", 3000), ("knn", 1000), ("knn", 3000)]
    return [("quantile", n) for n in (10**3, 10**4, 10**5)] + [
        ("knn", n) for n in (10**3, 10**4, 10**5, 10**6)
    ]


def main(argv=None) -> None:
    args = parse_args(__doc__.splitlines()[0], argv)
    progress(f"meshop and dense agree to {check_agreement(600 if args.quick else 3000):.1e}")
    records = []
    for device in devices(args):
        for field, n in cases(args.quick):
            n_dst = LOCAL_LATENT if field == "quantile" else n
            for backward in (False, True):
                for impl in ("meshop", "dense"):
                    record = dict(
                        device=device,
                        field=field,
                        n_src=n,
                        n_dst=n_dst,
                        backward=backward,
                        impl=impl,
                        elements=n * n_dst,
                    )
                    key = {k: record[k] for k in ("device", "impl", "backward")}
                    gb, k = dense_estimate(records, key, n * n_dst, DEFAULT_K[backward])
                    if impl == "dense" and device == "cpu" and gb > args.max_gb:
                        record["skipped"] = skip_note(gb, k, args.max_gb)
                        record["estimated_peak_mb"] = gb * 1024
                    else:
                        progress(f"{device} {field} {impl} N={n} backward={backward}")
                        params = dict(impl=impl, field=field, n=n, backward=backward)
                        record |= run_cli_case(prepare, params, device, args)
                    records.append(record)
    fields = {
        "quantile": f"{LOCAL_QUANTILE:.0%} quantile, N sources onto {LOCAL_LATENT} targets",
        "knn": f"{LOCAL_K} nearest neighbours, N sources onto the same N targets",
    }
    tables = {
        f"{device.upper()}, {fields[field]}, {'forward + backward' if bw else 'forward'}": (
            comparison_table(
                records,
                {"device": device, "field": field, "backward": bw},
                ["n_src", "n_dst"],
                ["N_src", "N_dst"],
            )
        )
        for device in devices(args)
        for field in fields
        for bw in (False, True)
    }
    write_results(
        "local_attention",
        f"Local position-attention (width {LAYER_WIDTH}, {LAYER_HEADS} heads): "
        "meshop vs dense mask",
        args,
        tables,
        records,
    )


if __name__ == "__main__":
    main()

"""Global and cross position-attention: meshop against the dense form of the papers' code.

meshop's :class:`~meshop.nn.PositionAttention` runs the Gaussian kernel softmax as fused
scaled-dot-product attention on augmented coordinates and never builds the N_dst x N_src matrix.
The dense form, written here as the PiT authors' code does it, builds the full distance matrix,
a row softmax per head and an einsum. Both run the same layer (same weights); the script first
checks that they agree.

    python -m benchmarks.speed.global_attention            # full table (a few minutes on one core)
    python -m benchmarks.speed.global_attention --quick    # smoke test
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
from benchmarks.lib.settings import LAYER_HEADS, LAYER_WIDTH

#: meshop cases with more target-source pairs than this are left out of the full run (time only)
MAX_PAIRS = 5 * 10**8
#: dense matrices held at the peak, per N_dst * N_src entries, before any dense case measured it
DEFAULT_K = {False: 5.0, True: 9.0}


def dense_position_attention(v, pos_src, pos_dst, lam):
    """The papers' code: full squared-distance matrix, softmax over the sources, einsum.

    Args:
        v: [N_src, H, C] values (source features times W^V).
        pos_src, pos_dst: [N_src, D], [N_dst, D] coordinates.
        lam: [H] positive bandwidths.

    Returns:
        [N_dst, H * C]
    """
    import torch

    dist = (pos_dst[:, None, :] - pos_src[None, :, :]).square().sum(-1)  # [N_dst, N_src]
    attn = torch.softmax(-lam[:, None, None] * dist, dim=-1)  # [H, N_dst, N_src]
    return torch.einsum("hij,jhc->ihc", attn, v).reshape(len(pos_dst), -1)


def build(n_src: int, n_dst: int | None, device: str = "cpu", backward: bool = False, seed=0):
    """The layer, source features and positions, target positions (None: self-attention)."""
    import torch

    from meshop.nn import PositionAttention

    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    layer = PositionAttention(LAYER_WIDTH, LAYER_WIDTH, heads=LAYER_HEADS).to(device)
    x = torch.randn(n_src, LAYER_WIDTH, generator=generator).to(device).requires_grad_(backward)
    pos_src = torch.rand(n_src, 2, generator=generator).to(device)
    pos_dst = None if n_dst is None else torch.rand(n_dst, 2, generator=generator).to(device)
    return layer, x, pos_src, pos_dst


def forward(impl: str, layer, x, pos_src, pos_dst):
    if impl == "meshop":
        return layer(x, pos_src, pos_dst=pos_dst)
    v = layer.lin_v(x).view(len(x), layer.heads, layer.head_channels)
    return dense_position_attention(v, pos_src, pos_src if pos_dst is None else pos_dst, layer.lam)


def prepare(impl: str, n_src: int, n_dst: int | None, backward: bool, device: str):
    """One case: the step is a forward pass (no autograd) or forward + backward of a loss."""
    import torch

    layer, x, pos_src, pos_dst = build(n_src, n_dst, device, backward)

    def step():
        if backward:
            layer.zero_grad(set_to_none=True)
            x.grad = None
            forward(impl, layer, x, pos_src, pos_dst).square().mean().backward()
        else:
            with torch.no_grad():
                forward(impl, layer, x, pos_src, pos_dst)

    return step


def check_agreement(n_src: int = 2000, n_dst: int = 300) -> float:
    """Largest difference between meshop and the dense form on one cross and one self case."""
    import torch

    worst = 0.0
    for target in (n_dst, None):
        layer, x, pos_src, pos_dst = build(n_src, target)
        with torch.no_grad():
            a = forward("meshop", layer, x, pos_src, pos_dst)
            b = forward("dense", layer, x, pos_src, pos_dst)
        worst = max(worst, float((a - b).abs().max()))
    if worst > 1e-4:
        raise SystemExit(f"meshop and the dense reference disagree by {worst:.2e}")
    return worst


def cases(quick: bool) -> list[tuple[str, int, int]]:
    """(kind, N_src, N_dst): cross attention onto a target mesh, global = self-attention."""
    if quick:
        return [("cross", 1000, 256), ("cross", 3000, 512), ("global", 1024, 1024)]
    cross = [("cross", s, t) for s in (10**3, 10**4, 10**5, 10**6) for t in (256, 1024, 4096)]
    return cross + [("global", n, n) for n in (1024, 4096, 16384)]


def main(argv=None) -> None:
    args = parse_args(__doc__.splitlines()[0], argv)
    diff = check_agreement(500, 100) if args.quick else check_agreement()
    progress(f"meshop and dense agree to {diff:.1e}")
    records = []
    for device in devices(args):
        for kind, n_src, n_dst in cases(args.quick):
            for backward in (False, True):
                for impl in ("meshop", "dense"):
                    record = dict(
                        device=device,
                        kind=kind,
                        n_src=n_src,
                        n_dst=n_dst,
                        backward=backward,
                        impl=impl,
                        elements=n_src * n_dst,
                    )
                    key = {k: record[k] for k in ("device", "impl", "backward")}
                    gb, k = dense_estimate(records, key, n_src * n_dst, DEFAULT_K[backward])
                    if impl == "meshop" and n_src * n_dst > MAX_PAIRS:
                        record["skipped"] = f"skipped: {n_src * n_dst:.1e} pairs (time budget)"
                    elif impl == "dense" and device == "cpu" and gb > args.max_gb:
                        record["skipped"] = skip_note(gb, k, args.max_gb)
                        record["estimated_peak_mb"] = gb * 1024
                    else:
                        progress(f"{device} {kind} {impl} {n_src}->{n_dst} backward={backward}")
                        record |= run_cli_case(
                            prepare,
                            dict(
                                impl=impl,
                                n_src=n_src,
                                n_dst=None if kind == "global" else n_dst,
                                backward=backward,
                            ),
                            device,
                            args,
                        )
                    records.append(record)
    tables = {
        f"{device.upper()}, {'forward + backward' if backward else 'forward'}": comparison_table(
            records,
            {"device": device, "backward": backward},
            ["kind", "n_src", "n_dst"],
            ["kind", "N_src", "N_dst"],
        )
        for device in devices(args)
        for backward in (False, True)
    }
    write_results(
        "position_attention",
        f"Global and cross position-attention (width {LAYER_WIDTH}, {LAYER_HEADS} heads): "
        "meshop vs dense",
        args,
        tables,
        records,
    )


if __name__ == "__main__":
    main()

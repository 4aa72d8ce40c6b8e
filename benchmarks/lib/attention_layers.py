"""The position-attention layers that ``speed/global_attention.py`` and ``speed/local_attention.py``
time against the dense form of the PiT authors' code, with the same weights, and the loop both
run: every case forward and forward + backward, meshop and the dense form, a dense case skipped
where its estimated memory is above ``--max-gb``."""

from __future__ import annotations

import torch

from benchmarks.lib.common import devices, progress, run_cli_case, skip_dense
from benchmarks.lib.settings import LAYER_HEADS, LAYER_WIDTH
from meshop.nn import LocalPositionAttention, PositionAttention


def dense_attention(v, pos_src, pos_dst, lam, quantile=None, k=None):
    """The papers' code, [N_dst, H * C] from the values ``v`` [N_src, H, C], the coordinates and
    the bandwidths ``lam`` [H]: full squared-distance matrix, for a local field (``quantile`` or
    ``k``) a per-row threshold (``torch.quantile``, or the k-th smallest entry) masking the
    softmax over the sources, einsum."""
    dist = (pos_dst[:, None, :] - pos_src[None, :, :]).square().sum(-1)  # [N_dst, N_src]
    logits = -lam[:, None, None] * dist
    if quantile is not None or k is not None:
        if quantile is not None:
            radius = torch.quantile(dist, quantile, dim=1, keepdim=True)
        else:
            radius = dist.topk(k, dim=1, largest=False).values[:, -1:]
        logits = logits.masked_fill(dist > radius, float("-inf"))
    attn = torch.softmax(logits, dim=-1)  # [H, N_dst, N_src]
    return torch.einsum("hij,jhc->ihc", attn, v).reshape(len(pos_dst), -1)


def build(n_src: int, n_dst: int | None, device="cpu", backward=False, seed=0, **field):
    """A layer at PiT's defaults (``field``: a local one's receptive field, else global), source
    features and positions, and target positions (None: self-attention)."""
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    kind = LocalPositionAttention if field else PositionAttention
    layer = kind(LAYER_WIDTH, LAYER_WIDTH, heads=LAYER_HEADS, **field).to(device)
    x = torch.randn(n_src, LAYER_WIDTH, generator=generator).to(device).requires_grad_(backward)
    pos_src = torch.rand(n_src, 2, generator=generator).to(device)
    pos_dst = None if n_dst is None else torch.rand(n_dst, 2, generator=generator).to(device)
    return layer, x, pos_src, pos_dst


def forward(impl: str, layer, x, pos_src, pos_dst):
    if impl == "meshop":
        return layer(x, pos_src, pos_dst=pos_dst)
    v = layer.lin_v(x).view(len(x), layer.heads, layer.head_channels)
    target = pos_src if pos_dst is None else pos_dst
    return dense_attention(v, pos_src, target, layer.lam, **getattr(layer, "field", {}))


def prepare(impl: str, n_src: int, n_dst, backward: bool, device: str, **field):
    """One case: the step is a forward pass (no autograd) or forward + backward of a loss."""
    layer, x, pos_src, pos_dst = build(n_src, n_dst, device, backward, **field)

    def step():
        if not backward:
            with torch.no_grad():
                return forward(impl, layer, x, pos_src, pos_dst)
        layer.zero_grad(set_to_none=True)
        x.grad = None
        forward(impl, layer, x, pos_src, pos_dst).square().mean().backward()

    return step


def agreement(cases) -> float:
    """Largest difference between meshop and the dense form over ``cases``, each the arguments
    of :func:`build`; exits when it is above 1e-4."""
    worst = 0.0
    for n_src, n_dst, field in cases:
        layer, x, pos_src, pos_dst = build(n_src, n_dst, **field)
        with torch.no_grad():
            a = forward("meshop", layer, x, pos_src, pos_dst)
            b = forward("dense", layer, x, pos_src, pos_dst)
        worst = max(worst, float((a - b).abs().max()))
    if worst > 1e-4:
        raise SystemExit(f"meshop and the dense reference disagree by {worst:.2e}")
    return worst


def measure_cases(args, cases, default_k: dict, max_pairs: float = float("inf")) -> list[dict]:
    """Every ``(fields, params)`` of ``cases`` (the record's own fields, with ``n_src`` and
    ``n_dst``; :func:`prepare`'s arguments) on every device, forward and forward + backward,
    meshop and dense; meshop cases of more than ``max_pairs`` target-source pairs are left out."""
    records = []
    for device in devices(args):
        for fields, params in cases:
            for backward in (False, True):
                for impl in ("meshop", "dense"):
                    pairs = fields["n_src"] * fields["n_dst"]
                    record = dict(device=device, **fields, backward=backward, impl=impl)
                    record["elements"] = pairs
                    key = ("device", "impl", "backward")
                    skipped = impl == "dense" and skip_dense(
                        records, record, key, default_k[backward], args, "N_dst*N_src"
                    )
                    if impl == "meshop" and pairs > max_pairs:
                        record["skipped"] = f"skipped: {pairs:.1e} pairs (time budget)"
                    elif not skipped:
                        progress(f"{device} {impl} {fields} backward={backward}")
                        case = dict(params, impl=impl, backward=backward)
                        record |= run_cli_case(prepare, case, device, args)
                    records.append(record)
    return records

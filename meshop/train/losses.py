"""Losses and metrics, computed per sample with batch vectors (samples may have different sizes)."""

from __future__ import annotations

import torch

from meshop._pyg import scatter


def _per_sample_norm(values: torch.Tensor, batch: torch.Tensor | None, p: int, num_samples: int | None):
    if batch is None:
        batch = torch.zeros(values.shape[0], dtype=torch.long, device=values.device)
    size = num_samples if num_samples is not None else int(batch.max()) + 1
    per_node = values.abs().pow(p).reshape(values.shape[0], -1).sum(-1)
    return scatter(per_node, batch, dim=0, dim_size=size, reduce="sum").pow(1.0 / p)


def relative_lp(
    pred: torch.Tensor,
    target: torch.Tensor,
    batch: torch.Tensor | None = None,
    p: int = 2,
    num_samples: int | None = None,
    reduction: str = "mean",
    eps: float = 1e-12,
) -> torch.Tensor:
    """Relative Lp error ``||pred - target||_p / ||target||_p`` of each sample, then reduced.

    Args:
        pred, target: [N, C] values at the nodes of all samples of a batch.
        batch: [N] sample index of each node (None: one sample).
        p: 2 for the relative L2 of the papers, 1 for PiT's Burgers/ShockTube.
        reduction: ``"mean"``, ``"sum"`` or ``"none"`` (one value per sample).
    """
    err = _per_sample_norm(pred - target, batch, p, num_samples)
    ref = _per_sample_norm(target, batch, p, num_samples)
    rel = err / (ref + eps)
    if reduction == "none":
        return rel
    return rel.sum() if reduction == "sum" else rel.mean()


def relative_l2(pred, target, batch=None, num_samples=None, reduction: str = "mean") -> torch.Tensor:
    """Relative L2 error per sample, reduced (see :func:`relative_lp`)."""
    return relative_lp(pred, target, batch, 2, num_samples, reduction)


def relative_l1(pred, target, batch=None, num_samples=None, reduction: str = "mean") -> torch.Tensor:
    """Relative L1 error per sample, reduced (see :func:`relative_lp`)."""
    return relative_lp(pred, target, batch, 1, num_samples, reduction)

r"""Quadrature with the nodes' weights: the reductions every attention layer integrates with.

A domain's quadrature weights :math:`w` [N] (``data.weight``, from :mod:`meshop.data.weights`;
:func:`meshop.data.weights.default_weight` when a domain has none) stand for the papers'
:math:`1/n`. The layers use them in two ways:

- as integrals, normalised to sum to one in every sample (a mean over the sample's domain):
  :func:`normalised_weight`, :func:`normalised_equal_weight` and :func:`equal_weight` scale them,
  :func:`weighted_moment` forms :math:`\sum_j w_j k_j^\top v_j`, :func:`weighted_count` counts
  the nodes that carry weight;
- inside a softmax, as :math:`\log w_j` added to the logits, so that the softmax becomes
  :math:`w_j e^{s_j} / \sum_l w_l e^{s_l}` exactly: :func:`log_weight`, :func:`add_log_weight`
  and :func:`log_weight_mask`.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from meshop._pyg import scatter
from meshop.errors import ConfigError


def normalised_weight(
    weight: Tensor | None, batch: Tensor, num_samples: int, like: Tensor
) -> Tensor:
    """Quadrature weights [N] scaled to sum to one in every sample (uniform when ``weight`` is
    None), in their dtype promoted to at least float32."""
    w = torch.ones(len(batch), device=like.device) if weight is None else weight
    w = w.to(torch.promote_types(w.dtype, torch.float32))
    total = scatter(w, batch, dim=0, dim_size=num_samples, reduce="sum")
    return w / total[batch]


def normalised_equal_weight(weight: Tensor | None, b: int, m: int, like: Tensor) -> Tensor:
    """:func:`normalised_weight` for ``b`` samples of ``m`` nodes each, as ``[b, m]``."""
    if weight is None:
        return torch.full((b, m), 1.0 / m, device=like.device)
    w = weight.to(torch.promote_types(weight.dtype, torch.float32)).view(b, m)
    return w / w.sum(1, keepdim=True)


def equal_weight(weight: Tensor | None, b: int, m: int, like: Tensor) -> Tensor:
    """Quadrature weights of ``b`` samples of ``m`` nodes in the dtype of ``like``, normalised per
    sample: ``[B, m]``, or ``[B, 1]`` when they are equal within every sample."""
    if weight is None:
        return like.new_full((b, 1), 1.0 / m)
    weight = weight.view(b, m).to(like.dtype)
    uniform = torch.equal(weight, weight[:, :1].expand_as(weight))
    weight = weight / weight.sum(1, keepdim=True)  # a mean over each sample's domain
    return weight[:, :1] if uniform else weight


def chunk_weight(weight: Tensor | None, like: Tensor, dtype: torch.dtype | None = None) -> Tensor:
    """The quadrature weights of a chunk of nodes for an integral accumulated over chunks, in
    ``dtype`` (that of ``like`` when None): ones when ``weight`` is None, since every layer
    normalises its integrals per sample and equal weights need not know the sample's size."""
    dtype = like.dtype if dtype is None else dtype
    if weight is None:
        return torch.ones(len(like), dtype=dtype, device=like.device)
    return weight.to(dtype)


def weighted_count(w: Tensor, batch: Tensor, num_samples: int) -> Tensor:
    """Number of nodes with a positive weight in every sample, ``[B]``."""
    return scatter((w > 0).to(w.dtype), batch, dim=0, dim_size=num_samples, reduce="sum")


def weighted_moment(k: Tensor, v: Tensor, weight: Tensor) -> Tensor:
    """``sum_j w_j k_j^T v_j`` per sample and head: [B, heads, e, e] from ``k``, ``v``
    [B, heads, n, e] and ``weight`` [B, n], or [B, 1] for equal weights (then the e x e product
    is scaled instead of the n x e keys)."""
    if weight.shape[-1] == 1:
        return (k.transpose(-2, -1) @ v) * weight[:, None, :, None]
    return (k * weight[:, None, :, None]).transpose(-2, -1) @ v


def log_weight(weight: Tensor | None, like: Tensor) -> Tensor | None:
    """``log w`` of quadrature weights [N] in the dtype of ``like`` (at least float32), a zero
    weight giving a very negative finite value (its node then adds nothing to the softmax, and a
    sample whose weights are all zero falls back to equal weights); ``None`` stays ``None``.

    Raises:
        ConfigError: a weight is negative or not finite.
    """
    if weight is None:
        return None
    dtype = torch.promote_types(like.dtype, torch.float32)
    weight = weight.to(dtype)
    if bool((weight < 0).any()) or not bool(torch.isfinite(weight).all()):
        raise ConfigError(
            "quadrature weights must be finite and >= 0 (the measure of each node's cell); got "
            f"min {float(weight.min())}, max {float(weight.max())}"
        )
    return weight.clamp_min(torch.finfo(dtype).tiny).log()


def add_log_weight(k: Tensor, log_w: Tensor | None) -> Tensor:
    """Keys ``[..., N_src, D + 1]`` with ``log w`` added to the last component: the queries'
    last component is 1, so every logit gains ``log w_k`` and the softmax becomes
    ``w_k e^{s_k} / sum_j w_j e^{s_j}`` (exact)."""
    if log_w is None:
        return k
    return torch.cat([k[..., :-1], k[..., -1:] + log_w.to(k.dtype)[..., None]], dim=-1)


def log_weight_mask(weight: Tensor, mask: Tensor, dtype) -> Tensor:
    """``log w_j`` on real nodes, ``-inf`` on padding: added to scores, a softmax over ``j`` becomes
    the quadrature-weighted normalisation ``w_j e^{s_j} / sum_l w_l e^{s_l}`` ([B, n_max])."""
    return torch.where(mask, weight.clamp_min(torch.finfo(dtype).tiny).log(), -math.inf).to(dtype)


__all__ = [
    "add_log_weight",
    "chunk_weight",
    "equal_weight",
    "log_weight",
    "log_weight_mask",
    "normalised_equal_weight",
    "normalised_weight",
    "weighted_count",
    "weighted_moment",
]

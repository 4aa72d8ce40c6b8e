"""Neighbour search between node sets, per sample, over torch-cluster.

Every function returns an edge index [2, E]: row 0 indexes the target (``pos_dst``) nodes, row 1
the source (``pos_src``) nodes, and only pairs from the same sample (equal batch value) appear.
Edges are grouped by target.
"""

from __future__ import annotations

import math

import torch

from meshop._pyg import to_dense_batch, torch_cluster
from meshop.errors import ConfigError


def _batches(pos_src, pos_dst, batch_src, batch_dst):
    if batch_src is None:
        batch_src = pos_src.new_zeros(len(pos_src), dtype=torch.long)
    if batch_dst is None:
        batch_dst = pos_dst.new_zeros(len(pos_dst), dtype=torch.long)
    for name, batch in (("batch_src", batch_src), ("batch_dst", batch_dst)):
        if len(batch) > 1 and bool((batch[1:] < batch[:-1]).any()):
            raise ConfigError(
                f"{name} must be sorted (each sample's nodes contiguous, as in a PyG batch); "
                "sort the nodes by sample first"
            )
    return batch_src, batch_dst


def squared_distance(pos_src, pos_dst, edge_index) -> torch.Tensor:
    """|pos_dst[i] - pos_src[j]|^2 for each edge (i, j), computed as a dense matrix would be."""
    return (pos_dst[edge_index[0]] - pos_src[edge_index[1]]).pow(2).sum(-1)


def knn_index(pos_src, pos_dst, k: int, batch_src=None, batch_dst=None) -> torch.Tensor:
    """The ``k`` nearest source nodes of every target node (fewer if the sample has fewer)."""
    if k < 1:
        raise ConfigError(f"k must be a positive number of neighbours, got {k}")
    batch_src, batch_dst = _batches(pos_src, pos_dst, batch_src, batch_dst)
    index = torch_cluster.knn(pos_src, pos_dst, k, batch_src, batch_dst)
    return index[:, torch.argsort(index[0], stable=True)]


def radius_index(
    pos_src, pos_dst, r: float, batch_src=None, batch_dst=None, max_num_neighbors: int = 1024
) -> torch.Tensor:
    """Source nodes within distance ``r`` of every target node (at most ``max_num_neighbors``)."""
    if not r > 0:
        raise ConfigError(f"radius must be positive, got {r}")
    batch_src, batch_dst = _batches(pos_src, pos_dst, batch_src, batch_dst)
    index = torch_cluster.radius(
        pos_src, pos_dst, float(r), batch_src, batch_dst, max_num_neighbors=max_num_neighbors
    )
    return index[:, torch.argsort(index[0], stable=True)]


def quantile_rank(
    num_src: torch.Tensor, q: float, dtype: torch.dtype = torch.float32
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank below and interpolation weight of ``torch.quantile(row, q)`` for rows of ``num_src``
    values of the given dtype (computed in that dtype, as ``torch.quantile`` does)."""
    rank = torch.as_tensor(q, dtype=dtype) * (num_src.to(dtype) - 1)
    below = rank.floor().to(torch.long)
    return below, rank - below.to(dtype)


def quantile_index(pos_src, pos_dst, q: float, batch_src=None, batch_dst=None) -> torch.Tensor:
    """Quantile receptive field of PiT eq. (10): for each target ``i`` the sources ``j`` with
    ``|x_i - y_j|^2 <= r_i^2``, where ``r_i^2`` is the ``q``-quantile (linear interpolation, as
    ``torch.quantile``) of the squared distances from ``i`` to every source of its own sample.

    Ties at the threshold are all included, exactly as a dense ``D <= torch.quantile(D, q, dim=1)``
    mask would; that is about ``ceil(q N_src)`` neighbours, found by kNN and never by an
    N_dst x N_src matrix.
    """
    if not 0.0 <= q <= 1.0:
        raise ConfigError(f"quantile must be in [0, 1], got {q}")
    batch_src, batch_dst = _batches(pos_src, pos_dst, batch_src, batch_dst)
    num_batches = int(max(batch_src.max(), batch_dst.max())) + 1
    count = torch.bincount(batch_src, minlength=num_batches)  # sources per sample
    below, frac = quantile_rank(count, q, pos_src.dtype)  # per sample
    k_needed = int((below + 2).clamp(max=count).max())
    margin = 4
    while True:
        k = min(k_needed + margin, int(count.max()))
        index = knn_index(pos_src, pos_dst, k, batch_src, batch_dst)
        dist = squared_distance(pos_src, pos_dst, index)
        # each target's k nearest distances in increasing order, padded with +inf
        order = torch.argsort(dist, stable=True)
        order = order[torch.argsort(index[0][order], stable=True)]
        sorted_d, _ = to_dense_batch(
            dist[order],
            index[0][order],
            fill_value=math.inf,
            max_num_nodes=k,
            batch_size=len(pos_dst),
        )
        b = batch_dst
        lo = sorted_d.gather(1, below[b].clamp(max=k - 1)[:, None])[:, 0]
        hi = sorted_d.gather(1, (below[b] + 1).clamp(max=count[b] - 1).clamp(max=k - 1)[:, None])[
            :, 0
        ]
        threshold = torch.lerp(lo, hi, frac[b])
        complete = (k >= count[b]) | (sorted_d[:, -1] > threshold * (1 + 1e-5) + 1e-30)
        if bool(complete.all()) or k >= int(count.max()):
            keep = dist <= threshold[index[0]]
            return index[:, keep]
        margin *= 4


def neighbor_index(
    pos_src,
    pos_dst,
    batch_src=None,
    batch_dst=None,
    *,
    quantile: float | None = None,
    k: int | None = None,
    radius: float | None = None,
    max_num_neighbors: int = 1024,
) -> torch.Tensor:
    """One entry point for the three receptive fields: give exactly one of quantile, k, radius."""
    given = [
        name for name, v in (("quantile", quantile), ("k", k), ("radius", radius)) if v is not None
    ]
    if len(given) != 1:
        raise ConfigError(
            f"give exactly one of quantile=, k=, radius= for a local receptive field (got {given})"
        )
    if quantile is not None:
        return quantile_index(pos_src, pos_dst, quantile, batch_src, batch_dst)
    if k is not None:
        return knn_index(pos_src, pos_dst, k, batch_src, batch_dst)
    return radius_index(pos_src, pos_dst, radius, batch_src, batch_dst, max_num_neighbors)

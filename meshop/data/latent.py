"""Latent and query meshes: farthest point sampling, coarse grids, user query points."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from meshop._pyg import Data, torch_cluster
from meshop.data.domains import grid_points
from meshop.data.subsample import random_subset
from meshop.errors import ConfigError, MeshError

#: farthest point sampling of a sample with more nodes than this (and than
#: :data:`FPS_OVERSAMPLE` times the nodes asked for) runs on a random subset of that many of its
#: nodes: each step of the sampling scans every candidate, so on a 1e7-node mesh 256 latent nodes
#: took 6.7 s, all of it spent telling apart nodes closer together than the subset's own spacing
#: (on 2**18 candidates still 0.5-1 s of a prediction that reads, samples and predicts in 25 s)
FPS_CANDIDATES = 2**16
FPS_OVERSAMPLE = 64


def farthest_point_sampling(
    pos: torch.Tensor, num_points: int, batch: torch.Tensor | None = None, seed: int | None = 0
) -> torch.Tensor:
    """Indices of ``num_points`` nodes per sample chosen by farthest point sampling (torch-cluster).

    The first node of each sample is drawn from a ``torch.Generator`` seeded with ``seed`` (fresh
    entropy when None), so the result is deterministic when seeded and the global RNG is untouched.
    Samples with fewer nodes keep all of them. Nodes of a sample must be contiguous (as in a batch).
    A sample of more than ``max(FPS_CANDIDATES, FPS_OVERSAMPLE * num_points)`` nodes is sampled
    among that many of its nodes, drawn by the same generator (a large mesh: the chosen nodes
    then lie about as far apart, found in a fraction of the time).
    """
    if num_points < 1:
        raise ConfigError(f"num_points must be positive, got {num_points}")
    if batch is None:
        batch = torch.zeros(len(pos), dtype=torch.long, device=pos.device)
    counts = torch.bincount(batch)
    generator = torch.Generator()
    generator.manual_seed(seed) if seed is not None else generator.seed()
    first = torch.rand(len(counts), generator=generator)
    candidates = _fps_candidates(counts.cpu(), num_points, generator)
    if candidates is not None:
        candidates = candidates.to(pos.device)
        pos, batch = pos[candidates], batch[candidates]
        counts = torch.bincount(batch, minlength=len(counts))
    ptr = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
    start = (first * counts.cpu()).long().to(pos.device)
    # torch-cluster's own random start uses C rand(): start deterministically instead by swapping
    # each sample's chosen first node to the front and asking for a non-random start
    perm = torch.arange(len(pos), device=pos.device)
    perm[ptr[:-1]], perm[ptr[:-1] + start] = ptr[:-1] + start, ptr[:-1]
    # fps keeps ceil(ratio * n) nodes; (m - 0.5) / n makes that exactly m without rounding trouble
    ratio = (counts.clamp(max=num_points).to(torch.float64) - 0.5) / counts.to(torch.float64)
    ratio = ratio.clamp(min=1e-12, max=1.0).to(pos.dtype)
    index = perm[torch_cluster.fps(pos[perm], batch, ratio=ratio, random_start=False)]
    return index if candidates is None else candidates[index]


def _fps_candidates(
    counts: torch.Tensor, num_points: int, generator: torch.Generator
) -> torch.Tensor | None:
    """The nodes farthest point sampling chooses among (in order, on the CPU), or None for all,
    given each sample's node ``counts``: every node of a sample up to the limit of
    :func:`farthest_point_sampling`, a random subset of that many nodes of a larger sample."""
    limit = max(FPS_CANDIDATES, FPS_OVERSAMPLE * num_points)
    if len(counts) == 0 or int(counts.max()) <= limit:
        return None
    parts, lo = [], 0
    for n in counts.tolist():
        if n <= limit:
            parts.append(torch.arange(lo, lo + n))
        else:
            parts.append(lo + random_subset(n, limit, generator).sort().values)
        lo += n
    return torch.cat(parts)


def add_latent_mesh(
    data: Data,
    num_points: int | None = None,
    *,
    grid_shape: Sequence[int] | None = None,
    seed: int | None = 0,
) -> Data:
    """Set ``data.latent_pos``: farthest point sampling of ``num_points`` nodes of ``data.pos``, a
    uniform ``grid_shape`` grid over the bounding box of ``data.pos``, or (neither given) the input
    mesh itself. Returns ``data`` (modified in place; latent weights stored for a former latent
    mesh are dropped)."""
    if num_points is not None and grid_shape is not None:
        raise ConfigError("give num_points (farthest point sampling) or grid_shape, not both")
    if grid_shape is not None:
        if len(grid_shape) != data.pos.shape[1]:
            raise MeshError(
                f"mixed dimensions: latent grid shape {tuple(grid_shape)} for a "
                f"{data.pos.shape[1]}D domain"
            )
        lo, hi = data.pos.min(0).values, data.pos.max(0).values
        data.latent_pos = grid_points(grid_shape, list(zip(lo.tolist(), hi.tolist())))
    elif num_points is not None:
        data.latent_pos = data.pos[farthest_point_sampling(data.pos, num_points, seed=seed)]
    else:
        data.latent_pos = data.pos.clone()
    if "latent_weight" in data:  # the weights of a former latent mesh
        del data.latent_weight
    return data


def set_query_points(data: Data, query_pos, y=None) -> Data:
    """Set ``data.query_pos`` (any points, in the domain or not) and optionally targets there."""
    query_pos = torch.as_tensor(query_pos, dtype=torch.float32)
    if query_pos.ndim == 1:
        query_pos = query_pos[:, None]
    if query_pos.shape[1] != data.pos.shape[1]:
        raise MeshError(
            f"mixed dimensions: query points have {query_pos.shape[1]} coordinates but the domain "
            f"is {data.pos.shape[1]}D"
        )
    if not torch.isfinite(query_pos).all():
        raise MeshError("query points contain NaN or Inf")
    data.query_pos = query_pos
    if y is not None:
        y = torch.as_tensor(y, dtype=torch.float32).reshape(len(query_pos), -1)
        data.y = y
    return data


def coarse_shape(fine_shape: Sequence[int], factor: float) -> tuple[int, ...]:
    """A coarse grid shape ``ceil(n / factor)`` per axis (at least 2 nodes)."""
    return tuple(max(2, math.ceil(n / factor)) for n in fine_shape)

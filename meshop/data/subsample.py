r"""Random subsets of a mesh's nodes with rescaled quadrature weights, for training on samples too
large to take whole in every step.

Every integral of a meshop layer is a quadrature :math:`\sum_i w_i f(x_i)` over the nodes. On a
random subset :math:`S` of :math:`m` of the :math:`n` nodes, drawn uniformly without replacement,
:math:`\frac{n}{m} \sum_{i \in S} w_i f(x_i)` has the full sum as its expectation: the rescaled
weights keep every integral unbiased (the layers normalise their integrals per sample, so the
factor :math:`n/m` only matters to a user's own integrals). A model trained on subsets sees noisier
integrals, as a mini-batch sees a noisier loss; it is evaluated on whole meshes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import torch

from meshop._pyg import Data
from meshop.errors import ConfigError

#: node fields subsampled with the nodes (targets only when they live at the nodes)
NODE_KEYS = ("pos", "x", "weight")


def subset_size(n: int, fraction: float) -> int:
    """``ceil(fraction * n)`` (at least 1) in exact arithmetic on the fraction as written
    (``0.1`` is one tenth): a float product would round ``0.1 * 30`` above 3, and a float32 one
    ``0.5 * (2**25 + 1)`` below its ceiling."""
    return max(1, math.ceil(Fraction(repr(float(fraction))) * n))


def random_subset(n: int, k: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """``k`` distinct indices of ``range(n)`` (all of them when ``k >= n``) drawn uniformly, in a
    random order. A few out of many are drawn as random integers with the repeats dropped: a
    permutation of all ``n`` took 0.2 s of a ten-million-node prediction for each subset."""
    k = min(k, n)
    if k == 0:
        return torch.empty(0, dtype=torch.long)
    if 4 * k > n:
        return torch.randperm(n, generator=generator)[:k]
    # m draws hold n (1 - exp(-m / n)) distinct values on average: k of them, and 5 % more
    m = math.ceil(-n * math.log1p(-k / n) * 1.05) + 16
    drawn = torch.unique(torch.randint(n, (m,), generator=generator))
    while len(drawn) < k:  # rare: more repeats than the margin
        extra = torch.randint(n, (k,), generator=generator)
        drawn = torch.unique(torch.cat([drawn, extra]))
    # a uniform choice of k of the distinct values drawn is a uniform k-subset (by symmetry)
    return drawn[torch.randperm(len(drawn), generator=generator)[:k]]


def subsample_nodes(data: Data, fraction: float, generator: torch.Generator | None = None) -> Data:
    """A copy of ``data`` on a random subset of ``ceil(fraction * n)`` of its nodes (uniform,
    without replacement, in the nodes' order), with ``pos``, ``x``, the weights and the targets at
    the nodes restricted to it and the weights rescaled by ``n / m``. Query points, their targets,
    the latent mesh and per-sample parameters stay; cells are dropped (a subset of nodes has
    none). A sample without weights keeps none: the models' default ``1/m`` is then the rescaled
    uniform weight."""
    if not 0.0 < fraction <= 1.0:
        raise ConfigError(f"the fraction of nodes must be in (0, 1], got {fraction}")
    if getattr(data, "grid_shape", None) is not None:
        raise ConfigError(
            "a uniform grid (grid_shape) keeps its shape: subsample the nodes of meshes only"
        )
    n = data.pos.shape[0]
    m = subset_size(n, fraction)
    if m >= n:
        return data
    keep = torch.randperm(n, generator=generator)[:m].sort().values.to(data.pos.device)
    out = Data()
    for key, value in data.items():
        if key.startswith("cell_index_") or key in ("face", "cells", "num_nodes"):
            continue
        out[key] = value
    for key in NODE_KEYS:
        if getattr(data, key, None) is not None:
            out[key] = data[key][keep]
    if getattr(data, "weight", None) is not None:
        out.weight = out.weight * (n / m)
    if getattr(data, "y", None) is not None and getattr(data, "query_pos", None) is None:
        out.y = data.y[keep]
    return out


class NodeSubsets(Sequence):
    """A view of a dataset whose every access draws a new random subset of each sample's nodes
    (:func:`subsample_nodes`), so that every epoch trains on other nodes. The draws follow
    torch's global generator (seeded runs repeat them)."""

    def __init__(self, dataset: Sequence[Data], fraction: float):
        if not 0.0 < fraction <= 1.0:
            raise ConfigError(f"node_fraction must be in (0, 1], got {fraction}")
        self.dataset, self.fraction = dataset, fraction

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Data:
        return subsample_nodes(self.dataset[index], self.fraction)


__all__ = ["NodeSubsets", "subsample_nodes", "subset_size"]

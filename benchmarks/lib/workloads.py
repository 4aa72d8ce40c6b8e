"""The Elasticity-like workload of the whole-model benchmarks (``speed/whole_models.py``, the PiT
rows of ``speed/training_vs_reference.py`` and ``speed/profile_pit.py``): point clouds of N nodes in
the unit square with 42 per-sample parameters, and the three models at the sizes they share
(:mod:`benchmarks.lib.settings`)."""

from __future__ import annotations

import math

from benchmarks.lib.settings import (
    ELASTICITY_PARAMS,
    PIT_BLOCKS,
    PIT_HEADS,
    PIT_LATENT,
    PIT_QUANTILE,
    PIT_WIDTH,
)


def build_model(name: str, **fields):
    """One of the three models at the shared sizes; ``fields`` override PiT's receptive fields."""
    from meshop.models import ONO, GalerkinTransformer, PiT

    in_channels = 2 + ELASTICITY_PARAMS
    if name == "PiT":
        receptive = fields or dict(encoder_quantile=PIT_QUANTILE, decoder_quantile=PIT_QUANTILE)
        # the paper's unweighted form, which meshop.testing.dense_pit computes
        return PiT(
            in_channels,
            1,
            2,
            width=PIT_WIDTH,
            heads=PIT_HEADS,
            blocks=PIT_BLOCKS,
            weighted=False,
            **receptive,
        )
    if name == "Galerkin Transformer":
        return GalerkinTransformer(
            in_channels,
            1,
            2,
            channels=PIT_WIDTH,
            heads=PIT_HEADS,
            layers=PIT_BLOCKS,
            path="mesh",
            cross_heads=PIT_HEADS,
            quantile=PIT_QUANTILE,
        )
    return ONO(in_channels, 1, 2, width=PIT_WIDTH, layers=PIT_BLOCKS, heads=PIT_HEADS)


def samples(n: int, count: int, latent: int = PIT_LATENT, seed: int = 0):
    """``count`` Elasticity-like samples of ``n`` random nodes each (different meshes), with a
    farthest-point latent mesh of ``latent`` nodes when ``latent < n``."""
    import torch

    from meshop.data import add_latent_mesh, from_points

    generator = torch.Generator().manual_seed(seed)
    out = []
    for i in range(count):
        pos = torch.rand(n, 2, generator=generator)
        params = torch.randn(ELASTICITY_PARAMS, generator=generator)
        y = torch.sin(2 * math.pi * pos[:, 0]) * params[0] + pos[:, 1] * params[1]
        data = from_points(pos, y=y, params=params)
        if latent < n:
            add_latent_mesh(data, latent, seed=seed + i)
        out.append(data)
    return out


def batch_of(data_list):
    from meshop.data import make_loader

    return next(iter(make_loader(data_list, batch_size=len(data_list))))

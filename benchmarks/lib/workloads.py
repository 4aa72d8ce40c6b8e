"""The workloads that several entry points share: Elasticity-like point clouds with the three
models at the sizes of :mod:`benchmarks.lib.settings`, and every model at its CPU preset size on a
sample of the unit square."""

from __future__ import annotations

import math

import torch

from benchmarks.lib.settings import (
    ELASTICITY_PARAMS,
    PIT_BLOCKS,
    PIT_HEADS,
    PIT_LATENT,
    PIT_QUANTILE,
    PIT_WIDTH,
)
from meshop.data import add_latent_mesh, from_points, make_loader
from meshop.models import ONO, GalerkinTransformer, MLPBaseline, PiT, Transolver

#: every model at the size ``meshop train`` gives it on the CPU datasets (meshop.train.presets),
#: as :func:`build_preset` builds it
PRESET_MODELS = {
    "pit": "PiT(width=64, heads=2, layers=4), 1% quantile fields, 256 latent nodes",
    "galerkin": "GalerkinTransformer(width=64, layers=4, heads=4), 256 latent nodes",
    "ono": "ONO(width=64, layers=4, heads=4, k=16)",
    "transolver": "Transolver(width=64, layers=4, heads=4, slices=32)",
    "mlp": "MLPBaseline(width=128, layers=4)",
}
#: the farthest-point latent mesh of PiT and the Galerkin Transformer on large meshes (their
#: presets use the input mesh, N x N at scale)
PRESET_LATENT = 256


def build_preset(name: str):
    """One of :data:`PRESET_MODELS` on one input field and 2D coordinates."""
    if name == "pit":
        return PiT(3, 1, 2, width=64, heads=2, layers=4)
    if name == "galerkin":
        return GalerkinTransformer(3, 1, 2, width=64, layers=4, heads=4, path="mesh")
    if name == "ono":
        return ONO(3, 1, 2, width=64, layers=4, heads=4, k=16)
    if name == "transolver":
        return Transolver(3, 1, 2, width=64, layers=4, heads=4, slices=32)
    return MLPBaseline(3, 1, 2)


def unit_square(n: int, device="cpu"):
    """One sample of ``n`` random nodes in the unit square, one input field, weights ``1/n``."""
    pos = torch.rand(n, 2, device=device)
    return from_points(pos, torch.sin(6 * pos[:, :1]), weight=torch.full((n,), 1.0 / n))


def build_model(name: str, **fields):
    """One of the three models at the shared sizes; ``fields`` override PiT's receptive fields."""
    in_channels = 2 + ELASTICITY_PARAMS
    if name == "PiT":
        receptive = fields or dict(encoder_quantile=PIT_QUANTILE, decoder_quantile=PIT_QUANTILE)
        # the paper's unweighted form, which meshop.testing.dense_pit computes
        sizes = dict(width=PIT_WIDTH, heads=PIT_HEADS, layers=PIT_BLOCKS, weighted=False)
        return PiT(in_channels, 1, 2, **sizes, **receptive)
    if name == "Galerkin Transformer":
        sizes = dict(width=PIT_WIDTH, heads=PIT_HEADS, layers=PIT_BLOCKS, path="mesh")
        return GalerkinTransformer(
            in_channels, 1, 2, **sizes, cross_heads=PIT_HEADS, quantile=PIT_QUANTILE
        )
    return ONO(in_channels, 1, 2, width=PIT_WIDTH, layers=PIT_BLOCKS, heads=PIT_HEADS)


def samples(n: int, count: int, latent: int = PIT_LATENT, seed: int = 0):
    """``count`` Elasticity-like samples of ``n`` random nodes each (different meshes), with a
    farthest-point latent mesh of ``latent`` nodes when ``latent < n``."""
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
    return next(iter(make_loader(data_list, batch_size=len(data_list))))

"""Attention layers (one per file), grid layers and MLPs.

Every attention layer is called the same way (:mod:`meshop.nn.interface`):
``layer(x, pos, batch=None, weight=None, *, pos_dst=None, batch_dst=None, **extra)``, from the
source nodes (with their quadrature weights) onto the target nodes, self-attention when no target
is given.
"""

from meshop.nn.encoder import GalerkinEncoderLayer
from meshop.nn.galerkin_attention import (
    FourierAttention,
    GalerkinAttention,
    HeadAttention,
    HeadLayerNorm,
)
from meshop.nn.grid import CiNNDown, CiNNUp, SpectralConv, SpectralRegressor
from meshop.nn.linear_attention import LinearAttention
from meshop.nn.local_position_attention import LocalPositionAttention
from meshop.nn.mlp import MLP
from meshop.nn.orthogonal_attention import OrthogonalAttention
from meshop.nn.physics_attention import PhysicsAttention
from meshop.nn.position_attention import PositionAttention
from meshop.nn.softmax_attention import SoftmaxAttention

__all__: list[str] = [
    "MLP",
    "CiNNDown",
    "CiNNUp",
    "FourierAttention",
    "GalerkinAttention",
    "GalerkinEncoderLayer",
    "HeadAttention",
    "HeadLayerNorm",
    "LinearAttention",
    "LocalPositionAttention",
    "OrthogonalAttention",
    "PhysicsAttention",
    "PositionAttention",
    "SoftmaxAttention",
    "SpectralConv",
    "SpectralRegressor",
]

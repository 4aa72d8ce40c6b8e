"""Attention layers (one per file), their blocks, grid layers and MLPs.

Every attention layer is called the same way (:mod:`meshop.nn.interface`):
``layer(x, pos, batch=None, weight=None, *, pos_dst=None, batch_dst=None, **extra)``, from the
source nodes (with their quadrature weights) onto the target nodes, self-attention when no target
is given. The sums over the source nodes are quadratures with those weights
(:mod:`meshop.nn.quadrature`); the blocks that the models stack are in :mod:`meshop.nn.blocks`.
"""

from meshop.nn.blocks import (
    FeatureBlock,
    GalerkinEncoderLayer,
    PiTBlock,
    SolutionBlock,
    TransolverBlock,
)
from meshop.nn.cinn import CiNNDown, CiNNUp
from meshop.nn.fourier_attention import FourierAttention
from meshop.nn.galerkin_attention import GalerkinAttention
from meshop.nn.head_attention import HeadAttention, HeadLayerNorm
from meshop.nn.linear_attention import LinearAttention
from meshop.nn.local_position_attention import LocalPositionAttention
from meshop.nn.mlp import MLP
from meshop.nn.orthogonal_attention import OrthogonalAttention
from meshop.nn.physics_attention import PhysicsAttention
from meshop.nn.position_attention import PositionAttention
from meshop.nn.softmax_attention import SoftmaxAttention
from meshop.nn.spectral_conv import SpectralConv
from meshop.nn.spectral_regressor import SpectralRegressor

__all__: list[str] = [
    "MLP",
    "CiNNDown",
    "CiNNUp",
    "FeatureBlock",
    "FourierAttention",
    "GalerkinAttention",
    "GalerkinEncoderLayer",
    "HeadAttention",
    "HeadLayerNorm",
    "LinearAttention",
    "LocalPositionAttention",
    "OrthogonalAttention",
    "PhysicsAttention",
    "PiTBlock",
    "PositionAttention",
    "SoftmaxAttention",
    "SolutionBlock",
    "SpectralConv",
    "SpectralRegressor",
    "TransolverBlock",
]

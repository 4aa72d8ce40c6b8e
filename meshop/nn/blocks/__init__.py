"""The blocks the models stack: attention, a pointwise network and the residual connections
around them, one file per model family."""

from meshop.nn.blocks.galerkin_encoder_layer import GalerkinEncoderLayer
from meshop.nn.blocks.ono_blocks import FeatureBlock, SolutionBlock
from meshop.nn.blocks.pit_block import PiTBlock
from meshop.nn.blocks.transolver_block import TransolverBlock

__all__ = ["FeatureBlock", "GalerkinEncoderLayer", "PiTBlock", "SolutionBlock", "TransolverBlock"]

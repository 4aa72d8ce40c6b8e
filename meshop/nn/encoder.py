"""Deprecated alias of :mod:`meshop.nn.blocks.galerkin_encoder_layer`, kept for imports of its
former contents."""

from meshop.nn.blocks.galerkin_encoder_layer import (
    ATTENTIONS,
    NORMS,
    GalerkinEncoderLayer,
    check_attention,
)

__all__ = ["ATTENTIONS", "NORMS", "GalerkinEncoderLayer", "check_attention"]

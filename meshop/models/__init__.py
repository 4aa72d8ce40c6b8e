"""Neural operators: ``model(batch) -> [total query nodes, out_channels]``."""

from meshop.models.base import Operator
from meshop.models.galerkin_transformer import FourierTransformer, GalerkinTransformer
from meshop.models.mlp_baseline import MLPBaseline
from meshop.models.ono import ONO
from meshop.models.pit import PiT
from meshop.models.transolver import Transolver

__all__: list[str] = [
    "ONO",
    "FourierTransformer",
    "GalerkinTransformer",
    "MLPBaseline",
    "Operator",
    "PiT",
    "Transolver",
]

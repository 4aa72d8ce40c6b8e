"""Neural operators: ``model(batch) -> [total query nodes, out_channels]``."""

from meshop.models.galerkin_transformer import GalerkinTransformer
from meshop.models.mlp_baseline import MLPBaseline
from meshop.models.ono import ONO
from meshop.models.pit import PiT
from meshop.models.transolver import Transolver

__all__: list[str] = ["ONO", "GalerkinTransformer", "MLPBaseline", "PiT", "Transolver"]

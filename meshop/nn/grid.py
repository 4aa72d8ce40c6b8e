"""Deprecated alias of the grid modules, kept for imports of its former contents.

The grid tensor helpers live in :mod:`meshop.data.grid`, the layers in :mod:`meshop.nn.cinn`
(:class:`~meshop.nn.CiNNDown`, :class:`~meshop.nn.CiNNUp`, ``middle_shape``),
:mod:`meshop.nn.spectral_conv` and :mod:`meshop.nn.spectral_regressor`.
"""

from meshop.data.grid import grid_tensor, interpolate_grid, node_tensor, sample_grid
from meshop.nn.cinn import CiNNDown, CiNNUp, middle_shape
from meshop.nn.spectral_conv import SpectralConv
from meshop.nn.spectral_regressor import SpectralRegressor

__all__ = [
    "CiNNDown",
    "CiNNUp",
    "SpectralConv",
    "SpectralRegressor",
    "grid_tensor",
    "interpolate_grid",
    "middle_shape",
    "node_tensor",
    "sample_grid",
]

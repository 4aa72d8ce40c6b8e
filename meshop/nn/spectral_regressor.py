r"""Spectral-convolution decoder of the Galerkin Transformer (Table 5, Appendix B)."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

import torch
from torch import Tensor, nn

from meshop.nn.mlp import ACTIVATIONS, check_activation
from meshop.nn.spectral_conv import SpectralConv


def _pointwise(module: nn.Module, x: Tensor) -> Tensor:
    """A channels-last module (Linear, MLP) on the channels of ``[B, C, *shape]``."""
    return module(x.movedim(1, -1)).movedim(-1, 1)


class SpectralRegressor(nn.Module):
    r"""Spectral-convolution decoder of the Galerkin Transformer (Table 5, Appendix B) on 1D or 2D
    grids: the FNO block without batch norm, with SiLU.

    .. math::
        \mathbf{v}_0 = [\mathbf{y} \,\|\, \mathbf{x}]
        \ (\text{or } P[\mathbf{y} \,\|\, \mathbf{x}] \text{ with ``project``}), \quad
        \mathbf{v}_{l} = \sigma\big(\mathcal{K}_l \mathbf{v}_{l-1} + W_l \mathbf{v}_{l-1}\big),
        \quad \mathbf{u} = Q_2\,\sigma(Q_1 \mathbf{v}_L),

    with the grid coordinates :math:`\mathbf{x}` appended to the features, :math:`L` spectral
    layers :math:`\mathcal{K}_l` (:class:`SpectralConv`) of ``width`` channels, pointwise linear
    maps :math:`W_l, P, Q_1, Q_2`. With ``project`` a pointwise linear map :math:`P` first brings
    :math:`[\mathbf{y} \| \mathbf{x}]` to ``width`` channels (the 2D configuration, where spectral
    weights grow as width squared times modes squared); without, the first spectral layer does.

    Args:
        in_channels (int): feature channels :math:`d` (coordinates not counted).
        out_channels (int): output channels.
        pos_dim (int): grid dimension (1 or 2): coordinates appended.
        width (int): channels of the spectral layers.
        modes (int): Fourier modes kept per axis.
        layers (int): number of spectral layers.
        hidden_channels (int, optional): width of the output MLP (default ``2 * width``).
        project (bool): pointwise projection to ``width`` before the spectral layers.
        activation (str): activation (SiLU in the paper).
        dropout (float): dropout after each spectral layer (training only).

    Shapes:
        - input: features ``[B, in_channels, *shape]``, coordinates ``[B, pos_dim, *shape]``,
          optionally the training ``grid`` (passed to the spectral layers)
        - output: ``[B, out_channels, *shape]``
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        pos_dim: int,
        width: int = 48,
        modes: int = 16,
        layers: int = 2,
        hidden_channels: int | None = None,
        project: bool = False,
        activation: str = "silu",
        dropout: float = 0.0,
    ):
        super().__init__()
        self.in_channels, self.out_channels, self.pos_dim = in_channels, out_channels, pos_dim
        self.width, self.modes, self.project = width, modes, project
        self.hidden_channels = hidden_channels or 2 * width
        self.activation = check_activation(activation)
        first = in_channels + pos_dim
        self.lin_in = nn.Linear(first, width) if project else None
        widths = [width if project else first] + [width] * layers
        self.convs = nn.ModuleList(
            SpectralConv(c_in, c_out, modes, dim=pos_dim) for c_in, c_out in pairwise(widths)
        )
        self.lins = nn.ModuleList(nn.Linear(c_in, c_out) for c_in, c_out in pairwise(widths))
        self.act = ACTIVATIONS[activation]()
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Sequential(
            nn.Linear(width, self.hidden_channels),
            ACTIVATIONS[activation](),
            nn.Linear(self.hidden_channels, out_channels),
        )

    def reset_parameters(self) -> None:
        for module in (self.lin_in, *self.convs, *self.lins, self.head[0], self.head[2]):
            if module is not None:
                module.reset_parameters()

    def forward(self, x: Tensor, pos: Tensor, grid: Sequence[int] | None = None) -> Tensor:
        v = torch.cat([x, pos], dim=1)
        if self.lin_in is not None:
            v = _pointwise(self.lin_in, v)
        for conv, lin in zip(self.convs, self.lins):
            v = self.dropout(self.act(conv(v, grid) + _pointwise(lin, v)))
        return _pointwise(self.head, v)

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, "
            f"pos_dim={self.pos_dim}, width={self.width}, modes={self.modes}, "
            f"layers={len(self.convs)}, project={self.project})"
        )


__all__ = ["SpectralRegressor"]

r"""Interpolation-based CNNs of the Galerkin Transformer on 2D uniform grids (Appendix B):
:class:`CiNNDown` from the fine grid to a coarse one, :class:`CiNNUp` back."""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import pairwise

import torch
from torch import Tensor, nn

from meshop.data.grid import interpolate_grid
from meshop.errors import ConfigError, MeshError
from meshop.nn.mlp import ACTIVATIONS, check_activation


def middle_shape(fine: Sequence[int], coarse: Sequence[int]) -> tuple[int, ...]:
    r"""The intermediate CiNN grid, :math:`n_m = \mathrm{round}(\sqrt{n_f n_c})` per axis."""
    return tuple(round(math.sqrt(f * c)) for f, c in zip(fine, coarse))


def _check_2d(x: Tensor, name: str) -> None:
    if x.ndim != 4:
        raise MeshError(
            f"{name} works on 2D uniform grids ([B, C, H, W]); got a tensor of shape "
            f"{tuple(x.shape)}. For 1D grids use the lift + spectral pipeline, for other meshes "
            "the mesh path (latent meshes and position-attention)."
        )


class _ConvBlock(nn.Sequential):
    """3x3 convolution without bias, then dropout, then the activation (Appendix B)."""

    def __init__(self, in_channels: int, out_channels: int, activation: str, dropout: float):
        super().__init__(
            nn.Conv2d(in_channels, out_channels, 3, padding=1, bias=False),
            nn.Dropout(dropout),
            ACTIVATIONS[activation](),
        )


class CiNNDown(nn.Module):
    r"""Downsampling interpolation-based CNN (Galerkin Transformer Appendix B, Figure 6).

    From a fine :math:`n_f \times n_f` grid to a coarse :math:`n_c \times n_c` one through a middle
    grid :math:`n_m \approx \sqrt{n_f n_c}` (:func:`middle_shape`), with bilinear interpolations
    (``align_corners=True``) instead of pooling:

    .. math::
        \mathbf{u}_0 = \Pi_{f \to m}\,\sigma(\mathrm{Conv}_0\,\mathbf{a}), \quad
        \mathbf{u}_k = \sigma(\mathrm{Conv}_k\,\mathbf{u}_{k-1})\ (k = 1, 2, 3), \quad
        \mathbf{z} = \Pi_{m \to c}\big([\mathbf{u}_1 \| \mathbf{u}_2 \| \mathbf{u}_3]
        + \mathbf{u}_0\big),

    where :math:`\mathrm{Conv}_0` maps the input channels to :math:`d`, the three stacked
    convolutions map :math:`d \to d/3 \to d/3 \to d - 2\lfloor d/3 \rfloor` so that their
    concatenation has :math:`d` channels, and :math:`\mathbf{u}_0` is the skip connection of the
    simplified basic block (no batch norm). Every convolution is 3x3, stride 1, padding 1, no bias,
    followed by dropout and the activation. The coarse-grid coordinates are appended afterwards, by
    the attention layers of the encoder.

    **Other resolutions.** A 3x3 stencil spans two grid spacings, so a convolution learned on one
    grid computes something else on a finer one. Given ``grid``, the fine grid the layer was
    trained on, an input on any other grid is first interpolated onto ``grid`` (bilinear,
    ``align_corners=True``: on a grid nested in the input, exactly its subsample) and the middle
    grid is :math:`n_m(\mathtt{grid}, n_c)`: every convolution then sees the stencils and grids of
    training, and the output depends on the input grid only through the sampling of the field.

    Args:
        in_channels (int): input channels (fields, coordinates and parameters on the fine grid).
        channels (int): output channels :math:`d` (the encoder width).
        activation (str): activation after each convolution.
        dropout (float): dropout after each convolution (training only).
        residual (bool): add the skip connection :math:`\mathbf{u}_0`.

    Shapes:
        - input: ``[B, in_channels, H, W]``, the coarse ``size`` ``(h, w)`` and optionally the
          training ``grid`` ``(H_0, W_0)``
        - output: ``[B, channels, h, w]``
    """

    def __init__(
        self,
        in_channels: int,
        channels: int,
        activation: str = "silu",
        dropout: float = 0.0,
        residual: bool = True,
    ):
        super().__init__()
        if channels < 3:
            raise ConfigError(f"CiNNDown needs channels >= 3 (three stacked convs), got {channels}")
        self.in_channels, self.channels, self.residual = in_channels, channels, residual
        self.activation = check_activation(activation)
        third = channels // 3
        widths = [channels, third, third, channels - 2 * third]
        self.lift = _ConvBlock(in_channels, channels, activation, dropout)
        self.convs = nn.ModuleList(
            _ConvBlock(c_in, c_out, activation, dropout) for c_in, c_out in pairwise(widths)
        )

    def reset_parameters(self) -> None:
        for block in (self.lift, *self.convs):
            block[0].reset_parameters()

    def forward(self, x: Tensor, size: Sequence[int], grid: Sequence[int] | None = None) -> Tensor:
        _check_2d(x, "CiNNDown")
        if grid is not None:
            x = interpolate_grid(x, grid)
        u0 = interpolate_grid(self.lift(x), middle_shape(x.shape[2:], size))
        stack, u = [], u0
        for conv in self.convs:
            u = conv(u)
            stack.append(u)
        z = torch.cat(stack, dim=1)
        return interpolate_grid(z + u0 if self.residual else z, size)

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}({self.in_channels}, {self.channels}, "
            f"activation={self.activation!r}, residual={self.residual})"
        )


class CiNNUp(nn.Module):
    r"""Upsampling interpolation-based CNN (Galerkin Transformer Appendix B, Figure 7).

    .. math::
        \mathbf{u} = \Pi_{c \to m}\,\mathbf{z}, \qquad
        \mathbf{y} = \Pi_{m \to f}\big(\sigma(\mathrm{Conv}\,\mathbf{u}) + \mathbf{u}\big),

    bilinear interpolations (``align_corners=True``) from the coarse grid to the middle grid
    :math:`n_m \approx \sqrt{n_f n_c}` and on to the fine grid, one 3x3 convolution
    :math:`d \to d` (no bias, dropout, activation) in between with its skip connection. The
    fine-grid coordinates are appended afterwards, by the regressor. Given ``grid``, the fine grid
    the layer was trained on, the middle grid is :math:`n_m(\mathtt{grid}, n_c)` whatever the
    output grid, so that the convolution runs on the grid it was trained on; only the last
    interpolation depends on the output grid.

    Args:
        channels (int): channels :math:`d` in and out.
        activation (str): activation after the convolution.
        dropout (float): dropout after the convolution (training only).
        residual (bool): add the skip connection :math:`\mathbf{u}`.

    Shapes:
        - input: ``[B, channels, h, w]``, the fine ``size`` ``(H, W)`` and optionally the
          training ``grid`` ``(H_0, W_0)``
        - output: ``[B, channels, H, W]``
    """

    def __init__(
        self, channels: int, activation: str = "silu", dropout: float = 0.0, residual: bool = True
    ):
        super().__init__()
        self.channels, self.residual = channels, residual
        self.activation = check_activation(activation)
        self.conv = _ConvBlock(channels, channels, activation, dropout)

    def reset_parameters(self) -> None:
        self.conv[0].reset_parameters()

    def forward(self, x: Tensor, size: Sequence[int], grid: Sequence[int] | None = None) -> Tensor:
        _check_2d(x, "CiNNUp")
        u = interpolate_grid(x, middle_shape(size if grid is None else grid, x.shape[2:]))
        y = self.conv(u)
        return interpolate_grid(y + u if self.residual else y, size)

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}({self.channels}, activation={self.activation!r}, "
            f"residual={self.residual})"
        )


__all__ = ["CiNNDown", "CiNNUp", "middle_shape"]

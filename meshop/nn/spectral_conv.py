r"""Fourier-space convolution of the Fourier Neural Operator on uniform grids."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from meshop.data.grid import interpolate_grid
from meshop.errors import ConfigError


class SpectralConv(nn.Module):
    r"""Fourier-space convolution of the Fourier Neural Operator on 1D, 2D or 3D uniform grids.

    .. math::
        (\mathcal{K} u)(x) = \mathcal{F}^{-1}\big(R \cdot \mathcal{F}u\big)(x), \qquad
        (R \cdot \hat u)_{k, o} = \sum_i R_{k, i, o}\, \hat u_{k, i}\ \text{ for the kept modes } k,

    with a real FFT over the grid axes and every other mode set to zero. The kept modes are the
    lowest ``modes`` frequencies of each axis, with both signs on every axis but the last (whose
    negative frequencies the real FFT omits): one corner in 1D, two in 2D (``[:m1, :m2]`` and
    ``[-m1:, :m2]``), four in 3D. A grid too small for ``modes`` keeps the modes it has. The complex
    weights are stored as real pairs, so ``numel`` counts a complex entry as two parameters (the
    convention of Table 5).

    **Other resolutions.** Given ``grid``, the grid the layer was trained on, an input on another
    grid is interpolated onto ``grid`` ((bi)linear, ``align_corners=True``), transformed there,
    and the result interpolated back. The grids include both ends of the box, so the discrete
    transform's period is :math:`n h`, which changes with the grid, and a non-periodic field's
    periodic extension jumps at the border; a coarse training grid also keeps nearly all of its
    modes (12 modes on a 22-node axis, which has 11), so the trained weights act on its whole
    spectrum, aliases and jump included. On a finer grid the same mode indices would be other
    frequencies and the rest of the spectrum would be cut; on ``grid`` the layer stays the one
    that was trained (and weights of modes ``grid`` lacks never act).

    Args:
        in_channels (int): input channels.
        out_channels (int): output channels.
        modes (int or sequence): modes kept per axis; an int is used on every axis.
        dim (int): number of grid axes (1, 2 or 3); taken from ``modes`` when it is a sequence.

    Shapes:
        - input: ``[B, in_channels, *shape]`` and optionally the training ``grid``
        - output: ``[B, out_channels, *shape]``
    """

    def __init__(
        self, in_channels: int, out_channels: int, modes: int | Sequence[int], dim: int = 1
    ):
        super().__init__()
        modes = (int(modes),) * dim if isinstance(modes, int) else tuple(int(m) for m in modes)
        if not 1 <= len(modes) <= 3 or min(modes) < 1:
            raise ConfigError(f"modes must be positive, for 1 to 3 grid axes; got {modes}")
        self.in_channels, self.out_channels, self.modes = in_channels, out_channels, modes
        corners = 2 ** (len(modes) - 1)
        self.weight = nn.Parameter(torch.empty(corners, in_channels, out_channels, *modes, 2))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.weight.uniform_(0.0, 1.0 / (self.in_channels * self.out_channels))

    def forward(self, x: Tensor, grid: Sequence[int] | None = None) -> Tensor:
        shape = tuple(x.shape[2:])
        if grid is not None and tuple(int(n) for n in grid) != shape:
            return interpolate_grid(self(interpolate_grid(x, grid)), shape)
        dim = len(self.modes)
        axes = tuple(range(-dim, 0))
        x_ft = torch.fft.rfftn(x, dim=axes)
        kept = [min(m, n // 2) for m, n in zip(self.modes[:-1], shape[:-1])]
        kept.append(min(self.modes[-1], x_ft.shape[-1]))
        weight = torch.view_as_complex(self.weight)
        out = x_ft.new_zeros(x.shape[0], self.out_channels, *x_ft.shape[2:])
        for corner, negative in enumerate(itertools.product((False, True), repeat=dim - 1)):
            data_idx, weight_idx = [], []
            for axis, k in enumerate(kept):
                m = self.modes[axis]
                neg = axis < dim - 1 and negative[axis]
                data_idx.append(slice(-k, None) if neg else slice(0, k))
                weight_idx.append(slice(m - k, m) if neg else slice(0, k))
            block = x_ft[(..., *data_idx)]
            w = weight[(corner, slice(None), slice(None), *weight_idx)]
            out[(..., *data_idx)] = torch.einsum("bi...,io...->bo...", block, w)
        return torch.fft.irfftn(out, s=shape, dim=axes)

    def __repr__(self) -> str:
        name = self.__class__.__name__
        return f"{name}({self.in_channels}, {self.out_channels}, modes={self.modes})"


__all__ = ["SpectralConv"]

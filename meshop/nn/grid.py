r"""Uniform-grid layers of the Galerkin Transformer: CiNN down/up-sampling (Appendix B) and the
spectral-convolution regressor (Table 5).

Grid tensors are channels-first, ``[B, C, *grid_shape]``, in the node order of
:func:`meshop.data.grid_points` (first axis slowest); :func:`grid_tensor` and :func:`node_tensor`
convert to and from the ``[N, C]`` node features of a batch of equal grids. Domains without
``grid_shape`` are refused with an error that points to the mesh path.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from itertools import pairwise

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from meshop._pyg import Data, to_dense_batch
from meshop.data import grid_shape_of, num_samples
from meshop.errors import ConfigError, MeshError
from meshop.nn.mlp import ACTIVATIONS


def grid_tensor(x: Tensor, data: Data) -> Tensor:
    """Node values ``[N, C]`` of a grid domain (or a batch of equal grids) as ``[B, C, *shape]``.

    Raises:
        MeshError: ``data`` has no ``grid_shape`` (use the mesh path) or mixes grid shapes.
    """
    shape = grid_shape_of(data)
    return x.view(num_samples(data), *shape, x.shape[-1]).movedim(-1, 1)


def node_tensor(x: Tensor) -> Tensor:
    """``[B, C, *shape]`` back to node values ``[B * prod(shape), C]`` (first axis slowest)."""
    return x.movedim(1, -1).reshape(-1, x.shape[1])


def interpolate_grid(x: Tensor, size: Sequence[int]) -> Tensor:
    """(Bi)linear interpolation of ``[B, C, *shape]`` onto a ``size`` grid over the same box.

    ``align_corners=True``: both grids include the box corners, as :func:`meshop.data.grid_points`
    does, so a linear field is reproduced exactly (the CiNN restrictions and prolongations).
    """
    size = tuple(int(s) for s in size)
    if tuple(x.shape[2:]) == size:
        return x
    mode = {1: "linear", 2: "bilinear", 3: "trilinear"}[len(size)]
    return F.interpolate(x, size=size, mode=mode, align_corners=True)


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


def _check_activation(activation: str) -> str:
    if activation not in ACTIVATIONS:
        raise ConfigError(f"unknown activation {activation!r}; choose one of {sorted(ACTIVATIONS)}")
    return activation


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
        self.activation = _check_activation(activation)
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
        self.activation = _check_activation(activation)
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
        self.activation = _check_activation(activation)
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


def sample_grid(
    field: Tensor, pos: Tensor, query_pos: Tensor, query_batch: Tensor | None = None
) -> Tensor:
    """Values of grid fields at any points, by (bi)linear interpolation (1D or 2D grids).

    Args:
        field: ``[B, C, *shape]`` values on each sample's grid.
        pos: ``[B, dim, *shape]`` the grid coordinates (each sample's box is read from them).
        query_pos: ``[Nq, dim]`` points; outside the box the border value is used.
        query_batch: ``[Nq]`` sample of each point (sorted), or None for one sample.

    Returns:
        ``[Nq, C]``
    """
    dim = pos.shape[1]
    flat = pos.flatten(2)
    lo, hi = flat.min(-1).values, flat.max(-1).values  # [B, dim]
    if query_batch is None:
        query_batch = torch.zeros(len(query_pos), dtype=torch.long, device=query_pos.device)
    unit = 2 * (query_pos - lo[query_batch]) / (hi - lo)[query_batch] - 1
    unit, mask = to_dense_batch(unit, query_batch, batch_size=field.shape[0])  # [B, nq, dim]
    if dim == 1:  # as a 1 x L image: x along the grid, y = 0
        field, unit = field[:, :, None, :], torch.cat([unit, torch.zeros_like(unit)], dim=-1)
    else:  # grid_sample reads (x, y) = (last axis, first axis)
        unit = unit.flip(-1)
    out = F.grid_sample(
        field, unit[:, None], mode="bilinear", padding_mode="border", align_corners=True
    )  # [B, C, 1, nq]
    return out[:, :, 0].transpose(1, 2)[mask]


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

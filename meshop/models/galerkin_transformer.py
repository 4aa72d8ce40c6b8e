"""Galerkin and Fourier Transformers (Cao, NeurIPS 2021) on uniform grids and on any mesh."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from meshop._pyg import Data
from meshop.data.batching import (
    grid_shape_of,
    latent_nodes,
    node_batch,
    node_set_weights,
    num_samples,
    query_nodes,
)
from meshop.data.grid import grid_tensor, interpolate_grid, node_tensor, sample_grid
from meshop.data.latent import coarse_shape as divided_shape
from meshop.errors import ConfigError
from meshop.models.base import Operator
from meshop.nn.blocks.galerkin_encoder_layer import NORMS, GalerkinEncoderLayer, check_attention
from meshop.nn.chunking import Walk
from meshop.nn.cinn import CiNNDown, CiNNUp
from meshop.nn.local_position_attention import LocalPositionAttention
from meshop.nn.mlp import ACTIVATIONS, MLP
from meshop.nn.position_attention import PositionAttention
from meshop.nn.spectral_regressor import SpectralRegressor

#: Table 5 sizes, the defaults for 1D (Burgers) and 2D (Darcy) domains
PAPER_SIZES = {
    1: dict(width=96, heads=1, layers=4, spectral_width=48, modes=16, project=False),
    2: dict(width=128, heads=4, layers=6, spectral_width=32, modes=12, project=True),
}
PATHS = ("auto", "grid", "mesh")
DECODERS = ("spectral", "ffn")


class GalerkinTransformer(Operator):
    r"""Galerkin Transformer, or Fourier Transformer with ``attention="fourier"`` (Sec. 4, App. B;
    :class:`FourierTransformer` has it by default).

    A stack of :class:`~meshop.nn.GalerkinEncoderLayer` (eq. (4), or eq. (7) with
    ``norm="regular"``) on a latent set of nodes, with coordinates appended to every attention head
    and the domain's quadrature weights standing for the paper's :math:`1/n`. Around the encoder:

    - **1D uniform grids** (the Burgers pipeline, Fig. 4): pointwise lift ``Linear(in, d)`` on the
      grid, encoder on the grid itself, decoder on the grid;
    - **2D uniform grids** (Darcy, Fig. 5): :class:`~meshop.nn.CiNNDown` from the fine grid to the
      ``coarse_shape`` grid, encoder there, :class:`~meshop.nn.CiNNUp` to the output grid, decoder;
      the output grid is the fine grid for the spectral decoder and the coarse grid for the
      ``"ffn"`` decoder (the inverse problem, whose target lives on the coarse grid);
    - **any other mesh or point cloud** (and 3D): pointwise lift, cross position-attention (PiT)
      from the input nodes to the latent mesh (``latent_pos``; the input mesh when absent), the
      encoder there, cross position-attention to the query points, pointwise MLP decoder on
      ``[features, coordinates]``. Global position-attention by default, local with ``quantile``
      or ``k``.

    **Other grids than the training grid** (zero-shot super-resolution). The grid path is defined
    on the training grid ``grid_shape``, recorded from the first batch the model sees in training
    mode (or given). On any other grid of the same box the fine input is first interpolated onto
    ``grid_shape`` (on a 2x or 4x finer grid that is its subsample), the coarse grid (default every
    third node of ``grid_shape``) and the CiNNs' middle grids stay those of training, and the
    regressor's spectral convolutions transform on ``grid_shape`` (interpolating there and back);
    the last interpolation of the upsampling CiNN and the regressor's pointwise maps run on the new
    grid. Every convolution thus keeps the stencils and Fourier modes it was trained with, whose
    physical size and frequency a finer grid would otherwise change. On 1D grids (Burgers:
    periodic, without the end node, so that the transform's period is the box on every grid) the
    whole path runs on the input grid.

    Decoders: ``"spectral"`` is :class:`~meshop.nn.SpectralRegressor` (grids only; meshes use the
    MLP), ``"ffn"`` the pointwise MLP ``[d + m, d, d, out]``. Grid paths read node features as
    ``[B, C, *grid_shape]`` (C order, first axis slowest), so a batch holds grids of one shape.

    Output: ``[total query nodes, out_channels]`` at :func:`meshop.data.query_nodes`, on every
    path. On grids without ``query_pos`` this is the fine grid in node order; with ``query_pos``
    the decoded grid is sampled there (bilinear). For the inverse problem set ``query_pos`` to the
    coarse grid (``meshop.data.grid_points(coarse_shape, bounds)``, C order) and ``y`` there:
    the prediction is then the decoder's own coarse-grid output.

    Defaults follow Table 5 by dimension (``None`` arguments, resolved in ``config``): 1D
    ``width=96, heads=1, layers=4, spectral_width=48, modes=16``; 2D and above ``width=128,
    heads=4, layers=6, spectral_width=32, modes=12, project=True``. The presets :meth:`burgers`,
    :meth:`darcy` and :meth:`inverse` build the paper's networks (grid path only): 534k, 2.22M
    and 2.39M parameters against Table 5's 523k-530k, 2.22M and 2.38M.

    Args:
        in_channels (int): width of :func:`meshop.data.node_features` (x, pos, params).
        out_channels (int): output fields.
        pos_dim (int): spatial dimension :math:`m`.
        attention (str, optional): ``"galerkin"`` (GT), ``"fourier"`` (FT), ``"softmax"`` (ST) or
            ``"linear"`` (LT); default the class's :attr:`default_attention`.
        width (int, optional): encoder width :math:`d`.
        heads (int, optional): attention heads.
        layers (int, optional): encoder layers.
        norm (str): ``"new"`` (eq. (4), per-head LN inside the attention) or ``"regular"``
            (eq. (7)).
        mlp_ratio (float): FFN width of the encoder in units of ``width`` (the paper's
            :math:`2d`).
        dropout (float): attention dropout.
        ffn_dropout (float): encoder FFN dropout.
        eta (float): gain of the Xavier part of the attention projections (eq. (17)).
        delta (float): diagonal added to the attention projection matrices (eq. (17)).
        decoder (str): ``"spectral"`` or ``"ffn"``.
        spectral_width (int, optional): width of the spectral regressor.
        modes (int, optional): Fourier modes per axis of the spectral regressor.
        spectral_layers (int): spectral convolution layers.
        project (bool, optional): project to ``spectral_width`` before the spectral layers (2D
            default).
        coarse_shape (int or sequence, optional): the CiNN coarse grid (2D); default every third
            node of the training grid, ``ceil(n / 3)`` per axis. The paper: 43 for 141, 61 for
            211 (forward Darcy), 36 for 141 and 71 for 211 (inverse).
        grid_shape (int or sequence, optional): the training grid of the grid path (nodes per
            axis); None records the grid of the first batch seen in training mode (the attribute
            ``grid_shape``, saved in the state dict, hence in checkpoints). An untrained model
            without it treats every grid as its own training grid.
        grid_dropout (float): dropout in the CiNNs. decoder_dropout (float): in the regressor.
        act (str): activation of the CiNNs and decoders (SiLU in the paper).
        path (str): ``"auto"`` (grid path on domains with ``grid_shape`` in 1D/2D, mesh path
            otherwise; builds the modules of both), ``"grid"`` or ``"mesh"`` (only that path's
            modules).
        cross_heads (int): heads of the cross position-attention (mesh path).
        quantile (float, optional), k (int, optional): local receptive field of the cross
            position-attention (mesh path); global when both are None.
        decoder_k (int, optional): the decoder's own field where it differs: each query node's
            ``decoder_k`` nearest latent nodes (their number is the latent mesh's, whatever the
            input mesh), the encoder keeping ``quantile`` or ``k``.
        weighted (bool): on the mesh path, every attention weights its source nodes by their
            quadrature weights (:func:`meshop.data.batching.node_set_weights`), as PiT's: the
            cross attention down averages the input nodes of its field by their cells' measures,
            not one node one vote, so that a finer mesh's nodes in the field give the same
            integral; the encoder and the cross attention up weigh each latent node by its
            Voronoi cell. Without it (the default) the cross attentions weigh their nodes
            equally and the encoder uses 1/n per sample on a sampled latent mesh.

    Shapes:
        - input: a ``Data`` or a DataLoader batch (``follow_batch=["latent_pos", "query_pos"]``)
        - output: ``[N_query, out_channels]``
    """

    title = "Galerkin Transformer"
    #: the attention when ``attention`` is not given
    default_attention = "galerkin"

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        pos_dim: int,
        attention: str | None = None,
        width: int | None = None,
        heads: int | None = None,
        layers: int | None = None,
        norm: str = "new",
        mlp_ratio: float = 2,
        dropout: float = 0.0,
        ffn_dropout: float = 0.0,
        eta: float = 1e-2,
        delta: float = 1e-2,
        decoder: str = "spectral",
        spectral_width: int | None = None,
        modes: int | None = None,
        spectral_layers: int = 2,
        project: bool | None = None,
        coarse_shape: int | Sequence[int] | None = None,
        grid_shape: int | Sequence[int] | None = None,
        grid_dropout: float = 0.0,
        decoder_dropout: float = 0.0,
        act: str = "silu",
        path: str = "auto",
        cross_heads: int = 2,
        quantile: float | None = None,
        k: int | None = None,
        decoder_k: int | None = None,
        weighted: bool = False,
    ):
        super().__init__()
        attention = attention or self.default_attention
        check_attention(attention)
        _check_choice("path", path, PATHS)
        _check_choice("decoder", decoder, DECODERS)
        _check_choice("norm", norm, NORMS)
        _check_choice("act", act, tuple(ACTIVATIONS))
        if pos_dim < 1:
            raise ConfigError(f"pos_dim must be >= 1, got {pos_dim}")
        if path == "grid" and pos_dim > 2:
            raise ConfigError(
                f"the grid path (CiNN, spectral regressor) covers 1D and 2D grids; pos_dim is "
                f"{pos_dim}: use path='mesh'"
            )
        if quantile is not None and k is not None:
            raise ConfigError("give the cross attention one receptive field: quantile or k")
        sizes = PAPER_SIZES[min(pos_dim, 2)]
        width = width or sizes["width"]
        heads = heads or sizes["heads"]
        layers = layers if layers is not None else sizes["layers"]
        spectral_width = spectral_width or sizes["spectral_width"]
        modes = modes or sizes["modes"]
        project = sizes["project"] if project is None else project
        self.config.update(
            attention=attention,
            width=width,
            heads=heads,
            layers=layers,
            spectral_width=spectral_width,
            modes=modes,
            project=project,
        )
        if isinstance(coarse_shape, int):
            coarse_shape = (coarse_shape,) * pos_dim
        self.coarse_shape = tuple(coarse_shape) if coarse_shape is not None else None
        #: the training grid of the grid path (see ``grid_shape``; saved in the state dict)
        self.grid_shape = None if grid_shape is None else _grid_shape(grid_shape, pos_dim)
        self.path, self.decoder = path, decoder
        self.weighted = bool(weighted)
        self.grid = path != "mesh" and pos_dim <= 2
        self.mesh = path != "grid"
        self.encoder = nn.ModuleList(
            GalerkinEncoderLayer(
                width,
                pos_dim,
                attention,
                heads,
                norm,
                round(mlp_ratio * width),
                dropout,
                ffn_dropout,
                eta,
                delta,
            )
            for _ in range(layers)
        )
        lift = self.mesh or pos_dim == 1
        self.lift = nn.Linear(in_channels, width) if lift else None
        cinn = self.grid and pos_dim == 2
        self.down = CiNNDown(in_channels, width, act, grid_dropout) if cinn else None
        self.up = CiNNUp(width, act, grid_dropout) if cinn else None
        spectral = self.grid and decoder == "spectral"
        self.regressor = (
            SpectralRegressor(
                width,
                out_channels,
                pos_dim,
                spectral_width,
                modes,
                spectral_layers,
                project=project,
                activation=act,
                dropout=decoder_dropout,
            )
            if spectral
            else None
        )
        head = self.mesh or decoder == "ffn"
        self.head = MLP([width + pos_dim, width, width, out_channels], act=act) if head else None
        if self.mesh:
            cross = dict(quantile=quantile) if quantile is not None else dict(k=k)
            self.cross_down, self.cross_up = (
                LocalPositionAttention(width, width, cross_heads, **field)
                if next(iter(field.values())) is not None
                else PositionAttention(width, width, cross_heads)
                for field in (cross, cross if decoder_k is None else dict(k=decoder_k))
            )

    @classmethod
    def burgers(cls, in_channels: int = 2, out_channels: int = 1, **kwargs) -> GalerkinTransformer:
        """The 1D network of Table 5 / Fig. 4 (Burgers): 4 layers, d = 96, 1 head, 2 spectral
        layers of width 48 with 16 modes; ``in_channels=2`` is ``[u0, x]``. 534k parameters."""
        preset = dict(pos_dim=1, path="grid")  # the sizes: the 1D defaults, PAPER_SIZES[1]
        return cls(in_channels, out_channels, **{**preset, **kwargs})

    @classmethod
    def darcy(cls, in_channels: int = 3, out_channels: int = 1, **kwargs) -> GalerkinTransformer:
        """The 2D network of Table 5 / Fig. 5 (forward Darcy): CiNNs to a 43 x 43 coarse grid (the
        paper's choice for 141 x 141; 61 for 211), 6 layers, d = 128, 4 heads, 2 spectral layers of
        width 32 with 12 x 12 modes; ``in_channels=3`` is ``[a, x, y]``. 2.22M parameters."""
        # the sizes: the 2D defaults, PAPER_SIZES[2]
        preset = dict(pos_dim=2, coarse_shape=43, path="grid")
        return cls(in_channels, out_channels, **{**preset, **kwargs})

    @classmethod
    def inverse(cls, in_channels: int = 3, out_channels: int = 1, **kwargs) -> GalerkinTransformer:
        """The inverse-problem network of Table 5 (Darcy coefficient from the solution): 6 layers,
        d = 192, 4 heads, FFN decoder on the 36 x 36 coarse grid (the paper's choice for
        141 x 141; 71 for 211). 2.39M parameters."""
        # heads and layers: the 2D defaults, PAPER_SIZES[2]
        preset = dict(pos_dim=2, width=192, decoder="ffn", coarse_shape=36, path="grid")
        return cls(in_channels, out_channels, **{**preset, **kwargs})

    @classmethod
    def reads_weights(cls, config: dict[str, Any], latent_mesh: bool) -> bool:
        """On a mesh the weights are read by the weighted attentions, by the encoder when the
        latent mesh is the input mesh, and by the 1D grid path; not by an unweighted model on a
        latent mesh of its own."""
        return bool(config.get("weighted")) or not latent_mesh or config.get("pos_dim") == 1

    def reset_parameters(self) -> None:
        for layer in self.encoder:
            layer.reset_parameters()
        for name in ("lift", "down", "up", "regressor", "head", "cross_down", "cross_up"):
            module = getattr(self, name, None)
            if module is not None:
                module.reset_parameters()

    def uses_grid_path(self, data: Data) -> bool:
        """Whether ``data`` goes through the grid path (raises on a non-grid domain when the
        model was built with ``path="grid"``)."""
        if self.path == "grid":
            grid_shape_of(data)
            return True
        return self.grid and getattr(data, "grid_shape", None) is not None

    def compute(self, data: Data, walk: Walk) -> Tensor:
        """On the mesh path, the cross attention down runs for chunks of latent nodes and lifts
        only the input nodes it reads, the encoder layers integrate their kernels over the
        latent nodes (in chunks when there are more than a chunk), the cross attention up and
        the head run for chunks of query points. The grid path (CiNN, spectral layers) needs
        whole grids and runs unchunked.

        Inside :func:`~meshop.nn.splitting.split_mesh` (mesh path, a latent mesh ``latent_pos``
        that every process holds whole) the cross attention down merges every process's softmax
        sums over its own input nodes, then the encoder, the cross attention up to the process's
        query points and the head run on every process. Refused (:class:`ConfigError`) on the
        grid path and without a latent mesh."""
        x = self.features(data)
        if walk.group is not None:
            self.check_split(data)
        if self.uses_grid_path(data):
            return self._grid_forward(data, x)
        pos, batch = data.pos, node_batch(data)
        latent_pos, latent_batch = latent_nodes(data)
        query_pos, query_batch = query_nodes(data)
        if self.weighted:
            weight, latent_weight, _ = node_set_weights(data)
            if latent_weight is not None:
                # under split_mesh each process's share summed (see PiT.compute)
                latent_weight = walk.total(latent_weight)
        else:
            # the latent nodes' weights: the domain's own when the latent mesh is the input
            # mesh, else 1/n per sample; the cross attentions weigh their nodes equally
            weight = None
            latent_weight = getattr(data, "weight", None) if latent_pos is pos else None
        samples = num_samples(data)
        h = walk.layer(
            self.cross_down,
            lambda nodes: self.lift(x[nodes]),
            pos,
            batch,
            weight,
            num_samples=samples,
            pos_dst=latent_pos,
            batch_dst=latent_batch,
        )
        for layer in self.encoder:
            h = walk.layer(
                layer,
                h,
                latent_pos,
                latent_batch,
                latent_weight,
                num_samples=samples,
                shared=True,
                overwrite=True,
            )
        return walk.layer(
            self.cross_up,
            h,
            latent_pos,
            latent_batch,
            latent_weight if self.weighted else None,
            num_samples=samples,
            pos_dst=query_pos,
            batch_dst=query_batch,
            shared=True,
            then=lambda up, nodes: self.head(torch.cat([up, query_pos[nodes]], dim=-1)),
        )

    def quadratic(self, data: Data) -> str | None:
        if self.uses_grid_path(data) or getattr(data, "latent_pos", None) is not None:
            return None
        field = getattr(self.cross_down, "field", {})
        if "k" not in field and "radius" not in field:
            return (
                "its latent mesh is the input mesh, to which its cross attention attends from "
                "every node (global, or a quantile field that grows with the mesh); train it "
                "with a latent mesh (--latent-points 256) or a k-nearest cross attention (k=16)"
            )
        if self.config["attention"] == "softmax":
            return "its softmax attention weighs every pair of nodes; use galerkin attention"
        return None

    def check_split(self, data: Data) -> None:
        """What :meth:`forward_chunked` cannot split over processes, refused with what to do."""
        name = "Fourier" if self.config["attention"] == "fourier" else "Galerkin"
        if self.uses_grid_path(data):
            raise ConfigError(
                f"the {name} Transformer's grid path (CiNN, spectral regressor) needs whole grids, "
                f"which split_mesh spreads over processes; split it on the mesh path "
                f"(path='mesh') with a latent mesh, or evaluate each grid whole on a process"
            )
        if getattr(data, "latent_pos", None) is None:
            raise ConfigError(
                f"the {name} Transformer under split_mesh needs a latent mesh that every process "
                f"holds whole: give every process's part the same latent_pos "
                f"(meshop.nn.splitting.split_latent_mesh(part, 256) samples it from the whole "
                f"mesh; meshop's own pipelines: latent_points=256, --latent-points 256). Its "
                f"default latent mesh on meshes is the input mesh itself, on which each process "
                f"would need every node's features for its own nodes"
            )

    def _encode(self, h: Tensor, pos: Tensor, batch: Tensor, weight: Tensor | None) -> Tensor:
        for layer in self.encoder:
            h = layer(h, pos, batch, weight)
        return h

    def training_grid(self, shape: Sequence[int]) -> tuple[int, ...]:
        """The grid the grid path was trained on (the attribute ``grid_shape``); in training mode
        the first call records ``shape``; without a record (an untrained model) ``shape``
        itself."""
        if self.grid_shape is None:
            if not self.training:
                return tuple(shape)
            self.grid_shape = tuple(int(n) for n in shape)
        return self.grid_shape

    def get_extra_state(self) -> dict[str, Any]:
        """The recorded training grid, saved in the state dict (and so in checkpoints)."""
        return {"grid_shape": self.grid_shape}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        shape = state["grid_shape"]
        self.grid_shape = None if shape is None else tuple(int(n) for n in shape)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        # state dicts saved before the training grid was part of them (it was in ``config``,
        # hence given to the constructor as ``grid_shape``) keep the constructor's
        state_dict.setdefault(prefix + "_extra_state", self.get_extra_state())
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _grid_forward(self, data: Data, x: Tensor) -> Tensor:
        shape, b = grid_shape_of(data), num_samples(data)
        pos = grid_tensor(data.pos, data)  # [B, m, *shape]
        grid = self.training_grid(shape)
        if self.pos_dim == 1:
            weight = getattr(data, "weight", None)
            h = self._encode(self.lift(x), data.pos, node_batch(data), weight)
            h, out_shape, out_pos = grid_tensor(h, data), shape, pos
        else:
            coarse = self.coarse_shape or divided_shape(grid, 3)
            h = self.down(grid_tensor(x, data), coarse, grid)  # [B, d, *coarse]
            coarse_pos = interpolate_grid(pos, coarse)
            n_c = math.prod(coarse)
            batch = torch.arange(b, device=x.device).repeat_interleave(n_c)
            # the coarse nodes share each sample's measure evenly, and every attention normalises
            # the weights per sample: the encoder's weights are the default 1 / n_c
            h = self._encode(node_tensor(h), node_tensor(coarse_pos), batch, None)
            h = h.view(b, *coarse, -1).movedim(-1, 1)
            out_shape = shape if self.decoder == "spectral" else coarse
            out_pos = pos if self.decoder == "spectral" else coarse_pos
            # the spectral decoder's middle grid is that of training; the FFN's output grid is the
            # coarse grid itself, whatever the input grid
            h = self.up(h, out_shape, grid if self.decoder == "spectral" else None)
        if self.decoder == "spectral":
            # 2D grids include both ends of a non-periodic box: transform on the training grid.
            # 1D grids (Burgers) are periodic without the end node: the transform's period is the
            # box on every grid, and each grid has its own box, so the regressor stays on it
            out = self.regressor(h, out_pos, grid if self.pos_dim == 2 else None)
        else:
            out = self.head(torch.cat([h, out_pos], dim=1).movedim(1, -1)).movedim(-1, 1)
        if getattr(data, "query_pos", None) is None and tuple(out_shape) == shape:
            return node_tensor(out)
        return sample_grid(out, out_pos, *query_nodes(data))


class FourierTransformer(GalerkinTransformer):
    r"""The Fourier Transformer (Galerkin Transformer paper, eq. (5)): :class:`GalerkinTransformer`
    with Fourier-type attention (``attention="fourier"``) by default; the same arguments."""

    title = "Fourier Transformer"
    default_attention = "fourier"


def _grid_shape(shape: int | Sequence[int], pos_dim: int) -> tuple[int, ...]:
    """``grid_shape`` as a tuple of ``pos_dim`` node counts, each at least 2."""
    shape = (shape,) * pos_dim if isinstance(shape, int) else tuple(shape)
    if len(shape) != pos_dim or any(int(n) != n or n < 2 for n in shape):
        raise ConfigError(
            f"grid_shape must give {pos_dim} node count(s) of at least 2 (the training grid, "
            f"e.g. {(22,) * pos_dim}); got {shape}"
        )
    return tuple(int(n) for n in shape)


def _check_choice(name: str, value: str, choices: Sequence[str]) -> None:
    if value not in choices:
        raise ConfigError(f"unknown {name} {value!r}; choose one of {list(choices)}")


__all__ = ["FourierTransformer", "GalerkinTransformer"]

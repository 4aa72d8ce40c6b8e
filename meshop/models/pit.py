"""Position-induced Transformer (PiT, Chen & Wu, ICML 2024), the model of its Sec. 2.3."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn

from meshop._pyg import Data
from meshop.data.batching import (
    latent_nodes,
    node_batch,
    node_features,
    node_set_weights,
    num_samples,
    query_features,
    query_nodes,
)
from meshop.errors import ConfigError
from meshop.models.base import Operator
from meshop.nn.blocks.pit_block import PiTBlock
from meshop.nn.chunking import Walk
from meshop.nn.local_position_attention import LocalPositionAttention
from meshop.nn.mlp import MLP


class PiT(Operator):
    r"""Position-induced Transformer (PiT Sec. 2.3, Fig. 2, Table 9): an encoder-processor-decoder
    neural operator built from position-attention only.

    .. math::
        \mathrm{Encoder} &= \sigma \circ \mathrm{LocPosAtt_{in}}(\cdot\,; D_{a \to v}) \circ \sigma
            \circ \mathrm{Linear}, \\
        \mathrm{Processor} &= L \text{ blocks } U_\ell = \sigma(\mathrm{MLP}_\ell(\sigma(
            \mathrm{PosAtt}_\ell(U_{\ell-1}; D_v))) + \mathrm{Linear}_\ell(U_{\ell-1})), \\
        \mathrm{Decoder} &= \mathrm{MLP} \circ \sigma \circ \mathrm{LocPosAtt_{out}}(\cdot\,;
            D_{v \to u}),

    with :math:`\sigma` = GELU. The encoder lifts the node features on the input mesh
    :math:`X_a` (``pos``) and moves them by local cross position-attention onto the latent mesh
    :math:`X_v` (``latent_pos``, e.g. farthest point sampling; the input mesh when absent); the
    processor mixes them globally on :math:`X_v`; the decoder moves them onto any query points
    :math:`X_u` (``query_pos``, else ``pos``) and projects to the output channels. Every attention
    runs within its own sample, so a prediction does not depend on the other samples of a batch.

    The defaults are the paper's recommendations (App. E.2, App. C.2): width 64, 2 heads, 4 layers,
    1% quantile receptive fields, the ``tan`` parameterization of :math:`\lambda`. Table 9's
    benchmark settings are, e.g., Darcy2D ``width=128, encoder_quantile=0.02,
    decoder_quantile=0.05``; InviscidBurgers ``width=64, encoder_quantile=0.01,
    decoder_quantile=0.08, decoder_layers=1``.

    Args:
        in_channels (int): width of :func:`meshop.data.node_features` (fields, coordinates and
            per-sample parameters concatenated).
        out_channels (int): output fields at the query points.
        pos_dim (int): spatial dimension of the coordinates.
        width (int): encoding dimension :math:`d_v`.
        heads (int): heads of every position-attention layer.
        layers (int): processor blocks :math:`L`.
        encoder_quantile (float, optional): receptive field of the encoder (quantile of the
            distances from a latent node to the input mesh).
        decoder_quantile (float, optional): receptive field of the decoder (quantile of the
            distances from a query point to the latent mesh).
        encoder_k (int, optional): a k-nearest-neighbour receptive field of the encoder instead.
        decoder_k (int, optional): a k-nearest-neighbour receptive field of the decoder instead.
        encoder_radius (float, optional): a radius receptive field of the encoder instead.
        decoder_radius (float, optional): a radius receptive field of the decoder instead.
        decoder_layers (int): processor blocks applied on the query mesh after the decoder's
            attention (Table 9 uses one for InviscidBurgers and ShockTube); O(N_u^2) time.
        lambda_param (str): ``"tan"`` (paper), ``"softplus"`` or ``"square"``.
        periodic (float or sequence, optional): periodic box lengths; all distances become
            minimum-image distances.
        weighted (bool): every attention weights its source nodes by their quadrature weights
            (:func:`meshop.data.batching.node_set_weights`), so that its sums are integrals over
            the domain, not over the node density; ``False`` is the paper's form (equal
            weights). The PiT page of the documentation compares the two on a graded and a
            uniform mesh.
        pointwise (bool): the decoder also reads each query point's own input features
            (:func:`meshop.data.query_features`: its coordinates and parameters, and the input
            fields of its nearest node), lifted by a linear layer and added to the decoder's
            attention before its GELU: :math:`\sigma(\mathrm{LocPosAtt_{out}}(U; D_{v \to u})
            + \mathrm{Linear}(a(y)))`. A target that depends on a node's own inputs (a surface
            normal, a local load) is then within reach, which the paper's decoder, which sees
            the query's position only through the attention, does not have. ``False`` (the
            default) is the paper's form.
        latent_positions (bool): the coordinates enter at the latent nodes, lifted by a linear
            layer and added to the encoder's attention before its GELU:
            :math:`\sigma(\mathrm{LocPosAtt_{in}}(\sigma(\mathrm{Linear}(a));
            D_{a \to v}) + \mathrm{Linear}(x_v))`, instead of as input features that the
            encoder averages (``False``, the paper's form). A latent node's averaged coordinates
            depend on the input mesh where its receptive field is one-sided, at the boundary:
            a kernel narrower than a coarse mesh's node spacing reads the boundary nodes there,
            and on a finer mesh an average reaching inside; its own coordinates do not change
            (the PiT page, "On finer meshes").

    Shapes:
        - input: a ``Data`` or a DataLoader batch (``follow_batch=["latent_pos", "query_pos"]``)
        - output: :math:`(N_u, C_{out})` at :func:`meshop.data.query_nodes`
    """

    title = "PiT"
    uses_latent_mesh = True

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        pos_dim: int,
        width: int = 64,
        heads: int = 2,
        layers: int = 4,
        encoder_quantile: float | None = 0.01,
        decoder_quantile: float | None = 0.01,
        encoder_k: int | None = None,
        decoder_k: int | None = None,
        encoder_radius: float | None = None,
        decoder_radius: float | None = None,
        decoder_layers: int = 0,
        lambda_param: str = "tan",
        periodic: float | Sequence[float | None] | None = None,
        weighted: bool = True,
        pointwise: bool = False,
        latent_positions: bool = False,
    ):
        super().__init__()
        if layers < 0 or decoder_layers < 0:
            raise ConfigError(
                f"layers and decoder_layers must be >= 0, got {layers}, {decoder_layers}"
            )
        if isinstance(periodic, Sequence) and len(periodic) != pos_dim:
            raise ConfigError(
                f"periodic gives {len(periodic)} box lengths for pos_dim={pos_dim}; "
                f"give one per axis"
            )
        if latent_positions and in_channels <= pos_dim:
            raise ConfigError(
                f"PiT(latent_positions=True) lifts the input fields and parameters without the "
                f"coordinates, but in_channels={in_channels} holds only the {pos_dim} "
                f"coordinates; give the nodes input fields, or leave latent_positions False"
            )
        self.weighted = bool(weighted)
        self.lift = nn.Linear(in_channels - pos_dim if latent_positions else in_channels, width)
        self.latent_lift = nn.Linear(pos_dim, width) if latent_positions else None
        self.encoder = LocalPositionAttention(
            width,
            width,
            heads,
            lambda_param=lambda_param,
            periodic=periodic,
            **_field("encoder", encoder_quantile, encoder_k, encoder_radius),
        )
        self.processor = nn.ModuleList(
            PiTBlock(width, heads, lambda_param, periodic) for _ in range(layers)
        )
        self.decoder = LocalPositionAttention(
            width,
            width,
            heads,
            lambda_param=lambda_param,
            periodic=periodic,
            **_field("decoder", decoder_quantile, decoder_k, decoder_radius),
        )
        self.decoder_processor = nn.ModuleList(
            PiTBlock(width, heads, lambda_param, periodic) for _ in range(decoder_layers)
        )
        self.head = MLP([width, width, out_channels])
        self.query_lift = nn.Linear(in_channels, width) if pointwise else None

    @classmethod
    def reads_weights(cls, config: dict[str, Any], latent_mesh: bool) -> bool:
        """Only the weighted position attention reads them (``weighted=False`` does not)."""
        return bool(config.get("weighted", True))

    def reset_parameters(self) -> None:
        self.lift.reset_parameters()
        self.encoder.reset_parameters()
        self.decoder.reset_parameters()
        self.head.reset_parameters()
        for lin in (self.query_lift, self.latent_lift):
            if lin is not None:
                lin.reset_parameters()
        for block in [*self.processor, *self.decoder_processor]:
            block.reset_parameters()

    def compute(self, data: Data, walk: Walk) -> Tensor:
        """The encoder attends for chunks of latent nodes and lifts only the input nodes their
        receptive fields hold; the processor attends on the latent mesh, the decoder and head
        run for chunks of query points. The only state of size N is the input and the output.

        Inside :func:`~meshop.nn.splitting.split_mesh` each process holds a part of the input
        nodes (and its own query points, or none: the outputs at its own nodes) and every
        process the same latent mesh ``latent_pos``: the encoder's softmax sums over each
        process's sources are merged over the processes (its receptive fields, and the latent
        nodes' quadrature weights, are those of the whole mesh), then the processor and the
        decoder run on every process. Refused (:class:`ConfigError`) without a latent mesh, with
        ``decoder_layers`` (attention among the query points of every process) and with
        ``pointwise`` and query points (their nearest input node may be another process's)."""
        if walk.group is not None:
            self.check_split(data)
        if self.latent_lift is None:
            features = self.features(data)
        else:  # the coordinates enter at the latent nodes
            self.check(data)
            features = node_features(data, use_pos=False)
        pos, batch = data.pos, node_batch(data)
        latent_pos, latent_batch = latent_nodes(data)

        def encoded(out, nodes):
            if self.latent_lift is not None:
                out = out + self.latent_lift(latent_pos[nodes])
            return F.gelu(out)

        query_pos, query_batch = query_nodes(data)
        weight, latent_weight, query_weight = (
            node_set_weights(data) if self.weighted else (None,) * 3
        )
        if latent_weight is not None:
            # under split_mesh each process's nodes' share summed; weights stored with every
            # part (the whole mesh's, from the data preparation) come out a constant times
            # larger, which no attention sees (each normalises its weights per target)
            latent_weight = walk.total(latent_weight)
        samples = num_samples(data)
        u = walk.layer(
            self.encoder,
            lambda nodes: F.gelu(self.lift(features[nodes])),
            pos,
            batch,
            weight,
            num_samples=samples,
            pos_dst=latent_pos,
            batch_dst=latent_batch,
            then=encoded,
        )  # [N_v, d_v]
        for block in self.processor:
            u = walk.layer(
                block, u, latent_pos, latent_batch, latent_weight, num_samples=samples, shared=True
            )
        own = query_features(data) if self.query_lift is not None else None

        def decoded(out, nodes):
            if own is not None:
                out = out + self.query_lift(own[nodes])
            out = F.gelu(out)
            return self.head(out) if not len(self.decoder_processor) else out

        u = walk.layer(
            self.decoder,
            u,
            latent_pos,
            latent_batch,
            latent_weight,
            num_samples=samples,
            pos_dst=query_pos,
            batch_dst=query_batch,
            shared=True,
            then=decoded,
        )  # [N_u, d_v], or the outputs
        if not len(self.decoder_processor):
            return u
        for block in self.decoder_processor:
            u = walk.layer(
                block, u, query_pos, query_batch, query_weight, num_samples=samples, shared=True
            )
        return walk.map(lambda nodes: self.head(u[nodes]), len(u))

    def quadratic(self, data: Data) -> str | None:
        if getattr(data, "latent_pos", None) is None:
            return (
                "its latent mesh is the input mesh, on which every processor block attends "
                "among all the nodes; train it with a latent mesh (--latent-points 256)"
            )
        if len(self.decoder_processor):
            return (
                f"its decoder_layers={len(self.decoder_processor)} attend among all the query "
                f"points; train it with decoder_layers=0, or predict at fewer --query points"
            )
        return None

    def check_split(self, data: Data) -> None:
        """What :meth:`forward_chunked` cannot split over processes, refused with what to do."""
        if getattr(data, "latent_pos", None) is None:
            raise ConfigError(
                "PiT under split_mesh needs a latent mesh that every process holds whole: give "
                "every process's part the same latent_pos (meshop.nn.splitting.split_latent_mesh("
                "part, 256) samples it from the whole mesh); without it the latent mesh is the "
                "input mesh, which split_mesh spreads over the processes"
            )
        if len(self.decoder_processor):
            raise ConfigError(
                f"PiT with decoder_layers={len(self.decoder_processor)} attends among all the "
                f"query points of a sample, which split_mesh spreads over the processes; "
                f"evaluate it with each sample whole on a process"
            )
        if self.query_lift is not None and getattr(data, "query_pos", None) is not None:
            raise ConfigError(
                "PiT(pointwise=True) reads the input fields of each query point's nearest input "
                "node, which split_mesh may have put on another process; split it without "
                "query_pos (the outputs at each process's own nodes), or evaluate it whole"
            )


def _field(where: str, quantile, k, radius) -> dict:
    """The receptive field of the encoder or decoder: k or radius override the default quantile."""
    if k is not None or radius is not None:
        quantile = None
    field = {"quantile": quantile, "k": k, "radius": radius}
    given = {name: value for name, value in field.items() if value is not None}
    if len(given) != 1:
        raise ConfigError(
            f"give the {where} one receptive field: {where}_quantile, {where}_k or "
            f"{where}_radius (got {given or None})"
        )
    return given


__all__ = ["PiT"]

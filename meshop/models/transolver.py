"""Transolver (Wu et al., ICML 2024): a transformer whose attention runs among learned physical
states (slices of the mesh) instead of among the nodes."""

from __future__ import annotations

from torch import Tensor, nn

from meshop._pyg import Data
from meshop.data.batching import nodes_with_queries, num_samples
from meshop.errors import ConfigError
from meshop.models.base import Operator
from meshop.nn.blocks.transolver_block import TransolverBlock
from meshop.nn.chunking import Walk
from meshop.nn.mlp import MLP
from meshop.nn.physics_attention import PhysicsAttention
from meshop.nn.splitting import mesh_weight


class Transolver(Operator):
    r"""Transolver (Transolver Sec. 3.2, Fig. 2): preprocess, :math:`L` physics-attention blocks,
    output head, all on the nodes of the mesh.

    .. math::
        \mathbf{x}^0 = \mathrm{MLP}([a, x, \theta]), \qquad
        \mathbf{x}^l = \mathrm{TransolverBlock}_l(\mathbf{x}^{l-1}) \ (l = 1..L), \qquad
        u = W\, \mathrm{LN}(\mathbf{x}^L) + b,

    where the preprocess MLP (two linear layers, GELU) lifts the node features :math:`[a, x,
    \theta]` (input fields, coordinates, per-sample parameters: see
    :func:`meshop.data.node_features`), every :class:`TransolverBlock` is eq. (5) with
    :class:`~meshop.nn.PhysicsAttention`, and a layer norm and a linear layer map to the output
    fields. Slice tokens are per-sample integrals with the nodes' quadrature ``weight`` (``1/n``
    per sample when the data has none), so meshes of any kind and size share one batch without
    padding, and a prediction does not depend on the other samples of its batch.

    **Query points** (``query_pos``): *slice assignment of the query points*. Every operation of
    the model but the slice tokens of eq. (2) acts on each node alone, so the model is a function
    of a point's own features and of the tokens, which are integrals over the input mesh. The
    query points therefore ride along as extra nodes of their sample with zero quadrature weight:
    each gets its own slice weights, reads the tokens in eq. (4), and adds nothing to them, so a
    query point never affects the mesh nodes or the other query points, and one placed on a mesh
    node gets exactly that node's prediction. This needs no parameters beyond the paper's model
    and no neighbour search per layer (a local cross-attention decoder would add both and a
    receptive-field size to choose). The input fields at a query point are those of the nearest
    mesh node; its coordinates and parameters are its own.

    The paper's models (Sec. 4, implementation details, and the authors' scripts) use 8 layers,
    width 128 (256 on the large industrial meshes), 8 heads, 32 or 64 slices and
    ``mlp_ratio=1``; the defaults are width 128 and 64 slices. ``meshop train`` scales them down
    on the CPU datasets (:mod:`meshop.train.presets`). Initialisation as in the authors' code:
    normal linear weights (std 0.02, truncated at +-2) and zero biases everywhere, layer norms at
    identity, temperatures 0.5.

    Args:
        in_channels (int): width of :func:`meshop.data.node_features` (fields, coordinates and
            per-sample parameters concatenated).
        out_channels (int): output fields at the query points.
        pos_dim (int): spatial dimension of the coordinates.
        width (int): feature width :math:`C`.
        layers (int): number :math:`L` of Transolver blocks.
        heads (int): heads of every physics-attention.
        slices (int): slices :math:`M` per head.
        mlp_ratio (int): hidden width of the block MLPs in units of ``width``.
        dropout (float): dropout on the token attention weights (training only).

    Shapes:
        - input: a ``Data`` or a DataLoader batch (``follow_batch=["latent_pos", "query_pos"]``);
          ``latent_pos`` is not used
        - output: :math:`(N_q, C_{out})` at :func:`meshop.data.query_nodes`
    """

    title = "Transolver"

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        pos_dim: int,
        width: int = 128,
        layers: int = 8,
        heads: int = 8,
        slices: int = 64,
        mlp_ratio: int = 1,
        dropout: float = 0.0,
    ):
        super().__init__()
        if layers < 1 or min(in_channels, out_channels, pos_dim, width, slices, mlp_ratio) < 1:
            raise ConfigError(
                "in_channels, out_channels, pos_dim, width, layers, slices and mlp_ratio must be "
                f"positive; got {in_channels}, {out_channels}, {pos_dim}, {width}, {layers}, "
                f"{slices}, {mlp_ratio}"
            )
        if heads < 1 or width % heads:
            raise ConfigError(f"heads ({heads}) must be positive and divide width ({width})")
        self.preprocess = MLP([in_channels, 2 * width, width])
        self.blocks = nn.ModuleList(
            TransolverBlock(width, heads, slices, mlp_ratio, dropout) for _ in range(layers)
        )
        self.head = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, out_channels))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """The authors' initialisation: every linear layer normal (std 0.02, truncated at +-2) with
        zero bias, every layer norm at identity, every temperature at its initial value."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.trunc_normal_(module.weight, std=0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.LayerNorm):
                module.reset_parameters()
            elif isinstance(module, PhysicsAttention):
                nn.init.constant_(module.temperature, module.init_temperature)

    def compute(self, data: Data, walk: Walk) -> Tensor:
        """The features ``[N, width]`` are the only state of size N; every block integrates its
        slice tokens over the nodes (in chunks: over every chunk) before updating them."""
        features, batch, weight, is_query = self._nodes(data)
        weight = mesh_weight(data, weight)
        samples, n = num_samples(data), len(features)
        x = walk.map(lambda nodes: self.preprocess(features[nodes]), n)
        for block in self.blocks:
            x = walk.layer(block, x, None, batch, weight, num_samples=samples, overwrite=True)
        out = walk.map(lambda nodes: self.head(x[nodes]), n)
        return out if is_query is None else out[is_query]

    def _nodes(self, data: Data):
        """Mesh nodes followed by the query nodes (see :func:`meshop.data.nodes_with_queries`);
        the coordinates are part of the features."""
        features, _, batch, weight, is_query = nodes_with_queries(data, self.features(data))
        return features, batch, weight, is_query


__all__ = ["Transolver"]

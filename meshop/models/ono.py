"""The Orthogonal Neural Operator (ONO, Xiao et al.): a feature stream that learns eigenfunctions
and a solution stream updated by orthogonal attention."""

from __future__ import annotations

from torch import Tensor, nn

from meshop._pyg import Data
from meshop.data.batching import nodes_with_queries, num_samples
from meshop.errors import ConfigError
from meshop.models.base import Operator
from meshop.nn.blocks.ono_blocks import (
    FEATURE_ATTENTIONS,
    FeatureBlock,
    SolutionBlock,
    trunc_normal_linears,
)
from meshop.nn.chunking import Walk
from meshop.nn.mlp import MLP
from meshop.nn.splitting import mesh_weight


class ONO(Operator):
    r"""Orthogonal Neural Operator (ONO Sec. 3.2, Fig. 1): two streams over the nodes of a mesh.

    .. math::
        [g^{(1)}, h^{(1)}] &= \mathrm{MLP}([a, x, \theta]) \quad (\text{split in two halves}), \\
        g^{(l+1)} &= \mathrm{FeatureBlock}_l(g^{(l)}), \qquad
        h^{(l+1)} = \mathrm{FFN}_l\big(\mathrm{LN}(\psi^{(l)} \mathrm{diag}(\mu^{(l)})
            \langle \psi^{(l)}, h^{(l)} \rangle + h^{(l)})\big), \qquad
        \psi^{(l)} = \mathrm{ort}(g^{(l+1)} W_Q^{(l)}),

    for :math:`l = 1, \dots, L`; the last FFN outputs the solution. The encoder lifts the node
    features :math:`[a, x, \theta]` (input fields, coordinates, per-sample parameters: see
    :func:`meshop.data.node_features`) and splits them into the feature stream :math:`g`, whose
    pre-LN transformer blocks (:class:`FeatureBlock`) provide the neural eigenfunctions, and the
    solution stream :math:`h`, updated by :class:`~meshop.nn.OrthogonalAttention`
    (:class:`SolutionBlock`). Every integral is a per-sample quadrature with the nodes' ``weight``
    (``1/n`` per sample when the data has none), so meshes of any kind and size share one batch.
    By default (``orthonormalize="sample"``) every sample's eigenfunctions are orthonormal in
    :math:`L^2` of its own domain, so training and evaluation compute the same function and a
    prediction never depends on the other samples of its batch; with the authors'
    ``orthonormalize="batch"`` that holds in evaluation mode only, which whitens with a running
    moment.

    **Query points** (``query_pos``, App. A's cross form). They ride along as extra nodes of their
    sample with zero quadrature weight: in every attention of both streams they read the integrals
    over the input mesh but add nothing to them (nor to the whitening moments), so the last stage
    evaluates :math:`\psi(Y)\, \mathrm{diag}(\mu) \langle \psi(X), h(X) \rangle` at the query
    points :math:`Y` from the mesh nodes :math:`X`, and a query point never affects the mesh nodes
    or the other query points. Their input fields are those of the nearest mesh node (coordinates
    and parameters are their own), so a query point placed on a mesh node gets exactly that node's
    prediction. This differs from App. A's eq. (20), whose later stages integrate over the query
    points, which carry no quadrature weights.

    The defaults follow the paper's Elasticity setting (Sec. 4, authors' code): width 128,
    8 stages, :math:`k = 8` eigenfunctions, 8 heads; the feature stream uses Galerkin attention by
    default (the paper's linear and Nyström blocks are order-dependent or absent here; Galerkin
    attention is its Table 5 alternative and, like every choice here, independent of node order).
    The paper does not state the FFN width; ``mlp_ratio=1`` keeps the size within its Table 8 range.

    Args:
        in_channels (int): width of :func:`meshop.data.node_features` (fields, coordinates and
            per-sample parameters concatenated).
        out_channels (int): output fields at the query points.
        pos_dim (int): spatial dimension of the coordinates.
        width (int): width :math:`d` of both streams (the encoder outputs :math:`2d`).
        layers (int): number :math:`L` of stages (feature block + orthogonal attention).
        k (int): eigenfunctions per orthogonal attention.
        heads (int): heads of the feature-stream attention.
        feature_attention (str): ``"galerkin"``, ``"linear"``, ``"softmax"`` or ``"fourier"``.
        value_projection (bool): :math:`W_V` of eq. (5) (off in the authors' code; see
            :class:`~meshop.nn.OrthogonalAttention`).
        orthonormalize (str): ``"sample"`` (eigenfunctions orthonormal on every sample's own
            domain: no running statistics) or ``"batch"`` (the authors' batch whitening with a
            running moment for evaluation); see :class:`~meshop.nn.OrthogonalAttention`.
        momentum (float): running-moment momentum of ``orthonormalize="batch"``, BatchNorm
            convention (the authors' 0.9 decay).
        inner_product (str): ``"mean"`` (resolution-independent) or ``"sum"`` (authors' code); see
            :class:`~meshop.nn.OrthogonalAttention`.
        mlp_ratio (int): FFN hidden width in units of ``width``.
        dropout (float): attention dropout of the feature stream.
        feature_layer_norm (bool): the per-head layer norms of the feature-stream attention
            (the Galerkin Transformer's placement, e.g. "LT Ln" for linear attention); ``False``
            gives the raw projections of the authors' ``linear-attention-transformer`` block.
        feature_coordinates (bool): append the coordinates to every head of the feature-stream
            attention; ``False``: the features alone, as in the authors' code (the coordinates
            still enter through the encoder).
        linear_decoder (bool): the last stage's FFN as a single linear layer to the outputs (the
            authors' ``ONO2``) instead of a two-layer FFN.
        linear_encoder (bool): the encoder as a single linear layer (the authors' ``ONO2``:
            ``preprocess = Linear(in, 2 width)``) instead of a two-layer GELU MLP.
        feature_qkv_bias (bool): biases of the Q, K, V projections of the feature-stream
            attention; ``False``: none, as in the authors' ``linear-attention-transformer``.
        feature_query_scale (bool): linear feature attention only: the factor
            :math:`d_{head}^{-1/2}` on the queries after their softmax, as in the authors' code
            (``False`` leaves it to the output projection: the same functions, but a different
            parameterisation, which under AdamW and the std-0.02 initialisation trains
            differently; see :class:`~meshop.nn.LinearAttention`).
        authors_init (bool): every linear layer truncated normal (std 0.02) with zero bias, the
            feature attention's included (the authors' ``initialize_weights``); ``False`` keeps
            the feature attention's own initialisation (:class:`~meshop.nn.HeadAttention`).

    With ``feature_attention="linear"``, ``orthonormalize="batch"``, ``value_projection=False``,
    ``inner_product="sum"``, ``feature_layer_norm=False``, ``feature_coordinates=False``,
    ``linear_decoder=True``, ``linear_encoder=True``, ``feature_qkv_bias=False``,
    ``feature_query_scale=True`` and ``authors_init=True`` the model is the authors' ``ONO2``
    (orth=True), parameter for parameter (the same outputs for the same weights, up to the
    precision of the whitening, which meshop computes in float64).

    Shapes:
        - input: a ``Data`` or a DataLoader batch (``follow_batch=["latent_pos", "query_pos"]``);
          ``latent_pos`` is not used
        - output: :math:`(N_q, C_{out})` at :func:`meshop.data.query_nodes`
    """

    title = "ONO"

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        pos_dim: int,
        width: int = 128,
        layers: int = 8,
        k: int = 8,
        heads: int = 8,
        feature_attention: str = "galerkin",
        value_projection: bool = True,
        orthonormalize: str = "sample",
        momentum: float = 0.1,
        inner_product: str = "mean",
        mlp_ratio: int = 1,
        dropout: float = 0.0,
        feature_layer_norm: bool = True,
        feature_coordinates: bool = True,
        linear_decoder: bool = False,
        linear_encoder: bool = False,
        authors_init: bool = False,
        feature_qkv_bias: bool = True,
        feature_query_scale: bool = False,
    ):
        super().__init__()
        if feature_attention not in FEATURE_ATTENTIONS:
            raise ConfigError(
                f"unknown feature_attention {feature_attention!r}; choose one of "
                f"{sorted(FEATURE_ATTENTIONS)}"
            )
        if layers < 1 or min(in_channels, out_channels, pos_dim, width, mlp_ratio) < 1:
            raise ConfigError(
                "in_channels, out_channels, pos_dim, width, layers and mlp_ratio must be positive; "
                f"got {in_channels}, {out_channels}, {pos_dim}, {width}, {layers}, {mlp_ratio}"
            )
        self.encoder = MLP([in_channels, *([] if linear_encoder else [2 * width]), 2 * width])
        self.authors_init = authors_init
        self.feature_blocks = nn.ModuleList(
            FeatureBlock(
                width,
                pos_dim if feature_coordinates else 0,
                heads,
                feature_attention,
                mlp_ratio,
                dropout,
                feature_layer_norm,
                feature_qkv_bias,
                feature_query_scale,
            )
            for _ in range(layers)
        )
        self.solution_blocks = nn.ModuleList(
            SolutionBlock(
                width,
                out_channels if i == layers - 1 else width,
                k,
                value_projection,
                orthonormalize,
                momentum,
                inner_product,
                mlp_ratio,
                hidden=not (linear_decoder and i == layers - 1),
            )
            for i in range(layers)
        )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Truncated-normal linear weights (std 0.02, as in the authors' code) in the encoder and
        the FFNs; the feature attention keeps its own initialisation unless ``authors_init``."""
        self.encoder.reset_parameters()
        trunc_normal_linears(self.encoder)
        for block in [*self.feature_blocks, *self.solution_blocks]:
            block.reset_parameters()
        if self.authors_init:
            for module in self.modules():
                if isinstance(module, nn.Linear):
                    nn.init.trunc_normal_(module.weight, std=0.02)
                    if module.bias is not None:
                        nn.init.zeros_(module.bias)

    def compute(self, data: Data, walk: Walk) -> Tensor:
        """The two streams ``[N, width]`` are the only state of size N; every stage integrates
        the feature attention's kernels, then the orthogonal attention's moments and inner
        products, over the nodes (in chunks: over every chunk) before updating them. Chunked,
        the feature attention must have per-sample kernels (softmax attention has none)."""
        features, pos, batch, weight, is_query = self._nodes(data)
        weight = mesh_weight(data, weight)
        samples, n = num_samples(data), len(features)
        g, h = walk.map(lambda nodes: self.encoder(features[nodes]), n).chunk(2, dim=-1)
        for feature_block, solution_block in zip(self.feature_blocks, self.solution_blocks):
            g = walk.layer(
                feature_block, g, pos, batch, weight, num_samples=samples, overwrite=True
            )
            h = walk.layer(
                solution_block, h, None, batch, weight, num_samples=samples, overwrite=True, g=g
            )
        return h if is_query is None else h[is_query]

    def quadratic(self, data: Data) -> str | None:
        if self.config["feature_attention"] == "softmax":
            return (
                "its softmax feature attention weighs every pair of nodes; train it with "
                "feature_attention='galerkin' or 'linear'"
            )
        return None

    def _nodes(self, data: Data):
        """Mesh nodes followed by the query nodes (see :func:`meshop.data.nodes_with_queries`)."""
        return nodes_with_queries(data, self.features(data))


__all__ = ["ONO"]

"""The two blocks of ONO (Xiao et al.): the feature stream's transformer block and the solution
stream's orthogonal-attention stage."""

from __future__ import annotations

from torch import Tensor, nn

from meshop.data.batching import part
from meshop.errors import ConfigError
from meshop.nn.chunked import map_over_chunks, sum_over_chunks
from meshop.nn.fourier_attention import FourierAttention
from meshop.nn.galerkin_attention import GalerkinAttention
from meshop.nn.linear_attention import LinearAttention
from meshop.nn.mlp import MLP
from meshop.nn.orthogonal_attention import OrthogonalAttention
from meshop.nn.softmax_attention import SoftmaxAttention

#: self-attention layers of the feature stream, by name (all order-independent)
FEATURE_ATTENTIONS = {
    "galerkin": GalerkinAttention,
    "linear": LinearAttention,
    "softmax": SoftmaxAttention,
    "fourier": FourierAttention,
}


class FeatureBlock(nn.Module):
    r"""Pre-LN transformer block of ONO's feature stream (ONO eq. (3)).

    .. math::
        \tilde g = g + \mathrm{Attn}(\mathrm{LN}(g)), \qquad
        g \leftarrow \tilde g + \mathrm{FFN}(\mathrm{LN}(\tilde g)),

    with any self-attention of :data:`FEATURE_ATTENTIONS` (quadrature-weighted, per sample) and a
    two-layer GELU FFN.

    Args:
        width (int): feature width :math:`d'`.
        pos_dim (int): coordinates appended to every attention head.
        heads (int): attention heads.
        attention (str): a key of :data:`FEATURE_ATTENTIONS`.
        mlp_ratio (int): hidden width of the FFN in units of ``width``.
        dropout (float): attention dropout (training only).
        layer_norm (bool): the attention's per-head layer norms (the Galerkin Transformer's new
            placement); ``False``: the raw projections, as in the authors' linear attention.
        qkv_bias (bool): biases of the attention's Q, K, V projections (``False``: none, as in
            the authors' linear attention).
        query_scale (bool): linear attention only: the queries' softmax times
            :math:`e^{-1/2}`, as in the authors' linear attention (see
            :class:`~meshop.nn.LinearAttention`).

    Shapes:
        - input: ``g`` [N, d'], ``pos`` [N, pos_dim], ``batch`` [N], ``weight`` [N]
        - output: [N, d']
    """

    def __init__(
        self,
        width,
        pos_dim,
        heads=8,
        attention="galerkin",
        mlp_ratio=1,
        dropout=0.0,
        layer_norm=True,
        qkv_bias=True,
        query_scale=False,
    ):
        super().__init__()
        if query_scale and attention != "linear":
            raise ConfigError(
                f"query_scale is an option of the linear attention, not of {attention!r}"
            )
        self.norm_attn = nn.LayerNorm(width)
        extra = {"query_scale": True} if query_scale else {}
        self.attn = FEATURE_ATTENTIONS[attention](
            width,
            pos_dim,
            heads=heads,
            layer_norm=layer_norm,
            dropout=dropout,
            qkv_bias=qkv_bias,
            **extra,
        )
        self.norm_ffn = nn.LayerNorm(width)
        self.ffn = MLP([width, mlp_ratio * width, width])

    def reset_parameters(self) -> None:
        for module in (self.norm_attn, self.attn, self.norm_ffn, self.ffn):
            module.reset_parameters()
        trunc_normal_linears(self.ffn)

    def forward(self, g: Tensor, pos: Tensor, batch: Tensor, weight: Tensor) -> Tensor:
        g = g + self.attn(self.norm_attn(g), pos, batch, weight)
        return g + self.ffn(self.norm_ffn(g))

    def forward_chunked(
        self,
        g: Tensor,
        pos: Tensor,
        batch: Tensor,
        weight: Tensor | None,
        num_samples: int,
        chunk_nodes: int,
    ) -> Tensor:
        """:meth:`forward` chunk by chunk (:mod:`meshop.nn.chunked`): the attention's kernels
        integrated over every chunk (:meth:`~meshop.nn.HeadAttention.integrate`), then each
        chunk's attention and FFN; ``g`` is updated in place without autograd, checkpointed chunk
        by chunk with it."""
        attn = self.attn

        def integrals(nodes):
            x = self.norm_attn(g[nodes])
            return attn.integrate(x, pos[nodes], batch[nodes], part(weight, nodes), num_samples)

        kernel = attn.kernel(sum_over_chunks(integrals, len(g), chunk_nodes, attn))

        def update(nodes):
            x = self.norm_attn(g[nodes])
            y = g[nodes] + attn.apply_kernel(x, pos[nodes], batch[nodes], kernel)
            return y + self.ffn(self.norm_ffn(y))

        return map_over_chunks(update, len(g), chunk_nodes, out=g)


class SolutionBlock(nn.Module):
    r"""One stage of ONO's solution stream: orthogonal attention, residual, LN and FFN (eq. (6)).

    .. math::
        h \leftarrow \mathrm{FFN}\big(\mathrm{LN}(\psi\, \mathrm{diag}(\mu)\,
        \langle \psi, h W_V \rangle + h)\big), \qquad \psi = \mathrm{ort}(g W_Q),

    where :math:`g` is the feature stream after the same stage's :class:`FeatureBlock`. The last
    stage's FFN maps to the output channels: it is the decoder :math:`\mathcal{P}` of eq. (2).

    Args:
        width (int): width :math:`d` of the solution stream (and of the feature stream).
        out_channels (int): output width of the FFN.
        k (int), value_projection (bool), orthonormalize (str): see
            :class:`~meshop.nn.OrthogonalAttention`.
        momentum (float), inner_product (str): see :class:`~meshop.nn.OrthogonalAttention`.
        mlp_ratio (int): hidden width of the FFN in units of ``width``.
        hidden (bool): ``False`` makes the FFN a single linear layer (the authors' last stage).

    Shapes:
        - input: ``h`` [N, d], ``g`` [N, d], ``batch`` [N], ``weight`` [N]
        - output: [N, out_channels]
    """

    def __init__(
        self,
        width,
        out_channels,
        k=8,
        value_projection=True,
        orthonormalize="sample",
        momentum=0.1,
        inner_product="mean",
        mlp_ratio=1,
        hidden=True,
    ):
        super().__init__()
        self.attn = OrthogonalAttention(
            width,
            width,
            k,
            value_projection,
            orthonormalize=orthonormalize,
            momentum=momentum,
            inner_product=inner_product,
        )
        self.norm = nn.LayerNorm(width)
        self.ffn = MLP(
            [width, mlp_ratio * width, out_channels] if hidden else [width, out_channels]
        )

    def reset_parameters(self) -> None:
        for module in (self.attn, self.norm, self.ffn):
            module.reset_parameters()
        trunc_normal_linears(self.ffn)

    def forward(self, h: Tensor, g: Tensor, batch: Tensor, weight: Tensor) -> Tensor:
        return self.ffn(self.norm(self.attn(h, None, batch, weight, g=g) + h))

    def forward_chunked(
        self,
        h: Tensor,
        g: Tensor,
        batch: Tensor,
        weight: Tensor | None,
        num_samples: int,
        chunk_nodes: int,
    ) -> Tensor:
        """:meth:`forward` chunk by chunk (:mod:`meshop.nn.chunked`): the moments over every
        chunk (:meth:`~meshop.nn.OrthogonalAttention.moments`), the factors, the inner products
        over every chunk (:meth:`~meshop.nn.OrthogonalAttention.project`), then each chunk's
        output ``[N, out_channels]`` (written into ``h`` without autograd when the widths
        agree)."""
        attn = self.attn

        def moments(nodes):
            return attn.moments(g[nodes], batch[nodes], part(weight, nodes), num_samples)

        sums = sum_over_chunks(moments, len(h), chunk_nodes)
        factors = attn.factors(sums)

        def inner(nodes):
            return attn.project(
                h[nodes], g[nodes], batch[nodes], part(weight, nodes), factors, sums
            )

        coefficients = attn.coefficients(sum_over_chunks(inner, len(h), chunk_nodes), sums)

        def update(nodes):
            y = attn.expand(g[nodes], batch[nodes], factors, coefficients) + h[nodes]
            return self.ffn(self.norm(y))

        return map_over_chunks(update, len(h), chunk_nodes, out=h)


def trunc_normal_linears(mlp: MLP) -> None:
    """The authors' initialisation of an MLP: truncated-normal weights (std 0.02), zero biases."""
    for lin in mlp.lins:
        nn.init.trunc_normal_(lin.weight, std=0.02)
        nn.init.zeros_(lin.bias)


__all__ = ["FEATURE_ATTENTIONS", "FeatureBlock", "SolutionBlock", "trunc_normal_linears"]

"""The two blocks of ONO (Xiao et al.): the feature stream's transformer block and the solution
stream's orthogonal-attention stage."""

from __future__ import annotations

from torch import Tensor, nn

from meshop.errors import ConfigError
from meshop.nn.fourier_attention import FourierAttention
from meshop.nn.galerkin_attention import GalerkinAttention
from meshop.nn.integral import Integral
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


class FeatureBlock(Integral):
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

    # The integral protocol (meshop.nn.integral) of its attention, the residual and FFN per node.

    def partial(self, x, pos, batch, weight, num_samples, state=None, **extra):
        return self.attn.partial(self.norm_attn(x), pos, batch, weight, num_samples)

    def finish(self, sums, state=None) -> Tensor:
        return self.attn.finish(sums)

    def apply(self, state, x, pos, batch, **extra) -> Tensor:
        y = x + self.attn.apply(state, self.norm_attn(x), pos, batch)
        return y + self.ffn(self.norm_ffn(y))


class SolutionBlock(Integral):
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
        - input: ``h`` [N, d], ``pos`` (unused), ``batch`` [N], ``weight`` [N], keyword ``g``
          [N, d] (the feature stream)
        - output: [N, out_channels]
    """

    passes = 2

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

    def forward(self, h: Tensor, pos=None, batch=None, weight=None, *, g: Tensor) -> Tensor:
        return self.ffn(self.norm(self.attn(h, None, batch, weight, g=g) + h))

    # The integral protocol (meshop.nn.integral) of its attention's two passes, then the
    # residual, LN and FFN per node.

    def partial(self, x, pos, batch, weight, num_samples, state=None, *, g, **extra):
        return self.attn.partial(x, None, batch, weight, num_samples, state, g=g)

    def finish(self, sums, state=None):
        return self.attn.finish(sums, state)

    def apply(self, state, x, pos, batch, *, g, **extra) -> Tensor:
        return self.ffn(self.norm(self.attn.apply(state, x, None, batch, g=g) + x))


def trunc_normal_linears(mlp: MLP) -> None:
    """The authors' initialisation of an MLP: truncated-normal weights (std 0.02), zero biases."""
    for lin in mlp.lins:
        nn.init.trunc_normal_(lin.weight, std=0.02)
        nn.init.zeros_(lin.bias)


__all__ = ["FEATURE_ATTENTIONS", "FeatureBlock", "SolutionBlock", "trunc_normal_linears"]

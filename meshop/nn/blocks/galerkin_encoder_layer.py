r"""Encoder layer of the Galerkin Transformer: scale-preserving (eq. (4)) or regular (eq. (7))."""

from __future__ import annotations

from torch import Tensor, nn

from meshop.errors import ConfigError
from meshop.nn.fourier_attention import FourierAttention
from meshop.nn.galerkin_attention import GalerkinAttention
from meshop.nn.integral import Integral
from meshop.nn.linear_attention import LinearAttention
from meshop.nn.softmax_attention import SoftmaxAttention

#: the attention types of the Galerkin Transformer's layer family, by name
ATTENTIONS = {
    "galerkin": GalerkinAttention,
    "fourier": FourierAttention,
    "softmax": SoftmaxAttention,
    "linear": LinearAttention,
}

#: layer-norm schemes: ``"new"`` (eq. (4), LN inside the attention) or ``"regular"`` (eq. (7))
NORMS = ("new", "regular")


def check_attention(attention: str) -> type:
    if attention not in ATTENTIONS:
        raise ConfigError(f"unknown attention {attention!r}; choose one of {sorted(ATTENTIONS)}")
    return ATTENTIONS[attention]


class GalerkinEncoderLayer(Integral):
    r"""One encoder layer of the Galerkin Transformer, in either layer-norm scheme.

    The scale-preserving scheme (``norm="new"``, eq. (4)) keeps no layer norm outside the
    attention, whose per-head layer norm sits on :math:`K, V` (Galerkin, eq. (6)) or :math:`Q, K`
    (Fourier, eq. (5)):

    .. math::
        \tilde{\mathbf{y}} = \mathbf{y} + \mathrm{Attn}(\mathbf{y}), \qquad
        \mathbf{y} \mapsto \tilde{\mathbf{y}} + g(\tilde{\mathbf{y}}).

    The regular scheme (``norm="regular"``, eq. (7)) takes the layer norm out of the attention and
    normalises after each residual connection, as in the classic post-LN Transformer that eq. (7)
    writes compactly:

    .. math::
        \tilde{\mathbf{y}} = \mathrm{Ln}\big(\mathbf{y} + \mathrm{Attn}(\mathbf{y})\big), \qquad
        \mathbf{y} \mapsto \mathrm{Ln}\big(\tilde{\mathbf{y}} + g(\tilde{\mathbf{y}})\big).

    :math:`g` is the pointwise FFN ``Linear(d, h) -> ReLU -> Dropout -> Linear(h, d)``.

    Args:
        channels (int): width :math:`d`.
        pos_dim (int): coordinates appended to every attention head.
        attention (str): ``"galerkin"``, ``"fourier"``, ``"softmax"`` or ``"linear"``.
        heads (int): attention heads.
        norm (str): ``"new"`` (eq. (4)) or ``"regular"`` (eq. (7)).
        hidden_channels (int, optional): FFN width :math:`h` (default :math:`2d`).
        dropout (float): attention dropout (training only).
        ffn_dropout (float): FFN dropout (training only).
        eta (float): gain of the Xavier part of the attention projections (eq. (17)).
        delta (float): diagonal added to the attention projection matrices (eq. (17)).

    Shapes:
        - input: ``x`` [N, d], ``pos`` [N, pos_dim], ``batch`` [N], ``weight`` [N] (quadrature
          weights, see :class:`~meshop.nn.HeadAttention`)
        - output: [N, d]
    """

    def __init__(
        self,
        channels: int,
        pos_dim: int,
        attention: str = "galerkin",
        heads: int = 1,
        norm: str = "new",
        hidden_channels: int | None = None,
        dropout: float = 0.0,
        ffn_dropout: float = 0.0,
        eta: float = 1e-2,
        delta: float = 1e-2,
    ):
        super().__init__()
        if norm not in NORMS:
            raise ConfigError(f"unknown norm {norm!r}; choose 'new' (eq. 4) or 'regular' (eq. 7)")
        self.channels, self.norm = channels, norm
        self.hidden_channels = hidden_channels or 2 * channels
        self.attn = check_attention(attention)(
            channels,
            pos_dim,
            heads=heads,
            layer_norm=norm == "new",
            dropout=dropout,
            eta=eta,
            delta=delta,
        )
        self.ffn = nn.Sequential(
            nn.Linear(channels, self.hidden_channels),
            nn.ReLU(),
            nn.Dropout(ffn_dropout),
            nn.Linear(self.hidden_channels, channels),
        )
        if norm == "regular":
            self.norm_attn, self.norm_ffn = nn.LayerNorm(channels), nn.LayerNorm(channels)

    def reset_parameters(self) -> None:
        self.attn.reset_parameters()
        for module in self.ffn:
            if isinstance(module, nn.Linear):
                module.reset_parameters()
        if self.norm == "regular":
            self.norm_attn.reset_parameters()
            self.norm_ffn.reset_parameters()

    def forward(
        self, x: Tensor, pos: Tensor, batch: Tensor | None = None, weight: Tensor | None = None
    ) -> Tensor:
        x = x + self.attn(x, pos, batch, weight)
        if self.norm == "regular":
            x = self.norm_attn(x)
            return self.norm_ffn(x + self.ffn(x))
        return x + self.ffn(x)

    # The integral protocol (meshop.nn.integral) of its attention, the residual and FFN per node.

    def partial(self, x, pos, batch, weight, num_samples, state=None, **extra):
        return self.attn.partial(x, pos, batch, weight, num_samples)

    def finish(self, sums, state=None) -> Tensor:
        return self.attn.finish(sums)

    def apply(self, state, x, pos, batch, **extra) -> Tensor:
        y = x + self.attn.apply(state, x, pos, batch)
        if self.norm == "regular":
            y = self.norm_attn(y)
            return self.norm_ffn(y + self.ffn(y))
        return y + self.ffn(y)

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}({self.channels}, attention={self.attn!r}, "
            f"norm={self.norm!r}, hidden_channels={self.hidden_channels})"
        )


__all__ = ["ATTENTIONS", "NORMS", "GalerkinEncoderLayer", "check_attention"]

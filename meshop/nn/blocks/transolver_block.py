"""One layer of Transolver (Transolver eq. (5))."""

from __future__ import annotations

from torch import Tensor, nn

from meshop.nn.integral import Integral
from meshop.nn.mlp import MLP
from meshop.nn.physics_attention import PhysicsAttention


class TransolverBlock(Integral):
    r"""One Transolver layer (Transolver eq. (5)): pre-LN physics-attention and MLP, each with a
    residual connection.

    .. math::
        \hat{\mathbf{x}}^{l} = \mathrm{PhysicsAttn}\big(\mathrm{LN}(\mathbf{x}^{l-1})\big)
            + \mathbf{x}^{l-1}, \qquad
        \mathbf{x}^{l} = \mathrm{MLP}\big(\mathrm{LN}(\hat{\mathbf{x}}^{l})\big)
            + \hat{\mathbf{x}}^{l}

    Args:
        width (int): feature width :math:`C`.
        heads (int), slices (int), dropout (float): see :class:`~meshop.nn.PhysicsAttention`.
        mlp_ratio (int): hidden width of the MLP in units of ``width``.

    Shapes:
        - input: ``x`` [N, C], ``pos`` (unused), ``batch`` [N], ``weight`` [N]
        - output: [N, C]
    """

    def __init__(self, width, heads=8, slices=64, mlp_ratio=1, dropout=0.0):
        super().__init__()
        self.norm_attn = nn.LayerNorm(width)
        self.attn = PhysicsAttention(width, heads=heads, slices=slices, dropout=dropout)
        self.norm_mlp = nn.LayerNorm(width)
        self.mlp = MLP([width, mlp_ratio * width, width])

    def forward(self, x: Tensor, pos=None, batch=None, weight=None) -> Tensor:
        x = x + self.attn(self.norm_attn(x), None, batch, weight)
        return x + self.mlp(self.norm_mlp(x))

    # The integral protocol (meshop.nn.integral) of its attention, the residual and MLP per node.

    def partial(self, x, pos, batch, weight, num_samples, state=None, **extra):
        return self.attn.partial(self.norm_attn(x), None, batch, weight, num_samples)

    def finish(self, sums, state=None) -> Tensor:
        return self.attn.finish(sums)

    def apply(self, state, x, pos, batch, **extra) -> Tensor:
        y = x + self.attn.apply(state, self.norm_attn(x), None, batch)
        return y + self.mlp(self.norm_mlp(y))


__all__ = ["TransolverBlock"]

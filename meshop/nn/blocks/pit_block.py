"""The processor block of PiT (Sec. 2.3; Table 9)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from meshop.nn.integral import Integral
from meshop.nn.mlp import MLP
from meshop.nn.position_attention import PositionAttention


class PiTBlock(Integral):
    r"""One processor block of PiT (Sec. 2.3; Table 9 "PosAtt MLP LINEAR GELU"):

    .. math::
        h = \sigma(\mathrm{PosAtt}(U; D)), \qquad U' = \sigma(\mathrm{MLP}(h) + \mathrm{Linear}(U)),

    with :math:`\sigma` = GELU, global multi-head position-attention on the block's mesh, a
    two-layer MLP (GELU between) and a linear skip. This is the paper's form; it reproduces the
    parameter counts of Table 9 exactly.

    Args:
        width (int): feature width :math:`d_v`.
        heads (int): attention heads.
        lambda_param (str): parameterization of :math:`\lambda > 0`.
        periodic (float or sequence, optional): periodic box lengths (minimum-image distance).

    Shapes:
        - input: :math:`(N, d_v)`, positions :math:`(N, D)`, batch :math:`(N)` or ``None``,
          quadrature weights :math:`(N)` or ``None``
        - output: :math:`(N, d_v)`
    """

    cuts = "targets"

    def __init__(self, width: int, heads: int = 2, lambda_param: str = "tan", periodic=None):
        super().__init__()
        self.attn = PositionAttention(width, width, heads, lambda_param, periodic)
        self.mlp = MLP([width, width, width])
        self.skip = nn.Linear(width, width)

    def reset_parameters(self) -> None:
        self.attn.reset_parameters()
        self.mlp.reset_parameters()
        self.skip.reset_parameters()

    def forward(
        self, u: Tensor, pos: Tensor, batch: Tensor | None = None, weight: Tensor | None = None
    ) -> Tensor:
        h = F.gelu(self.attn(u, pos, batch, weight))
        return F.gelu(self.mlp(h) + self.skip(u))

    # The integral protocol (meshop.nn.integral) of its attention, the MLP and skip per target.

    def target_chunk(self, chunk_nodes: int, batch: Tensor) -> int:
        return self.attn.target_chunk(chunk_nodes, batch)

    def partial(self, x, pos, batch, weight, num_samples, state=None, **extra):
        return self.attn.partial(x, pos, batch, weight, num_samples, state, **extra)

    def finish(self, sums, state=None) -> Tensor:
        return self.attn.finish(sums, state)

    def apply(self, state, x, pos, batch, **extra) -> Tensor:
        """The block's output at targets from their attention ``state`` and own features ``x``."""
        return F.gelu(self.mlp(F.gelu(state)) + self.skip(x))


__all__ = ["PiTBlock"]

"""The processor block of PiT (Sec. 2.3; Table 9)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from meshop.nn.chunked import map_over_chunks
from meshop.nn.mlp import MLP
from meshop.nn.position_attention import PositionAttention


class PiTBlock(nn.Module):
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

    def forward_chunked(
        self, u: Tensor, pos: Tensor, batch: Tensor, weight: Tensor | None, chunk_nodes: int
    ) -> Tensor:
        """:meth:`forward` for chunks of targets, each attending to every node of its sample
        with the sources streamed (:meth:`~meshop.nn.PositionAttention.attend_streamed`): a new
        ``[N, d_v]`` tensor, never an ``N x N`` one; checkpointed chunk by chunk under
        autograd."""

        def update(nodes):
            h = self.attn.attend_streamed(
                lambda sources: u[sources], pos, batch, weight, pos[nodes], batch[nodes]
            )
            return F.gelu(self.mlp(F.gelu(h)) + self.skip(u[nodes]))

        return map_over_chunks(update, len(u), chunk_nodes)


__all__ = ["PiTBlock"]

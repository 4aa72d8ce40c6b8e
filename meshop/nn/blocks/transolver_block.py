"""One layer of Transolver (Transolver eq. (5))."""

from __future__ import annotations

from torch import Tensor, nn

from meshop.data.batching import part
from meshop.nn.chunked import map_over_chunks, sum_over_chunks
from meshop.nn.mlp import MLP
from meshop.nn.physics_attention import PhysicsAttention


class TransolverBlock(nn.Module):
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
        - input: ``x`` [N, C], ``batch`` [N], ``weight`` [N]
        - output: [N, C]
    """

    def __init__(self, width, heads=8, slices=64, mlp_ratio=1, dropout=0.0):
        super().__init__()
        self.norm_attn = nn.LayerNorm(width)
        self.attn = PhysicsAttention(width, heads=heads, slices=slices, dropout=dropout)
        self.norm_mlp = nn.LayerNorm(width)
        self.mlp = MLP([width, mlp_ratio * width, width])

    def forward(self, x: Tensor, batch: Tensor, weight: Tensor) -> Tensor:
        x = x + self.attn(self.norm_attn(x), None, batch, weight)
        return x + self.mlp(self.norm_mlp(x))

    def forward_chunked(
        self, x: Tensor, batch: Tensor, weight: Tensor | None, num_samples: int, chunk_nodes: int
    ) -> Tensor:
        """:meth:`forward` chunk by chunk (:mod:`meshop.nn.chunked`): the slice tokens integrated
        over every chunk first (:meth:`~meshop.nn.PhysicsAttention.integrate`), then each chunk's
        attention and MLP; ``x`` is updated in place without autograd, checkpointed chunk by
        chunk with it."""

        def integrals(nodes):
            return self.attn.integrate(
                self.norm_attn(x[nodes]), batch[nodes], part(weight, nodes), num_samples
            )

        tokens = self.attn.attend_tokens(sum_over_chunks(integrals, len(x), chunk_nodes))

        def update(nodes):
            y = x[nodes] + self.attn.deslice(self.norm_attn(x[nodes]), batch[nodes], tokens)
            return y + self.mlp(self.norm_mlp(y))

        return map_over_chunks(update, len(x), chunk_nodes, out=x)


__all__ = ["TransolverBlock"]

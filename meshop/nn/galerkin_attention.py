r"""Softmax-free Galerkin-type self-attention (Galerkin Transformer eq. (6))."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from meshop.nn.head_attention import HeadAttention
from meshop.nn.quadrature import equal_weight, weighted_moment


class GalerkinAttention(HeadAttention):
    r"""Galerkin-type attention (Galerkin Transformer eq. (6)), linear in the number of nodes.

    .. math::
        \mathbf{z}_i = Q_i \Big(\sum_{j} w_j\, \mathrm{Ln}(K_j)^\top \mathrm{Ln}(V_j)\Big)
        \quad\text{per head and per sample,}

    i.e. :math:`Q(\tilde K^\top \tilde V)/n` with the :math:`1/n` read as quadrature weights
    :math:`w_j`. The :math:`e \times e` matrix :math:`\tilde K^\top \tilde V` is formed first
    (:math:`e = d_k + m`), so the cost is :math:`O(n e^2)` and no :math:`n \times n` matrix exists.
    Attention dropout acts on that matrix. Multi-head frame, coordinates, diagonal initialization
    and arguments: :class:`HeadAttention`.

    Shapes:
        - input: ``x`` [N, d], ``pos`` [N, m], ``batch`` [N], ``weight`` [N]
        - output: [N, d]
    """

    normalized = ("k", "v")

    def attend(self, q, k, v, weight, mask):
        kv = F.dropout(weighted_moment(k, v, weight), self.dropout, self.training)
        return q @ kv

    def _forward_equal(self, x: Tensor, pos: Tensor, weight: Tensor | None, b: int) -> Tensor:
        r"""Equal-size samples with the query and output projections folded into the
        :math:`e \times e` products: with :math:`M_h = (\tilde K_h^\top W \tilde V_h) W^O_h`
        (``[B, e, d]`` per head), the layer is
        :math:`\sum_h [Q_h \| \mathbf{x}] M_h + b^O = y A + \mathbf{x} P + c` with
        :math:`A = \sum_h W^Q_h M_h^{(Q)}` (``[B, d, d]``), so neither :math:`Q` nor the
        attention output is formed: one ``[m, d] x [d, d]`` product per sample replaces three.
        The same numbers as the general path up to rounding."""
        if "q" in self.norms:  # a layer norm on Q would not fold (not the case of eq. (6))
            return super()._forward_equal(x, pos, weight, b)
        n, heads, hc, pd = x.shape[0], self.heads, self.head_channels, self.pos_dim
        m, e = n // b, hc + pd
        blocks = []
        for key, lin in (("k", self.lin_k), ("v", self.lin_v)):
            t = lin(x).view(b, m, heads, hc)
            if key in self.norms:
                t = self.norms[key](t)
            t = t.transpose(1, 2)  # [B, heads, m, d_k]
            if pd:
                coords = pos.view(b, 1, m, pd).expand(b, heads, m, pd)
                t = torch.cat([t, coords.to(t.dtype)], dim=-1)
            blocks.append(t)
        kv = weighted_moment(*blocks, equal_weight(weight, b, m, x))  # [B, heads, e, e]
        kv = F.dropout(kv, self.dropout, self.training)
        w_out = self.lin_out.weight.view(-1, heads, e).permute(1, 2, 0)  # [heads, e, d]
        mixed = kv @ w_out  # [B, heads, e, d]: M_h
        mixed_q = mixed[:, :, :hc].reshape(b, heads * hc, -1)
        a = self.lin_q.weight.T @ mixed_q  # [B, d_in, d]
        c = self.lin_out.bias.expand(b, -1)  # [B, d]
        if self.lin_q.bias is not None:
            c = self.lin_q.bias @ mixed_q + c
        out = torch.baddbmm(c[:, None, :], x.view(b, m, -1), a)
        if pd:
            out = torch.baddbmm(out, pos.view(b, m, pd).to(out.dtype), mixed[:, :, hc:].sum(1))
        return out.view(n, -1)


__all__ = ["GalerkinAttention"]

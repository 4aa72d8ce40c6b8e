r"""Linear (efficient) attention of Shen et al., the "LT" baseline of the Galerkin Transformer."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from meshop.nn.galerkin_attention import HeadAttention, _equal_weight, log_weight_mask


class LinearAttention(HeadAttention):
    r"""Linear attention with two softmax normalisations (the Galerkin Transformer's "LT", Table 2).

    .. math::
        \mathbf{z}_i = \sigma_{\text{row}}(\hat Q_i)
        \sum_j \frac{w_j \exp(\hat K_j)}{\sum_l w_l \exp(\hat K_l)}^{\!\top} V_j
        \quad\text{per head and per sample,}

    where :math:`\sigma_{\text{row}}` is a softmax over the features of each node, the second
    softmax runs over the nodes of the sample, column by column, weighted by the quadrature weights
    :math:`w_j` (the plain softmax when the weights are equal), and :math:`\hat\diamond` carries the
    coordinates (:math:`e = d_k + m`). Like :class:`~meshop.nn.GalerkinAttention` the
    :math:`e \times e` product is formed first: cost :math:`O(n e^2)`. The new layer-norm placement
    normalises :math:`K` and :math:`V` ("LT Ln"); ``layer_norm=False`` gives the efficient attention
    of Shen et al. Dropout on the :math:`e \times e` matrix only in training. Arguments:
    :class:`~meshop.nn.HeadAttention`.

    Shapes:
        - input: ``x`` [N, d], ``pos`` [N, m], ``batch`` [N], ``weight`` [N]
        - output: [N, d]
    """

    normalized = ("k", "v")

    def attend(self, q, k, v, weight, mask):
        q = q.softmax(dim=-1)
        if weight.shape[-1] != 1:  # equal weights shift every logit alike: nothing to add
            k = k + log_weight_mask(weight, mask, k.dtype)[:, None, :, None]
        k = k.softmax(dim=-2)
        kv = F.dropout(k.transpose(-2, -1) @ v, self.dropout, self.training)  # [B, heads, e, e]
        return q @ kv

    def _forward_equal(self, x: Tensor, pos: Tensor, weight: Tensor | None, b: int) -> Tensor:
        r"""Equal-size samples with the output projection folded into the :math:`e \times e`
        products: :math:`\sum_h \sigma(\hat Q_h) (\hat K_h^\top V_h W^O_h) + b^O`, one
        ``[m, heads e] x [heads e, d]`` product per sample instead of the per-head products and
        the merge. The same numbers as the general path up to rounding."""
        n, heads, hc, pd = x.shape[0], self.heads, self.head_channels, self.pos_dim
        m, e = n // b, hc + pd
        blocks = []
        for key, lin in (("q", self.lin_q), ("k", self.lin_k), ("v", self.lin_v)):
            t = lin(x).view(b, m, heads, hc)
            if key in self.norms:
                t = self.norms[key](t)
            if key != "q":
                t = t.transpose(1, 2)  # [B, heads, m, d_k]
            if pd:
                coords = pos.view(b, m, 1, pd) if key == "q" else pos.view(b, 1, m, pd)
                t = torch.cat([t, coords.expand(*t.shape[:-1], pd).to(t.dtype)], dim=-1)
            blocks.append(t)
        q, k, v = blocks  # q [B, m, heads, e]; k, v [B, heads, m, e]
        weight = _equal_weight(weight, b, m, x)
        if weight.shape[-1] != 1:
            k = k + weight.clamp_min(torch.finfo(k.dtype).tiny).log()[:, None, :, None]
        kv = F.dropout(k.softmax(dim=-2).transpose(-2, -1) @ v, self.dropout, self.training)
        w_out = self.lin_out.weight.view(-1, heads, e).permute(1, 2, 0)  # [heads, e, d]
        mixed = (kv @ w_out).reshape(b, heads * e, -1)  # [B, heads e, d]
        q = q.softmax(dim=-1).view(b, m, heads * e)
        return torch.baddbmm(self.lin_out.bias, q, mixed).view(n, -1)


__all__ = ["LinearAttention"]

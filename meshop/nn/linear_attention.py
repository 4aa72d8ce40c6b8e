r"""Linear (efficient) attention of Shen et al., the "LT" baseline of the Galerkin Transformer."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from meshop.nn.head_attention import HeadAttention
from meshop.nn.quadrature import equal_weight, log_weight_mask


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
        products (:meth:`~meshop.nn.HeadAttention._merge_folded`). The same numbers as the
        general path up to rounding."""
        q, k, v = self._equal_projections(x, pos, b)
        weight = equal_weight(weight, b, q.shape[1], x)
        if weight.shape[-1] != 1:
            k = k + weight.clamp_min(torch.finfo(k.dtype).tiny).log()[:, None, :, None]
        kv = F.dropout(k.softmax(dim=-2).transpose(-2, -1) @ v, self.dropout, self.training)
        return self._merge_folded(q.softmax(dim=-1), kv)


__all__ = ["LinearAttention"]

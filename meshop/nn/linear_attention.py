r"""Linear (efficient) attention of Shen et al., the "LT" baseline of the Galerkin Transformer."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from meshop.data.batching import sample_ranges
from meshop.nn.head_attention import HeadAttention
from meshop.nn.integral import SoftmaxSums
from meshop.nn.quadrature import chunk_weight, equal_weight, log_weight_mask


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
    of Shen et al. Dropout on the :math:`e \times e` matrix only in training.

    Args:
        query_scale (bool): multiply the softmax of the queries by :math:`e^{-1/2}`, as
            lucidrains' ``linear-attention-transformer`` does (the same functions as without it,
            the factor taken up by :math:`W^O`, but a different parameterisation: under Adam and
            a small initialisation of :math:`W^O` it trains differently); default ``False``.
            The other arguments are those of :class:`~meshop.nn.HeadAttention`.

    Shapes:
        - input: ``x`` [N, d], ``pos`` [N, m], ``batch`` [N], ``weight`` [N]
        - output: [N, d]
    """

    normalized = ("k", "v")

    def __init__(self, *args, query_scale: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.query_scale = query_scale

    def attend(self, q, k, v, weight, mask):
        q = self._query(q)
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
        return self._merge_folded(self._query(q), kv)

    def partial(self, x, pos, batch, weight, num_samples, state=None, **extra):
        r"""The node softmax's sums of these nodes (see :meth:`HeadAttention.partial
        <meshop.nn.HeadAttention.partial>`) per sample, head and key feature, shifted by their
        maximum :math:`m` of :math:`\hat K + \log w`: :math:`\sum_j w_j e^{\hat K_j - m\,\top}
        V_j` (``num`` [B, heads, e, e]) and :math:`\sum_j w_j e^{\hat K_j - m}` (``mass``
        [B, heads, e])."""
        k = self._node_projection("k", self.lin_k, x, pos)  # [heads, n, e]
        v = self._node_projection("v", self.lin_v, x, pos)
        w = chunk_weight(weight, x)
        logits = k + w.clamp_min(torch.finfo(k.dtype).tiny).log()[None, :, None]
        e = k.shape[-1]
        sums = SoftmaxSums(
            x.new_zeros(num_samples, self.heads, e, e),
            x.new_zeros(num_samples, self.heads, e),
            x.new_full((num_samples, self.heads, e), -torch.inf),
        )
        for sample, nodes in sample_ranges(batch, num_samples):
            top = logits[:, nodes].amax(1).detach()  # [heads, e]: any shift gives the same sums
            p = torch.exp(logits[:, nodes] - top[:, None, :])  # [heads, n_b, e]
            sums.num[sample] = p.transpose(1, 2) @ v[:, nodes]
            sums.mass[sample] = p.sum(1)
            sums.max[sample] = top
        return sums

    def finish(self, sums, state=None):
        """The per-sample kernels ``[B, heads, e, e]``: the node softmax of the keys applied to
        the values; attention dropout on the kernel in training."""
        return F.dropout(sums.quotient(), self.dropout, self.training)

    def _query(self, q):
        q = q.softmax(dim=-1)
        return q * q.shape[-1] ** -0.5 if self.query_scale else q

    def __repr__(self) -> str:
        text = super().__repr__()
        return text[:-1] + ", query_scale=True)" if self.query_scale else text


__all__ = ["LinearAttention"]

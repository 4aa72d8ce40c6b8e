r"""Linear (efficient) attention of Shen et al., the "LT" baseline of the Galerkin Transformer."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from meshop.data.batching import sample_ranges
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

    def integrate(self, x, pos, batch, weight, num_samples, sums=None):
        r"""Adds one chunk of nodes to the running per-sample integrals of the node softmax
        (see :meth:`HeadAttention.integrate <meshop.nn.HeadAttention.integrate>`): with a running
        maximum :math:`m` of :math:`\hat K + \log w` per sample, head and feature,
        :math:`\sum_j w_j e^{\hat K_j - m\,\top} V_j` (``"kv"``) and :math:`\sum_j w_j
        e^{\hat K_j - m}` (``"mass"`` [B, heads, e]); both are rescaled when the maximum grows,
        so the result is exact in any chunking."""
        k = self._node_projection("k", self.lin_k, x, pos)  # [heads, n, e]
        v = self._node_projection("v", self.lin_v, x, pos)
        w = x.new_ones(len(x)) if weight is None else weight.to(x.dtype)
        logits = k + w.clamp_min(torch.finfo(k.dtype).tiny).log()[None, :, None]
        if sums is None:
            e = k.shape[-1]
            sums = {
                "kv": x.new_zeros(num_samples, self.heads, e, e),
                "mass": x.new_zeros(num_samples, self.heads, e),
                "max": x.new_full((num_samples, self.heads, e), -torch.inf),
            }
        for sample, nodes in sample_ranges(batch, num_samples):
            top = torch.maximum(sums["max"][sample], logits[:, nodes].amax(1))  # [heads, e]
            rescale = torch.exp(sums["max"][sample] - top)
            p = torch.exp(logits[:, nodes] - top[:, None, :])  # [heads, n_b, e]
            sums["kv"][sample] = (
                sums["kv"][sample] * rescale[..., None] + p.transpose(1, 2) @ v[:, nodes]
            )
            sums["mass"][sample] = sums["mass"][sample] * rescale + p.sum(1)
            sums["max"][sample] = top
        return sums

    def kernel(self, sums):
        """The per-sample kernels ``[B, heads, e, e]``: the node softmax of the keys applied to
        the values."""
        return sums["kv"] / sums["mass"].clamp_min(torch.finfo(sums["mass"].dtype).tiny)[..., None]

    def _query(self, q):
        return q.softmax(dim=-1)


__all__ = ["LinearAttention"]

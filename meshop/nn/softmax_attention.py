r"""Softmax scaled dot-product self-attention, the baseline of the Galerkin Transformer (ST)."""

from __future__ import annotations

import torch.nn.functional as F

from meshop.errors import ConfigError
from meshop.nn.head_attention import HeadAttention
from meshop.nn.quadrature import log_weight_mask


class SoftmaxAttention(HeadAttention):
    r"""Softmax attention in the Galerkin Transformer's multi-head frame (its "ST" baseline).

    .. math::
        \mathbf{z}_i = \sum_j
        \frac{w_j \exp\!\big(\hat Q_i \cdot \hat K_j / \sqrt{e}\big)}
             {\sum_l w_l \exp\!\big(\hat Q_i \cdot \hat K_l / \sqrt{e}\big)}\, V_j
        \quad\text{per head and per sample,}

    with :math:`\hat Q = \mathrm{Ln}(Q)`, :math:`\hat K = \mathrm{Ln}(K)` in the new layer-norm
    placement (the paper's "ST Ln", Table 2) or the raw projections with ``layer_norm=False``,
    coordinates appended (:math:`e = d_k + m`). The quadrature weights :math:`w_j` enter as
    :math:`\log w_j` added to the scores: with equal weights in a sample (a uniform grid, or the
    default) this is exactly the usual softmax. Computed by
    :func:`torch.nn.functional.scaled_dot_product_attention`; dropout on the attention weights only
    in training. Arguments: :class:`~meshop.nn.HeadAttention`.

    Shapes:
        - input: ``x`` [N, d], ``pos`` [N, m], ``batch`` [N], ``weight`` [N]
        - output: [N, d]
    """

    normalized = ("q", "k")

    def attend(self, q, k, v, weight, mask):
        bias = log_weight_mask(weight, mask, q.dtype)[:, None, None, :]  # [B, 1, 1, n]
        p = self.dropout if self.training else 0.0
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=p)

    def partial(self, x, pos, batch, weight, num_samples, state=None, **extra):
        """Softmax attention has no kernel independent of the query node (its cost is quadratic
        in the nodes), so it cannot be evaluated in chunks of nodes."""
        raise ConfigError(
            "softmax attention weighs every node pair, so it has no per-sample integral to "
            "accumulate over chunks of nodes; evaluate it unchunked (chunk_nodes=None), or use "
            "galerkin, fourier or linear attention for meshes too large to fit"
        )


__all__ = ["SoftmaxAttention"]

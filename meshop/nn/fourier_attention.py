r"""Softmax-free Fourier-type self-attention (Galerkin Transformer eq. (5))."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from meshop.errors import ConfigError
from meshop.nn.head_attention import HeadAttention
from meshop.nn.quadrature import equal_weight, weighted_moment


class FourierAttention(HeadAttention):
    r"""Fourier-type attention (Galerkin Transformer eq. (5)), computed at linear cost in the nodes.

    .. math::
        \mathbf{z}_i = \sum_{j} w_j\, \big(\mathrm{Ln}(Q_i) \cdot \mathrm{Ln}(K_j)\big)\, V_j
        \quad\text{per head and per sample,}

    i.e. :math:`(\tilde Q \tilde K^\top) V / n` with the :math:`1/n` read as quadrature weights
    :math:`w_j`: a Nyström discretisation of an integral transform with the learned kernel
    :math:`\kappa(x, \xi) = \zeta_q(x) \cdot \phi_k(\xi)`. Without softmax the product is
    associative, :math:`(\tilde Q \tilde K^\top) W V = \tilde Q (\tilde K^\top W V)`, so the
    layer forms the :math:`e \times e` matrix first and costs :math:`O(n e^2)` like
    :class:`GalerkinAttention` (the same numbers up to rounding; the layer norms still sit on
    :math:`Q` and :math:`K`). Only attention dropout in training, which acts on the entries of the
    :math:`n \times n` kernel matrix, needs that matrix: then it is built, at
    :math:`O(n^2 e)`. Multi-head frame, coordinates, diagonal initialization and arguments:
    :class:`HeadAttention`.

    Shapes:
        - input: ``x`` [N, d], ``pos`` [N, m], ``batch`` [N], ``weight`` [N]
        - output: [N, d]
    """

    normalized = ("q", "k")

    def attend(self, q, k, v, weight, mask):
        if not (self.training and self.dropout > 0):  # (Q K^T) W V = Q (K^T W V): linear in n
            return q @ weighted_moment(k, v, weight)
        if weight.shape[-1] == 1:  # equal weights: scale the n x e keys, not the n x n kernel
            kernel = q @ (k * weight[:, None, :, None]).transpose(-2, -1)
        else:
            kernel = (q @ k.transpose(-2, -1)) * weight[:, None, None, :]  # [B, heads, n, n]
        kernel = F.dropout(kernel, self.dropout, self.training)
        return kernel @ v

    def _forward_equal(self, x: Tensor, pos: Tensor, weight: Tensor | None, b: int) -> Tensor:
        r"""Equal-size samples in linear order with the output projection folded into the
        :math:`e \times e` products (:meth:`~meshop.nn.HeadAttention._merge_folded`); kernel
        dropout in training takes the general frame. The same numbers as the general path up to
        rounding."""
        if self.training and self.dropout > 0:
            return super()._forward_equal(x, pos, weight, b)
        q, k, v = self._equal_projections(x, pos, b)
        return self._merge_folded(q, weighted_moment(k, v, equal_weight(weight, b, q.shape[1], x)))

    def finish(self, sums, state=None):
        """The per-sample kernels of chunked evaluation (:meth:`HeadAttention.finish
        <meshop.nn.HeadAttention.finish>`), without dropout: Fourier attention's dropout acts on
        the entries of the ``n x n`` kernel, which chunks never build."""
        if self.training and self.dropout > 0:
            raise ConfigError(
                "Fourier attention's dropout acts on the n x n kernel, which chunked training "
                "never builds; train in chunks with dropout=0, or without chunks"
            )
        mass = sums["mass"].clamp_min(torch.finfo(sums["mass"].dtype).tiny)
        return sums["kv"] / mass[:, None, None, None]


__all__ = ["FourierAttention"]

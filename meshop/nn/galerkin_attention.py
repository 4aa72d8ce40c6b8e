r"""Softmax-free Galerkin- and Fourier-type self-attention (Galerkin Transformer eqs. (5), (6)).

This module also holds :class:`HeadAttention`, the multi-head frame the whole layer family shares
(projections, per-head layer norm, coordinates appended to every head, merge, diagonal
initialization of eq. (17)); :class:`~meshop.nn.SoftmaxAttention` and
:class:`~meshop.nn.LinearAttention` are the paper's baselines in the same frame.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from meshop._pyg import to_dense_batch
from meshop.data.neighbors import equal_sizes
from meshop.errors import ConfigError
from meshop.nn.interface import check_inputs


def default_weight(n: int, batch: Tensor | None, like: Tensor) -> Tensor:
    """Quadrature weights ``1 / n_b`` for every node of sample ``b`` (the paper's ``1/n``), with the
    dtype and device of ``like``."""
    if batch is None:
        return torch.full((n,), 1.0 / n, dtype=like.dtype, device=like.device)
    return 1.0 / torch.bincount(batch).to(like.dtype)[batch]


class HeadLayerNorm(nn.Module):
    r"""Layer normalization of each head's features, with its own affine parameters per head.

    .. math::
        \mathrm{Ln}(\mathbf{q}_{i,h}) = \gamma_h \odot
        \frac{\mathbf{q}_{i,h} - \mu(\mathbf{q}_{i,h})}
             {\sqrt{\sigma^2(\mathbf{q}_{i,h}) + \epsilon}} + \beta_h

    Shapes:
        - input and output: ``[N, heads, head_channels]``
    """

    def __init__(self, heads: int, head_channels: int, eps: float = 1e-5):
        super().__init__()
        self.heads, self.head_channels, self.eps = heads, head_channels, eps
        self.weight = nn.Parameter(torch.empty(heads, head_channels))
        self.bias = nn.Parameter(torch.empty(heads, head_channels))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.ones_(self.weight)
        nn.init.zeros_(self.bias)

    def forward(self, x: Tensor) -> Tensor:
        if self.heads == 1:  # one affine for every node: the fused kernel applies it
            return F.layer_norm(x, (self.head_channels,), self.weight[0], self.bias[0], self.eps)
        return F.layer_norm(x, (self.head_channels,), eps=self.eps) * self.weight + self.bias

    def extra_repr(self) -> str:
        return f"heads={self.heads}, head_channels={self.head_channels}"


class HeadAttention(nn.Module):
    r"""Multi-head self-attention frame of the Galerkin Transformer layer family.

    For every head :math:`h` (:math:`d_k = d / \text{heads}`), with :math:`\mathbf{x}` the node
    coordinates:

    .. math::
        Q_h, K_h, V_h = \mathbf{y} W^Q_h,\ \mathbf{y} W^K_h,\ \mathbf{y} W^V_h, \qquad
        \hat{\diamond}_h = [\,\mathrm{Ln}_h(\diamond_h) \text{ or } \diamond_h \,\|\, \mathbf{x}\,],
        \qquad
        \mathbf{z} = \big[\mathrm{Attn}(\hat Q_h, \hat K_h, \hat V_h)\big]_{h} W^O,

    where the subclass defines :math:`\mathrm{Attn}` and which two of :math:`Q, K, V` get the
    per-head layer norm (eqs. (5), (6)), and
    :math:`W^O \in \mathbb{R}^{(d + \text{heads}\cdot m) \times d}` merges the heads.
    The projections start from the diagonal initialization of eq. (17),
    :math:`W \leftarrow \eta U + \delta I` with :math:`U` Xavier-uniform (gain 1), biases zero.

    Every sum over nodes is a quadrature per sample: node :math:`j` of sample :math:`b` has weight
    :math:`w_j / \sum_{l \in b} w_l` (the domain's ``weight`` normalised to sum to one per sample,
    i.e. integrals are averages over the domain; ``1/n_b`` when not given), which is exactly the
    paper's :math:`1/n` on a uniform grid. Normalising keeps the layer's scale independent of the
    domain's size: an airfoil mesh reaching 15 chords out has a measure of about 700, and six
    layers of raw integrals over it overflow.

    Args:
        channels (int): width :math:`d` of the input and output features.
        pos_dim (int): number :math:`m` of coordinates appended to every head (0: none).
        heads (int): number of heads; must divide ``channels``.
        layer_norm (bool): the paper's per-head layer norm inside the attention (the new scheme);
            ``False`` for the regular scheme of eq. (7), where the encoder normalises instead.
        dropout (float): dropout on the attention weights, applied in training only.
        eta (float): gain :math:`\eta` of the Xavier part of the initialization.
        delta (float): diagonal :math:`\delta` added to the projection matrices.

    Shapes:
        - input: the common signature of :mod:`meshop.nn.interface`, self-attention only:
          ``x`` [N, d], ``pos`` [N, m], ``batch`` [N] (sorted, as in PyG batches), ``weight`` [N]
          (``pos_dst`` and ``batch_dst`` raise: the queries are the nodes' own features)
        - output: [N, d]
    """

    #: which projections get the per-head layer norm in the new scheme
    normalized: tuple[str, ...] = ()

    def __init__(
        self,
        channels: int,
        pos_dim: int,
        heads: int = 1,
        layer_norm: bool = True,
        dropout: float = 0.0,
        eta: float = 1e-2,
        delta: float = 1e-2,
    ):
        super().__init__()
        if heads < 1 or channels % heads:
            raise ConfigError(f"heads ({heads}) must be positive and divide channels ({channels})")
        if pos_dim < 0:
            raise ConfigError(f"pos_dim must be >= 0, got {pos_dim}")
        self.channels, self.pos_dim, self.heads = channels, pos_dim, heads
        self.head_channels = channels // heads
        self.layer_norm, self.dropout, self.eta, self.delta = layer_norm, dropout, eta, delta
        self.lin_q = nn.Linear(channels, channels)
        self.lin_k = nn.Linear(channels, channels)
        self.lin_v = nn.Linear(channels, channels)
        self.norms = nn.ModuleDict(
            {key: HeadLayerNorm(heads, self.head_channels) for key in self.normalized}
            if layer_norm
            else {}
        )
        self.lin_out = nn.Linear(channels + heads * pos_dim, channels)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in (self.lin_q, self.lin_k, self.lin_v):
            nn.init.xavier_uniform_(lin.weight, gain=self.eta)
            with torch.no_grad():
                lin.weight += self.delta * torch.eye(
                    self.channels, dtype=lin.weight.dtype, device=lin.weight.device
                )
            nn.init.zeros_(lin.bias)
        for norm in self.norms.values():
            norm.reset_parameters()
        self.lin_out.reset_parameters()

    def attend(self, q: Tensor, k: Tensor, v: Tensor, weight: Tensor, mask: Tensor) -> Tensor:
        """The attention of one layer type on dense per-sample blocks.

        Args:
            q: [B, heads, n_max, e] queries (zero rows where ``mask`` is False).
            k: [B, heads, n_max, e] keys (zero rows where ``mask`` is False).
            v: [B, heads, n_max, e] values (zero rows where ``mask`` is False).
            weight: [B, n_max] quadrature weights (zero on padding), or [B, 1] when the weights
                are equal within every sample (and there is no padding).
            mask: [B, n_max] True on real nodes.

        Returns:
            [B, heads, n_max, e]
        """
        raise NotImplementedError

    def forward(
        self,
        x: Tensor,
        pos: Tensor,
        batch: Tensor | None = None,
        weight: Tensor | None = None,
        *,
        pos_dst: Tensor | None = None,
        batch_dst: Tensor | None = None,
    ) -> Tensor:
        check_inputs(type(self).__name__, x, pos, batch, weight, pos_dst, batch_dst, cross=False)
        n, heads = x.shape[0], self.heads
        sizes = equal_sizes(n, n, batch, batch)
        if sizes is not None:
            return self._forward_equal(x, pos, weight, sizes[0])
        coords = pos[:, None, :].expand(n, heads, self.pos_dim) if self.pos_dim else None
        if weight is None:
            weight = default_weight(n, batch, x)
        blocks = []
        for key, lin in (("q", self.lin_q), ("k", self.lin_k), ("v", self.lin_v)):
            t = lin(x).view(n, heads, self.head_channels)
            if key in self.norms:
                t = self.norms[key](t)
            if coords is not None:
                t = torch.cat([t, coords], dim=-1)
            blocks.append(t)
        e = blocks[0].shape[-1]
        dense = []
        for t in blocks:
            t, mask = to_dense_batch(t.reshape(n, heads * e), batch)
            dense.append(t.view(t.shape[0], t.shape[1], heads, e).transpose(1, 2))
        weight, _ = to_dense_batch(weight, batch)
        weight = weight / weight.sum(1, keepdim=True)  # a mean over each sample's domain
        out = self.attend(*dense, weight.to(x.dtype), mask)  # [B, heads, n_max, e]
        out = out.transpose(1, 2).reshape(mask.shape[0], mask.shape[1], heads * e)[mask]
        return self.lin_out(out)

    def _forward_equal(self, x: Tensor, pos: Tensor, weight: Tensor | None, b: int) -> Tensor:
        """Samples of equal sizes as one batch of ``[B, heads, m, e]`` views (no padding, no
        gathering); uniform weights within every sample are passed as ``[B, 1]``."""
        n, heads = x.shape[0], self.heads
        m = n // b
        coords = None
        if self.pos_dim:
            coords = pos.view(b, 1, m, self.pos_dim).expand(b, heads, m, self.pos_dim)
        blocks = []
        for key, lin in (("q", self.lin_q), ("k", self.lin_k), ("v", self.lin_v)):
            t = lin(x).view(b, m, heads, self.head_channels)
            if key in self.norms:
                t = self.norms[key](t)
            t = t.transpose(1, 2)  # [B, heads, m, d_k]
            if coords is not None:
                t = torch.cat([t, coords.to(t.dtype)], dim=-1)
            blocks.append(t)
        weight = _equal_weight(weight, b, m, x)
        mask = torch.ones(b, m, dtype=torch.bool, device=x.device)
        out = self.attend(*blocks, weight, mask)  # [B, heads, m, e]
        return self.lin_out(out.transpose(1, 2).reshape(n, -1))

    def _equal_projections(self, x: Tensor, pos: Tensor, b: int) -> tuple[Tensor, Tensor, Tensor]:
        r""":math:`\hat Q` ``[B, m, heads, e]`` (nodes first, ready for :meth:`_merge_folded`),
        :math:`\hat K, \hat V` ``[B, heads, m, e]`` of ``b`` equal-size samples."""
        n, heads, hc, pd = x.shape[0], self.heads, self.head_channels, self.pos_dim
        m = n // b
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
        return blocks[0], blocks[1], blocks[2]

    def _merge_folded(self, q: Tensor, kv: Tensor) -> Tensor:
        r"""The merged output :math:`\sum_h q_h\, \kappa_h W^O_h + b^O` of queries ``q``
        ``[B, m, heads, e]`` and per-head matrices :math:`\kappa_h` ``kv`` ``[B, heads, e, e]``,
        with the output projection folded into :math:`\kappa_h` first: one ``[m, heads e] x
        [heads e, d]`` product per sample instead of the per-head products, the transpose and
        the merge; ``[B m, d]``."""
        b, m, heads, e = q.shape
        w_out = self.lin_out.weight.view(-1, heads, e).permute(1, 2, 0)  # [heads, e, d]
        mixed = (kv @ w_out).reshape(b, heads * e, -1)  # [B, heads e, d]
        return torch.baddbmm(self.lin_out.bias, q.reshape(b, m, heads * e), mixed).view(b * m, -1)

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}({self.channels}, pos_dim={self.pos_dim}, "
            f"heads={self.heads}, layer_norm={self.layer_norm}, dropout={self.dropout})"
        )


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
        kv = weighted_moment(*blocks, _equal_weight(weight, b, m, x))  # [B, heads, e, e]
        kv = F.dropout(kv, self.dropout, self.training)
        w_out = self.lin_out.weight.view(-1, heads, e).permute(1, 2, 0)  # [heads, e, d]
        mixed = kv @ w_out  # [B, heads, e, d]: M_h
        mixed_q = mixed[:, :, :hc].reshape(b, heads * hc, -1)
        a = self.lin_q.weight.T @ mixed_q  # [B, d_in, d]
        c = self.lin_q.bias @ mixed_q + self.lin_out.bias  # [B, d]
        out = torch.baddbmm(c[:, None, :], x.view(b, m, -1), a)
        if pd:
            out = torch.baddbmm(out, pos.view(b, m, pd).to(out.dtype), mixed[:, :, hc:].sum(1))
        return out.view(n, -1)


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
        return self._merge_folded(q, weighted_moment(k, v, _equal_weight(weight, b, q.shape[1], x)))


def _equal_weight(weight: Tensor | None, b: int, m: int, like: Tensor) -> Tensor:
    """Quadrature weights of ``b`` samples of ``m`` nodes, normalised per sample: ``[B, m]``, or
    ``[B, 1]`` when they are equal within every sample."""
    if weight is None:
        return like.new_full((b, 1), 1.0 / m)
    weight = weight.view(b, m).to(like.dtype)
    uniform = torch.equal(weight, weight[:, :1].expand_as(weight))
    weight = weight / weight.sum(1, keepdim=True)  # a mean over each sample's domain
    return weight[:, :1] if uniform else weight


def weighted_moment(k: Tensor, v: Tensor, weight: Tensor) -> Tensor:
    """``sum_j w_j k_j^T v_j`` per sample and head: [B, heads, e, e] from ``k``, ``v``
    [B, heads, n, e] and ``weight`` [B, n], or [B, 1] for equal weights (then the e x e product
    is scaled instead of the n x e keys)."""
    if weight.shape[-1] == 1:
        return (k.transpose(-2, -1) @ v) * weight[:, None, :, None]
    return (k * weight[:, None, :, None]).transpose(-2, -1) @ v


def log_weight_mask(weight: Tensor, mask: Tensor, dtype) -> Tensor:
    """``log w_j`` on real nodes, ``-inf`` on padding: added to scores, a softmax over ``j`` becomes
    the quadrature-weighted normalisation ``w_j e^{s_j} / sum_l w_l e^{s_l}`` ([B, n_max])."""
    return torch.where(mask, weight.clamp_min(torch.finfo(dtype).tiny).log(), -math.inf).to(dtype)


__all__ = [
    "FourierAttention",
    "GalerkinAttention",
    "HeadAttention",
    "HeadLayerNorm",
    "default_weight",
    "log_weight_mask",
    "weighted_moment",
]

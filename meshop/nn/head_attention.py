r"""The multi-head frame of the Galerkin Transformer's attention family (Galerkin Transformer
eqs. (5)-(7), (17)): projections, per-head layer norm, coordinates appended to every head, merge
and diagonal initialization, shared by :class:`~meshop.nn.GalerkinAttention`,
:class:`~meshop.nn.FourierAttention` and the paper's baselines :class:`~meshop.nn.SoftmaxAttention`
and :class:`~meshop.nn.LinearAttention`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from meshop._pyg import to_dense_batch
from meshop.data.batching import sample_ranges
from meshop.data.neighbors import equal_sizes
from meshop.data.weights import default_weight
from meshop.errors import ConfigError
from meshop.nn.integral import Integral
from meshop.nn.interface import check_inputs
from meshop.nn.quadrature import chunk_weight, equal_weight


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


class HeadAttention(Integral):
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
        qkv_bias (bool): biases of the :math:`Q, K, V` projections; ``False``: bias-free
            projections, as in lucidrains' ``linear-attention-transformer`` (the output
            projection keeps its bias).

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
        qkv_bias: bool = True,
    ):
        super().__init__()
        if heads < 1 or channels % heads:
            raise ConfigError(f"heads ({heads}) must be positive and divide channels ({channels})")
        if pos_dim < 0:
            raise ConfigError(f"pos_dim must be >= 0, got {pos_dim}")
        self.channels, self.pos_dim, self.heads = channels, pos_dim, heads
        self.head_channels = channels // heads
        self.layer_norm, self.dropout, self.eta, self.delta = layer_norm, dropout, eta, delta
        self.qkv_bias = qkv_bias
        self.lin_q = nn.Linear(channels, channels, bias=qkv_bias)
        self.lin_k = nn.Linear(channels, channels, bias=qkv_bias)
        self.lin_v = nn.Linear(channels, channels, bias=qkv_bias)
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
            if lin.bias is not None:
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
        if weight is None:
            weight = default_weight(n, batch, x)
        blocks = [self._node_projection(*key_lin, x, pos) for key_lin in self._projections()]
        e = blocks[0].shape[-1]
        dense = []
        for t in blocks:  # [heads, n, e] -> [B, heads, n_max, e]
            t, mask = to_dense_batch(t.transpose(0, 1).reshape(n, heads * e), batch)
            dense.append(t.view(t.shape[0], t.shape[1], heads, e).transpose(1, 2))
        weight, _ = to_dense_batch(weight, batch)
        weight = weight / weight.sum(1, keepdim=True)  # a mean over each sample's domain
        out = self.attend(*dense, weight.to(x.dtype), mask)  # [B, heads, n_max, e]
        out = out.transpose(1, 2).reshape(mask.shape[0], mask.shape[1], heads * e)[mask]
        return self.lin_out(out)

    def _forward_equal(self, x: Tensor, pos: Tensor, weight: Tensor | None, b: int) -> Tensor:
        """Samples of equal sizes as one batch of ``[B, heads, m, e]`` views (no padding, no
        gathering); uniform weights within every sample are passed as ``[B, 1]``."""
        q, k, v = self._equal_projections(x, pos, b)
        mask = torch.ones(b, q.shape[1], dtype=torch.bool, device=x.device)
        out = self.attend(q.transpose(1, 2), k, v, equal_weight(weight, b, q.shape[1], x), mask)
        return self.lin_out(out.transpose(1, 2).reshape(len(x), -1))

    def _equal_projections(self, x: Tensor, pos: Tensor, b: int) -> tuple[Tensor, Tensor, Tensor]:
        r""":math:`\hat Q` ``[B, m, heads, e]`` (nodes first, ready for :meth:`_merge_folded`),
        :math:`\hat K, \hat V` ``[B, heads, m, e]`` of ``b`` equal-size samples."""
        n, heads, hc, pd = x.shape[0], self.heads, self.head_channels, self.pos_dim
        m = n // b
        blocks = []
        for key, lin in self._projections():
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

    def _projections(self) -> tuple[tuple[str, nn.Linear], ...]:
        return ("q", self.lin_q), ("k", self.lin_k), ("v", self.lin_v)

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

    # The integral protocol (meshop.nn.integral): the layer's only sum over the nodes is the
    # e x e kernel of each head and sample, accumulated over any chunks, then applied per node.

    def partial(self, x, pos, batch, weight, num_samples, state=None, **extra):
        r"""The sums of these nodes (``x`` [n, d], ``pos`` [n, m], sorted ``batch`` [n] of
        global sample indices, ``weight`` [n] or None for equal weights) per sample:
        :math:`\sum_j w_j \hat K_j^\top \hat V_j` (``"kv"`` [B, heads, e, e]) and
        :math:`\sum_j w_j` (``"mass"`` [B])."""
        k = self._node_projection("k", self.lin_k, x, pos)  # [heads, n, e]
        v = self._node_projection("v", self.lin_v, x, pos)
        w = chunk_weight(weight, x)
        e = k.shape[-1]
        sums = {"kv": x.new_zeros(num_samples, self.heads, e, e), "mass": x.new_zeros(num_samples)}
        for sample, nodes in sample_ranges(batch, num_samples):
            w_b = w[nodes]
            sums["kv"][sample] = (k[:, nodes] * w_b[:, None]).transpose(1, 2) @ v[:, nodes]
            sums["mass"][sample] = w_b.sum()
        return sums

    def finish(self, sums, state=None) -> Tensor:
        """The per-sample kernels ``[B, heads, e, e]``: the weights normalised to a mean over
        each sample's domain, as in :meth:`forward`; attention dropout on the kernel in training,
        as in Galerkin attention."""
        mass = sums["mass"].clamp_min(torch.finfo(sums["mass"].dtype).tiny)
        return F.dropout(sums["kv"] / mass[:, None, None, None], self.dropout, self.training)

    def apply(self, state, x, pos, batch, **extra) -> Tensor:
        r"""The output ``[n, d]`` at these nodes from the kernel of every sample ``state``:
        :math:`[\hat Q_h \kappa_h]_h W^O + b^O`."""
        q = self._query(self._node_projection("q", self.lin_q, x, pos))  # [heads, n, e]
        out = torch.empty_like(q)
        for sample, nodes in sample_ranges(batch, len(state)):
            out[:, nodes] = q[:, nodes] @ state[sample]
        return self.lin_out(out.transpose(0, 1).reshape(len(x), -1))

    def _query(self, q: Tensor) -> Tensor:
        """The queries as the kernel reads them (the identity; a row softmax in linear
        attention)."""
        return q

    def _node_projection(self, key: str, lin: nn.Linear, x: Tensor, pos: Tensor) -> Tensor:
        r""":math:`\hat Q`, :math:`\hat K` or :math:`\hat V` of a chunk of nodes, head-major
        ``[heads, n, e]``."""
        n = len(x)
        t = lin(x).view(n, self.heads, self.head_channels)
        if key in self.norms:
            t = self.norms[key](t)
        if self.pos_dim:
            coords = pos[:, None, :].expand(n, self.heads, self.pos_dim).to(t.dtype)
            t = torch.cat([t, coords], dim=-1)
        return t.transpose(0, 1)

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}({self.channels}, pos_dim={self.pos_dim}, "
            f"heads={self.heads}, layer_norm={self.layer_norm}, dropout={self.dropout}"
            + ("" if self.qkv_bias else ", qkv_bias=False")
            + ")"
        )


__all__ = ["HeadAttention", "HeadLayerNorm"]

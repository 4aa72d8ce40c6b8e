"""Global and cross position-attention (PiT eqs. (5), (6), (9); multi-head App. C.2)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from meshop.data.neighbors import box_lengths, equal_sizes, minimum_image, sample_slices
from meshop.nn.integral import SoftmaxSums, rows
from meshop.nn.interface import check_inputs
from meshop.nn.position_kernel import PositionKernel
from meshop.nn.quadrature import add_log_weight, log_weight


class PositionAttention(PositionKernel):
    r"""Global position-attention of PiT, and cross position-attention when a target mesh is given.

    Self-attention on one mesh (PiT eqs. (5)-(6)) and cross attention from a source mesh
    :math:`\{y_k\}` onto a target mesh :math:`\{x_i\}` (eq. (9)) are the same formula, run per
    sample of a batch, with one bandwidth :math:`\lambda^h > 0` per head (App. C.2, eq. (22)) and
    the quadrature weights :math:`w_k` of the source nodes:

    .. math::
        \mathrm{head}^h_i = \sum_{k} \frac{w_k \exp(-\lambda^h \|x_i - y_k\|^2)}
            {\sum_{j} w_j \exp(-\lambda^h \|x_i - y_j\|^2)}\, (U W^h)_k,
        \qquad \mathrm{out}_i = \mathrm{Concat}(\mathrm{head}^1_i, \dots, \mathrm{head}^H_i),

    with :math:`W^h \in \mathbb{R}^{C_{in} \times C_{out}/H}` (together the value projection
    :math:`W^V`, no bias) and the sums over the source nodes of the target's own sample. Without
    ``weight`` every :math:`w_k` is equal: the paper's formula, whose limit under mesh refinement
    is the integral operator of Theorem 2.1 (eqs. (7)-(8)) against the *node density*; with the
    mesh's weights the sums are quadratures, and the limit is the same integral over the domain
    on graded and uniform meshes alike. The weights enter exactly, as :math:`\log w_k` added to
    every logit (below), on every path; their scale does not matter.

    The :math:`N_{dst} \times N_{src}` matrix is never built. Since
    :math:`-\lambda\|x - y\|^2 = 2\lambda x \cdot y - \lambda\|y\|^2 - \lambda\|x\|^2` and the row
    softmax cancels the last term, each head is scaled-dot-product attention with queries
    :math:`[x, 1]`, keys :math:`[2\lambda y, -\lambda\|y\|^2 + \log w]` and ``scale=1``;
    coordinates are centred on the sample's source mean first (float32 cancellation) and
    zero-padded to the value head width, so that ``F.scaled_dot_product_attention`` takes its
    fused kernel (O(N) memory).
    Batches whose samples all have the same numbers of source and target nodes (grids, fixed
    meshes, resampled latent meshes) run as one batched call (``[B, H, N, P]``). When the two or
    more samples of such a batch also share one mesh (grids, Darcy, Burgers), each head's kernel
    is computed once and applied to all the samples' values side by side (``[H, N_src, B C_h]``);
    that kernel is an explicit :math:`H N_{dst} N_{src}` matrix, used up to ``dense_elements``
    entries (the fused kernel beyond). Batches of mixed sizes run sample after sample (a
    block-diagonal boolean mask would be a dense :math:`N_{dst} \times N_{src}` tensor). All
    paths compute the same formula.

    With ``periodic`` the distance is the minimum-image one, :math:`\|x - y\|_L^2 = \sum_a
    (\delta_a - L_a\,\mathrm{round}(\delta_a / L_a))^2` with :math:`\delta = x - y`. It is not a dot
    product, so the kernel (with :math:`\log w_k` added to its logits) is computed exactly in
    chunks of targets: O(chunk x N_src) memory, at most ``chunk_elements`` distances at a time.

    Args:
        in_channels (int): width :math:`C_{in}` of the source features.
        out_channels (int): width :math:`C_{out}` of the output; divisible by ``heads``.
        heads (int): number of heads :math:`H`, each with its own :math:`\lambda^h` and
            :math:`W^h` (PiT default 2).
        lambda_param (str): how :math:`\lambda^h > 0` is parameterized: ``"tan"`` (paper),
            ``"softplus"`` or ``"square"``; see :func:`positive_lambda`.
        periodic (float or sequence, optional): box length of a periodic domain, one for all axes
            or one per axis (``None`` for an open axis). Coordinates need not be wrapped.
        chunk_elements (int): target-chunk budget of the periodic path, in distances.
        dense_elements (int): largest explicit kernel (:math:`H N_{dst} N_{src}` entries) of a
            batch whose samples share one mesh; 0 always uses the fused kernel.

    Shapes:
        - input: the common signature of :mod:`meshop.nn.interface`: ``x`` :math:`(N_{src},
          C_{in})`, ``pos`` :math:`(N_{src}, D)`, sorted ``batch`` :math:`(N_{src})`, ``weight``
          :math:`(N_{src})` (``None``: equal weights, the paper's form); keywords ``pos_dst``
          :math:`(N_{dst}, D)` (``None``: self-attention) and sorted ``batch_dst``
          :math:`(N_{dst})`
        - output: :math:`(N_{dst}, C_{out})`
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        heads: int = 2,
        lambda_param: str = "tan",
        periodic: float | Sequence[float | None] | None = None,
        chunk_elements: int = 2**20,
        dense_elements: int = 2**24,
    ):
        self.chunk_elements = int(chunk_elements)
        self.dense_elements = int(dense_elements)
        super().__init__(in_channels, out_channels, heads, lambda_param, periodic)

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
        check_inputs(type(self).__name__, x, pos, batch, weight, pos_dst, batch_dst)
        if pos_dst is None:
            pos_dst, batch_dst = pos, batch
        v = self.lin_v(x).view(-1, self.heads, self.head_channels)  # [N_src, H, C_h]
        if len(pos) == 0 or len(pos_dst) == 0:  # nothing to attend to, or nobody asking
            return v.new_zeros(len(pos_dst), self.out_channels)
        lam = self.lam
        log_w = log_weight(weight, pos)
        sizes = equal_sizes(len(pos), len(pos_dst), batch, batch_dst)
        if self.periodic is None and sizes is not None:
            b, n_src, n_dst = sizes
            out = self._attend_batched(
                pos.view(b, n_src, -1),
                pos_dst.view(b, n_dst, -1),
                v.view(b, n_src, self.heads, self.head_channels),
                lam,
                None if log_w is None else log_w.view(b, n_src),
            )
            return out.reshape(len(pos_dst), self.out_channels)
        if batch is None:
            batch = torch.zeros(len(pos), dtype=torch.long, device=pos.device)
        if batch_dst is None:
            batch_dst = torch.zeros(len(pos_dst), dtype=torch.long, device=pos_dst.device)
        attend = self._attend if self.periodic is None else self._attend_periodic
        out = v.new_zeros(len(pos_dst), self.heads, self.head_channels)
        for src, dst in sample_slices(batch, batch_dst):
            if src.stop > src.start and dst.stop > dst.start:
                w = None if log_w is None else log_w[src]
                out[dst] = attend(pos[src], pos_dst[dst], v[src], lam, w)
        return out.view(len(pos_dst), self.out_channels)

    def _attend(
        self, pos_src: Tensor, pos_dst: Tensor, v: Tensor, lam: Tensor, log_w: Tensor | None
    ) -> Tensor:
        """One sample (``v`` [N_src, H, C_h]): the batched path with one sample."""
        log_w = None if log_w is None else log_w[None]
        return self._attend_batched(pos_src[None], pos_dst[None], v[None], lam, log_w)[0]

    def _attend_batched(
        self, pos_src: Tensor, pos_dst: Tensor, v: Tensor, lam: Tensor, log_w: Tensor | None
    ) -> Tensor:
        """Samples of equal sizes: ``pos_src`` [B, N_src, D], ``pos_dst`` [B, N_dst, D], ``v``
        [B, N_src, H, C_h], ``log_w`` [B, N_src] or None -> [B, N_dst, H, C_h]."""
        b, n_src, heads, width = v.shape
        n_dst = pos_dst.shape[1]
        shared = b > 1 and (
            torch.equal(pos_src, pos_src[:1].expand_as(pos_src))
            and torch.equal(pos_dst, pos_dst[:1].expand_as(pos_dst))
            and (log_w is None or torch.equal(log_w, log_w[:1].expand_as(log_w)))
        )
        if shared:
            pos_src, pos_dst = pos_src[:1], pos_dst[:1]
            log_w = None if log_w is None else log_w[:1]
        centre = pos_src.mean(1, keepdim=True)
        y, x = pos_src - centre, pos_dst - centre  # [B', N, D]
        if not shared or heads * n_dst * n_src > self.dense_elements:
            return self._attend_fused(x, y, v, lam, log_w)
        # one kernel per head for every sample: the samples' values side by side, [H, N_src, B C];
        # queries and keys keep the width D + 1 of the augmented coordinates (no padding)
        q = torch.cat([x, torch.ones_like(x[..., :1])], dim=-1).expand(heads, -1, -1)
        k = torch.cat([2.0 * y, -y.square().sum(-1, keepdim=True)], dim=-1)  # [1, N_src, D + 1]
        k = add_log_weight(lam.view(heads, 1, 1) * k, None if log_w is None else log_w[0])
        values = v.permute(2, 1, 0, 3).reshape(1, heads, n_src, b * width)
        dtype = values.dtype
        out = F.scaled_dot_product_attention(
            q.to(dtype)[None], k.to(dtype)[None], values, scale=1.0
        )  # [1, H, N_dst, B C]
        return out[0].view(heads, n_dst, b, width).permute(2, 1, 0, 3)

    def _attend_fused(
        self, x: Tensor, y: Tensor, v: Tensor, lam: Tensor, log_w: Tensor | None
    ) -> Tensor:
        """The batched path through the fused kernel: ``x`` [B', N_dst, D] and ``y`` [B', N_src, D]
        centred coordinates (B' = 1 on a shared mesh), ``v`` [B, N_src, H, C_h]."""
        b, _, heads, width = v.shape
        dim = x.shape[-1]
        size = max(width, dim + 1)
        q = torch.cat([x, torch.ones_like(x[..., :1])], dim=-1)  # [B', N_dst, D + 1]
        q = F.pad(q, (0, size - dim - 1))[:, None].expand(b, heads, -1, -1)
        k = torch.cat([2.0 * y, -y.square().sum(-1, keepdim=True)], dim=-1)  # [B', N_src, D + 1]
        k = lam.view(1, heads, 1, 1) * k[:, None]  # [B', H, N_src, D + 1]
        k = add_log_weight(k, None if log_w is None else log_w[:, None])
        k = F.pad(k, (0, size - dim - 1)).expand(b, heads, -1, -1)
        values = F.pad(v.transpose(1, 2), (0, size - width))  # [B, H, N_src, P]
        dtype = values.dtype
        out = F.scaled_dot_product_attention(
            q.to(dtype).contiguous(), k.to(dtype).contiguous(), values, scale=1.0
        )
        return out[..., :width].transpose(1, 2)  # [B, N_dst, H, C_h]

    def _attend_periodic(
        self, pos_src: Tensor, pos_dst: Tensor, v: Tensor, lam: Tensor, log_w: Tensor | None
    ) -> Tensor:
        """One sample, minimum-image distances, exact kernel in chunks of targets."""
        box = box_lengths(self.periodic, pos_src.shape[1], pos_src)
        chunk = max(1, self.chunk_elements // len(pos_src))
        # allocate the value layout and the output once: per-chunk allocations of varying
        # lifetime fragment the CPU heap (measured: peak RSS grew to GBs over 100k x 4k)
        out = v.new_empty(len(pos_dst), self.heads, self.head_channels)
        v = v.transpose(0, 1).contiguous()  # [H, N_src, C_h]
        for start in range(0, len(pos_dst), chunk):
            delta = minimum_image(pos_dst[start : start + chunk, None] - pos_src[None], box)
            dist = delta.square().sum(-1)  # [c, N_src]
            logits = -lam.view(-1, 1, 1) * dist  # [H, c, N_src]
            attn = torch.softmax(logits if log_w is None else logits + log_w, dim=-1)
            out[start : start + chunk] = torch.matmul(attn.to(v.dtype), v).transpose(0, 1)
        return out

    def partial(
        self, x, pos, batch, weight, num_samples, state=None, *, pos_dst, batch_dst, **extra
    ) -> SoftmaxSums:
        r"""Every target's softmax sums over the sources (:mod:`meshop.nn.integral`): the
        targets ``pos_dst`` [N_dst, D] (sorted ``batch_dst``) read the sources ``pos``
        (sorted ``batch``, ``weight`` or None) of their sample, whose features ``x`` may be a
        function of their rows (:func:`~meshop.nn.integral.rows`), so that no more than a block
        of sources' values exists at a time: :math:`\sum_k w_k e^{s_{ik} - m_i} v_k` ``num``
        ``[N_dst, H, C_h]``, :math:`\sum_k w_k e^{s_{ik} - m_i}` ``mass`` and the running
        maximum :math:`m_i` ``max`` ``[N_dst, H]``, the same formula as :meth:`forward`,
        exact in any blocking. The distances are computed directly (minimum-image when
        periodic), at most ``4 * chunk_elements`` per block; under autograd every block is
        checkpointed, so that a training step keeps one block's ``[H, N_dst, n]`` tensors."""
        lam = self.lam
        log_w = log_weight(weight, pos)
        box = None if self.periodic is None else box_lengths(self.periodic, pos.shape[1], pos)
        n_all = len(pos_dst)
        sums = SoftmaxSums(
            pos_dst.new_zeros(n_all, self.heads, self.head_channels),
            pos_dst.new_zeros(n_all, self.heads),
            pos_dst.new_full((n_all, self.heads), -torch.inf),
        )
        for src, dst in sample_slices(batch, batch_dst):
            n_dst = dst.stop - dst.start
            if n_dst == 0 or src.stop == src.start:
                continue
            step = max(1, 4 * self.chunk_elements // (n_dst * self.heads))

            def block_sums(block, dst=dst):
                """One block of sources' softmax sums ``[H, n_dst, ...]``."""
                v = self.lin_v(rows(x, block)).view(-1, self.heads, self.head_channels)
                delta = pos_dst[dst, None] - pos[None, block]  # [n_dst, n, D]
                if box is not None:
                    delta = minimum_image(delta, box)
                logits = -lam.view(-1, 1, 1) * delta.square().sum(-1)  # [H, n_dst, n]
                if log_w is not None:
                    logits = logits + log_w[block]
                top = logits.amax(-1).detach()
                p = torch.exp(logits - top[..., None])
                return p.to(v.dtype) @ v.transpose(0, 1), p.sum(-1), top

            total = None
            for start in range(src.start, src.stop, step):
                block = slice(start, min(start + step, src.stop))
                if torch.is_grad_enabled():  # the block's [H, n_dst, n] tensors recomputed
                    part = SoftmaxSums(*checkpoint(block_sums, block, use_reentrant=False))
                else:
                    part = SoftmaxSums(*block_sums(block))
                total = part if total is None else total.merge(part)
            sums.num[dst] = total.num.transpose(0, 1).to(pos_dst.dtype)
            sums.mass[dst] = total.mass.t().to(pos_dst.dtype)
            sums.max[dst] = total.max.t().to(pos_dst.dtype)
        return sums

    def __repr__(self) -> str:
        periodic = "" if self.periodic is None else f", periodic={self.periodic}"
        return (
            f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, "
            f"heads={self.heads}, lambda_param={self.lambda_param!r}{periodic})"
        )


__all__ = ["PositionAttention"]

"""Sparse aggregation of attention weights on edges: CSR products per head, forward and
backward, without the ``[E, H, C]`` messages."""

from __future__ import annotations

import warnings

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable


def source_order(local: Tensor) -> Tensor:
    """The order of a sample's edges (sorted by target, then source) by source, then target: the
    transpose in CSR order, in the edges' own index dtype."""
    return torch.argsort(local[1], stable=True).to(local.dtype)


def _sparse(crow: Tensor, col: Tensor, values: Tensor, size: tuple[int, int]) -> Tensor:
    """A CSR matrix from indices already in CSR order (torch's beta notice, and its notice that
    the invariant checks are off, which they are on purpose, silenced)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Ss]parse CSR tensor support is in beta.*")
        warnings.filterwarnings("ignore", message=".*[Ss]parse invariant checks are implicitly")
        return torch.sparse_csr_tensor(crow, col, values, size=size, check_invariants=False)


def _row_pointers(row: Tensor, num_rows: int) -> Tensor:
    """CSR row pointers [num_rows + 1] of sorted row indices."""
    counts = torch.bincount(row, minlength=num_rows)
    return torch.cat([counts.new_zeros(1), counts.cumsum(0)])


class SparseAggregate(torch.autograd.Function):
    r"""``out[i, h] = sum_{e: dst_e = i} alpha[e, h] v[src_e, h]`` without the ``[E, H, C]``
    messages: per head, the forward is the CSR product :math:`A^h V^h` with
    :math:`A^h_{ij} = \alpha_{e,h}` on the edges, and the backward is
    :math:`\partial V^h = (A^h)^\top \partial\mathrm{out}^h` (CSR product with the transpose)
    and :math:`\partial\alpha_{e,h} = \langle \partial\mathrm{out}_{dst_e, h},
    V_{src_e, h}\rangle` (``torch.sparse.sampled_addmm`` on the edge pattern). Autocast is off:
    the products run in the inputs' dtype.

    ``alpha`` [E, H] and ``v`` [N_src, H, C] share a dtype; ``index`` [2, E] (row 0 target,
    row 1 source) is sorted by target, then source, without repeated edges; ``order`` [E], when
    given, sorts the edges by source, then target (else the backward sorts them).
    """

    @staticmethod
    def forward(
        ctx, alpha: Tensor, v: Tensor, index: Tensor, num_dst: int, order: Tensor | None = None
    ) -> Tensor:
        dst, src = index
        crow = _row_pointers(dst, num_dst)
        v_heads = v.transpose(0, 1).contiguous()  # [H, N_src, C]
        size = (num_dst, len(v))
        with torch.autocast(v.device.type, enabled=False):
            out = [
                _sparse(crow, src, a, size) @ v_h for a, v_h in zip(alpha.t().contiguous(), v_heads)
            ]
        ctx.save_for_backward(alpha, v_heads, index, crow, order)
        return torch.stack(out, dim=1)  # [N_dst, H, C]

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor):
        alpha, v_heads, (dst, src), crow, order = ctx.saved_tensors
        size = (len(crow) - 1, v_heads.shape[1])  # [N_dst, N_src]
        grad_heads = grad_out.to(v_heads.dtype).transpose(0, 1).contiguous()  # [H, N_dst, C]
        grad_alpha = grad_v = None
        with torch.autocast(v_heads.device.type, enabled=False):
            if ctx.needs_input_grad[0]:
                grad_alpha = torch.stack(
                    [
                        torch.sparse.sampled_addmm(
                            _sparse(crow, src, a, size), g, v_h.t(), beta=0.0
                        ).values()
                        for a, g, v_h in zip(alpha.t().contiguous(), grad_heads, v_heads)
                    ],
                    dim=1,
                )
            if ctx.needs_input_grad[1]:
                if order is None:  # the transpose in CSR order
                    order = torch.argsort(src, stable=True)
                crow_t, col_t = _row_pointers(src, size[1]), dst[order]
                grad_v = torch.stack(
                    [
                        _sparse(crow_t, col_t, a, size[::-1]) @ g
                        for a, g in zip(alpha[order].t().contiguous(), grad_heads)
                    ],
                    dim=1,
                )
        return grad_alpha, grad_v, None, None, None


__all__ = ["SparseAggregate", "source_order"]

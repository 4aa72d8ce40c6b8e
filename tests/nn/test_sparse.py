"""Sparse aggregation of edge weights (meshop.nn.sparse): the CSR products of local
position-attention equal the sum of the per-edge messages they avoid building."""

import torch

from meshop.nn.sparse import SparseAggregate


def csr_edges(num_dst, num_src, seed=0):
    """A random edge set [2, E] in CSR order (by target, then source), target 2 without edges."""
    mask = torch.rand(num_dst, num_src, generator=torch.Generator().manual_seed(seed)) < 0.4
    mask[2] = False
    return mask.nonzero().t()


def test_sparse_aggregation_matches_the_message_sum_and_passes_gradcheck():
    num_dst, num_src, heads, width = 5, 7, 2, 3
    index = csr_edges(num_dst, num_src)
    generator = torch.Generator().manual_seed(1)
    alpha = torch.rand(index.shape[1], heads, generator=generator, dtype=torch.float64)
    v = torch.randn(num_src, heads, width, generator=generator, dtype=torch.float64)
    out = SparseAggregate.apply(alpha, v, index, num_dst)
    messages = alpha[:, :, None] * v[index[1]]  # [E, H, C]: what the aggregation avoids building
    expected = torch.zeros(num_dst, heads, width, dtype=torch.float64).index_add_(
        0, index[0], messages
    )
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
    alpha.requires_grad_(True)
    v.requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda a, w: SparseAggregate.apply(a, w, index, num_dst), (alpha, v)
    )

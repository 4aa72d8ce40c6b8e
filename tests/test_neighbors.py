import pytest
import torch

from meshop.data import (
    grid_points,
    knn_index,
    neighbor_index,
    quantile_index,
    radius_index,
)
from meshop.errors import ConfigError


def dense_quantile_mask(pos_src, pos_dst, q):
    d = (pos_dst[:, None, :] - pos_src[None, :, :]).pow(2).sum(-1)
    return d <= torch.quantile(d, q, dim=1, keepdim=True)


def as_mask(index, n_dst, n_src):
    mask = torch.zeros(n_dst, n_src, dtype=torch.bool)
    mask[index[0], index[1]] = True
    return mask


@pytest.mark.parametrize("q", [0.0, 0.01, 0.05, 0.2, 0.5, 1.0])
def test_quantile_neighbours_equal_dense_quantile_mask_on_random_clouds(q):
    g = torch.Generator().manual_seed(1)
    pos_src, pos_dst = torch.rand(300, 2, generator=g), torch.rand(120, 2, generator=g)
    index = quantile_index(pos_src, pos_dst, q)
    assert torch.equal(as_mask(index, 120, 300), dense_quantile_mask(pos_src, pos_dst, q))
    assert len(index[1]) == len(set(map(tuple, index.t().tolist())))  # no duplicates


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_quantile_neighbours_match_dense_mask_in_the_positions_dtype(dtype):
    g = torch.Generator().manual_seed(5)
    pos_src = torch.rand(200, 3, generator=g, dtype=dtype)
    pos_dst = torch.rand(50, 3, generator=g, dtype=dtype)
    index = quantile_index(pos_src, pos_dst, 0.07)
    assert torch.equal(as_mask(index, 50, 200), dense_quantile_mask(pos_src, pos_dst, 0.07))


@pytest.mark.parametrize("q", [0.01, 0.02, 0.05, 0.1])
def test_quantile_neighbours_include_ties_on_a_uniform_grid(q):
    pos = grid_points((17, 17))
    index = quantile_index(pos, pos, q)
    dense = dense_quantile_mask(pos, pos, q)
    assert torch.equal(as_mask(index, len(pos), len(pos)), dense)
    # on a grid many neighbours are equidistant: more than ceil(q N) per row must appear
    assert dense.sum(1).max() > torch.ceil(torch.tensor(q * len(pos)))


def test_quantile_neighbours_are_per_sample_in_batches_of_different_sizes():
    g = torch.Generator().manual_seed(2)
    sizes_src, sizes_dst = [50, 200, 120], [30, 10, 60]
    pos_src = [torch.rand(n, 3, generator=g) for n in sizes_src]
    pos_dst = [torch.rand(n, 3, generator=g) for n in sizes_dst]
    batch_src = torch.cat([torch.full((n,), i) for i, n in enumerate(sizes_src)])
    batch_dst = torch.cat([torch.full((n,), i) for i, n in enumerate(sizes_dst)])
    index = quantile_index(torch.cat(pos_src), torch.cat(pos_dst), 0.1, batch_src, batch_dst)
    assert torch.equal(batch_src[index[1]], batch_dst[index[0]])
    off_src, off_dst = 0, 0
    full = as_mask(index, sum(sizes_dst), sum(sizes_src))
    for ps, pd in zip(pos_src, pos_dst):
        block = full[off_dst : off_dst + len(pd), off_src : off_src + len(ps)]
        assert torch.equal(block, dense_quantile_mask(ps, pd, 0.1))
        off_src, off_dst = off_src + len(ps), off_dst + len(pd)


def test_knn_and_radius_return_target_source_pairs_grouped_by_target():
    g = torch.Generator().manual_seed(3)
    pos_src, pos_dst = torch.rand(100, 2, generator=g), torch.rand(40, 2, generator=g)
    index = knn_index(pos_src, pos_dst, 5)
    assert index.shape == (2, 200)
    assert torch.equal(index[0], torch.arange(40).repeat_interleave(5))
    d = torch.cdist(pos_dst, pos_src)
    expected = d.topk(5, largest=False).indices.sort(1).values
    assert torch.equal(index[1].view(40, 5).sort(1).values, expected)
    index = radius_index(pos_src, pos_dst, 0.2)
    assert torch.equal(as_mask(index, 40, 100), d <= 0.2)


def test_neighbor_index_needs_exactly_one_receptive_field():
    pos = torch.rand(10, 2)
    with pytest.raises(ConfigError, match="exactly one"):
        neighbor_index(pos, pos, quantile=0.1, k=3)
    with pytest.raises(ConfigError, match="quantile must be in"):
        neighbor_index(pos, pos, quantile=1.5)
    with pytest.raises(ConfigError, match="k must be"):
        neighbor_index(pos, pos, k=0)
    assert neighbor_index(pos, pos, k=3).shape == (2, 30)


def test_unsorted_batch_vectors_are_rejected():
    pos = torch.rand(6, 2)
    with pytest.raises(ConfigError, match="batch_src must be sorted"):
        knn_index(pos, pos, 2, torch.tensor([0, 1, 0, 1, 0, 1]), torch.zeros(6, dtype=torch.long))

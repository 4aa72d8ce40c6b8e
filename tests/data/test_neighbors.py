import pytest
import torch

from meshop.data import (
    grid_points,
    knn_index,
    neighbor_index,
    neighbors,
    quantile_index,
    radius_index,
)
from meshop.data import neighbors as neighbors_module
from meshop.data.neighbors import radius_among, sort_edges
from meshop.errors import ConfigError


def dense_quantile_mask(pos_src, pos_dst, q):
    d = (pos_dst[:, None, :] - pos_src[None, :, :]).pow(2).sum(-1)
    return d <= torch.quantile(d, q, dim=1, keepdim=True)


def as_mask(index, n_dst, n_src):
    mask = torch.zeros(n_dst, n_src, dtype=torch.bool)
    mask[index[0], index[1]] = True
    return mask


#: the quantile searches: kNN, radius searches by torch-cluster's tree, by direct distances
METHODS = ["knn", "radius", "radius-direct"]


@pytest.fixture(autouse=True)
def radius_searches(request, monkeypatch):
    """A test's ``method`` "radius" searches by torch-cluster's tree only, "radius-direct" by
    direct distances only (the two ways of :func:`meshop.data.neighbors.radius_among`)."""
    method = (
        request.node.callspec.params.get("method") if hasattr(request.node, "callspec") else None
    )
    if method in ("radius", "radius-direct"):
        every = float("inf") if method == "radius-direct" else 0.0
        monkeypatch.setattr(neighbors, "DENSE_PER_SOURCE_LOG2", every)


def quantile_by(pos_src, pos_dst, q, batch_src=None, batch_dst=None, method="radius"):
    return quantile_index(
        pos_src, pos_dst, q, batch_src, batch_dst, method=method.removesuffix("-direct")
    )


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("q", [0.0, 0.01, 0.05, 0.2, 0.5, 1.0])
def test_quantile_neighbours_equal_dense_quantile_mask_on_random_clouds(q, method):
    g = torch.Generator().manual_seed(1)
    pos_src, pos_dst = torch.rand(300, 2, generator=g), torch.rand(120, 2, generator=g)
    index = quantile_by(pos_src, pos_dst, q, method=method)
    assert torch.equal(as_mask(index, 120, 300), dense_quantile_mask(pos_src, pos_dst, q))
    assert len(index[1]) == len(set(map(tuple, index.t().tolist())))  # no duplicates


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_quantile_neighbours_match_dense_mask_in_the_positions_dtype(dtype, method):
    g = torch.Generator().manual_seed(5)
    pos_src = torch.rand(200, 3, generator=g, dtype=dtype)
    pos_dst = torch.rand(50, 3, generator=g, dtype=dtype)
    index = quantile_by(pos_src, pos_dst, 0.07, method=method)
    assert torch.equal(as_mask(index, 50, 200), dense_quantile_mask(pos_src, pos_dst, 0.07))


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("q", [0.01, 0.02, 0.05, 0.1])
def test_quantile_neighbours_include_ties_on_a_uniform_grid(q, method):
    pos = grid_points((17, 17))
    index = quantile_by(pos, pos, q, method=method)
    dense = dense_quantile_mask(pos, pos, q)
    assert torch.equal(as_mask(index, len(pos), len(pos)), dense)
    # on a grid many neighbours are equidistant: more than ceil(q N) per row must appear
    assert dense.sum(1).max() > torch.ceil(torch.tensor(q * len(pos)))


@pytest.mark.parametrize("method", METHODS)
def test_quantile_neighbours_are_per_sample_in_batches_of_different_sizes(method):
    g = torch.Generator().manual_seed(2)
    # the fourth sample has targets but no sources: its targets get no neighbours
    sizes_src, sizes_dst = [50, 200, 120, 0, 7], [30, 10, 60, 5, 3]
    pos_src = [torch.rand(n, 3, generator=g) for n in sizes_src]
    pos_dst = [torch.rand(n, 3, generator=g) for n in sizes_dst]
    batch_src = torch.cat([torch.full((n,), i) for i, n in enumerate(sizes_src)])
    batch_dst = torch.cat([torch.full((n,), i) for i, n in enumerate(sizes_dst)])
    index = quantile_by(
        torch.cat(pos_src), torch.cat(pos_dst), 0.1, batch_src, batch_dst, method=method
    )
    assert torch.equal(batch_src[index[1]], batch_dst[index[0]])
    assert bool((index[0][1:] >= index[0][:-1]).all())  # grouped by target
    off_src, off_dst = 0, 0
    full = as_mask(index, sum(sizes_dst), sum(sizes_src))
    for ps, pd in zip(pos_src, pos_dst):
        if len(ps) == 0:
            assert not full[off_dst : off_dst + len(pd)].any()
        else:
            block = full[off_dst : off_dst + len(pd), off_src : off_src + len(ps)]
            assert torch.equal(block, dense_quantile_mask(ps, pd, 0.1))
        off_src, off_dst = off_src + len(ps), off_dst + len(pd)


@pytest.mark.parametrize("method", METHODS[1:])
def test_radius_quantile_search_stays_exact_when_its_estimate_is_poor(monkeypatch, method):
    # a tiny subsample and no safety margin: most first searches come back short or with the
    # threshold at their edge, and must be repeated with larger radii
    monkeypatch.setattr(neighbors, "ESTIMATE_SOURCES", 8)
    monkeypatch.setattr(neighbors, "SAFETY", 0.5)
    g = torch.Generator().manual_seed(7)
    pos_src = torch.rand(2000, 2, generator=g) ** 3  # graded: dense near the origin
    pos_dst = torch.rand(90, 2, generator=g)
    index = quantile_by(pos_src, pos_dst, 0.05, method=method)
    assert torch.equal(as_mask(index, 90, 2000), dense_quantile_mask(pos_src, pos_dst, 0.05))


@pytest.mark.parametrize("method", METHODS[1:])
def test_radius_quantile_search_that_hits_its_cap_searches_again_without_it(monkeypatch, method):
    monkeypatch.setattr(neighbors, "CAP_FACTOR", 0)  # cap = 64 sources, a target needs ~100
    g = torch.Generator().manual_seed(10)
    pos_src, pos_dst = torch.rand(1000, 2, generator=g), torch.rand(40, 2, generator=g)
    index = quantile_by(pos_src, pos_dst, 0.1, method=method)
    assert torch.equal(as_mask(index, 40, 1000), dense_quantile_mask(pos_src, pos_dst, 0.1))


@pytest.mark.parametrize("method", METHODS[1:])
def test_radius_quantile_search_with_zero_thresholds_is_exact_and_finishes(method):
    # every node twice and q = 0: each threshold is 0, which no search radius can bracket
    half = torch.rand(300, 2, generator=torch.Generator().manual_seed(11), dtype=torch.float64)
    pos = torch.cat([half, half])
    index = quantile_by(pos, pos, 0.0, method=method)
    assert torch.equal(as_mask(index, 600, 600), dense_quantile_mask(pos, pos, 0.0))


@pytest.mark.parametrize("bad", [float("nan"), 3e19, float("inf")])
@pytest.mark.parametrize("method", METHODS[1:])
def test_radius_quantile_search_finishes_on_non_finite_distances(bad, method):
    g = torch.Generator().manual_seed(12)
    pos_src = torch.rand(50, 2, generator=g)
    pos_dst = pos_src[:5].clone()
    pos_dst[1, 0] = bad  # NaN, or squared distances that overflow float32
    by_radius = quantile_by(pos_src, pos_dst, 0.1, method=method)
    by_knn = quantile_index(pos_src, pos_dst, 0.1, method="knn")
    assert torch.equal(as_mask(by_radius, 5, 50), as_mask(by_knn, 5, 50))


class _Spy:
    """torch_cluster with a record of the searches called."""

    def __init__(self, module):
        self.module, self.calls = module, []

    def __getattr__(self, name):
        def call(*args, **kwargs):
            self.calls.append(name)
            return getattr(self.module, name)(*args, **kwargs)

        return call


def test_auto_quantile_search_uses_radius_search_for_wide_fields(monkeypatch):
    spy = _Spy(neighbors.torch_cluster)
    monkeypatch.setattr(neighbors, "torch_cluster", spy)
    g = torch.Generator().manual_seed(8)
    pos_src, pos_dst = torch.rand(400, 2, generator=g), torch.rand(30, 2, generator=g)
    narrow = quantile_index(pos_src, pos_dst, 0.02)  # 8 neighbours: kNN
    assert spy.calls == ["knn"]
    monkeypatch.setattr(neighbors, "RADIUS_SEARCH_FROM", 8)
    monkeypatch.setattr(neighbors, "DENSE_PER_SOURCE_LOG2", 0.0)  # by the tree
    spy.calls.clear()
    wide = quantile_index(pos_src, pos_dst, 0.3)
    assert "knn" not in spy.calls and "radius" in spy.calls
    for index, q in ((narrow, 0.02), (wide, 0.3)):
        assert torch.equal(as_mask(index, 30, 400), dense_quantile_mask(pos_src, pos_dst, q))


def test_radius_searches_of_few_targets_among_many_sources_compute_distances_directly(
    monkeypatch,
):
    # a latent mesh's few nodes with wide fields in a large mesh: no tree over the sources
    spy = _Spy(neighbors.torch_cluster)
    monkeypatch.setattr(neighbors, "torch_cluster", spy)
    g = torch.Generator().manual_seed(9)
    pos_src, pos_dst = torch.rand(5000, 2, generator=g), torch.rand(6, 2, generator=g)
    few = quantile_index(pos_src, pos_dst, 0.3, method="radius")
    assert spy.calls == []
    assert torch.equal(as_mask(few, 6, 5000), dense_quantile_mask(pos_src, pos_dst, 0.3))
    # as many targets as sources: the tree
    many = quantile_index(pos_src[:300], pos_src[:300], 0.3, method="radius")
    assert "radius" in spy.calls
    assert torch.equal(
        as_mask(many, 300, 300), dense_quantile_mask(pos_src[:300], pos_src[:300], 0.3)
    )


def test_direct_radius_search_returns_every_source_within_the_radius_of_its_sample():
    g = torch.Generator().manual_seed(13)
    pos_src, pos_dst = torch.rand(70, 3, generator=g), torch.rand(9, 3, generator=g)
    batch_src = torch.tensor([0] * 30 + [1] * 40)
    batch_dst = torch.tensor([0] * 4 + [1] * 5)
    slices = neighbors.sample_slices(batch_src, batch_dst)
    index = neighbors._dense_radius(pos_src, pos_dst, 0.2, slices)
    d = (pos_dst[:, None] - pos_src[None]).pow(2).sum(-1)
    expected = (d <= 0.2) & (batch_dst[:, None] == batch_src[None])
    assert torch.equal(as_mask(index, 9, 70), expected)
    assert torch.equal(index, sort_edges(index, 9, 70))  # grouped by target, sorted by source


def test_sample_slices_of_sorted_batches_with_empty_samples():
    batch_src = torch.tensor([1, 1, 3, 3, 3])  # samples 0 and 2 without sources
    batch_dst = torch.tensor([0, 2, 2, 4])  # samples 1 and 3 without targets
    slices = neighbors.sample_slices(batch_src, batch_dst)
    assert [(s.start, s.stop, t.start, t.stop) for s, t in slices] == [
        (0, 0, 0, 1),
        (0, 2, 1, 1),
        (2, 2, 1, 3),
        (2, 5, 3, 3),
        (5, 5, 3, 4),
    ]
    assert neighbors.sample_slices(batch_src[:0], batch_dst[:0]) == []


def test_unknown_quantile_search_is_rejected():
    pos = torch.rand(10, 2)
    with pytest.raises(ConfigError, match="unknown quantile search 'exact'"):
        quantile_index(pos, pos, 0.1, method="exact")


@pytest.mark.parametrize("uneven", [False, True])
def test_sort_edges_orders_by_target_then_source(uneven):
    g = torch.Generator().manual_seed(9)
    dst = torch.randint(0, 50, (600,), generator=g)
    if uneven:  # one target with most edges: the global-sort fallback
        dst[:500] = 3
    src = torch.randint(0, 80, (600,), generator=g)
    key = torch.unique(dst * 80 + src)  # no repeated edges
    edges = torch.stack([key // 80, key % 80])[:, torch.randperm(len(key), generator=g)]
    out = sort_edges(edges, 50, 80)
    assert torch.equal(out, torch.stack([key // 80, key % 80]))


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


@pytest.mark.parametrize("threads", [2, 3, 4])
def test_searches_split_over_threads_by_target_ranges_equal_one_search(monkeypatch, threads):
    # torch-cluster searches on one thread; large target sets are searched in ranges at once
    g = torch.Generator().manual_seed(4)
    pos_src, pos_dst = torch.rand(60, 2, generator=g), torch.rand(301, 2, generator=g)
    batch_src = torch.arange(3).repeat_interleave(20)  # ranges cut through the samples
    batch_dst = torch.tensor([0] * 100 + [1] * 1 + [2] * 200)
    searches = {
        "knn": lambda: knn_index(pos_src, pos_dst, 4, batch_src, batch_dst),
        "radius": lambda: radius_index(pos_src, pos_dst, 0.3, batch_src, batch_dst),
        "among": lambda: radius_among(pos_src, pos_dst, 0.09, batch_src, batch_dst, 64),
    }
    whole = {name: search() for name, search in searches.items()}
    calls = []
    real = neighbors_module.torch_cluster
    spy = type("Spy", (), {})()
    spy.knn = lambda *a, **k: calls.append(len(a[1])) or real.knn(*a, **k)
    spy.radius = lambda *a, **k: calls.append(len(a[1])) or real.radius(*a, **k)
    monkeypatch.setattr(neighbors_module, "torch_cluster", spy)
    monkeypatch.setattr(neighbors_module, "THREADED_TARGETS", 100)
    monkeypatch.setattr(neighbors_module, "DENSE_PER_SOURCE_LOG2", 0.0)  # radius_among: a tree
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        parts = min(threads, 3)  # each range at least THREADED_TARGETS targets
        for name, search in searches.items():
            calls.clear()
            assert torch.equal(search(), whole[name]), name
            assert sorted(calls) == sorted(
                301 * i // parts - 301 * (i - 1) // parts for i in range(1, parts + 1)
            ), name
        calls.clear()
        small = knn_index(pos_src, pos_dst[:199], 4, batch_src, batch_dst[:199])  # one call
        assert calls == [199] and torch.equal(small, whole["knn"][:, : 199 * 4])
        calls.clear()
        many = torch.rand(160, 2, generator=g)  # ranges smaller than the sources: one call
        knn_index(many, pos_dst, 1)
        assert calls == [301]
    finally:
        torch.set_num_threads(previous)


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

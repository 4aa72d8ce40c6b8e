import numpy as np
import pytest
import torch

from meshop import GaussianNormalizer, add_latent_mesh, from_points, make_loader, uniform_grid
from meshop.data import (
    farthest_point_sampling,
    grid_shape_of,
    latent_nodes,
    node_features,
    query_nodes,
    set_query_points,
)
from meshop.errors import ConfigError, FieldError, MeshError


def test_uniform_grid_node_order_makes_view_correct():
    shape = (4, 5, 3)
    field = torch.arange(60.0).reshape(*shape)
    data = uniform_grid(shape, x=field[..., None])
    assert data.grid_shape == shape
    assert torch.equal(data.x.view(*shape, 1)[..., 0], field)
    i, j, k = 2, 3, 1
    row = (i * 5 + j) * 3 + k
    assert data.pos[row].tolist() == pytest.approx([i / 3, j / 4, k / 2])
    assert data.weight.sum().item() == pytest.approx(1.0)
    assert data.weight[0].item() == pytest.approx(1 / 60)


@pytest.mark.parametrize("shape", [(9,), (6, 7), (3, 4, 5)])
def test_batched_grids_view_as_batch_by_grid(shape):
    samples = [uniform_grid(shape, x=torch.randn(*shape, 2)) for _ in range(3)]
    batch = next(iter(make_loader(samples, batch_size=3)))
    assert grid_shape_of(batch) == shape
    stacked = torch.stack([s.x.view(*shape, 2) for s in samples])
    assert torch.equal(batch.x.view(3, *shape, 2), stacked)


def test_grid_shape_of_rejects_meshes_and_mixed_shapes():
    with pytest.raises(MeshError, match="mesh path"):
        grid_shape_of(from_points(torch.rand(5, 2)))
    batch = next(iter(make_loader([uniform_grid((4, 4)), uniform_grid((5, 5))], batch_size=2)))
    with pytest.raises(MeshError, match="mixes grid shapes"):
        grid_shape_of(batch)


def test_farthest_point_sampling_is_deterministic_when_seeded_and_exact_in_count():
    pos = torch.rand(500, 2)
    state = torch.get_rng_state()
    a = farthest_point_sampling(pos, 64, seed=7)
    assert torch.equal(torch.get_rng_state(), state)  # global RNG untouched
    assert torch.equal(a, farthest_point_sampling(pos, 64, seed=7))
    assert len(a) == 64 and len(set(a.tolist())) == 64
    batch = torch.tensor([0] * 100 + [1] * 37 + [2] * 3)
    idx = farthest_point_sampling(torch.rand(140, 2), 20, batch, seed=0)
    assert torch.bincount(batch[idx]).tolist() == [20, 20, 3]


def test_farthest_points_spread_over_the_domain():
    g = torch.Generator().manual_seed(0)
    pos = torch.rand(2000, 2, generator=g)
    latent = pos[farthest_point_sampling(pos, 50, seed=0)]
    nearest = torch.cdist(pos, latent).min(1).values.max()
    random = pos[torch.randperm(2000, generator=g)[:50]]
    assert nearest < torch.cdist(pos, random).min(1).values.max()


def test_farthest_point_sampling_of_a_large_sample_runs_on_a_subset_of_its_nodes(monkeypatch):
    from meshop.data import latent

    seen = []
    fps = latent.torch_cluster.fps
    monkeypatch.setattr(latent, "FPS_CANDIDATES", 1000)
    monkeypatch.setattr(
        latent.torch_cluster, "fps", lambda pos, *a, **k: seen.append(len(pos)) or fps(pos, *a, **k)
    )
    g = torch.Generator().manual_seed(0)
    small, large = torch.rand(300, 2, generator=g), torch.rand(20_000, 2, generator=g)
    batch = torch.tensor([0] * 300 + [1] * 20_000)
    both = torch.cat([small, large])
    index = farthest_point_sampling(both, 12, batch, seed=3)
    assert seen == [300 + 1000]  # the small sample whole, 1000 of the large one's nodes
    assert torch.equal(index, farthest_point_sampling(both, 12, batch, seed=3))  # seeded
    assert torch.bincount(batch[index]).tolist() == [12, 12]
    assert len(set(index.tolist())) == 24
    # nodes of the sample they belong to, as far apart as those of the whole sample's sampling
    picked = both[index[batch[index] == 1]]
    monkeypatch.setattr(latent, "FPS_CANDIDATES", 10**9)
    whole = farthest_point_sampling(both, 12, batch, seed=3)
    assert torch.equal(whole[batch[whole] == 0], index[batch[index] == 0])  # small: unchanged
    reference = both[whole[batch[whole] == 1]]
    cover = torch.cdist(large, picked).min(1).values.max()
    assert cover < 1.3 * torch.cdist(large, reference).min(1).values.max()
    # at least FPS_OVERSAMPLE candidates per node asked for
    seen.clear()
    monkeypatch.setattr(latent, "FPS_CANDIDATES", 1000)
    farthest_point_sampling(large, 100, seed=0)
    assert seen == [100 * latent.FPS_OVERSAMPLE]


def test_batching_meshes_of_different_sizes_with_latent_and_query_sets():
    samples = []
    for n, nq in [(30, 7), (80, 12), (55, 3)]:
        d = from_points(torch.rand(n, 2), x=torch.rand(n, 1), params=[n, 1.0])
        add_latent_mesh(d, num_points=10, seed=n)
        set_query_points(d, torch.rand(nq, 2), y=torch.rand(nq, 1))
        samples.append(d)
    batch = next(iter(make_loader(samples, batch_size=3)))
    assert batch.num_graphs == 3
    assert torch.bincount(batch.batch).tolist() == [30, 80, 55]
    latent, latent_batch = latent_nodes(batch)
    assert torch.bincount(latent_batch).tolist() == [10, 10, 10]
    _, query_batch = query_nodes(batch)
    assert torch.bincount(query_batch).tolist() == [7, 12, 3]
    assert batch.y.shape == (22, 1)
    feats = node_features(batch)
    assert feats.shape == (165, 1 + 2 + 2)
    assert torch.equal(feats[30:110, 3], torch.full((80,), 80.0))  # params broadcast per sample
    # every sample's latent points are its own nodes
    for b, s in enumerate(samples):
        assert torch.equal(latent[latent_batch == b], s.latent_pos)


def test_single_domain_falls_back_to_its_own_nodes():
    d = from_points(torch.rand(12, 3))
    assert latent_nodes(d)[0] is d.pos
    q, qb = query_nodes(d)
    assert q is d.pos and qb.tolist() == [0] * 12


def test_coarse_grid_latent_mesh_spans_the_domain():
    d = add_latent_mesh(uniform_grid((9, 9)), grid_shape=(3, 3))
    assert d.latent_pos.shape == (9, 2)
    assert d.latent_pos.min().item() == 0 and d.latent_pos.max().item() == 1
    with pytest.raises(MeshError, match="mixed dimensions"):
        add_latent_mesh(uniform_grid((9, 9)), grid_shape=(3, 3, 3))
    with pytest.raises(ConfigError, match="not both"):
        add_latent_mesh(uniform_grid((9, 9)), num_points=3, grid_shape=(3, 3))


def test_from_points_validates_shapes_and_values():
    with pytest.raises(FieldError, match="one row per node"):
        from_points(torch.rand(5, 2), x=torch.rand(4, 1))
    with pytest.raises(MeshError, match="NaN"):
        from_points(torch.tensor([[0.0, np.nan]]))
    with pytest.raises(MeshError, match="mixed dimensions"):
        from_points(torch.rand(5, 2), query_pos=torch.rand(3, 3))
    with pytest.raises(MeshError, match="non-empty"):
        from_points(torch.zeros(0, 2))


def test_normaliser_fits_train_data_and_round_trips_through_state_dict():
    g = torch.Generator().manual_seed(0)
    chunks = [torch.randn(100, 2, generator=g) * torch.tensor([3.0, 0.5]) + 4 for _ in range(5)]
    norm = GaussianNormalizer(2).fit(chunks)
    allv = torch.cat(chunks)
    assert torch.allclose(norm.mean, allv.mean(0), atol=1e-5)
    assert torch.allclose(norm.std, allv.std(0, unbiased=False), atol=1e-5)
    enc = norm.encode(allv)
    assert torch.allclose(enc.mean(0), torch.zeros(2), atol=1e-5)
    assert torch.allclose(norm.decode(enc), allv, atol=1e-5)
    fresh = GaussianNormalizer(2)
    fresh.load_state_dict(norm.state_dict())
    assert bool(fresh.fitted) and torch.equal(fresh.mean, norm.mean)
    with pytest.raises(ConfigError, match="2 channels"):
        GaussianNormalizer(2).fit(torch.zeros(3, 3))


def test_query_features_take_inputs_of_the_nearest_node_of_the_same_sample():
    from meshop.data import query_features

    a = from_points(torch.tensor([[0.0, 0.0], [1.0, 0.0]]), x=torch.tensor([1.0, 2.0]), params=[5])
    b = from_points(torch.tensor([[0.0, 0.0], [1.0, 1.0]]), x=torch.tensor([3.0, 4.0]), params=[6])
    set_query_points(a, torch.tensor([[0.9, 0.1]]))
    set_query_points(b, torch.tensor([[0.1, 0.0], [0.8, 0.9]]))
    batch = next(iter(make_loader([a, b], batch_size=2)))
    feats = query_features(batch)
    expected = [[2.0, 0.9, 0.1, 5.0], [3.0, 0.1, 0.0, 6.0], [4.0, 0.8, 0.9, 6.0]]
    assert torch.allclose(feats, torch.tensor(expected))
    plain = from_points(torch.rand(4, 2), x=torch.rand(4, 1))
    assert torch.equal(query_features(plain), node_features(plain))


@pytest.mark.parametrize("first_has_queries", [True, False])
def test_a_batch_mixing_samples_with_and_without_query_points_is_refused(first_has_queries):
    with_queries, without = from_points(torch.rand(10, 2)), from_points(torch.rand(12, 2))
    set_query_points(with_queries, torch.rand(5, 2))
    samples = [with_queries, without] if first_has_queries else [without, with_queries]
    where = "only in the first sample" if first_has_queries else "only in sample 1 of the batch"
    with pytest.raises(MeshError, match=f"same fields \\(query_pos {where}\\)"):
        next(iter(make_loader(samples, batch_size=2)))
    # batches whose samples agree still pass, one sample at a time too
    assert len(list(make_loader(samples, batch_size=1))) == 2

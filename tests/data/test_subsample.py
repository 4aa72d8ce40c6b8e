"""Training on random subsets of the nodes (meshop.data.subsample, TrainConfig.node_fraction):
the subsets' rescaled quadratures are unbiased, and a run trains on new subsets every epoch."""

import pytest
import torch

from meshop.data import from_points, set_query_points, uniform_grid
from meshop.data.subsample import NodeSubsets, random_subset, subsample_nodes, subset_size
from meshop.errors import ConfigError
from meshop.models import Transolver
from meshop.train import TrainConfig, Trainer, prepare_data


def sample(n=400, seed=0):
    g = torch.Generator().manual_seed(seed)
    pos = torch.rand(n, 2, generator=g)
    data = from_points(pos, x=pos[:, :1] ** 2, y=torch.sin(3 * pos))
    data.weight = torch.rand(n, generator=g) / n
    data.face = torch.zeros(3, 1, dtype=torch.long)
    return data


def test_subsets_keep_the_nodes_fields_and_rescale_the_weights():
    data = sample()
    part = subsample_nodes(data, 0.25, torch.Generator().manual_seed(1))
    assert len(part.pos) == 100 and part.x.shape == (100, 1) and part.y.shape == (100, 2)
    keep = [int(torch.nonzero((data.pos == p).all(1))[0]) for p in part.pos]
    assert keep == sorted(keep)  # in the nodes' order
    assert torch.equal(part.y, data.y[keep]) and torch.equal(part.x, data.x[keep])
    assert torch.allclose(part.weight, data.weight[keep] * 4)
    assert getattr(part, "face", None) is None  # a subset has no cells
    assert subsample_nodes(data, 1.0) is data


def test_subset_sizes_are_the_exact_ceiling_of_the_fraction_as_written():
    assert subset_size(30, 0.1) == 3  # 0.1 * 30 is 3.0000000000000004 in floats
    assert subset_size(2**25 + 1, 0.5) == 2**24 + 1  # float32 rounds 2^24 + 0.5 down to 2^24
    assert subset_size(10, 0.25) == 3 and subset_size(7, 1e-9) == 1 and subset_size(7, 1.0) == 7
    data = from_points(torch.rand(30, 2))
    assert len(subsample_nodes(data, 0.1).pos) == 3


@pytest.mark.parametrize("n, k", [(50, 20), (50, 80), (1000, 30)])  # a permutation, drawn ints
def test_random_subsets_are_distinct_seeded_and_uniform(n, k):
    gen = torch.Generator().manual_seed(0)
    counts = torch.zeros(n)
    for _ in range(400):
        chosen = random_subset(n, k, gen)
        assert len(chosen) == min(n, k) == len(chosen.unique())
        assert 0 <= int(chosen.min()) and int(chosen.max()) < n
        counts[chosen] += 1
    expected = 400 * min(n, k) / n  # each node is chosen as often as any other
    assert (counts - expected).abs().max() < 6 * expected**0.5 + 1
    first = random_subset(n, k, torch.Generator().manual_seed(5))
    assert torch.equal(first, random_subset(n, k, torch.Generator().manual_seed(5)))
    if k < n:  # in a random order, not sorted
        assert not torch.equal(first, first.sort().values)
    assert len(random_subset(0, k, gen)) == 0 and len(random_subset(n, 0, gen)) == 0


def test_rescaled_quadratures_are_unbiased():
    data = sample(300)
    exact = float((data.weight * data.x[:, 0]).sum())
    g = torch.Generator().manual_seed(0)
    draws = [subsample_nodes(data, 0.1, g) for _ in range(4000)]
    mean = sum(float((d.weight * d.x[:, 0]).sum()) for d in draws) / len(draws)
    assert mean == pytest.approx(exact, rel=0.01)


def test_query_points_keep_their_targets_and_grids_are_refused():
    data = sample()
    set_query_points(data, torch.rand(30, 2))
    data.y = torch.rand(30, 2)
    part = subsample_nodes(data, 0.5)
    assert len(part.pos) == 200 and torch.equal(part.y, data.y) and len(part.query_pos) == 30
    with pytest.raises(ConfigError, match="grid"):
        subsample_nodes(uniform_grid((4, 4)), 0.5)
    with pytest.raises(ConfigError, match=r"\(0, 1\]"):
        subsample_nodes(data, 0.0)


def test_every_access_draws_new_nodes():
    view = NodeSubsets([sample()], 0.5)
    assert len(view) == 1
    assert not torch.equal(view[0].pos, view[0].pos)


def test_a_run_with_node_fraction_trains_on_subsets_and_evaluates_whole_meshes():
    train = [sample(200 + 10 * i, i) for i in range(4)]
    seen = []
    model = Transolver(3, 2, 2, width=16, layers=1, heads=2, slices=4)
    model.register_forward_pre_hook(lambda module, args: seen.append(len(args[0].pos)))
    config = TrainConfig(epochs=1, batch_size=2, progress=False, node_fraction=0.25)
    metrics = Trainer(model, prepare_data(train, train[:1], config)).fit()
    # two training batches of quarter meshes (ceil(n / 4) of 200, 210, 220 and 230 nodes)
    assert sum(seen[:2]) == 50 + 53 + 55 + 58 and max(seen[:2]) <= 58 + 55
    assert seen[-1] == 200  # the test error on the whole mesh
    assert metrics["test_rel_l2"] > 0
    with pytest.raises(ConfigError, match="node_fraction must be in"):
        TrainConfig(node_fraction=1.5)
    with pytest.raises(ConfigError, match="no cells for the H1"):
        TrainConfig(node_fraction=0.5, h1_weight=0.1)


def test_training_on_node_subsets_keeps_no_neighbour_lists_and_evaluation_does():
    """Every step's subset is new: PiT's local layers keep no edges for them (a cache of
    entries that never come back), while whole meshes (the test error) are cached as always."""
    from meshop.models import PiT
    from meshop.nn.local_position_attention import LocalPositionAttention

    train = [sample(60 + 10 * i, i) for i in range(4)]

    def cached(fraction, test):
        torch.manual_seed(0)
        model = PiT(3, 2, 2, width=8, heads=1, layers=1, encoder_k=4, decoder_k=4)
        config = TrainConfig(
            epochs=1, batch_size=2, progress=False, node_fraction=fraction, latent_points=8
        )
        Trainer(model, prepare_data(train, test, config)).fit()
        layers = [m for m in model.modules() if isinstance(m, LocalPositionAttention)]
        return sum(len(layer.edge_cache) for layer in layers)

    assert cached(None, None) > 0  # whole meshes: every sample's edges kept
    assert cached(0.5, None) == 0  # subsets: none
    assert cached(0.5, train[:1]) > 0  # the test error on the whole mesh is cached as always

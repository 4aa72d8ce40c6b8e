"""Transolver's physics-attention (Transolver eqs. (1)-(4)) with quadrature weights, against a dense
float64 reference, per sample, and under refinement of a graded mesh."""

import itertools
import math

import numpy as np
import pytest
import torch

from meshop.data import lumped_mass_weights, make_loader, uniform_grid
from meshop.errors import ConfigError
from meshop.nn import PhysicsAttention
from tests.reference import dense_physics_attention


def make_layer(channels=8, heads=2, slices=5, **kwargs):
    torch.manual_seed(0)
    layer = PhysicsAttention(channels, heads=heads, slices=slices, **kwargs).double()
    with torch.no_grad():  # move away from the initialization to exercise every term
        for p in layer.parameters():
            p.add_(0.3 * torch.randn_like(p))
        layer.temperature.copy_(torch.tensor([0.7, 1.3]))
    return layer.eval()


def irregular_batch(sizes=(7, 11, 4), channels=8):
    g = torch.Generator().manual_seed(1)
    n = sum(sizes)
    x = torch.randn(n, channels, generator=g, dtype=torch.float64)
    pos = torch.rand(n, 2, generator=g, dtype=torch.float64)
    weight = torch.rand(n, generator=g, dtype=torch.float64) + 0.1
    batch = torch.cat([torch.full((s,), i) for i, s in enumerate(sizes)])
    return x, pos, weight, batch


def test_slice_weights_are_a_partition_of_unity_at_every_node_and_head():
    layer = make_layer(slices=7)
    x, *_ = irregular_batch()
    with torch.no_grad():
        s = layer.slice_weights(x)
    assert s.shape == (len(x), 2, 7) and bool((s > 0).all())
    torch.testing.assert_close(s.sum(-1), torch.ones(len(x), 2, dtype=torch.float64))
    assert float(s.max(-1).values.min()) < 0.99  # soft, not one-hot: every term is exercised


def test_layer_matches_dense_float64_reference_with_weights_on_an_irregular_batch():
    layer = make_layer()
    x, pos, weight, batch = irregular_batch()
    out = layer(x, pos, batch, weight)
    assert out.shape == x.shape
    for b in range(3):
        m = batch == b
        torch.testing.assert_close(out[m], dense_physics_attention(layer, x[m], weight[m]))
    # only the ratio of eq. (2) sees the weights: their scale per sample does not matter
    scale = torch.tensor([3.0, 0.01, 70.0], dtype=torch.float64)[batch]
    torch.testing.assert_close(layer(x, pos, batch, weight * scale), out)


def test_default_weight_is_one_over_n_and_equals_the_uniform_grid_weight():
    layer = make_layer(channels=6, heads=2)
    g = torch.Generator().manual_seed(2)
    grid = uniform_grid((4, 5), x=torch.randn(20, 6, generator=g))
    x = grid.x.double()
    ref = dense_physics_attention(layer, x, torch.full((20,), 1 / 20, dtype=torch.float64))
    torch.testing.assert_close(layer(x, None), ref)
    torch.testing.assert_close(layer(x, None, weight=grid.weight.double()), ref)


def test_permutation_equivariance_within_every_sample():
    layer = make_layer()
    x, pos, weight, batch = irregular_batch()
    g = torch.Generator().manual_seed(3)
    counts = torch.bincount(batch).tolist()
    starts = np.cumsum([0, *counts[:-1]])
    perm = torch.cat([int(s) + torch.randperm(n, generator=g) for s, n in zip(starts, counts)])
    out = layer(x, pos, batch, weight)
    torch.testing.assert_close(layer(x[perm], pos[perm], batch, weight[perm]), out[perm])


def test_samples_of_different_sizes_in_a_batch_do_not_mix():
    layer = make_layer()
    x, pos, weight, batch = irregular_batch(sizes=(5, 13, 1, 9))
    out = layer(x, pos, batch, weight)
    for b in range(4):
        m = batch == b
        torch.testing.assert_close(out[m], layer(x[m], pos[m], weight=weight[m]))


def test_batch_from_a_loader_of_grids_with_different_sizes():
    layer = PhysicsAttention(4, heads=2, slices=3).eval()
    data = [uniform_grid((n,), x=torch.randn(n, 4)) for n in (9, 17)]
    batch = next(iter(make_loader(data, batch_size=2)))
    out = layer(batch.x, batch.pos, batch.batch, batch.weight)
    expected = layer(data[1].x, data[1].pos, weight=data[1].weight)
    torch.testing.assert_close(out[9:], expected, rtol=1e-5, atol=1e-6)


def test_zero_weight_nodes_read_the_tokens_without_changing_them():
    layer = make_layer()
    x, _, weight, _ = irregular_batch(sizes=(12,))
    extra = torch.randn(5, 8, dtype=torch.float64)
    both_x = torch.cat([x, extra, x[:3]])
    both_w = torch.cat([weight, torch.zeros(8, dtype=torch.float64)])
    out = layer(both_x, None, None, both_w)
    torch.testing.assert_close(out[:12], layer(x, None, None, weight))
    torch.testing.assert_close(out[17:], out[:3])  # a copy of a node gets that node's output


def graded_mesh(cells: int, refinements: int):
    """Nodes of [0, 1] crowded towards 0 (x = t^3), then split ``refinements`` times uniformly (a
    midpoint in every cell), with their lumped-mass weights."""
    nodes = np.linspace(0, 1, cells + 1) ** 3
    for _ in range(refinements):
        mid = 0.5 * (nodes[1:] + nodes[:-1])
        nodes = np.sort(np.concatenate([nodes, mid]))
    lines = np.stack([np.arange(len(nodes) - 1), np.arange(1, len(nodes))], 1)
    weight = lumped_mass_weights(nodes[:, None], [("line", lines)])
    return torch.as_tensor(nodes)[:, None], torch.as_tensor(weight)


def features(x):
    """Smooth fields of the coordinate fed to the layer."""
    return torch.cat([torch.sin(2 * math.pi * x), torch.cos(3 * x), x, x**2], dim=1)


def test_slice_tokens_of_a_uniformly_refined_graded_mesh_converge_to_the_domain_integral():
    layer = make_layer(channels=4, heads=2, slices=4)
    fine = torch.linspace(0, 1, 200_001, dtype=torch.float64)[:, None]
    fine_weight = torch.full((len(fine),), 1.0, dtype=torch.float64)
    fine_weight[[0, -1]] = 0.5  # the trapezoidal rule
    with torch.no_grad():
        _, exact = layer.slice_tokens(features(fine), None, fine_weight)
        errors, unweighted = [], []
        for level in range(6):
            x, weight = graded_mesh(8, level)
            _, tokens = layer.slice_tokens(features(x), None, weight)
            _, plain = layer.slice_tokens(features(x))  # 1/n: the node density's mean
            errors.append(float((tokens - exact).abs().max()))
            unweighted.append(float((plain - exact).abs().max()))
    for coarse, finer in itertools.pairwise(errors):
        assert finer < coarse / 3  # second order: a factor ~4 per refinement
    assert errors[-1] < 2e-4  # 257 nodes
    assert min(unweighted) > 0.2  # 1/n weights converge to the node density's mean instead


def test_dropout_acts_in_training_only():
    layer = PhysicsAttention(8, heads=2, slices=6, dropout=0.5)
    x = torch.randn(20, 8)
    layer.eval()
    torch.testing.assert_close(layer(x, None), layer(x, None))
    layer.train()
    torch.manual_seed(0)
    first = layer(x, None)
    torch.manual_seed(1)
    assert not torch.allclose(first, layer(x, None))


def test_gradients_reach_every_parameter_and_the_layer_follows_dtype():
    layer = PhysicsAttention(8, heads=4, slices=3)
    x, pos, weight, batch = irregular_batch(channels=8)
    layer(x.float(), pos.float(), batch, weight.float()).square().sum().backward()
    for name, p in layer.named_parameters():
        assert p.grad is not None and bool(p.grad.abs().sum() > 0), name
    assert layer.double()(x, pos, batch, weight).dtype == torch.float64


def test_invalid_sizes_are_config_errors():
    with pytest.raises(ConfigError, match="divide channels"):
        PhysicsAttention(10, heads=3)
    with pytest.raises(ConfigError, match="temperature"):
        PhysicsAttention(8, heads=2, temperature=0.0)
    with pytest.raises(ConfigError, match="not sorted"):
        PhysicsAttention(8, heads=2)(torch.randn(4, 8), None, torch.tensor([0, 1, 0, 1]))
    layer = PhysicsAttention(10, heads=3, head_channels=4)  # an explicit head width is allowed
    assert layer(torch.randn(6, 10), None).shape == (6, 10)
    assert "slices=64" in repr(layer)

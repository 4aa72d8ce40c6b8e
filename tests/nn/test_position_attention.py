"""Position-attention layers against dense references of PiT eqs. (5), (6), (9), (10) and (22)."""

import itertools
import math

import numpy as np
import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from meshop.data import grid_points
from meshop.errors import ConfigError
from meshop.nn import LocalPositionAttention, PositionAttention
from tests.reference import dense_attention, field_mask, squared_distances

# ---------------------------------------------------------------- helpers


def assert_close(out, ref, atol=2e-5):
    assert out.shape == ref.shape
    torch.testing.assert_close(out.double(), ref, rtol=1e-4, atol=atol)


def cloud(n, dim=2, seed=0, scale=1.0, offset=0.0):
    return torch.rand(n, dim, generator=torch.Generator().manual_seed(seed)) * scale + offset


def features(n, c=5, seed=1):
    return torch.randn(n, c, generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------- global and cross attention


def graded_weights(n, seed=3):
    """Positive quadrature weights spread over four decades, as on a graded mesh."""
    return 10.0 ** (-4 * torch.rand(n, generator=torch.Generator().manual_seed(seed)))


def test_weighted_attention_matches_the_dense_reference_on_every_path():
    """w_k exp(..) / sum_j w_j exp(..), exactly, through the single-sample fused kernel, the
    batched fused kernel, the shared-mesh kernel, the per-sample loop of mixed sizes, the
    periodic chunks and the sparse local fields (quantile, k, radius, periodic images)."""
    torch.manual_seed(0)
    pos_src, pos_dst, x = cloud(120), cloud(40, seed=2), features(120)
    w = graded_weights(120)
    layers = [
        PositionAttention(5, 8, heads=2),
        PositionAttention(5, 8, heads=2, periodic=1.0, chunk_elements=500),
        LocalPositionAttention(5, 8, heads=2, quantile=0.2),
        LocalPositionAttention(5, 8, heads=2, k=9),
        LocalPositionAttention(5, 8, heads=2, radius=0.3),
        LocalPositionAttention(5, 8, heads=2, k=9, periodic=1.0),
    ]
    for layer in layers:
        field = getattr(layer, "field", {})
        ref = dense_attention(layer, x, pos_src, pos_dst, weight=w, **field)
        assert_close(layer(x, pos_src, None, w, pos_dst=pos_dst), ref)
        assert (ref - dense_attention(layer, x, pos_src, pos_dst, **field)).abs().max() > 1e-2
        assert_close(
            layer(x, pos_src, None, w), dense_attention(layer, x, pos_src, weight=w, **field)
        )
    # batches: equal sizes on different meshes (batched fused), one shared mesh (shared kernel,
    # and the fused kernel beyond dense_elements), mixed sizes (per-sample loop)
    layer = PositionAttention(5, 8, heads=2)
    batch = torch.arange(3).repeat_interleave(40)
    batch_dst = torch.arange(3).repeat_interleave(10)
    shared_src, shared_dst = cloud(40).repeat(3, 1), cloud(10, seed=2).repeat(3, 1)
    for p_src, p_dst, weight in (
        (cloud(120), cloud(30, seed=2), w),
        (shared_src, shared_dst, graded_weights(40).repeat(3)),
        (shared_src, shared_dst, w),
    ):
        ref = dense_attention(layer, x, p_src, p_dst, batch, batch_dst, weight=weight)
        for dense_elements in (2**24, 0):
            layer.dense_elements = dense_elements
            out = layer(x, p_src, batch, weight, pos_dst=p_dst, batch_dst=batch_dst)
            assert_close(out, ref)
    mixed = torch.repeat_interleave(torch.arange(3), torch.tensor([50, 30, 40]))
    ref = dense_attention(layer, x, pos_src, None, mixed, mixed, weight=w)
    assert_close(layer(x, pos_src, mixed, w), ref)


def test_weighted_attention_ignores_the_scale_of_the_weights_and_zero_weights():
    """Only ratios of weights matter; a source of weight 0 adds nothing (a target still; in a
    radius field, which does not count its neighbours, nothing else changes)."""
    torch.manual_seed(0)
    pos, x, w = cloud(60), features(60), graded_weights(60)
    for layer in (PositionAttention(5, 8), LocalPositionAttention(5, 8, radius=0.4)):
        out = layer(x, pos, None, w)
        torch.testing.assert_close(layer(x, pos, None, 1e3 * w), out, rtol=1e-4, atol=1e-5)
        zero = torch.cat([w[:50], torch.zeros(10)])
        without = layer(x[:50], pos[:50], None, w[:50], pos_dst=pos)
        torch.testing.assert_close(layer(x, pos, None, zero), without, rtol=1e-4, atol=1e-5)
    with pytest.raises(ConfigError, match="weights must be finite and >= 0"):
        PositionAttention(5, 8)(x, pos, None, -w)


@pytest.mark.parametrize("dim", [1, 2, 3])
@pytest.mark.parametrize("lambda_param", ["tan", "softplus", "square"])
def test_global_attention_matches_dense_reference(dim, lambda_param):
    torch.manual_seed(0)
    layer = PositionAttention(5, 8, heads=2, lambda_param=lambda_param)
    pos, x = cloud(150, dim, scale=2.0, offset=5.0), features(150)
    assert_close(layer(x, pos), dense_attention(layer, x, pos))


@pytest.mark.parametrize(("out_channels", "heads"), [(8, 1), (6, 3), (2, 2)])
def test_cross_attention_matches_dense_reference(out_channels, heads):
    # (2, 2): a head narrower than the augmented coordinates (the values get padded instead)
    torch.manual_seed(0)
    layer = PositionAttention(5, out_channels, heads=heads)
    pos_src, pos_dst, x = cloud(200, 3), cloud(70, 3, seed=2), features(200)
    out = layer(x, pos_src, pos_dst=pos_dst)
    assert out.shape == (70, out_channels)
    assert_close(out, dense_attention(layer, x, pos_src, pos_dst))


def test_heads_have_their_own_lambda():
    torch.manual_seed(0)
    layer = PositionAttention(5, 8, heads=2)
    with torch.no_grad():
        layer.theta.copy_(torch.tensor([0.01 - math.pi / 2, 1.0]))  # lambda ~ 4e-5 and ~ 10.9
    pos_src, pos_dst, x = cloud(100), cloud(30, seed=2), features(100)
    out = layer(x, pos_src, pos_dst=pos_dst)
    assert_close(out, dense_attention(layer, x, pos_src, pos_dst))
    mean_value = (x @ layer.lin_v.weight.T)[:, :4].mean(0)  # a tiny lambda averages the values
    torch.testing.assert_close(out[:, :4], mean_value.expand(30, 4), rtol=0, atol=5e-3)


def test_global_attention_on_a_batch_of_different_sizes_matches_per_sample_reference():
    torch.manual_seed(0)
    layer = PositionAttention(5, 8, heads=2)
    sizes_src, sizes_dst = [50, 120, 30], [20, 0, 45]
    pos_src = torch.cat([cloud(n, seed=i, offset=3 * i) for i, n in enumerate(sizes_src)])
    pos_dst = torch.cat([cloud(n, seed=10 + i, offset=3 * i) for i, n in enumerate(sizes_dst)])
    batch_src = torch.repeat_interleave(torch.arange(3), torch.tensor(sizes_src))
    batch_dst = torch.repeat_interleave(torch.arange(3), torch.tensor(sizes_dst))
    x = features(len(pos_src))
    out = layer(x, pos_src, batch_src, pos_dst=pos_dst, batch_dst=batch_dst)
    assert_close(out, dense_attention(layer, x, pos_src, pos_dst, batch_src, batch_dst))
    self_out = layer(x, pos_src, batch_src)
    assert_close(self_out, dense_attention(layer, x, pos_src, None, batch_src, batch_src))


@pytest.mark.parametrize("periodic", [1.0, (1.0, None)])
def test_periodic_global_attention_matches_dense_minimum_image_reference(periodic):
    torch.manual_seed(0)
    layer = PositionAttention(5, 8, heads=2, periodic=periodic, chunk_elements=1000)
    pos_src, pos_dst, x = cloud(120), cloud(40, seed=2), features(120)
    assert_close(layer(x, pos_src, pos_dst=pos_dst), dense_attention(layer, x, pos_src, pos_dst))


def test_periodic_attention_ignores_whole_periods_in_the_coordinates():
    torch.manual_seed(0)
    global_layer = PositionAttention(5, 8, heads=2, periodic=(1.0, 2.0))
    local_layer = LocalPositionAttention(5, 8, heads=2, quantile=0.1, periodic=(1.0, 2.0))
    pos = cloud(100) * torch.tensor([1.0, 2.0])
    shifted = pos + torch.tensor([3.0, -2.0]) * torch.randint(-1, 2, (100, 2))
    x = features(100)
    for layer in (global_layer, local_layer):
        torch.testing.assert_close(layer(x, shifted), layer(x, pos), rtol=1e-4, atol=1e-5)


def test_global_attention_memory_is_linear_in_the_mesh_sizes():
    torch.manual_seed(0)
    n_src, n_dst = 20_000, 2_000
    dense_bytes = 4 * n_src * n_dst
    pos_src, pos_dst, x = cloud(n_src), cloud(n_dst, seed=2), features(n_src, 8)
    layers = [
        PositionAttention(8, 16, heads=2),
        PositionAttention(8, 16, heads=2, periodic=1.0),
        LocalPositionAttention(8, 16, heads=2, quantile=0.01),
    ]
    for layer in layers:
        with torch.no_grad(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as p:
            layer(x, pos_src, pos_dst=pos_dst)
        largest = max(event.cpu_memory_usage for event in p.events())
        assert largest < dense_bytes / 4, (layer, largest)


# ---------------------------------------------------------------- local attention


@pytest.mark.parametrize("quantile", [0.02, 0.1, 0.5])
def test_local_attention_matches_dense_quantile_reference_on_random_clouds(quantile):
    torch.manual_seed(0)
    layer = LocalPositionAttention(5, 8, heads=2, quantile=quantile)
    pos_src, pos_dst, x = cloud(200), cloud(60, seed=2), features(200)
    assert_close(layer(x, pos_src), dense_attention(layer, x, pos_src, quantile=quantile))
    assert_close(
        layer(x, pos_src, pos_dst=pos_dst),
        dense_attention(layer, x, pos_src, pos_dst, quantile=quantile),
    )


def test_local_attention_matches_dense_quantile_reference_on_a_grid_with_ties():
    torch.manual_seed(0)
    layer = LocalPositionAttention(5, 6, heads=3, quantile=0.05)
    pos_src, x = grid_points((16, 16)), features(256)
    pos_dst = grid_points((6, 6))  # every target sits on a grid node: ties at every radius
    D = squared_distances(pos_src, pos_src)
    assert field_mask(D, quantile=0.05).sum(1).max() > math.ceil(0.05 * 256)  # ties are included
    assert_close(layer(x, pos_src), dense_attention(layer, x, pos_src, quantile=0.05))
    assert_close(
        layer(x, pos_src, pos_dst=pos_dst),
        dense_attention(layer, x, pos_src, pos_dst, quantile=0.05),
    )


@pytest.mark.parametrize("field", [{"k": 7}, {"radius": 0.2}])
def test_local_attention_matches_dense_knn_and_radius_references(field):
    torch.manual_seed(0)
    layer = LocalPositionAttention(5, 8, heads=2, **field)
    pos_src, pos_dst, x = cloud(150), cloud(50, seed=2), features(150)
    assert_close(
        layer(x, pos_src, pos_dst=pos_dst), dense_attention(layer, x, pos_src, pos_dst, **field)
    )


def test_local_attention_on_a_batch_of_different_sizes_matches_per_sample_reference():
    torch.manual_seed(0)
    layer = LocalPositionAttention(5, 8, heads=2, quantile=0.05)
    sizes_src, sizes_dst = [60, 200, 35], [25, 10, 50]
    pos_src = torch.cat([cloud(n, seed=i) for i, n in enumerate(sizes_src)])  # overlapping boxes
    pos_dst = torch.cat([cloud(n, seed=10 + i) for i, n in enumerate(sizes_dst)])
    batch_src = torch.repeat_interleave(torch.arange(3), torch.tensor(sizes_src))
    batch_dst = torch.repeat_interleave(torch.arange(3), torch.tensor(sizes_dst))
    x = features(len(pos_src))
    out = layer(x, pos_src, batch_src, pos_dst=pos_dst, batch_dst=batch_dst)
    ref = dense_attention(layer, x, pos_src, pos_dst, batch_src, batch_dst, quantile=0.05)
    assert_close(out, ref)


def test_periodic_local_attention_matches_dense_minimum_image_reference_with_ties():
    torch.manual_seed(0)
    layer = LocalPositionAttention(5, 8, heads=2, quantile=0.1, periodic=1.0)
    pos = torch.arange(40.0)[:, None] / 40  # periodic 1D grid: symmetric ties across x = 0
    x = features(40)
    assert_close(layer(x, pos), dense_attention(layer, x, pos, quantile=0.1))
    sizes = [40, 25]
    pos_b = torch.cat([pos, cloud(25, dim=1, seed=3)])
    batch = torch.repeat_interleave(torch.arange(2), torch.tensor(sizes))
    x_b = features(65)
    ref = dense_attention(layer, x_b, pos_b, None, batch, batch, quantile=0.1)
    assert_close(layer(x_b, pos_b, batch), ref)


def test_periodic_local_attention_matches_dense_minimum_image_knn_reference():
    torch.manual_seed(0)
    layer = LocalPositionAttention(5, 8, heads=2, k=6, periodic=(1.0, None))
    pos_src, pos_dst, x = cloud(150), cloud(40, seed=2), features(150)
    assert_close(
        layer(x, pos_src, pos_dst=pos_dst), dense_attention(layer, x, pos_src, pos_dst, k=6)
    )


def test_local_attention_with_an_empty_receptive_field_gives_zeros():
    layer = LocalPositionAttention(5, 8, heads=2, radius=0.1)
    pos_src, x = cloud(50), features(50)
    out = layer(x, pos_src, pos_dst=torch.tensor([[5.0, 5.0]]))
    assert torch.equal(out, torch.zeros(1, 8))


def test_local_attention_gradients_match_the_dense_reference():
    """Gradients with respect to lambda, W^V, the features and both meshes' coordinates, against
    autograd through the dense masked softmax of eq. (10), in float64."""
    torch.manual_seed(0)
    layer = LocalPositionAttention(5, 8, heads=2, k=8).double()
    pos_src, pos_dst = cloud(80).double(), cloud(30, seed=2).double()
    x = features(80).double()
    mask = field_mask(squared_distances(pos_dst, pos_src), k=8)
    grads = []
    for local in (True, False):
        inputs = [t.clone().requires_grad_(True) for t in (x, pos_src, pos_dst)]
        layer.zero_grad()
        if local:
            out = layer(inputs[0], inputs[1], pos_dst=inputs[2])
        else:
            x_, ps, pd = inputs
            v = (x_ @ layer.lin_v.weight.T).view(-1, 2, 4)
            D = (pd[:, None] - ps[None]).pow(2).sum(-1)
            heads = [
                torch.softmax((-lam * D).masked_fill(~mask, -math.inf), dim=1) @ v[:, h]
                for h, lam in enumerate(layer.lam)
            ]
            out = torch.cat(heads, dim=1)
        (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
        grads.append([t.grad for t in inputs] + [layer.theta.grad, layer.lin_v.weight.grad])
    for local, dense in zip(*grads):
        torch.testing.assert_close(local, dense, rtol=1e-9, atol=1e-12)


def test_local_attention_runs_under_bfloat16_autocast():
    torch.manual_seed(0)
    layer = LocalPositionAttention(5, 8, heads=2, k=6)
    pos_src, pos_dst, x = cloud(60), cloud(20, seed=2), features(60).requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = layer(x, pos_src, pos_dst=pos_dst)
    out.sum().backward()
    torch.testing.assert_close(
        out.float(), layer(x, pos_src, pos_dst=pos_dst), rtol=0.05, atol=0.05
    )
    assert torch.isfinite(x.grad).all() and torch.isfinite(layer.theta.grad).all()


def test_local_attention_never_builds_per_edge_messages():
    """Forward and backward allocate nothing near the [E, C_out] message tensor (E edges)."""
    torch.manual_seed(0)
    layer = LocalPositionAttention(8, 32, heads=2, quantile=0.01)
    pos_src, pos_dst = cloud(20_000), cloud(2_000, seed=2)
    x = features(20_000, 8).requires_grad_(True)
    num_edges = layer.neighbors(pos_src, pos_dst)[0].shape[1]
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as p:
        layer(x, pos_src, pos_dst=pos_dst).square().sum().backward()
    largest = max(event.cpu_memory_usage for event in p.events())
    assert largest < 4 * num_edges * 32 / 4, (largest, num_edges)


# ---------------------------------------------------------------- properties of both


def make_layers():
    torch.manual_seed(0)
    return [
        PositionAttention(5, 8, heads=2),
        PositionAttention(5, 8, heads=2, periodic=1.0),
        LocalPositionAttention(5, 8, heads=2, quantile=0.1),
        LocalPositionAttention(5, 8, heads=2, k=9, periodic=1.0),
    ]


@pytest.mark.parametrize("layer", make_layers(), ids=repr)
def test_attention_is_invariant_to_source_order_and_equivariant_to_target_order(layer):
    pos_src, pos_dst, x = cloud(120), cloud(50, seed=2), features(120)
    out = layer(x, pos_src, pos_dst=pos_dst)
    perm_src = torch.randperm(120, generator=torch.Generator().manual_seed(5))
    perm_dst = torch.randperm(50, generator=torch.Generator().manual_seed(6))
    torch.testing.assert_close(layer(x[perm_src], pos_src[perm_src], pos_dst=pos_dst), out)
    torch.testing.assert_close(layer(x, pos_src, pos_dst=pos_dst[perm_dst]), out[perm_dst])
    self_out = layer(x, pos_src)
    torch.testing.assert_close(layer(x[perm_src], pos_src[perm_src]), self_out[perm_src])


@pytest.mark.parametrize("layer", make_layers(), ids=repr)
def test_gradients_reach_lambda_and_the_value_projection(layer):
    pos_src, pos_dst, x = cloud(80), cloud(30, seed=2), features(80)
    layer.zero_grad()
    layer(x, pos_src, pos_dst=pos_dst).square().sum().backward()
    for grad in (layer.theta.grad, layer.lin_v.weight.grad):
        assert grad is not None and torch.isfinite(grad).all() and (grad != 0).all()


@pytest.mark.parametrize(
    "build",
    [
        lambda: PositionAttention(4, 6, heads=4),
        lambda: PositionAttention(4, 4, lambda_param="exp"),
        lambda: PositionAttention(4, 4, periodic=-1.0),
        lambda: LocalPositionAttention(4, 4),
        lambda: LocalPositionAttention(4, 4, quantile=0.1, k=4),
        lambda: LocalPositionAttention(4, 4, quantile=1.5),
        lambda: LocalPositionAttention(4, 4, radius=0.0),
    ],
)
def test_bad_arguments_raise_config_errors(build):
    with pytest.raises(ConfigError):
        build()


def test_global_attention_asks_for_sorted_batch_vectors():
    layer = PositionAttention(5, 4)
    batch = torch.tensor([0, 1, 0, 1])
    with pytest.raises(ConfigError, match="not sorted"):
        layer(features(4), cloud(4), batch)


def test_periodic_box_needs_one_length_per_axis():
    layer = PositionAttention(5, 4, periodic=(1.0, 1.0, 1.0))
    with pytest.raises(ConfigError, match="one per axis"):
        layer(features(10), cloud(10))


def test_repr_shows_sizes_and_receptive_field():
    assert repr(PositionAttention(5, 8, heads=2)) == (
        "PositionAttention(5, 8, heads=2, lambda_param='tan')"
    )
    assert "quantile=0.02" in repr(LocalPositionAttention(5, 8, quantile=0.02))


# ---------------------------------------------------------------- Theorem 2.1


def test_attention_on_refined_meshes_converges_to_the_integral_operator():
    """Theorem 2.1: on meshes X_n ~ mu, PosAtt(U^n; D^n) -> int kappa^lambda(x - y) v(y) dmu(y)
    (eqs. (7)-(8)), here for the uniform measure on [0, 1]^2, lambda = 20, W^V = 1, evaluated by
    cross attention at 40 fixed points; the reference integral uses 200^2 Gauss-Legendre nodes."""
    lam = 20.0
    layer = PositionAttention(1, 1, heads=1, lambda_param="softplus")
    with torch.no_grad():
        layer.lin_v.weight.fill_(1.0)
        layer.theta.fill_(math.log(math.expm1(lam)))

    def v(p):
        return torch.sin(math.pi * p[:, :1]) * torch.cos(2 * p[:, 1:]) + p[:, :1] ** 2

    targets = cloud(40, seed=7).double()
    nodes, weights = np.polynomial.legendre.leggauss(200)
    nodes, weights = torch.tensor((nodes + 1) / 2), torch.tensor(weights / 2)
    y = torch.stack(torch.meshgrid(nodes, nodes, indexing="ij"), -1).reshape(-1, 2)
    kernel = torch.exp(-lam * torch.cdist(targets, y) ** 2) * torch.outer(weights, weights).view(-1)
    exact = kernel @ v(y) / kernel.sum(1, keepdim=True)

    def error(pos):
        with torch.no_grad():
            out = layer(v(pos), pos, pos_dst=targets.float())
        return (out.double() - exact).pow(2).mean().sqrt().item()

    # cell-centred grids (a deterministic X_n ~ mu): second-order convergence
    grid_errors = [error((grid_points((n, n)) * (n - 1) + 0.5) / n) for n in (10, 20, 40, 80)]
    assert all(fine < coarse / 3 for coarse, fine in itertools.pairwise(grid_errors))
    # i.i.d. uniform clouds: Monte-Carlo rate, 100x the points ~ 10x smaller error
    cloud_errors = [np.mean([error(cloud(n, seed=s)) for s in range(4)]) for n in (100, 10_000)]
    assert cloud_errors[1] < cloud_errors[0] / 4

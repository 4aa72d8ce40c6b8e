"""Specification of meshop.nn.OrthogonalAttention (ONO eqs. (4)-(9), (15), App. A)."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from meshop.errors import ConfigError
from meshop.nn import OrthogonalAttention

D, DG, K = 6, 5, 3
SIZES = [7, 12, 9]


def make_inputs(sizes=SIZES, seed=0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    n = sum(sizes)
    h = torch.randn(n, D, generator=gen, dtype=dtype)
    g = torch.randn(n, DG, generator=gen, dtype=dtype)
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    weight = torch.rand(n, generator=gen, dtype=dtype) + 0.2  # a non-uniform mesh
    return h, g, batch, weight


def make_layer(seed=0, **kwargs):
    torch.manual_seed(seed)
    layer = OrthogonalAttention(D, DG, k=K, **kwargs).double()
    with torch.no_grad():  # features of order one, so that whitening has work to do
        layer.lin_q.weight.normal_()
        layer.lin_q.bias.normal_()
        layer.eigen_logit.normal_()
    return layer


def normalised(weight, batch):
    total = torch.zeros(int(batch.max()) + 1, dtype=weight.dtype).index_add_(0, batch, weight)
    return weight / total[batch]


def batch_moment(q, weight, batch):
    """(1/B) sum_b sum_{i in b} wbar_i q_i q_i^T: the dense reference of the whitening moment."""
    wbar = normalised(weight, batch)
    return (q * wbar[:, None]).T @ q / (int(batch.max()) + 1)


def dense_reference(layer, h, g, batch, weight, moment, g_dst=None, batch_dst=None):
    """psi(Y) diag(mu) <psi(X), h W_V>_b per sample, with an explicit inverse of the factor."""
    inv_t = torch.linalg.inv(torch.linalg.cholesky(moment)).T
    psi = layer.lin_q(g) @ inv_t
    g_dst, batch_dst = (g, batch) if g_dst is None else (g_dst, batch_dst)
    psi_dst = layer.lin_q(g_dst) @ inv_t
    value = layer.lin_v(h) if layer.lin_v is not None else h
    wbar = normalised(weight, batch)
    out = torch.empty(len(g_dst), D, dtype=h.dtype)
    for b in range(int(batch.max()) + 1):
        src, dst = batch == b, batch_dst == b
        coeff = psi[src].T @ (wbar[src, None] * value[src])  # [k, d]
        if layer.inner_product == "sum":
            coeff = coeff * src.sum()
        out[dst] = psi_dst[dst] @ torch.diag(layer.eigenvalues) @ coeff
    return out


def test_whitened_features_have_identity_weighted_second_moment_over_the_batch():
    _, g, batch, weight = make_inputs()
    layer = make_layer().train()
    psi = layer.eigenfunctions(g, batch, weight)
    torch.testing.assert_close(batch_moment(psi, weight, batch), torch.eye(K, dtype=psi.dtype))
    # one factor for the whole batch, not one per sample: a single sample is not white
    first = batch == 0
    assert not torch.allclose(
        batch_moment(psi[first], weight[first], batch[first]), torch.eye(K, dtype=psi.dtype)
    )


def test_training_output_matches_dense_reference_with_batch_moment():
    h, g, batch, weight = make_inputs()
    for kwargs in ({}, {"value_projection": False}, {"inner_product": "sum"}):
        layer = make_layer(**kwargs).train()
        moment = batch_moment(layer.lin_q(g), weight, batch)
        expected = dense_reference(layer, h, g, batch, weight, moment)
        torch.testing.assert_close(layer(h, g, batch, weight), expected)


def test_uniform_weights_give_the_papers_average_and_sum_gives_its_raw_sum():
    h, g, batch, _ = make_inputs(sizes=[10, 10])
    uniform = torch.full((len(g),), 0.1, dtype=g.dtype)
    layer = make_layer(value_projection=False).train()
    q = layer.lin_q(g)
    paper_moment = q.T @ q / len(q)  # (1/(N M)) sum over samples and points, eq. (7)
    psi = q @ torch.linalg.inv(torch.linalg.cholesky(paper_moment)).T
    torch.testing.assert_close(layer.eigenfunctions(g, batch), psi)
    torch.testing.assert_close(layer.eigenfunctions(g, batch, uniform), psi)
    raw = make_layer(inner_product="sum", value_projection=False).train()
    mu = raw.eigenvalues
    expected = torch.cat([psi[b] * mu @ (psi[b].T @ h[b]) for b in (batch == 0, batch == 1)])
    torch.testing.assert_close(raw(h, g, batch), expected)  # the authors' code: no 1/M


def test_running_moment_uses_batchnorm_momentum_convention():
    layer = make_layer(momentum=0.25).train()
    assert not layer.initialized
    _, g1, batch1, weight1 = make_inputs(seed=1)
    _, g2, batch2, weight2 = make_inputs(seed=2)
    layer.eigenfunctions(g1, batch1, weight1)
    first = batch_moment(layer.lin_q(g1), weight1, batch1).detach()
    assert layer.initialized
    torch.testing.assert_close(layer.running_moment, first)  # the first batch sets it
    layer.eigenfunctions(g2, batch2, weight2)
    second = batch_moment(layer.lin_q(g2), weight2, batch2).detach()
    torch.testing.assert_close(layer.running_moment, 0.75 * first + 0.25 * second)
    assert not layer.running_moment.requires_grad


def test_evaluation_uses_the_running_moment_and_is_deterministic():
    h, g, batch, weight = make_inputs()
    layer = make_layer().train()
    layer(*make_inputs(seed=3))
    running = layer.running_moment.clone()
    layer.eval()
    out = layer(h, g, batch, weight)
    torch.testing.assert_close(out, dense_reference(layer, h, g, batch, weight, running))
    torch.testing.assert_close(layer(h, g, batch, weight), out, rtol=0, atol=0)
    torch.testing.assert_close(layer.running_moment, running, rtol=0, atol=0)


def test_evaluation_before_training_whitens_with_the_identity():
    h, g, batch, weight = make_inputs()
    layer = make_layer().eval()
    torch.testing.assert_close(layer.eigenfunctions(g, batch, weight), layer.lin_q(g))
    assert torch.isfinite(layer(h, g, batch, weight)).all()


def test_strict_state_dict_round_trip_on_a_fresh_layer():
    h, g, batch, weight = make_inputs()
    layer = make_layer(value_projection=True).train()
    layer(h, g, batch, weight)
    state = layer.state_dict()
    assert {"running_moment", "initialized"} <= set(state)
    fresh = OrthogonalAttention(D, DG, k=K, value_projection=True).double()
    fresh.load_state_dict(state, strict=True)
    assert fresh.initialized
    layer.eval(), fresh.eval()
    torch.testing.assert_close(fresh(h, g, batch, weight), layer(h, g, batch, weight))


def test_cross_form_evaluates_source_eigenfunctions_at_target_nodes():
    h, g, batch, weight = make_inputs()
    _, g_dst, batch_dst, _ = make_inputs(sizes=[4, 2, 5], seed=4)
    layer = make_layer(value_projection=True).train()
    moment = batch_moment(layer.lin_q(g), weight, batch)  # the moment comes from the source only
    out = layer(h, g, batch, weight, g_dst=g_dst, batch_dst=batch_dst)
    assert out.shape == (len(g_dst), D)
    expected = dense_reference(layer, h, g, batch, weight, moment, g_dst, batch_dst)
    torch.testing.assert_close(out, expected)
    # target nodes equal to the source nodes give back the self-attention output
    torch.testing.assert_close(layer(h, g, batch, weight, g, batch), layer(h, g, batch, weight))


def test_zero_weight_nodes_read_the_integrals_but_do_not_enter_them():
    h, g, batch, weight = make_inputs(sizes=[8])
    h_extra, g_extra, _, _ = make_inputs(sizes=[5], seed=5)
    layer = make_layer().train()
    out = layer(h, g, batch, weight)
    both = layer(
        torch.cat([h, h_extra]),
        torch.cat([g, g_extra]),
        torch.zeros(13, dtype=torch.long),
        torch.cat([weight, torch.zeros(5, dtype=weight.dtype)]),
    )
    torch.testing.assert_close(both[:8], out)
    torch.testing.assert_close(both[8:], layer(h, g, batch, weight, g_dst=g_extra))


def test_permutation_equivariance():
    h, g, batch, weight = make_inputs()
    perm = torch.cat([torch.randperm(n) + start for n, start in zip(SIZES, [0, 7, 19])])
    for mode in ("train", "eval"):
        layer = make_layer().train(mode == "train")
        out = layer(h, g, batch, weight)
        torch.testing.assert_close(layer(h[perm], g[perm], batch, weight[perm]), out[perm])


def test_predictions_of_a_sample_do_not_depend_on_its_batch_in_eval_mode():
    h, g, batch, weight = make_inputs()
    layer = make_layer().train()
    layer(h, g, batch, weight)
    layer.eval()
    out = layer(h, g, batch, weight)
    for b in range(len(SIZES)):
        m = batch == b
        torch.testing.assert_close(layer(h[m], g[m], None, weight[m]), out[m])


class ShapeRecorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.shapes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor):
                self.shapes.append(tuple(t.shape))
        return out


def test_never_materialises_an_n_by_n_matrix():
    n = 500
    h, g, batch, weight = make_inputs(sizes=[n])
    layer = make_layer(value_projection=True).train()
    h.requires_grad_(True)
    with ShapeRecorder() as recorder:
        layer(h, g, batch, weight).sum().backward()
    largest = max(torch.Size(s).numel() for s in recorder.shapes)
    assert largest <= 2 * n * D < n * n  # linear in N: node features, never N x N
    assert not any(sum(d >= n for d in s) >= 2 for s in recorder.shapes)


def test_training_gradients_flow_through_the_batch_moment():
    h, g, batch, weight = make_inputs(sizes=[4, 3])
    layer = make_layer(value_projection=True).train()
    g.requires_grad_(True)
    h.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda g, h: layer(h, g, batch, weight), (g, h))


def test_rank_deficient_moment_is_factorised_with_jitter():
    h, g, batch, weight = make_inputs()
    layer = make_layer().train()
    with torch.no_grad():  # every eigenfunction feature equal: a rank-one moment
        layer.lin_q.weight.copy_(layer.lin_q.weight[:1].expand(K, DG))
        layer.lin_q.bias.fill_(0.5)
    assert torch.linalg.cholesky_ex(batch_moment(layer.lin_q(g), weight, batch))[1] > 0
    assert torch.isfinite(layer(h, g, batch, weight)).all()


def test_whitening_runs_in_float64_under_autocast():
    h, g, batch, weight = make_inputs(dtype=torch.float32)
    layer = make_layer().float().train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        psi = layer.eigenfunctions(g, batch, weight)
        out = layer(h, g, batch, weight)
    assert psi.dtype == torch.float64 and out.dtype == torch.float32
    moment = batch_moment(psi, weight.double(), batch)
    torch.testing.assert_close(moment, torch.eye(K, dtype=torch.float64))


def test_repr_and_invalid_arguments():
    layer = OrthogonalAttention(16, 32, k=8, value_projection=True)
    assert "16, feature_channels=32, k=8, value_projection=True" in repr(layer)
    with pytest.raises(ConfigError, match="inner_product"):
        OrthogonalAttention(16, 32, inner_product="median")
    with pytest.raises(ConfigError, match="momentum"):
        OrthogonalAttention(16, 32, momentum=0.0)


def _whiten_on_rank(rank, world_size, init_file, out_dir):
    torch.distributed.init_process_group(
        "gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size
    )
    _, g, batch, weight = make_inputs()
    mine = batch % world_size == rank  # samples 0 and 2 on rank 0, sample 1 on rank 1
    layer = make_layer().train()
    psi = layer.eigenfunctions(
        g[mine], torch.unique(batch[mine], return_inverse=True)[1], weight[mine]
    )
    (psi**2).sum().backward()
    torch.save(
        (psi.detach(), layer.running_moment, layer.lin_q.weight.grad), f"{out_dir}/{rank}.pt"
    )
    torch.distributed.destroy_process_group()


def test_ranks_whiten_with_the_moment_of_the_whole_distributed_batch(tmp_path):
    args = (2, tmp_path / "init", tmp_path)  # fork: the ranks skip re-importing torch and PyG
    torch.multiprocessing.start_processes(_whiten_on_rank, args, nprocs=2, start_method="fork")
    _, g, batch, weight = make_inputs()
    layer = make_layer().train()
    psi = layer.eigenfunctions(g, batch, weight)
    (psi**2).sum().backward()
    ranks = [torch.load(tmp_path / f"{r}.pt") for r in range(2)]
    for rank, (psi_rank, moment, _) in enumerate(ranks):
        torch.testing.assert_close(psi_rank, psi[batch % 2 == rank])
        torch.testing.assert_close(moment, layer.running_moment)
    # gradients through the all-reduce: the ranks' gradients add up to the whole batch's
    torch.testing.assert_close(ranks[0][2] + ranks[1][2], layer.lin_q.weight.grad)

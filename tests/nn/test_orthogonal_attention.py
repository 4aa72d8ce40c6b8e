"""Specification of meshop.nn.OrthogonalAttention (ONO eqs. (4)-(9), (15), App. A): per-sample
orthonormalisation (the default) and the authors' batch whitening with a running moment."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from meshop.errors import ConfigError
from meshop.nn import OrthogonalAttention
from meshop.nn.orthogonal_attention import _cholesky_with_jitter

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


def sample_moment(q, weight):
    """sum_i wbar_i q_i q_i^T over the nodes of one sample."""
    wbar = weight / weight.sum()
    return (q * wbar[:, None]).T @ q


def batch_moment(q, weight, batch):
    """(1/B) sum_b sum_{i in b} wbar_i q_i q_i^T: the dense reference of the batch moment."""
    wbar = normalised(weight, batch)
    return (q * wbar[:, None]).T @ q / (int(batch.max()) + 1)


def dense_reference(layer, h, g, batch, weight, g_dst=None, batch_dst=None, moment=None):
    """psi(Y) diag(mu) <psi(X), h W_V>_b, one sample at a time, with an explicit inverse of the
    Cholesky factor of the sample's own moment C_b, or of ``moment`` for every sample."""
    q = layer.lin_q(g)
    g_dst, batch_dst = (g, batch) if g_dst is None else (g_dst, batch_dst)
    q_dst = layer.lin_q(g_dst)
    value = layer.lin_v(h) if layer.lin_v is not None else h
    wbar = normalised(weight, batch)
    out = torch.empty(len(g_dst), D, dtype=h.dtype)
    for b in range(int(batch.max()) + 1):
        src, dst = batch == b, batch_dst == b
        c = sample_moment(q[src], weight[src]) if moment is None else moment
        inv_t = torch.linalg.inv(torch.linalg.cholesky(c)).T
        coeff = (q[src] @ inv_t).T @ (wbar[src, None] * value[src])  # [k, d]
        if layer.inner_product == "sum":
            coeff = coeff * src.sum()
        out[dst] = q_dst[dst] @ inv_t @ torch.diag(layer.eigenvalues) @ coeff
    return out


# -- orthonormalize="sample" (the default) -------------------------------------------------------


def test_eigenfunctions_are_orthonormal_in_every_samples_weighted_l2():
    _, g, batch, weight = make_inputs()
    layer = make_layer()
    assert layer.orthonormalize == "sample"
    for mode in (True, False):
        psi = layer.train(mode).eigenfunctions(g, batch, weight)
        for b in range(len(SIZES)):
            m = batch == b
            torch.testing.assert_close(sample_moment(psi[m], weight[m]), torch.eye(K).double())


def test_output_matches_dense_float64_reference_with_per_sample_factors():
    h, g, batch, weight = make_inputs()
    for kwargs in ({}, {"value_projection": False}, {"inner_product": "sum"}):
        layer = make_layer(**kwargs)
        expected = dense_reference(layer, h, g, batch, weight)
        for mode in (True, False):
            torch.testing.assert_close(layer.train(mode)(h, None, batch, weight, g=g), expected)


def test_cross_form_uses_the_factor_of_each_targets_own_sample():
    h, g, batch, weight = make_inputs()
    _, g_dst, batch_dst, _ = make_inputs(sizes=[4, 2, 5], seed=4)
    layer = make_layer()
    out = layer(h, None, batch, weight, g=g, g_dst=g_dst, batch_dst=batch_dst)
    expected = dense_reference(layer, h, g, batch, weight, g_dst, batch_dst)
    torch.testing.assert_close(out, expected)
    psi_dst = layer.eigenfunctions(g, batch, weight, g_dst=g_dst, batch_dst=batch_dst)
    for b in range(len(SIZES)):
        src, dst = batch == b, batch_dst == b
        moment = sample_moment(layer.lin_q(g[src]), weight[src])
        inv_t = torch.linalg.inv(torch.linalg.cholesky(moment)).T
        torch.testing.assert_close(psi_dst[dst], layer.lin_q(g_dst[dst]) @ inv_t)


def test_training_and_evaluation_compute_the_same_function_independent_of_the_batch():
    h, g, batch, weight = make_inputs()
    layer = make_layer().train()
    out = layer(h, None, batch, weight, g=g)
    assert not any(name.startswith("running") for name, _ in layer.named_buffers())
    torch.testing.assert_close(layer.eval()(h, None, batch, weight, g=g), out)
    for mode in (True, False):
        layer.train(mode)
        for b in range(len(SIZES)):
            m = batch == b
            torch.testing.assert_close(layer(h[m], None, None, weight[m], g=g[m]), out[m])


@pytest.mark.parametrize("orthonormalize", ["sample", "batch"])
def test_duplicating_a_node_and_halving_its_weight_changes_nothing(orthonormalize):
    h, g, batch, weight = make_inputs()
    layer = make_layer(orthonormalize=orthonormalize).train()
    out = layer(h, None, batch, weight, g=g)
    j = 10  # a node of the second sample
    order = torch.cat([torch.arange(j + 1), torch.tensor([j]), torch.arange(j + 1, len(g))])
    halved = weight.clone()
    halved[j] /= 2
    dup = layer(h[order], None, batch[order], halved[order], g=g[order])
    torch.testing.assert_close(dup, out[order])


def test_gradients_flow_through_per_sample_factors():
    h, g, batch, weight = make_inputs(sizes=[4, 3])
    layer = make_layer(value_projection=True)
    g.requires_grad_(True)
    h.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda g, h: layer(h, None, batch, weight, g=g), (g, h))


def test_jitter_is_added_only_to_the_moments_that_need_it():
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(2, K, K, generator=gen, dtype=torch.float64)
    healthy = a @ a.transpose(1, 2) + torch.eye(K, dtype=torch.float64)
    v = torch.randn(K, 1, generator=gen, dtype=torch.float64)
    moments = torch.stack([healthy[0], v @ v.T, healthy[1]])  # the middle one has rank one
    chol = _cholesky_with_jitter(moments)
    torch.testing.assert_close(chol[[0, 2]], torch.linalg.cholesky(healthy), rtol=0, atol=0)
    assert torch.isfinite(chol).all()
    torch.testing.assert_close(chol[1] @ chol[1].T, moments[1], atol=1e-6, rtol=0)


def test_a_sample_with_fewer_than_k_weighted_nodes_is_refused_with_advice():
    h, g, batch, weight = make_inputs(sizes=[7, K - 1])
    with pytest.raises(ConfigError, match="sample 1 of the batch has 2.*orthonormalize='batch'"):
        make_layer()(h, None, batch, weight, g=g)
    weight = weight.clone()
    weight[: 7 - K + 1] = 0  # zero-weight nodes do not count: K - 1 weighted nodes are left
    with pytest.raises(ConfigError, match="sample 0"):
        make_layer()(h[:7], None, None, weight[:7], g=g[:7])


def test_states_of_the_two_forms_do_not_load_into_each_other():
    sample, batch_form = make_layer(), make_layer(orthonormalize="batch")
    with pytest.raises(ConfigError, match="saved with orthonormalize='batch'.*build it with"):
        sample.load_state_dict(batch_form.state_dict())
    with pytest.raises(ConfigError, match="saved with orthonormalize='sample'"):
        batch_form.load_state_dict(sample.state_dict())


# -- orthonormalize="batch" (the authors' form) --------------------------------------------------


def test_batch_form_whitens_the_batch_not_each_sample():
    _, g, batch, weight = make_inputs()
    layer = make_layer(orthonormalize="batch").train()
    psi = layer.eigenfunctions(g, batch, weight)
    torch.testing.assert_close(batch_moment(psi, weight, batch), torch.eye(K, dtype=psi.dtype))
    # one factor for the whole batch, not one per sample: a single sample is not white
    first = batch == 0
    assert not torch.allclose(
        batch_moment(psi[first], weight[first], batch[first]), torch.eye(K, dtype=psi.dtype)
    )


def test_batch_form_training_output_matches_dense_reference_with_batch_moment():
    h, g, batch, weight = make_inputs()
    for kwargs in ({}, {"value_projection": False}, {"inner_product": "sum"}):
        layer = make_layer(orthonormalize="batch", **kwargs).train()
        moment = batch_moment(layer.lin_q(g), weight, batch)
        expected = dense_reference(layer, h, g, batch, weight, moment=moment)
        torch.testing.assert_close(layer(h, None, batch, weight, g=g), expected)


def test_uniform_weights_give_the_papers_average_and_sum_gives_its_raw_sum():
    h, g, batch, _ = make_inputs(sizes=[10, 10])
    uniform = torch.full((len(g),), 0.1, dtype=g.dtype)
    layer = make_layer(orthonormalize="batch", value_projection=False).train()
    q = layer.lin_q(g)
    paper_moment = q.T @ q / len(q)  # (1/(N M)) sum over samples and points, eq. (7)
    psi = q @ torch.linalg.inv(torch.linalg.cholesky(paper_moment)).T
    torch.testing.assert_close(layer.eigenfunctions(g, batch), psi)
    torch.testing.assert_close(layer.eigenfunctions(g, batch, uniform), psi)
    raw = make_layer(orthonormalize="batch", inner_product="sum", value_projection=False).train()
    mu = raw.eigenvalues
    expected = torch.cat([psi[b] * mu @ (psi[b].T @ h[b]) for b in (batch == 0, batch == 1)])
    torch.testing.assert_close(raw(h, None, batch, g=g), expected)  # the authors' code: no 1/M


def test_running_moment_uses_batchnorm_momentum_convention():
    layer = make_layer(orthonormalize="batch", momentum=0.25).train()
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


def test_batch_form_evaluation_uses_the_running_moment_and_is_deterministic():
    h, g, batch, weight = make_inputs()
    layer = make_layer(orthonormalize="batch").train()
    h3, g3, batch3, weight3 = make_inputs(seed=3)
    layer(h3, None, batch3, weight3, g=g3)
    running = layer.running_moment.clone()
    layer.eval()
    out = layer(h, None, batch, weight, g=g)
    torch.testing.assert_close(out, dense_reference(layer, h, g, batch, weight, moment=running))
    torch.testing.assert_close(layer(h, None, batch, weight, g=g), out, rtol=0, atol=0)
    torch.testing.assert_close(layer.running_moment, running, rtol=0, atol=0)


def test_batch_form_evaluation_before_training_whitens_with_the_identity():
    h, g, batch, weight = make_inputs()
    layer = make_layer(orthonormalize="batch").eval()
    torch.testing.assert_close(layer.eigenfunctions(g, batch, weight), layer.lin_q(g))
    assert torch.isfinite(layer(h, None, batch, weight, g=g)).all()


@pytest.mark.parametrize("orthonormalize", ["sample", "batch"])
def test_strict_state_dict_round_trip_on_a_fresh_layer(orthonormalize):
    h, g, batch, weight = make_inputs()
    layer = make_layer(value_projection=True, orthonormalize=orthonormalize).train()
    layer(h, None, batch, weight, g=g)
    state = layer.state_dict()
    assert ({"running_moment", "initialized"} <= set(state)) == (orthonormalize == "batch")
    fresh = OrthogonalAttention(
        D, DG, k=K, value_projection=True, orthonormalize=orthonormalize
    ).double()
    fresh.load_state_dict(state, strict=True)
    layer.eval(), fresh.eval()
    torch.testing.assert_close(
        fresh(h, None, batch, weight, g=g), layer(h, None, batch, weight, g=g)
    )


def test_batch_form_cross_form_evaluates_source_eigenfunctions_at_target_nodes():
    h, g, batch, weight = make_inputs()
    _, g_dst, batch_dst, _ = make_inputs(sizes=[4, 2, 5], seed=4)
    layer = make_layer(orthonormalize="batch", value_projection=True).train()
    moment = batch_moment(layer.lin_q(g), weight, batch)  # the moment comes from the source only
    out = layer(h, None, batch, weight, g=g, g_dst=g_dst, batch_dst=batch_dst)
    assert out.shape == (len(g_dst), D)
    expected = dense_reference(layer, h, g, batch, weight, g_dst, batch_dst, moment=moment)
    torch.testing.assert_close(out, expected)


# -- both forms ----------------------------------------------------------------------------------


@pytest.mark.parametrize("orthonormalize", ["sample", "batch"])
def test_target_nodes_equal_to_the_source_nodes_give_the_self_attention_output(orthonormalize):
    h, g, batch, weight = make_inputs()
    layer = make_layer(orthonormalize=orthonormalize).train()
    torch.testing.assert_close(
        layer(h, None, batch, weight, g=g, g_dst=g, batch_dst=batch),
        layer(h, None, batch, weight, g=g),
    )


@pytest.mark.parametrize("orthonormalize", ["sample", "batch"])
def test_zero_weight_nodes_read_the_integrals_but_do_not_enter_them(orthonormalize):
    h, g, batch, weight = make_inputs(sizes=[8])
    h_extra, g_extra, _, _ = make_inputs(sizes=[5], seed=5)
    layer = make_layer(orthonormalize=orthonormalize).train()
    out = layer(h, None, batch, weight, g=g)
    both = layer(
        torch.cat([h, h_extra]),
        None,
        torch.zeros(13, dtype=torch.long),
        torch.cat([weight, torch.zeros(5, dtype=weight.dtype)]),
        g=torch.cat([g, g_extra]),
    )
    torch.testing.assert_close(both[:8], out)
    torch.testing.assert_close(both[8:], layer(h, None, batch, weight, g=g, g_dst=g_extra))


@pytest.mark.parametrize("orthonormalize", ["sample", "batch"])
def test_permutation_equivariance(orthonormalize):
    h, g, batch, weight = make_inputs()
    perm = torch.cat([torch.randperm(n) + start for n, start in zip(SIZES, [0, 7, 19])])
    for mode in ("train", "eval"):
        layer = make_layer(orthonormalize=orthonormalize).train(mode == "train")
        out = layer(h, None, batch, weight, g=g)
        torch.testing.assert_close(layer(h[perm], None, batch, weight[perm], g=g[perm]), out[perm])


@pytest.mark.parametrize("orthonormalize", ["sample", "batch"])
def test_predictions_of_a_sample_do_not_depend_on_its_batch_in_eval_mode(orthonormalize):
    h, g, batch, weight = make_inputs()
    layer = make_layer(orthonormalize=orthonormalize).train()
    layer(h, None, batch, weight, g=g)
    layer.eval()
    out = layer(h, None, batch, weight, g=g)
    for b in range(len(SIZES)):
        m = batch == b
        torch.testing.assert_close(layer(h[m], None, None, weight[m], g=g[m]), out[m])


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


@pytest.mark.parametrize("orthonormalize", ["sample", "batch"])
def test_never_materialises_an_n_by_n_matrix(orthonormalize):
    n = 500
    h, g, batch, weight = make_inputs(sizes=[n])
    layer = make_layer(value_projection=True, orthonormalize=orthonormalize).train()
    h.requires_grad_(True)
    with ShapeRecorder() as recorder:
        layer(h, None, batch, weight, g=g).sum().backward()
    largest = max(torch.Size(s).numel() for s in recorder.shapes)
    assert largest <= 2 * n * D < n * n  # linear in N: node features, never N x N
    assert not any(sum(d >= n for d in s) >= 2 for s in recorder.shapes)


def test_batch_form_training_gradients_flow_through_the_batch_moment():
    h, g, batch, weight = make_inputs(sizes=[4, 3])
    layer = make_layer(orthonormalize="batch", value_projection=True).train()
    g.requires_grad_(True)
    h.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda g, h: layer(h, None, batch, weight, g=g), (g, h))


@pytest.mark.parametrize("orthonormalize", ["sample", "batch"])
def test_rank_deficient_moment_is_factorised_with_jitter(orthonormalize):
    h, g, batch, weight = make_inputs()
    layer = make_layer(orthonormalize=orthonormalize).train()
    with torch.no_grad():  # every eigenfunction feature equal: rank-one moments
        layer.lin_q.weight.copy_(layer.lin_q.weight[:1].expand(K, DG))
        layer.lin_q.bias.fill_(0.5)
    assert torch.linalg.cholesky_ex(batch_moment(layer.lin_q(g), weight, batch))[1] > 0
    assert torch.isfinite(layer(h, None, batch, weight, g=g)).all()


@pytest.mark.parametrize("orthonormalize", ["sample", "batch"])
def test_whitening_runs_in_float64_under_autocast(orthonormalize):
    h, g, batch, weight = make_inputs(dtype=torch.float32)
    layer = make_layer(orthonormalize=orthonormalize).float().train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        psi = layer.eigenfunctions(g, batch, weight)
        out = layer(h, None, batch, weight, g=g)
    assert psi.dtype == torch.float64 and out.dtype == torch.float32
    first = batch == 0
    moment = (
        sample_moment(psi[first], weight[first].double())
        if orthonormalize == "sample"
        else batch_moment(psi, weight.double(), batch)
    )
    torch.testing.assert_close(moment, torch.eye(K, dtype=torch.float64))


def test_repr_and_invalid_arguments():
    layer = OrthogonalAttention(16, 32, k=8, value_projection=True)
    assert "16, feature_channels=32, k=8, value_projection=True" in repr(layer)
    assert "orthonormalize='sample'" in repr(layer)
    with pytest.raises(ConfigError, match="orthonormalize"):
        OrthogonalAttention(16, 32, orthonormalize="global")
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
    local = torch.unique(batch[mine], return_inverse=True)[1]
    layer = make_layer(orthonormalize="batch").train()
    psi = layer.eigenfunctions(g[mine], local, weight[mine])
    (psi**2).sum().backward()
    per_sample = make_layer().train().eigenfunctions(g[mine], local, weight[mine])
    torch.save(
        (psi.detach(), layer.running_moment, layer.lin_q.weight.grad, per_sample.detach()),
        f"{out_dir}/{rank}.pt",
    )
    torch.distributed.destroy_process_group()


def test_ranks_whiten_with_the_moment_of_the_whole_distributed_batch(tmp_path):
    args = (2, tmp_path / "init", tmp_path)  # fork: the ranks skip re-importing torch and PyG
    torch.multiprocessing.start_processes(_whiten_on_rank, args, nprocs=2, start_method="fork")
    _, g, batch, weight = make_inputs()
    layer = make_layer(orthonormalize="batch").train()
    psi = layer.eigenfunctions(g, batch, weight)
    (psi**2).sum().backward()
    per_sample = make_layer().train().eigenfunctions(g, batch, weight)
    ranks = [torch.load(tmp_path / f"{r}.pt") for r in range(2)]
    for rank, (psi_rank, moment, _, per_sample_rank) in enumerate(ranks):
        torch.testing.assert_close(psi_rank, psi[batch % 2 == rank])
        torch.testing.assert_close(moment, layer.running_moment)
        # orthonormalize="sample" needs no communication: each rank's samples as on one process
        torch.testing.assert_close(per_sample_rank, per_sample[batch % 2 == rank])
    # gradients through the all-reduce: the ranks' gradients add up to the whole batch's
    torch.testing.assert_close(ranks[0][2] + ranks[1][2], layer.lin_q.weight.grad)


@pytest.mark.parametrize("orthonormalize", ["sample", "batch"])
def test_cross_form_reads_zeros_at_targets_of_samples_without_sources(orthonormalize):
    """Targets of a sample with no source node (in the middle or past the last source sample)
    get zeros, and the other targets are what they are without them."""
    h, g, batch, weight = make_inputs(sizes=[9, 10])
    _, g_dst, _, _ = make_inputs(sizes=[4, 3, 5, 2], seed=4)
    batch_dst = torch.repeat_interleave(torch.arange(4), torch.tensor([4, 3, 5, 2]))
    sources = torch.where(batch == 1, 2, batch)  # samples 0 and 2 have sources, 1 and 3 none
    layer = make_layer(orthonormalize=orthonormalize).train()
    out = layer(h, None, sources, weight, g=g, g_dst=g_dst, batch_dst=batch_dst)
    assert out.shape == (len(g_dst), D) and torch.isfinite(out).all()
    empty = (batch_dst == 1) | (batch_dst == 3)
    assert torch.equal(out[empty], torch.zeros_like(out[empty]))
    single = layer.float()(  # in float32 too, where a huge eigenfunction would overflow
        h.float(),
        None,
        sources,
        weight.float(),
        g=g.float(),
        g_dst=g_dst.float(),
        batch_dst=batch_dst,
    )
    assert torch.isfinite(single).all() and torch.equal(
        single[empty], torch.zeros_like(single[empty])
    )
    layer.double()
    keep = ~empty
    expected = layer(h, None, batch, weight, g=g, g_dst=g_dst[keep], batch_dst=batch_dst[keep] // 2)
    torch.testing.assert_close(out[keep], expected)


def test_the_cross_form_needs_target_features():
    h, g, batch, weight = make_inputs()
    layer = make_layer()
    with pytest.raises(ConfigError, match="give g_dst"):
        layer(h, None, batch, weight, g=g, pos_dst=torch.rand(5, 2))
    with pytest.raises(ConfigError, match="g_dst must be"):
        layer(h, None, batch, weight, g=g, g_dst=torch.rand(5, DG + 1))
    with pytest.raises(ConfigError, match="batch_dst has 4 rows but g_dst has 5"):
        layer(h, None, batch, weight, g=g, g_dst=g[:5], batch_dst=batch[:4])

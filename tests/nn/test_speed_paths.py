"""Fast paths (equal-size batches, shared meshes, equal weights) compute what the per-sample path
and the dense formulas compute, gradients included; the benchmarks' reference formulations compute
what the papers' code does."""

import json
import math

import pytest
import torch

import meshop.nn.head_attention as head_module
import meshop.nn.orthogonal_attention as orthogonal_module
from benchmarks.lib import training_steps
from benchmarks.speed import profile_ono, profile_pit, training_vs_reference
from meshop import testing as reference
from meshop.data.neighbors import equal_sizes, sample_slices
from meshop.nn import (
    FourierAttention,
    GalerkinAttention,
    GalerkinEncoderLayer,
    LinearAttention,
    LocalPositionAttention,
    OrthogonalAttention,
    PositionAttention,
    SoftmaxAttention,
)


def batch_vector(b, n):
    return torch.arange(b).repeat_interleave(n)


def grads(out, tensors):
    return torch.autograd.grad(out.square().sum(), tensors)


def assert_all_close(first, second):
    """Equal to float32 precision relative to the largest entry of all the tensors (a gradient
    that is zero in exact arithmetic is rounding noise in both)."""
    scale = max(float(b.abs().max()) for b in second)
    for a, b in zip(first, second, strict=True):
        assert float((a - b).abs().max()) <= 2e-5 * scale, (a, b)


# --- equal sizes -------------------------------------------------------------------------------


def test_equal_sizes_recognises_equal_and_rejects_mixed_batches():
    assert equal_sizes(10, 6, None, None) == (1, 10, 6)
    assert equal_sizes(12, 6, batch_vector(3, 4), batch_vector(3, 2)) == (3, 4, 2)
    mixed = torch.tensor([0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2])
    assert equal_sizes(12, 6, mixed, batch_vector(3, 2)) is None
    assert equal_sizes(12, 6, batch_vector(3, 4), None) is None
    unsorted = torch.tensor([0, 1, 0, 1])
    assert equal_sizes(4, 4, unsorted, unsorted) is None
    assert equal_sizes(8, 6, batch_vector(2, 4), batch_vector(3, 2)) is None  # 2 vs 3 samples


# --- position attention ------------------------------------------------------------------------


def dense_position_attention(layer, x, pos_src, pos_dst, b):
    """exp(-lambda |x_i - y_k|^2) softmax weights times the values, per sample and head."""
    n_src, n_dst = len(pos_src) // b, len(pos_dst) // b
    v = layer.lin_v(x).view(b, n_src, layer.heads, layer.head_channels)
    ps, pd = pos_src.view(b, n_src, -1), pos_dst.view(b, n_dst, -1)
    dist = (pd[:, :, None] - ps[:, None]).square().sum(-1)
    attn = torch.softmax(-layer.lam.view(1, -1, 1, 1) * dist[:, None], dim=-1)
    return torch.einsum("bhij,bjhc->bihc", attn, v).reshape(b * n_dst, -1)


def per_sample_position_attention(layer, x, pos_src, pos_dst, batch_src, batch_dst):
    """The sample-by-sample path of the layer."""
    v = layer.lin_v(x).view(-1, layer.heads, layer.head_channels)
    out = v.new_zeros(len(pos_dst), layer.heads, layer.head_channels)
    for src, dst in sample_slices(batch_src, batch_dst):
        out[dst] = layer._attend(pos_src[src], pos_dst[dst], v[src], layer.lam, None)
    return out.view(len(pos_dst), -1)


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("dense_elements", [0, 2**24])
def test_batched_position_attention_equals_per_sample_and_dense(shared, dense_elements):
    torch.manual_seed(0)
    b, n_src, n_dst, c = 3, 40, 25, 8
    layer = PositionAttention(c, c, heads=2, dense_elements=dense_elements)
    x = torch.randn(b * n_src, c, requires_grad=True)
    count = 1 if shared else b
    pos_src = torch.rand(count, n_src, 2).expand(b, -1, -1).reshape(-1, 2)
    pos_dst = torch.rand(count, n_dst, 2).expand(b, -1, -1).reshape(-1, 2)
    batch_src, batch_dst = batch_vector(b, n_src), batch_vector(b, n_dst)
    params = [x, layer.theta, layer.lin_v.weight]
    out = layer(x, pos_src, batch_src, pos_dst=pos_dst, batch_dst=batch_dst)
    loop = per_sample_position_attention(layer, x, pos_src, pos_dst, batch_src, batch_dst)
    dense = dense_position_attention(layer, x, pos_src, pos_dst, b)
    torch.testing.assert_close(out, loop, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out, dense, rtol=1e-5, atol=1e-6)
    assert_all_close(grads(out, params), grads(dense, params))


def test_shared_mesh_kernel_is_computed_once_per_head(monkeypatch):
    """On a shared mesh one attention call covers every sample (the values side by side)."""
    torch.manual_seed(0)
    b, n, c = 4, 30, 8
    layer = PositionAttention(c, c, heads=2)
    pos = torch.rand(n, 2).repeat(b, 1)
    calls = []
    original = torch.nn.functional.scaled_dot_product_attention

    def spy(q, k, v, **kwargs):
        calls.append((tuple(q.shape), tuple(v.shape)))
        return original(q, k, v, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    layer(torch.randn(b * n, c), pos, batch_vector(b, n))
    assert calls == [((1, 2, n, 3), (1, 2, n, b * 4))]
    # one sample has nothing to share: the fused kernel (coordinates padded to the head width),
    # twice as fast as the explicit kernel for a single sample
    calls.clear()
    wide = PositionAttention(16, 16, heads=2)
    wide(torch.randn(n, 16), pos[:n], batch_vector(1, n))
    assert calls == [((1, 2, n, 8), (1, 2, n, 8))]


# --- Galerkin-family attention -----------------------------------------------------------------

ATTENTIONS = [GalerkinAttention, FourierAttention, LinearAttention, SoftmaxAttention]


@pytest.mark.parametrize("cls", ATTENTIONS)
@pytest.mark.parametrize("weights", ["none", "uniform", "varying"])
def test_equal_size_path_equals_padded_path(cls, weights, monkeypatch):
    torch.manual_seed(0)
    b, n, d = 3, 20, 8
    layer = cls(d, 2, heads=2)
    with torch.no_grad():  # move the layer norms' affine maps off the identity
        for norm in layer.norms.values():
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.uniform_(-0.5, 0.5)
    x = torch.randn(b * n, d, requires_grad=True)
    pos, batch = torch.rand(b * n, 2), batch_vector(b, n)
    weight = {
        "none": None,
        "uniform": torch.full((b * n,), 0.37),
        "varying": torch.rand(b * n) + 0.1,
    }[weights]
    params = [x, *layer.parameters()]
    fast = layer(x, pos, batch, weight)
    monkeypatch.setattr(head_module, "equal_sizes", lambda *args: None)
    padded = layer(x, pos, batch, weight)
    torch.testing.assert_close(fast, padded, rtol=1e-5, atol=1e-6)
    assert_all_close(grads(fast, params), grads(padded, params))


@pytest.mark.parametrize("weights", ["uniform", "varying"])
@pytest.mark.parametrize("sizes", [(20, 20, 20), (7, 20, 13)])
def test_fourier_attention_in_linear_order_equals_the_n_by_n_kernel(weights, sizes, monkeypatch):
    """Q (K^T W V) equals the paper's (Q K^T) W V, gradients included: the n x n form runs when
    kernel dropout is on in training, here with dropout replaced by the identity."""
    torch.manual_seed(0)
    n, d = sum(sizes), 8
    layer = FourierAttention(d, 2, heads=2, dropout=0.5)
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(0.3 * torch.randn_like(p))
    x = torch.randn(n, d, requires_grad=True)
    pos = torch.rand(n, 2)
    batch = torch.cat([torch.full((s,), i) for i, s in enumerate(sizes)])
    weight = torch.full((n,), 0.37) if weights == "uniform" else torch.rand(n) + 0.1
    params = [x, *layer.parameters()]
    linear = layer.eval()(x, pos, batch, weight)
    kernels = []
    original_matmul = torch.Tensor.__matmul__

    def spy(a, b):
        out = original_matmul(a, b)
        kernels.append(out.shape[-1] == out.shape[-2] == max(sizes))
        return out

    monkeypatch.setattr(torch.Tensor, "__matmul__", spy)
    monkeypatch.setattr(head_module.F, "dropout", lambda t, p, training: t)
    kernel = layer.train()(x, pos, batch, weight)
    assert any(kernels)  # the n x n kernel was built
    torch.testing.assert_close(linear, kernel, rtol=1e-5, atol=1e-6)
    assert_all_close(grads(linear, params), grads(kernel, params))


@pytest.mark.parametrize("cls", [FourierAttention, GalerkinAttention, LinearAttention])
def test_equal_size_path_is_taken(cls, monkeypatch):
    calls = []
    original = cls._forward_equal

    def spy(self, *args):
        calls.append(args[-1])
        return original(self, *args)

    monkeypatch.setattr(cls, "_forward_equal", spy)
    layer = cls(8, 1)
    layer(torch.randn(12, 8), torch.rand(12, 1), batch_vector(3, 4))
    layer(torch.randn(7, 8), torch.rand(7, 1), torch.tensor([0, 0, 0, 1, 1, 1, 1]))
    assert calls == [3]  # the mixed batch took the padded path


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(pos_dim=2, heads=2),
        dict(pos_dim=0, heads=2),
        dict(pos_dim=1, heads=1, layer_norm=False),
        dict(pos_dim=1, heads=4, dropout=0.3),
    ],
)
@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("cls", [GalerkinAttention, LinearAttention, FourierAttention])
def test_folded_projections_equal_the_padded_path(cls, kwargs, mode, monkeypatch):
    """Galerkin attention on equal-size samples folds W^Q and W^O into the e x e products,
    linear and Fourier attention W^O: the same output and gradients as the general path
    (attention dropout included: both paths draw the same mask from the same seed)."""
    torch.manual_seed(0)
    b, n, d = 3, 20, 8
    pos_dim = kwargs["pos_dim"]
    layer = cls(d, **kwargs).double().train(mode == "train")
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(0.3 * torch.randn_like(p))
    x = torch.randn(b * n, d, dtype=torch.float64, requires_grad=True)
    pos, batch = torch.rand(b * n, pos_dim, dtype=torch.float64), batch_vector(b, n)
    weight = torch.rand(b * n, dtype=torch.float64) + 0.1
    params = [x, *layer.parameters()]
    torch.manual_seed(1)
    fast = layer(x, pos, batch, weight)
    monkeypatch.setattr(head_module, "equal_sizes", lambda *args: None)
    torch.manual_seed(1)
    padded = layer(x, pos, batch, weight)
    assert_all_close([fast.detach()], [padded.detach()])
    assert_all_close(grads(fast, params), grads(padded, params))


# --- orthogonal attention ---------------------------------------------------------------------


@pytest.mark.parametrize("weights", ["none", "uniform", "varying"])
@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"value_projection": False, "inner_product": "sum"},
        {"orthonormalize": "batch"},
        {"orthonormalize": "batch", "value_projection": False, "inner_product": "sum"},
    ],
)
def test_orthogonal_attention_equal_size_path_equals_padded_path(kwargs, weights, monkeypatch):
    torch.manual_seed(0)
    b, n, d, k = 3, 20, 8, 4
    layer = OrthogonalAttention(d, 6, k=k, **kwargs)
    with torch.no_grad():  # features of order one, so that whitening has work to do
        layer.lin_q.weight.normal_()
        layer.eigen_logit.normal_()
        if layer.lin_v is not None:
            layer.lin_v.weight.normal_()
    h = torch.randn(b * n, d, requires_grad=True)
    g = torch.randn(b * n, 6, requires_grad=True)
    batch = batch_vector(b, n)
    weight = {
        "none": None,
        "uniform": torch.full((b * n,), 0.37),
        "varying": torch.cat([torch.rand(b * n - 5) + 0.1, torch.zeros(5)]),  # with queries
    }[weights]
    params = [h, g, *layer.parameters()]
    fast = layer(h, None, batch, weight, g=g)
    running = layer.running_moment.clone() if "orthonormalize" in kwargs else None
    monkeypatch.setattr(orthogonal_module, "equal_sizes", lambda *args: None)
    layer.reset_running_stats()
    padded = layer(h, None, batch, weight, g=g)
    assert_all_close([fast.detach()], [padded.detach()])
    assert_all_close(grads(fast, params), grads(padded, params))
    if running is not None:  # the batch form's running moment is updated alike
        torch.testing.assert_close(running, layer.running_moment)


def test_orthogonal_attention_equal_size_path_is_taken(monkeypatch):
    calls = []
    original = orthogonal_module.OrthogonalAttention._forward_equal

    def spy(self, *args):
        calls.append(args[-1])
        return original(self, *args)

    monkeypatch.setattr(orthogonal_module.OrthogonalAttention, "_forward_equal", spy)
    layer = OrthogonalAttention(8, 6, k=2)
    layer(torch.randn(12, 8), None, batch_vector(3, 4), g=torch.randn(12, 6))
    layer(torch.randn(7, 8), None, torch.tensor([0, 0, 0, 1, 1, 1, 1]), g=torch.randn(7, 6))
    layer(torch.randn(5, 8), None, g=torch.randn(5, 6))
    layer(
        torch.randn(12, 8),
        None,
        batch_vector(3, 4),
        g=torch.randn(12, 6),
        g_dst=torch.randn(6, 6),
        batch_dst=batch_vector(3, 2),
    )
    assert calls == [3, 1]  # the mixed batch and the cross form took the padded path


# --- reference formulations --------------------------------------------------------------------


def copy_galerkin_weights(ours: GalerkinEncoderLayer, ref: reference.GalerkinReferenceLayer):
    """meshop's weights into the reference layer (coordinates after, not before, each head)."""
    attn, heads, d_k = ours.attn, ours.attn.heads, ours.attn.head_channels
    m = attn.pos_dim
    with torch.no_grad():
        for lin, ref_lin in zip((attn.lin_q, attn.lin_k, attn.lin_v), ref.attn.linears):
            ref_lin.load_state_dict(lin.state_dict())
        keys = list(attn.norms)
        for key, norms in zip(keys, (ref.attn.norm_1, ref.attn.norm_2)):
            for h, norm in enumerate(norms):
                norm.weight.copy_(attn.norms[key].weight[h])
                norm.bias.copy_(attn.norms[key].bias[h])
        order = []
        for h in range(heads):  # reference column [pos, t] of head h -> meshop column [t, pos]
            base = h * (d_k + m)
            order += [base + d_k + i for i in range(m)] + [base + i for i in range(d_k)]
        ref.attn.fc.weight.copy_(attn.lin_out.weight[:, order])
        ref.attn.fc.bias.copy_(attn.lin_out.bias)
        ref.ffn[0].load_state_dict(ours.ffn[0].state_dict())
        ref.ffn[2].load_state_dict(ours.ffn[3].state_dict())


@pytest.mark.parametrize("attention", ["galerkin", "fourier"])
def test_galerkin_reference_layer_is_the_authors_formula(attention):
    """With the same weights, the reference layer equals meshop's encoder layer (the maths of
    eqs. (4)-(6) with 1/n weights), gradients included."""
    torch.manual_seed(0)
    b, n, d, heads = 2, 16, 8, 2
    ours = GalerkinEncoderLayer(d, 1, attention, heads=heads)
    with torch.no_grad():
        for norm in ours.attn.norms.values():
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.uniform_(-0.5, 0.5)
    ref = reference.GalerkinReferenceLayer(d, heads, 1, attention)
    copy_galerkin_weights(ours, ref)
    x = torch.randn(b, n, d, requires_grad=True)
    pos = torch.rand(b, n, 1)
    out_ref = ref(x, pos)
    out = ours(x.view(b * n, d), pos.view(b * n, 1), batch_vector(b, n)).view(b, n, d)
    torch.testing.assert_close(out_ref, out, rtol=1e-5, atol=1e-5)
    assert_all_close(grads(out_ref, [x]), grads(out, [x]))


def test_galerkin_reference_attention_by_hand():
    torch.manual_seed(0)
    b, n, d = 2, 10, 4
    ref = reference.GalerkinReferenceAttention(d, 1, 1, "galerkin")
    x, pos = torch.randn(b, n, d), torch.rand(b, n, 1)
    q, k, v = (lin(x) for lin in ref.linears)
    k, v = ref.norm_1[0](k), ref.norm_2[0](v)
    q, k, v = (torch.cat([pos, t], -1) for t in (q, k, v))
    expected = torch.stack([q[i] @ (k[i].T @ v[i]) / n for i in range(b)])
    torch.testing.assert_close(ref(x, pos), ref.fc(expected))


def quantile_by_hand(row: torch.Tensor, q: float) -> torch.Tensor:
    """Linear interpolation between the sorted values (torch.quantile's default)."""
    values = sorted(row.tolist())
    rank = q * (len(values) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(values) - 1)
    return values[low] + (rank - low) * (values[high] - values[low])


def test_pit_reference_layer_by_hand():
    torch.manual_seed(0)
    b, n_in, n_out, c, heads, q = 2, 30, 7, 3, 2, 0.2
    layer = reference.PiTReferencePosAtt(heads, q)
    u, pos_in, pos_out = torch.randn(b, n_in, c), torch.rand(b, n_in, 2), torch.rand(b, n_out, 2)
    lam = torch.tan(math.pi / 4 * (1 - 1e-7) * (1 + torch.sin(layer.theta.detach())))
    expected = torch.zeros(b, n_out, heads, c)
    for i in range(b):
        for t in range(n_out):
            dist = ((pos_out[i, t] - pos_in[i]) ** 2).sum(-1)
            for h in range(heads):
                scaled = lam[h] * dist
                keep = scaled <= quantile_by_hand(scaled, q)
                w = torch.where(keep, torch.exp(-scaled), 0.0)
                expected[i, t, h] = (w / w.sum()) @ u[i]
    out = layer(u, pos_in, pos_out).detach()
    torch.testing.assert_close(out, expected.flatten(-2), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("locality", [1.0, 0.1])
def test_pit_reference_layer_equals_meshop_with_identity_values(locality):
    """Every head sees all channels: meshop's layer with W^V = [I; ...; I] is the same operator."""
    torch.manual_seed(0)
    b, n, c, heads = 2, 40, 4, 2
    layer = reference.PiTReferencePosAtt(heads, locality)
    if locality == 1.0:
        ours = PositionAttention(c, heads * c, heads)
    else:
        ours = LocalPositionAttention(c, heads * c, heads, quantile=locality)
    with torch.no_grad():
        ours.lin_v.weight.copy_(torch.eye(c).repeat(heads, 1))
        ours.theta.copy_(layer.theta)
    u, pos = torch.randn(b, n, c, requires_grad=True), torch.rand(b, n, 2)
    out_ref = layer(u, pos, pos)
    batch = batch_vector(b, n)
    out = ours(u.reshape(b * n, c), pos.view(b * n, 2), batch).view(b, n, -1)
    torch.testing.assert_close(out_ref, out, rtol=1e-5, atol=1e-5)
    params_ref, params = [u, layer.theta], [u, ours.theta]
    assert_all_close(grads(out_ref, params_ref), grads(out, params))


def test_pit_reference_model_runs_and_trains():
    torch.manual_seed(0)
    model = reference.PiTReference(5, 1, width=8, heads=2, blocks=2)
    feats, pos, latent = torch.randn(2, 30, 5), torch.rand(2, 30, 2), torch.rand(2, 10, 2)
    out = model(feats, pos, latent)
    assert out.shape == (2, 30, 1)
    out.square().mean().backward()
    assert all(p.grad is not None for p in model.parameters())


def test_linear_attention_reference_by_hand():
    torch.manual_seed(0)
    b, n, dim, heads = 2, 12, 8, 2
    attn = reference.LinearAttentionReference(dim, heads)
    x = torch.randn(b, n, dim)
    d = dim // heads
    q, k, v = attn.to_q(x), attn.to_k(x), attn.to_v(x)
    parts = []
    for h in range(heads):
        cols = slice(h * d, (h + 1) * d)
        qh = q[..., cols].softmax(-1) * d**-0.5  # over channels
        kh = k[..., cols].softmax(1)  # over nodes
        parts.append(qh @ (kh.transpose(1, 2) @ v[..., cols]))
    torch.testing.assert_close(attn(x), attn.to_out(torch.cat(parts, -1)))


def test_ono_reference_whitens_with_the_batch_moment_and_tracks_it():
    torch.manual_seed(0)
    block = reference.ONOReferenceBlock(8, 2, psi_dim=3, momentum=0.9)
    captured = []
    block.proj.register_forward_hook(lambda mod, inp, out: captured.append(out.detach()))
    x, fx = torch.randn(2, 50, 8), torch.randn(2, 50, 8)
    block.train()
    _, out = block(x, fx)
    assert out.shape == (2, 50, 8)
    x_ = captured[0]
    cov = torch.einsum("blc,bld->cd", x_, x_) / 100
    torch.testing.assert_close(block.feature_cov, cov)
    chol = torch.linalg.cholesky(cov)
    whitened = x_ @ torch.linalg.inv(chol).T
    moment = torch.einsum("blc,bld->cd", whitened, whitened) / 100
    torch.testing.assert_close(moment, torch.eye(3), rtol=1e-4, atol=1e-4)
    block(x * 2, fx)
    cov2 = torch.einsum("blc,bld->cd", captured[1], captured[1]) / 100
    torch.testing.assert_close(block.feature_cov, 0.9 * cov + 0.1 * cov2)
    # evaluation whitens with the running covariance; fx <- (x_ softplus(mu)) (x_^T fx) + fx
    block.eval()
    with torch.no_grad():
        _, out = block(x, fx)
        psi = captured[2] @ torch.linalg.inv(torch.linalg.cholesky(block.feature_cov)).T
        mu = torch.nn.functional.softplus(block.mu)
        expected = (psi * mu) @ (psi.transpose(1, 2) @ fx) + fx
        torch.testing.assert_close(out, block.mlp2(block.ln_3(expected)))


def test_ono_reference_model_shapes():
    model = reference.ONOReference(3, 1, width=16, layers=2, heads=4, psi_dim=4)
    out = model(torch.randn(2, 20, 3))
    assert out.shape == (2, 20, 1)


def _ono_pairs(ours, ref):
    """(meshop parameter, reference parameter, map of values, map of gradients) of an ONO built
    with the authors' options and the reference ``ONO2``: meshop's node features are ``[f, pos]``,
    the reference's ``[pos, f]``; the reference scales its queries by ``d_head^-1/2`` where meshop
    leaves the factor to the output projection."""

    def same(t):
        return t

    def permute(t):
        return t[:, [1, 2, 0]]

    pairs = [
        (ours.encoder.lins[0].weight, ref.preprocess.weight, permute, permute),
        (ours.encoder.lins[0].bias, ref.preprocess.bias, same, same),
    ]
    assert len(ours.encoder.lins) == 1  # ONO2's one linear layer
    for feature, solution, block in zip(ours.feature_blocks, ours.solution_blocks, ref.blocks):
        attn, scale = feature.attn, block.attn.dim_head**0.5
        if getattr(attn, "query_scale", False):  # the factor on the queries, as in ONO2
            scale = 1.0
        linears = [
            (attn.lin_q, block.attn.to_q),
            (attn.lin_k, block.attn.to_k),
            (attn.lin_v, block.attn.to_v),
        ]
        pairs += [(mine.weight, theirs.weight, same, same) for mine, theirs in linears]
        pairs.append(
            (
                attn.lin_out.weight,
                block.attn.to_out.weight,
                lambda t, s=scale: t * s,
                lambda t, s=scale: t / s,
            )
        )
        modules = [
            (attn.lin_out, None),
            (feature.norm_attn, block.ln_1),
            (feature.norm_ffn, block.ln_2),
            (feature.ffn.lins[0], block.mlp.pre[0]),
            (feature.ffn.lins[1], block.mlp.post),
            (solution.attn.lin_q, block.proj),
            (solution.norm, block.ln_3),
        ]
        if len(solution.ffn.lins) == 1:  # the last stage: one linear layer
            modules.append((solution.ffn.lins[0], block.mlp2))
        else:
            modules += [
                (solution.ffn.lins[0], block.mlp2.pre[0]),
                (solution.ffn.lins[1], block.mlp2.post),
            ]
        for mine, theirs in modules:
            if theirs is not None:
                pairs.append((mine.weight, theirs.weight, same, same))
            pairs.append((mine.bias, (theirs or block.attn.to_out).bias, same, same))
        pairs.append((solution.attn.eigen_logit, block.mu, same, same))
    return pairs


def test_ono_with_the_authors_options_is_the_authors_model():
    """meshop's ONO with the benchmark's ONO_AUTHORS options computes the reference ONO2: the
    same predictions in training (two batches) and evaluation, the same running moments, the same
    gradients, parameter for parameter (in float64: the reference whitens in the precision of its
    inputs, meshop always in float64); so the speed benchmark's ONO rows time the same
    mathematics on both sides, and both train alike."""
    from meshop.data import from_points, make_loader
    from meshop.models import ONO

    torch.manual_seed(0)
    width, heads, k, b, n = 16, 2, 4, 3, 30
    options = training_steps.ONO_AUTHORS
    ours = ONO(3, 1, 2, width, 2, k, heads, feature_attention="linear", **options)
    ref = reference.ONOReference(3, 1, width=width, layers=2, heads=heads, psi_dim=k)
    ours.double(), ref.double()
    pairs = _ono_pairs(ours, ref)
    # parameter for parameter: no Q, K, V biases, the factor d_head^-1/2 on the queries
    assert {id(p) for p, *_ in pairs} == {id(p) for p in ours.parameters()}
    assert {id(p) for _, p, *_ in pairs} == {id(p) for p in ref.parameters()}
    assert all(f.attn.lin_q.bias is None and f.attn.query_scale for f in ours.feature_blocks)
    with torch.no_grad():
        for p in ours.parameters():
            p.copy_(0.5 * torch.randn_like(p))
        for mine, theirs, to_ref, _ in pairs:
            theirs.copy_(to_ref(mine))

    def batch(scale):
        samples = []
        for _ in range(b):
            pos, f = scale * torch.rand(n, 2), scale * torch.randn(n)
            samples.append(from_points(pos, x=f, y=f))
        data = next(iter(make_loader(samples, batch_size=b)))
        data.pos, data.x, data.weight = data.pos.double(), data.x.double(), data.weight.double()
        return data, torch.cat([data.pos, data.x], dim=-1).view(b, n, 3)

    for scale in (1.0, 2.0):  # two training batches: the running moments move alike
        data, features = batch(scale)
        ours.zero_grad(), ref.zero_grad()
        out, out_ref = ours(data).view(b, n, 1), ref(features)
        torch.testing.assert_close(out, out_ref, rtol=1e-4, atol=1e-5)
        out.square().sum().backward()
        out_ref.square().sum().backward()
        for mine, theirs, _, grad_to_ref in pairs:
            torch.testing.assert_close(
                grad_to_ref(mine.grad),
                theirs.grad,
                rtol=1e-3,
                atol=1e-4 * float(theirs.grad.abs().max()),
            )
    for solution, block in zip(ours.solution_blocks, ref.blocks):
        torch.testing.assert_close(solution.attn.running_moment, block.feature_cov)
    ours.eval(), ref.eval()
    with torch.no_grad():
        torch.testing.assert_close(ours(data).view(b, n, 1), ref(features), rtol=1e-4, atol=1e-5)


def test_ono_block_options_default_to_meshops_blocks():
    from meshop.models import ONO

    default = ONO(3, 1, 2, 16, 2, 4, 2, feature_attention="linear")
    authors = ONO(
        3,
        1,
        2,
        16,
        2,
        4,
        2,
        feature_attention="linear",
        feature_layer_norm=False,
        feature_coordinates=False,
        linear_decoder=True,
    )
    for model, norms, pos_dim, decoder in ((default, 2, 2, 2), (authors, 0, 0, 1)):
        assert all(len(f.attn.norms) == norms for f in model.feature_blocks)
        assert all(f.attn.pos_dim == pos_dim for f in model.feature_blocks)
        assert len(model.solution_blocks[-1].ffn.lins) == decoder
        assert all(len(s.ffn.lins) == 2 for s in model.solution_blocks[:-1])


def test_ono_linear_encoder_and_the_authors_initialisation():
    """``linear_encoder``: ONO2's one linear lift; ``authors_init``: every linear layer, the
    feature attention's included, truncated normal (std 0.02) with zero bias, as ONO2's
    ``initialize_weights``; both recorded in the config, so a checkpoint rebuilds them."""
    from meshop.models import ONO

    torch.manual_seed(0)
    default = ONO(3, 1, 2, 64, 2, 4, 4)
    authors = ONO(3, 1, 2, 64, 2, 4, 4, linear_encoder=True, authors_init=True)
    assert [lin.weight.shape for lin in authors.encoder.lins] == [(128, 3)]
    assert len(default.encoder.lins) == 2
    attention = [f.attn.lin_q for f in authors.feature_blocks]
    weights = torch.cat([lin.weight.flatten() for lin in attention])
    assert abs(float(weights.std()) - 0.02) < 0.004
    linears = [m for m in authors.modules() if isinstance(m, torch.nn.Linear)]
    assert all(lin.bias is None or not lin.bias.any() for lin in linears)
    own = torch.cat([f.attn.lin_q.weight.flatten() for f in default.feature_blocks])
    assert abs(float(own.std()) - 0.02) > 0.01  # the feature attention's own otherwise
    rebuilt = ONO(**authors.config)
    assert rebuilt.config == authors.config and len(rebuilt.encoder.lins) == 1


# --- the benchmark script ----------------------------------------------------------------------


def test_speed_benchmark_quick_writes_both_implementations(tmp_path, capsys):
    training_vs_reference.main(
        [
            "--quick",
            "--threads",
            "1",
            "--repeats",
            "1",
            "--only",
            "PiT, 150 / 40",
            "--out",
            str(tmp_path),
        ]
    )
    records = json.loads((tmp_path / "speed_vs_reference.json").read_text())["records"]
    assert [r["case"] for r in records] == ["PiT, 150 / 40 nodes, batch 2"]
    for impl in ("meshop", "reference", "dense"):
        assert records[0][impl]["median_s"] > 0 and records[0][impl]["parameters"] > 0
        assert records[0][impl]["median_cpu_s"] > 0
    table = (tmp_path / "speed_vs_reference.md").read_text()
    assert "measured under load" in table and table in capsys.readouterr().out
    assert "| speed-up in CPU time |" in table


def test_speed_benchmark_keeps_the_tables_of_finished_thread_counts(tmp_path, monkeypatch):
    calls = []

    def case():
        calls.append(torch.get_num_threads())
        if len(calls) > 1:  # the second thread count fails in its first case
            raise KeyboardInterrupt
        return {"meshop": (lambda: None, 1), "reference": (lambda: None, 2)}

    monkeypatch.setattr(training_vs_reference, "cases", lambda quick: [("a case", case, {})])
    with pytest.raises(KeyboardInterrupt):
        training_vs_reference.main(["--threads", "1,2", "--repeats", "1", "--out", str(tmp_path)])
    table = (tmp_path / "speed_vs_reference.md").read_text()
    assert "### 1 thread(s)" in table and "| a case |" in table
    assert "### 2 thread(s)" not in table


def test_speed_benchmark_ono_rows_match_the_authors_options_then_meshops_defaults():
    for authors, (whitening, projection, inner), authors_blocks in (
        (True, ("batch", False, "sum"), True),
        ("whitening", ("batch", False, "sum"), False),
        (False, ("sample", True, "mean"), False),
    ):
        model = training_steps.ono_model(authors)
        for block in model.solution_blocks:
            attn = block.attn
            assert attn.orthonormalize == whitening and attn.inner_product == inner
            assert (attn.lin_v is not None) == projection
        assert len(model.solution_blocks[-1].ffn.lins) == (1 if authors_blocks else 2)
        assert model.feature_blocks[0].attn.pos_dim == (0 if authors_blocks else 2)
    rows = {name: params for name, _, params in training_vs_reference.cases(quick=False)}
    assert rows["ONO, 16x16 grid, batch 20"].get("authors", True) is True
    assert rows["ONO, 972 nodes, batch 8"].get("authors", True) is True
    assert rows["ONO, 16x16 grid, batch 20, meshop's blocks"]["authors"] == "whitening"
    assert rows["ONO, 16x16 grid, batch 20, meshop defaults"]["authors"] is False


def test_pit_profile_quick_accounts_for_the_whole_step(tmp_path):
    result = profile_pit.profile_case(120, 40, 2, steps=1)
    assert sum(result["groups_s"].values()) == pytest.approx(result["step_s"])
    assert result["groups_s"]["position attention (fused SDPA, forward + backward)"] > 0
    assert result["groups_s"]["neighbour search and edge bookkeeping"] > 0
    profile_pit.main(["--quick", "--steps", "1", "--out", str(tmp_path)])
    assert "| where | time per step | share |" in (tmp_path / "pit_profile.md").read_text()


def test_ono_profile_groups_add_up_and_compare_the_three_models(tmp_path):
    result = profile_ono.profile_case(16, 2, steps=1)
    assert list(result) == list(profile_ono.IMPLEMENTATIONS)
    for record in result.values():
        groups = dict(record["groups_s"])
        total = groups.pop("total")
        assert sum(groups.values()) == pytest.approx(total)
        assert groups["matrix products (mm, addmm, bmm, baddbmm)"] > 0
        assert groups["whitening (Cholesky, triangular solve, inverse)"] > 0
    params = [record["parameters"] for record in result.values()]
    assert params[0] < params[1] and params[0] == params[2]  # ONO2 parameter for parameter
    profile_ono.main(["--quick", "--steps", "1", "--out", str(tmp_path)])
    text = (tmp_path / "ono_profile.md").read_text()
    assert "| operator group (self time per step) | meshop, authors' model |" in text


# --- neighbour lists kept between calls --------------------------------------------------------


def count_searches(monkeypatch):
    import meshop.nn.local_position_attention as local_module

    calls = []
    original = local_module.neighbor_index

    def spy(*args, **kwargs):
        calls.append(len(args[0]))
        return original(*args, **kwargs)

    monkeypatch.setattr(local_module, "neighbor_index", spy)
    return calls


def mesh_batch(meshes):
    pos_src = torch.cat([src for src, _ in meshes])
    pos_dst = torch.cat([dst for _, dst in meshes])
    batch_src = torch.cat([torch.full((len(s),), i) for i, (s, _) in enumerate(meshes)])
    batch_dst = torch.cat([torch.full((len(d),), i) for i, (_, d) in enumerate(meshes)])
    return pos_src, pos_dst, batch_src, batch_dst


@pytest.mark.parametrize("field", [{"quantile": 0.1}, {"k": 5}, {"radius": 0.3}])
def test_neighbour_lists_are_reused_per_sample_across_batches(field, monkeypatch):
    torch.manual_seed(0)
    meshes = [(torch.rand(30 + 5 * i, 2), torch.rand(12 + i, 2)) for i in range(4)]
    layer = LocalPositionAttention(4, 4, 2, **field)
    fresh = LocalPositionAttention(4, 4, 2, cache_mb=0, **field)
    calls = count_searches(monkeypatch)
    layer.neighbors(*mesh_batch(meshes[:2]))
    layer.neighbors(*mesh_batch(meshes[2:]))
    assert len(calls) == 2
    for order in ([3, 0, 2, 1], [1, 2]):  # other batches of the same samples: no search
        batch = mesh_batch([meshes[i] for i in order])
        index, dist = layer.neighbors(*batch)
        expected_index, expected_dist = fresh.neighbors(*batch)
        assert torch.equal(index, expected_index)
        torch.testing.assert_close(dist, expected_dist)
    assert len(calls) == 2 + 2  # only the cache-less layer searched
    moved = [(meshes[0][0] + 1e-3, meshes[0][1]), meshes[1]]  # positions changed: search again
    index, _ = layer.neighbors(*mesh_batch(moved))
    assert len(calls) == 5
    assert torch.equal(index, fresh.neighbors(*mesh_batch(moved))[0])
    targets_moved = [(meshes[2][0], meshes[2][1] + 0.05), meshes[3]]
    index, _ = layer.neighbors(*mesh_batch(targets_moved))
    assert len(calls) == 7
    assert torch.equal(index, fresh.neighbors(*mesh_batch(targets_moved))[0])


def test_neighbour_cache_keeps_to_its_budget_and_positions_keep_their_gradient():
    torch.manual_seed(0)
    layer = LocalPositionAttention(4, 4, 2, k=4, cache_mb=0.01)  # about 10 kB
    for _ in range(20):
        layer.neighbors(torch.rand(40, 2), torch.rand(40, 2))
    assert 0 < layer.edge_cache.bytes <= layer.edge_cache.max_bytes
    assert len(layer.edge_cache) < 20
    pos = torch.rand(40, 2, requires_grad=True)
    layer.neighbors(pos.detach(), pos.detach())
    _, dist = layer.neighbors(pos, pos)  # a cache hit, still differentiable in the positions
    assert dist.requires_grad


def test_pit_training_step_searches_no_neighbours_after_the_first(monkeypatch):
    from meshop.models import PiT

    torch.manual_seed(0)
    model = PiT(3, 1, 2, width=8, heads=2, layers=1, encoder_k=4, decoder_quantile=0.2)
    from meshop.data import from_points, make_loader

    samples = [from_points(torch.rand(20, 2), x=torch.rand(20), y=torch.rand(20)) for _ in range(4)]
    calls = count_searches(monkeypatch)
    for epoch in range(2):
        for batch in make_loader(samples, batch_size=2, shuffle=epoch == 1):
            model(batch).square().mean().backward()
    assert len(calls) == 4  # encoder and decoder, two batches, first epoch only


@pytest.mark.parametrize("field", [{"quantile": 0.1}, {"k": 5}])
def test_cached_edges_give_the_gradients_of_a_fresh_search(field, monkeypatch):
    """A cache hit reuses each sample's distances and its edges' order by source (the backward's
    transpose): outputs and every gradient equal a cache-less layer's. A sample first seen without
    autograd is stored unsorted; the first step with autograd sorts it once, later ones never."""
    torch.manual_seed(0)
    meshes = [(torch.rand(30 + 5 * i, 2), torch.rand(12 + i, 2)) for i in range(3)]
    cached = LocalPositionAttention(4, 6, 2, **field)
    fresh = LocalPositionAttention(4, 6, 2, cache_mb=0, **field)
    fresh.load_state_dict(cached.state_dict())
    sorts = []
    original = torch.argsort
    monkeypatch.setattr(torch, "argsort", lambda *a, **k: sorts.append(1) or original(*a, **k))
    pos_src, pos_dst, batch_src, batch_dst = mesh_batch(meshes)
    with torch.no_grad():  # prediction: stored, not sorted
        cached(
            torch.randn(len(pos_src), 4), pos_src, batch_src, pos_dst=pos_dst, batch_dst=batch_dst
        )
    assert sorts == []
    pos_src, pos_dst, batch_src, batch_dst = mesh_batch([meshes[2], meshes[0], meshes[1]])
    x = torch.randn(len(pos_src), 4, requires_grad=True)
    for step in range(2):
        sorts.clear()
        outs = []
        for layer in (cached, fresh):
            out = layer(x, pos_src, batch_src, pos_dst=pos_dst, batch_dst=batch_dst)
            outs.append((out, grads(out, [x, layer.theta, layer.lin_v.weight])))
        # the fresh layer's backward sorts once; the cached layer sorts each sample once, first
        assert len(sorts) == 1 + (3 if step == 0 else 0)
        torch.testing.assert_close(outs[0][0], outs[1][0])
        assert_all_close(outs[0][1], outs[1][1])

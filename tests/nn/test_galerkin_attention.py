"""Galerkin-family self-attention: Galerkin, Fourier, softmax and linear attention (Galerkin
Transformer eqs. (5), (6), (17), Table 2 baselines) against dense explicit formulas, and the encoder
layer (eqs. (4), (7))."""

import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from meshop.data import make_loader, uniform_grid
from meshop.nn import (
    FourierAttention,
    GalerkinAttention,
    GalerkinEncoderLayer,
    LinearAttention,
    SoftmaxAttention,
)

LAYERS = {
    "galerkin": GalerkinAttention,
    "fourier": FourierAttention,
    "softmax": SoftmaxAttention,
    "linear": LinearAttention,
}


def dense_reference(layer, x, pos, w, kind):
    """The paper's formula for one sample, head by head, with explicit matrices."""
    dk = layer.head_channels
    heads = []
    for h in range(layer.heads):
        rows = slice(h * dk, (h + 1) * dk)

        def project(lin, key, h=h, rows=rows):
            t = x @ lin.weight[rows].T + lin.bias[rows]
            if key in layer.norms:
                norm = layer.norms[key]
                mean = t.mean(-1, keepdim=True)
                var = t.var(-1, unbiased=False, keepdim=True)
                t = (t - mean) / torch.sqrt(var + norm.eps) * norm.weight[h] + norm.bias[h]
            return torch.cat([t, pos], dim=-1)

        Q, K, V = project(layer.lin_q, "q"), project(layer.lin_k, "k"), project(layer.lin_v, "v")
        W = torch.diag(w / w.sum())  # quadrature normalised per sample: a mean over the domain
        if kind == "galerkin":  # eq. (6): Q (K~^T V~) / n
            z = Q @ (K.T @ W @ V)
        elif kind == "fourier":  # eq. (5): (Q~ K~^T) V / n
            z = (Q @ K.T) @ W @ V
        elif kind == "softmax":
            A = torch.exp(Q @ K.T / math.sqrt(Q.shape[1])) * w[None, :]
            z = (A / A.sum(1, keepdim=True)) @ V
        else:  # linear attention: row softmax of Q, weighted column softmax of K
            Kc = torch.exp(K) * w[:, None]
            z = torch.softmax(Q, dim=1) @ ((Kc / Kc.sum(0, keepdim=True)).T @ V)
        heads.append(z)
    return layer.lin_out(torch.cat(heads, dim=1))


def make_layer(kind, channels=8, pos_dim=2, heads=2, **kwargs):
    torch.manual_seed(0)
    layer = LAYERS[kind](channels, pos_dim, heads=heads, **kwargs).double()
    with torch.no_grad():  # move away from the near-identity initialization to test every term
        for p in layer.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return layer.eval()


def irregular_batch(sizes=(7, 11), channels=8, dim=2):
    g = torch.Generator().manual_seed(1)
    n = sum(sizes)
    x = torch.randn(n, channels, generator=g, dtype=torch.float64)
    pos = torch.rand(n, dim, generator=g, dtype=torch.float64)
    weight = torch.rand(n, generator=g, dtype=torch.float64) + 0.1
    batch = torch.cat([torch.full((s,), i) for i, s in enumerate(sizes)])
    return x, pos, weight, batch


@pytest.mark.parametrize("kind", list(LAYERS))
def test_layer_matches_dense_formula_with_weights_on_irregular_batch(kind):
    layer = make_layer(kind)
    x, pos, weight, batch = irregular_batch()
    out = layer(x, pos, batch, weight)
    assert out.shape == (len(x), 8)
    for b in range(2):
        m = batch == b
        ref = dense_reference(layer, x[m], pos[m], weight[m], kind)
        torch.testing.assert_close(out[m], ref, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("kind", list(LAYERS))
def test_default_weight_is_one_over_n_and_equals_uniform_grid_weight(kind):
    layer = make_layer(kind, channels=6, heads=3)
    g = torch.Generator().manual_seed(2)
    grid = uniform_grid((4, 5), x=torch.randn(20, 6, generator=g))
    x, pos = grid.x.double(), grid.pos.double()
    ref = dense_reference(layer, x, pos, torch.full((20,), 1 / 20, dtype=torch.float64), kind)
    torch.testing.assert_close(layer(x, pos), ref, rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(layer(x, pos, weight=grid.weight.double()), ref)


@pytest.mark.parametrize("kind", list(LAYERS))
def test_samples_in_a_batch_do_not_mix(kind):
    layer = make_layer(kind)
    x, pos, _, batch = irregular_batch(sizes=(5, 9, 6))
    out = layer(x, pos, batch)  # default weights: 1/n of each sample
    for b in range(3):
        m = batch == b
        torch.testing.assert_close(out[m], layer(x[m], pos[m]))


def test_batch_from_loader_of_grids_with_different_sizes():
    layer = GalerkinAttention(4, 1, heads=2).eval()
    data = [uniform_grid((n,), x=torch.randn(n, 4)) for n in (9, 17)]
    batch = next(iter(make_loader(data, batch_size=2)))
    out = layer(batch.x, batch.pos, batch.batch, batch.weight)
    torch.testing.assert_close(out[9:], layer(data[1].x, data[1].pos), rtol=1e-5, atol=1e-6)


def test_layer_norm_sits_on_the_paper_pair_and_can_be_removed():
    assert set(GalerkinAttention(8, 2).norms) == {"k", "v"}
    assert set(FourierAttention(8, 2).norms) == {"q", "k"}
    assert set(SoftmaxAttention(8, 2).norms) == {"q", "k"}
    assert set(LinearAttention(8, 2).norms) == {"k", "v"}
    assert len(GalerkinAttention(8, 2, layer_norm=False).norms) == 0


def test_heads_are_merged_from_features_and_coordinates():
    layer = GalerkinAttention(12, 3, heads=4)
    assert layer.lin_out.in_features == 12 + 4 * 3
    assert layer.lin_out.out_features == 12


def test_diagonal_initialization_eq17():
    torch.manual_seed(0)
    d, eta, delta = 16, 1e-2, 1e-2
    layer = GalerkinAttention(d, 1, eta=eta, delta=delta)
    bound = eta * math.sqrt(6 / (d + d))  # Xavier-uniform, gain 1, scaled by eta
    for lin in (layer.lin_q, layer.lin_k, layer.lin_v):
        U = lin.weight - delta * torch.eye(d)
        assert U.abs().max() <= bound
        assert U.abs().max() > 0.5 * bound  # random, not zero
        assert torch.all(lin.bias == 0)


@pytest.mark.parametrize("kind", list(LAYERS))
def test_attention_dropout_only_in_training(kind):
    layer = make_layer(kind, dropout=0.5)
    plain = make_layer(kind, dropout=0.0)
    x, pos, weight, batch = irregular_batch()
    torch.testing.assert_close(layer(x, pos, batch, weight), plain(x, pos, batch, weight))
    layer.train()
    assert not torch.allclose(layer(x, pos, batch, weight), plain(x, pos, batch, weight))


class ShapeRecorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.numels = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, tuple | list) else [out]:
            if isinstance(t, torch.Tensor):
                self.numels.append(t.numel())
        return out


def largest_intermediate(layer, n):
    x, pos = torch.randn(n, layer.channels), torch.rand(n, layer.pos_dim)
    with torch.no_grad(), ShapeRecorder() as rec:
        layer(x, pos)
    return max(rec.numels)


def test_cost_is_linear_in_n_and_fourier_builds_n_by_n_only_for_kernel_dropout():
    d, heads, m = 8, 2, 2
    width = d + heads * m  # the widest per-node tensor: all heads with coordinates
    for n in (64, 512):
        assert largest_intermediate(GalerkinAttention(d, m, heads=heads), n) <= n * width
        assert largest_intermediate(LinearAttention(d, m, heads=heads), n) <= n * width
        # (Q K^T) V is computed as Q (K^T V), in training and in evaluation
        assert largest_intermediate(FourierAttention(d, m, heads=heads), n) <= n * width
        assert largest_intermediate(FourierAttention(d, m, heads=heads).eval(), n) <= n * width
        # dropout on the kernel's entries needs the n x n kernel
        dropped = FourierAttention(d, m, heads=heads, dropout=0.1)
        assert largest_intermediate(dropped, n) >= heads * n * n
        assert largest_intermediate(dropped.eval(), n) <= n * width


def test_invalid_heads_raise_config_error():
    from meshop.errors import ConfigError

    with pytest.raises(ConfigError, match="divide"):
        GalerkinAttention(10, 2, heads=3)


def test_repr_shows_sizes():
    text = repr(GalerkinAttention(16, 2, heads=4))
    assert "GalerkinAttention(16, pos_dim=2, heads=4" in text


def test_encoder_layer_scale_preserving_scheme_eq4():
    torch.manual_seed(0)
    layer = GalerkinEncoderLayer(8, 2, attention="fourier", heads=2).eval()
    x, pos, weight, batch = irregular_batch()
    x, pos, weight = x.float(), pos.float(), weight.float()
    y = x + layer.attn(x, pos, batch, weight)
    torch.testing.assert_close(layer(x, pos, batch, weight), y + layer.ffn(y))
    assert set(layer.attn.norms) == {"q", "k"}
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in layer.modules())


def test_encoder_layer_regular_scheme_eq7():
    torch.manual_seed(0)
    layer = GalerkinEncoderLayer(8, 2, attention="galerkin", norm="regular").eval()
    assert len(layer.attn.norms) == 0  # no layer norm inside the attention
    x, pos, weight, batch = irregular_batch()
    x, pos, weight = x.float(), pos.float(), weight.float()
    y = layer.norm_attn(x + layer.attn(x, pos, batch, weight))
    torch.testing.assert_close(layer(x, pos, batch, weight), layer.norm_ffn(y + layer.ffn(y)))


def test_encoder_ffn_is_linear_relu_linear_of_twice_the_width():
    layer = GalerkinEncoderLayer(16, 1, ffn_dropout=0.1)
    lin1, act, drop, lin2 = layer.ffn
    assert (lin1.in_features, lin1.out_features, lin2.out_features) == (16, 32, 16)
    assert isinstance(act, torch.nn.ReLU) and drop.p == 0.1


def test_encoder_rejects_unknown_attention_and_norm():
    from meshop.errors import ConfigError

    with pytest.raises(ConfigError, match="galerkin"):
        GalerkinEncoderLayer(8, 1, attention="performer")
    with pytest.raises(ConfigError, match="regular"):
        GalerkinEncoderLayer(8, 1, norm="pre")


@pytest.mark.parametrize("kind", ["galerkin", "fourier"])
def test_output_does_not_depend_on_the_scale_of_the_domain_measure(kind):
    torch.manual_seed(0)
    layer = LAYERS[kind](8, pos_dim=2, heads=2).double()
    x, pos = torch.randn(30, 8, dtype=torch.float64), torch.rand(30, 2, dtype=torch.float64)
    w = torch.rand(30, dtype=torch.float64) + 0.1
    torch.testing.assert_close(layer(x, pos, None, w), layer(x, pos, None, 700 * w))

"""Physics-attention's two paths (dense batched kernels for samples of equal sizes, the per-sample
loop for mixed sizes) compute Transolver's eqs. (1)-(4) as the dense float64 formula does, the
output and every gradient (input and parameters); so does the chunked evaluation (``integrate``,
``finish``, ``apply``), and float64 weights are cast to a float32 layer's dtype."""

import pytest
import torch

import meshop.nn.physics_attention as physics_module
from meshop.nn import PhysicsAttention
from tests.reference import dense_physics_attention

WEIGHTS = ["none", "uniform", "varying", "with queries"]


def make_layer(heads=2, slices=5, dropout=0.0):
    torch.manual_seed(0)
    layer = PhysicsAttention(8, heads=heads, slices=slices, dropout=dropout).double()
    with torch.no_grad():  # away from the initialization, so that every term has work to do
        for p in layer.parameters():
            p.add_(0.3 * torch.randn_like(p))
        layer.temperature.copy_(torch.linspace(0.6, 1.4, heads))
    return layer


def inputs(sizes, weights):
    g = torch.Generator().manual_seed(1)
    n = sum(sizes)
    x = torch.randn(n, 8, generator=g, dtype=torch.float64, requires_grad=True)
    batch = torch.cat([torch.full((s,), i) for i, s in enumerate(sizes)])
    weight = {
        "none": None,
        "uniform": torch.full((n,), 0.37, dtype=torch.float64),
        "varying": torch.rand(n, generator=g, dtype=torch.float64) + 0.1,
        # query nodes: weight zero, they read the tokens and add nothing to them
        "with queries": (torch.rand(n, generator=g, dtype=torch.float64) + 0.1)
        * (torch.arange(n) % 4 != 3),
    }[weights]
    return x, batch, weight


def reference_form(layer, x, batch, weight):
    """Eqs. (1)-(4) sample by sample with explicit matrices (``1/n`` weights when None)."""
    out = []
    for b in range(int(batch.max()) + 1):
        m = batch == b
        w = torch.ones(int(m.sum()), dtype=x.dtype) if weight is None else weight[m]
        out.append(dense_physics_attention(layer, x[m], w))
    return torch.cat(out)


def grads(out, tensors):
    return torch.autograd.grad(out.square().sum(), tensors)


def assert_same_function(layer, x, batch, weight):
    params = [x, *layer.parameters()]
    out = layer(x, None, batch, weight)
    ref = reference_form(layer, x, batch, weight)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-12)
    for a, b in zip(grads(out, params), grads(ref, params), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("weights", WEIGHTS)
@pytest.mark.parametrize("sizes", [(9, 9, 9), (14,)])
def test_equal_size_path_is_the_reference_form_with_every_gradient(sizes, weights):
    layer = make_layer()
    assert_same_function(layer, *inputs(sizes, weights))


@pytest.mark.parametrize("weights", WEIGHTS)
def test_mixed_size_path_is_the_reference_form_with_every_gradient(weights):
    layer = make_layer(heads=4, slices=3)
    assert_same_function(layer, *inputs((7, 11, 4), weights))


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_equal_size_path_equals_the_per_sample_path_with_dropout(mode, monkeypatch):
    """Token dropout in training: both paths draw the same mask from the same seed."""
    layer = make_layer(dropout=0.4).train(mode == "train")
    x, batch, weight = inputs((9, 9, 9), "varying")
    params = [x, *layer.parameters()]
    torch.manual_seed(3)
    fast = layer(x, None, batch, weight)
    monkeypatch.setattr(physics_module, "_all_equal", lambda sizes: False)
    torch.manual_seed(3)
    loop = layer(x, None, batch, weight)
    torch.testing.assert_close(fast, loop, rtol=1e-10, atol=1e-12)
    for a, b in zip(grads(fast, params), grads(loop, params), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)


def test_equal_sizes_take_the_dense_path_and_mixed_sizes_the_loop(monkeypatch):
    calls = []
    original = PhysicsAttention._forward_equal

    def spy(self, x, weight, b):
        calls.append(b)
        return original(self, x, weight, b)

    monkeypatch.setattr(PhysicsAttention, "_forward_equal", spy)
    layer = PhysicsAttention(8, heads=2, slices=4)
    layer(torch.randn(12, 8), None, torch.arange(3).repeat_interleave(4))
    layer(torch.randn(5, 8), None)
    layer(torch.randn(7, 8), None, torch.tensor([0, 0, 0, 1, 1, 1, 1]))
    assert calls == [3, 1]


@pytest.mark.parametrize("weights", WEIGHTS)
def test_chunked_methods_are_the_reference_form(weights):
    """The integral protocol (meshop.nn.integral): eq. (2)'s integrals summed over chunks that
    cut the samples (``partial``), eq. (3) once (``finish``), eqs. (1) and (4) chunk by chunk
    (``apply``), in float64 against eqs. (1)-(4) sample by sample."""
    layer = make_layer(heads=2, slices=5)
    x, batch, weight = inputs((7, 11, 4), weights)
    chunks = [slice(0, 5), slice(5, 13), slice(13, 22)]  # a sample in every chunk boundary
    with torch.no_grad():
        x = x.detach()
        shares = [
            layer.partial(x[c], None, batch[c], None if weight is None else weight[c], 3)
            for c in chunks
        ]
        features = sum(share[0] for share in shares)
        mass = sum(share[1] for share in shares)
        tokens = layer.finish((features, mass))
        out = torch.cat([layer.apply(tokens, x[c], None, batch[c]) for c in chunks])
        ref = reference_form(layer, x, batch, weight)
    assert features.shape == (3, 2, 5, 4) and mass.shape == (3, 2, 5)
    assert tokens.shape == (3, 2, 5, 4)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("sizes", [(9, 9, 9), (7, 11, 4)], ids=["equal sizes", "mixed sizes"])
def test_float64_weights_on_a_float32_layer_are_cast_to_its_dtype(sizes):
    """Weights computed in float64 (numpy, a mesh read in metres) given to a float32 layer: every
    path and the chunked integrals cast them and give the numbers of the same weights in
    float32 (matrix products do not promote a float32 operand)."""
    layer = make_layer().float()
    x, batch, weight = inputs(sizes, "varying")
    x = x.detach().float()
    with torch.no_grad():
        out = layer(x, None, batch, weight)
        ref = layer(x, None, batch, weight.float())
        sums = layer.partial(x, None, batch, weight, len(sizes))
        sums_ref = layer.partial(x, None, batch, weight.float(), len(sizes))
    assert out.dtype == torch.float32 and sums[0].dtype == sums[1].dtype == torch.float32
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    torch.testing.assert_close(sums, sums_ref, rtol=0, atol=0)

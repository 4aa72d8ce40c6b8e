"""Physics-attention's public entry points on batches of samples: ``slice_tokens`` integrates every
sample apart and returns the slice weights node-major, ``forward`` on samples of equal sizes gives
every sample its own weights (also when there are as many samples as heads), its argument
errors name the layer, and the defaults, bad sizes and an unsorted batch are whole sentences."""

import pytest
import torch

from meshop.errors import ConfigError
from meshop.nn import PhysicsAttention


def make_layer(heads=2, slices=5):
    torch.manual_seed(0)
    layer = PhysicsAttention(8, heads=heads, slices=slices).double()
    with torch.no_grad():  # away from the initialization, so that every term has work to do
        for p in layer.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return layer.eval()


def batch_of(sizes):
    g = torch.Generator().manual_seed(1)
    n = sum(sizes)
    x = torch.randn(n, 8, generator=g, dtype=torch.float64)
    weight = torch.rand(n, generator=g, dtype=torch.float64) + 0.1
    batch = torch.cat([torch.full((s,), i) for i, s in enumerate(sizes)])
    return x, batch, weight


def eq2_tokens(s, fx, w):
    """Eq. (2) for one sample: ``s`` [n, H, M], ``fx`` [n, H, D], ``w`` [n] -> [H, M, D]."""
    sw = s * w[:, None, None]
    return torch.einsum("nhm,nhd->hmd", sw, fx) / sw.sum(0)[..., None]


@pytest.mark.parametrize("weighted", [False, True])
def test_slice_tokens_integrates_every_sample_of_a_batch_apart(weighted):
    layer = make_layer(heads=2, slices=5)
    sizes = (7, 11, 4)
    x, batch, weight = batch_of(sizes)
    weight = weight if weighted else None
    with torch.no_grad():
        s, tokens = layer.slice_tokens(x, batch, weight)
        fx = layer.lin_fx(x).view(len(x), 2, 4)
    torch.testing.assert_close(s, layer.slice_weights(x))
    assert s.shape == (22, 2, 5) and tokens.shape == (3, 2, 5, 4)
    w = torch.ones(len(x), dtype=x.dtype) if weight is None else weight
    for b, nodes in enumerate(torch.arange(len(x)).split(sizes)):
        torch.testing.assert_close(tokens[b], eq2_tokens(s[nodes], fx[nodes], w[nodes]))


@pytest.mark.parametrize("samples", [2, 3])
def test_a_batch_of_equal_sizes_gives_every_sample_its_own_weights(samples):
    """As many samples as heads (2) and one more: each sample's output is its output alone."""
    layer = make_layer(heads=2)
    x, batch, weight = batch_of((9,) * samples)
    with torch.no_grad():
        out = layer(x, None, batch, weight)
        for nodes in torch.arange(len(x)).split(9):
            torch.testing.assert_close(out[nodes], layer(x[nodes], None, None, weight[nodes]))


def test_argument_errors_of_forward_name_the_layer_and_the_argument():
    layer = make_layer()
    x, batch, weight = batch_of((5,))
    with pytest.raises(ConfigError, match=r"^PhysicsAttention: pos must be \[N, D\]"):
        layer(x, torch.zeros(4, 2, dtype=x.dtype))  # pos is not used, but must fit x
    with pytest.raises(ConfigError, match=r"^PhysicsAttention: weight must be \[N\]"):
        layer(x, None, batch, weight[:4])
    with pytest.raises(ConfigError, match=r"^PhysicsAttention is self-attention only"):
        layer(x, None, batch, weight, batch_dst=batch)


@pytest.mark.parametrize("sizes", [(6, 6), (6, 4)])
def test_a_sample_whose_weights_are_all_zero_has_zero_tokens(sizes):
    """It integrates nothing: its slice tokens are 0, so eq. (3) gives 0 and every node of it
    gets the output projection's bias (not the tokens of equal weights, although its weights are
    equal); the other sample is its output alone (equal sizes take the dense path, mixed sizes
    the loop)."""
    layer = make_layer()
    x, batch, weight = batch_of(sizes)
    weight[: sizes[0]] = 0.0
    weight[sizes[0] :] = 0.5  # equal within each sample, as a uniform mesh's
    with torch.no_grad():
        out = layer(x, None, batch, weight)
        first, second = out.split(sizes)
        torch.testing.assert_close(first, layer.lin_out.bias.expand(sizes[0], 8))
        rest = slice(sizes[0], None)
        torch.testing.assert_close(second, layer(x[rest], None, None, weight[rest]))


def test_the_defaults_and_every_size_error_in_whole_sentences():
    """The paper's defaults (8 heads of width channels / 8, 64 slices, temperature 0.5); every
    size is checked, also when the head width is given."""
    layer = PhysicsAttention(64)
    assert (layer.heads, layer.head_channels, layer.slices, layer.dropout) == (8, 8, 64, 0.0)
    assert layer.temperature.tolist() == [0.5] * 8
    sizes = {"channels": 8, "heads": 2, "slices": 4, "head_channels": 4}
    for name in sizes:
        bad = {**sizes, name: 0}
        with pytest.raises(ConfigError) as info:
            PhysicsAttention(**bad)
        assert str(info.value) == (
            "channels, heads, slices and head_channels must be positive and temperature > 0; "
            f"got {bad['channels']}, {bad['heads']}, {bad['slices']}, {bad['head_channels']}, 0.5"
        )


@pytest.mark.parametrize("batch", [[1, 0], [0, 1, 0]])
def test_an_unsorted_batch_is_refused_in_a_whole_sentence(batch):
    """Also a batch of two nodes."""
    layer = make_layer()
    x = torch.randn(len(batch), 8, dtype=torch.float64)
    with pytest.raises(ConfigError) as info:
        layer(x, None, torch.tensor(batch))
    assert str(info.value) == (
        "batch is not sorted; physics-attention expects the nodes of each sample to be "
        "contiguous, as in a PyG DataLoader batch (sort the nodes by sample first)"
    )

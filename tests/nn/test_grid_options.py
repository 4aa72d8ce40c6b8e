"""The grid layers' options and edge cases: dropout only where asked, CiNN without skip
connections, SpectralConv's kept modes on grids smaller than its modes (against explicit Fourier
sums) and its argument checks (interpolation and point sampling: test_data_grid.py)."""

import itertools

import pytest
import torch

from meshop.data.grid import interpolate_grid
from meshop.errors import ConfigError, MeshError
from meshop.nn import CiNNDown, CiNNUp, SpectralConv, SpectralRegressor
from tests.helpers import unit_grid


def layers(dropout: float):
    torch.manual_seed(0)
    return [
        (CiNNDown(3, 4, dropout=dropout), (torch.randn(2, 3, 9, 9), (3, 3))),
        (CiNNUp(4, dropout=dropout), (torch.randn(2, 4, 3, 3), (9, 9))),
        (
            SpectralRegressor(2, 1, pos_dim=2, width=4, modes=2, dropout=dropout),
            (torch.randn(2, 2, 6, 6), unit_grid(6, 6).expand(2, -1, -1, -1)),
        ),
    ]


def test_grid_layers_drop_out_when_asked():
    for layer, args in layers(dropout=0.5):
        expected = layer.eval()(*args)
        torch.manual_seed(1)
        assert not torch.allclose(layer.train()(*args), expected), type(layer).__name__


def test_default_grid_layers_do_not_drop_out():
    torch.manual_seed(0)
    x, pos = torch.randn(1, 2, 6, 6), unit_grid(6, 6)
    cases = [
        (CiNNDown(3, 4), (torch.randn(1, 3, 9, 9), (3, 3))),
        (CiNNUp(4), (torch.randn(1, 4, 3, 3), (9, 9))),
        (SpectralRegressor(2, 1, pos_dim=2, width=4, modes=2), (x, pos)),
    ]
    for layer, args in cases:
        assert torch.equal(layer.train()(*args), layer.eval()(*args)), type(layer).__name__


def test_cinn_without_skip_connections_is_the_convolution_path_alone():
    torch.manual_seed(0)
    x = torch.randn(1, 3, 9, 9)
    down, plain = CiNNDown(3, 4), CiNNDown(3, 4, residual=False)
    plain.load_state_dict(down.state_dict())
    u0 = interpolate_grid(down.lift(x), (5, 5))  # the middle grid of 9 and 3
    stack, u = [], u0
    for conv in down.convs:
        u = conv(u)
        stack.append(u)
    z = torch.cat(stack, dim=1)
    assert torch.allclose(plain(x, (3, 3)), interpolate_grid(z, (3, 3)), atol=1e-6)
    assert torch.allclose(down(x, (3, 3)), interpolate_grid(z + u0, (3, 3)), atol=1e-6)

    z = torch.randn(1, 4, 3, 3)
    up, plain = CiNNUp(4), CiNNUp(4, residual=False)
    plain.load_state_dict(up.state_dict())
    u = interpolate_grid(z, (5, 5))
    assert torch.allclose(plain(z, (9, 9)), interpolate_grid(up.conv(u), (9, 9)), atol=1e-6)
    assert torch.allclose(up(z, (9, 9)), interpolate_grid(up.conv(u) + u, (9, 9)), atol=1e-6)


def fourier_sums(layer: SpectralConv, x: torch.Tensor) -> torch.Tensor:
    """The Fourier layer written frequency by frequency: every kept frequency ``j`` (``|j_a| <
    min(m_a, n_a // 2)`` on the axes but the last, ``0 <= j < min(m, n // 2 + 1)`` on the last)
    is multiplied by the weight of its sign corner at index ``j_a`` (``m_a + j_a`` when
    negative)."""
    shape, dim = x.shape[2:], x.ndim - 2
    x_ft = torch.fft.rfftn(x.double(), dim=tuple(range(-dim, 0)))
    weight = torch.view_as_complex(layer.weight.detach().double())
    out = torch.zeros(x.shape[0], layer.out_channels, *x_ft.shape[2:], dtype=x_ft.dtype)
    ranges = [range(-min(m, n // 2), min(m, n // 2)) for m, n in zip(layer.modes[:-1], shape[:-1])]
    ranges.append(range(min(layer.modes[-1], shape[-1] // 2 + 1)))
    for freq in itertools.product(*ranges):
        corner = sum(2 ** (dim - 2 - a) for a, j in enumerate(freq[:-1]) if j < 0)
        index = tuple(j if j >= 0 else m + j for j, m in zip(freq, layer.modes))
        w = weight[(corner, slice(None), slice(None), *index)]
        out[(slice(None), slice(None), *freq)] = x_ft[(slice(None), slice(None), *freq)] @ w
    return torch.fft.irfftn(out, s=tuple(shape), dim=tuple(range(-dim, 0)))


@pytest.mark.parametrize(
    "modes, shape",
    [((5, 3), (6, 8)), ((4, 3), (7, 8)), ((3, 2, 2), (4, 6, 5)), ((2, 3, 4), (6, 4, 4))],
)
def test_spectral_conv_on_grids_smaller_than_its_modes_matches_fourier_sums(modes, shape):
    torch.manual_seed(0)
    layer = SpectralConv(2, 3, modes)
    with torch.no_grad():  # weights of both signs, so that a wrong corner or index shows
        layer.weight.normal_()
    x = torch.randn(2, 2, *shape)
    assert torch.allclose(layer(x).double(), fourier_sums(layer, x), atol=1e-5)


def test_spectral_conv_initial_weights_are_uniform_on_zero_to_one_over_channels():
    torch.manual_seed(0)
    layer = SpectralConv(3, 5, (6, 6))
    bound = 1 / 15
    assert layer.weight.min() >= 0 and layer.weight.max() <= bound
    assert layer.weight.max() > 0.95 * bound and layer.weight.min() < 0.05 * bound


def test_spectral_conv_modes_and_their_checks():
    assert SpectralConv(2, 2, 4).modes == (4,)  # one axis unless told
    assert SpectralConv(2, 2, 4, dim=3).modes == (4, 4, 4)
    assert SpectralConv(2, 2, [3, 2]).modes == (3, 2)
    assert SpectralConv(2, 2, (1, 1, 1)).modes == (1, 1, 1)  # three axes, one mode: allowed
    for modes in [(2, 2, 2, 2), (3, 0), ()]:
        with pytest.raises(ConfigError, match=r"modes must be positive, for 1 to 3 grid axes"):
            SpectralConv(2, 2, modes)


def test_spectral_regressor_defaults_are_the_papers_decoder():
    layer = SpectralRegressor(3, 1, pos_dim=2)
    assert (layer.width, layer.modes, len(layer.convs), layer.hidden_channels) == (48, 16, 2, 96)
    assert SpectralRegressor(3, 1, pos_dim=2, width=10).hidden_channels == 20


def test_grid_layers_say_which_layer_and_which_choices():
    assert CiNNDown(2, 3).channels == 3  # three stacked convs: three channels is the least
    with pytest.raises(ConfigError, match=r"CiNNDown needs channels >= 3 .*got 2"):
        CiNNDown(2, 2)
    with pytest.raises(ConfigError, match=r"unknown activation 'swish'; choose one of \["):
        CiNNUp(4, activation="swish")
    assert "activation='gelu'" in repr(CiNNDown(2, 3, activation="gelu"))
    assert "activation='gelu'" in repr(CiNNUp(3, activation="gelu"))
    assert SpectralRegressor(2, 1, pos_dim=1, activation="gelu").activation == "gelu"
    for layer, name in ((CiNNDown(2, 3), "CiNNDown"), (CiNNUp(3), "CiNNUp")):
        with pytest.raises(MeshError, match=rf"^{name} works on 2D uniform grids"):
            layer(torch.zeros(1, 3, 5), (3,))

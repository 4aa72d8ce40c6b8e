"""Uniform-grid layers of the Galerkin Transformer: CiNN (Appendix B), spectral convolution and
regressor (the grid views of node features: test_data_grid.py)."""

import math

import pytest
import torch

from meshop.data import from_points
from meshop.data.grid import grid_tensor
from meshop.errors import MeshError
from meshop.nn import CiNNDown, CiNNUp, SpectralConv, SpectralRegressor
from meshop.nn.cinn import middle_shape


def num_params(module):
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize(("fine", "coarse", "middle"), [(141, 43, 78), (211, 61, 113)])
def test_cinn_shapes_of_the_paper_grids(fine, coarse, middle):
    assert middle_shape((fine, fine), (coarse, coarse)) == (middle, middle)
    assert middle == round(math.sqrt(fine * coarse))
    down, up = CiNNDown(3, 6), CiNNUp(6)
    with torch.no_grad():
        z = down(torch.randn(1, 3, fine, fine), (coarse, coarse))
        assert z.shape == (1, 6, coarse, coarse)
        assert up(z, (fine, fine)).shape == (1, 6, fine, fine)


def test_cinn_down_stacks_three_convs_to_d_channels():
    down = CiNNDown(3, 128)
    assert [block[0].out_channels for block in down.convs] == [42, 42, 44]
    assert down.lift[0].in_channels == 3 and down.lift[0].out_channels == 128
    for block in (down.lift, *down.convs):
        conv = block[0]
        assert conv.kernel_size == (3, 3) and conv.padding == (1, 1) and conv.bias is None


def periodic_grid(n):
    t = torch.arange(n, dtype=torch.float64) / n
    return torch.meshgrid(t, t, indexing="ij")


def identity_spectral_conv(channels, modes, dim):
    conv = SpectralConv(channels, channels, modes, dim=dim).double()
    with torch.no_grad():
        conv.weight.zero_()
        eye = torch.eye(channels, dtype=torch.float64).view(1, channels, channels, *[1] * dim)
        conv.weight[..., 0] = eye  # real part: identity on every kept mode
    return conv


def test_spectral_conv_2d_keeps_both_frequency_corners_and_cuts_higher_modes():
    x, y = periodic_grid(32)
    low = torch.sin(2 * math.pi * (3 * x - 2 * y)) + torch.cos(2 * math.pi * (x + 4 * y))
    high = torch.cos(2 * math.pi * 7 * x)
    conv = identity_spectral_conv(1, 5, dim=2)
    out = conv((low + high)[None, None])[0, 0]
    torch.testing.assert_close(out, low, atol=1e-10, rtol=0)


def test_spectral_conv_1d_is_a_learned_filter_on_the_lowest_modes():
    t = torch.arange(64, dtype=torch.float64) / 64
    low, high = torch.sin(2 * math.pi * 5 * t), torch.cos(2 * math.pi * 20 * t)
    conv = identity_spectral_conv(1, 16, dim=1)
    torch.testing.assert_close(conv((low + high)[None, None])[0, 0], low, atol=1e-10, rtol=0)


def test_spectral_conv_runs_on_grids_smaller_than_its_modes():
    conv = SpectralConv(2, 3, 12, dim=2)
    assert conv(torch.randn(2, 2, 9, 7)).shape == (2, 3, 9, 7)


def test_spectral_parameters_count_complex_entries_twice():
    assert num_params(SpectralConv(32, 32, 12, dim=2)) == 2 * 32 * 32 * 12 * 12 * 2
    assert num_params(SpectralConv(48, 48, 16, dim=1)) == 48 * 48 * 16 * 2


def test_spectral_regressor_shapes_1d_and_2d():
    reg1 = SpectralRegressor(8, 2, pos_dim=1, width=6, modes=4)
    assert reg1(torch.randn(3, 8, 20), torch.randn(3, 1, 20)).shape == (3, 2, 20)
    reg2 = SpectralRegressor(8, 1, pos_dim=2, width=6, modes=3, project=True)
    assert reg2(torch.randn(2, 8, 10, 9), torch.randn(2, 2, 10, 9)).shape == (2, 1, 10, 9)
    assert reg2.convs[0].in_channels == 6  # projected first
    assert reg1.convs[0].in_channels == 8 + 1  # coordinates appended


def test_grid_layers_refuse_domains_without_grid_shape():
    cloud = from_points(torch.rand(12, 2), x=torch.randn(12, 1))
    with pytest.raises(MeshError, match="mesh path"):
        grid_tensor(cloud.x, cloud)
    with pytest.raises(MeshError, match="mesh path"):
        CiNNDown(1, 6)(torch.randn(1, 1, 12), (4,))


def smooth_field(n, channels=3):
    """``[1, channels, n, n]`` smooth fields on the ``n x n`` grid of the unit square."""
    t = torch.linspace(0, 1, n, dtype=torch.float64)
    x, y = torch.meshgrid(t, t, indexing="ij")
    fields = [torch.sin(3 * x + 2 * c * y) + x * y**2 * (c + 1) for c in range(channels)]
    return torch.stack(fields)[None]


def test_cinns_on_a_finer_grid_reproduce_the_training_grid_with_grid_given():
    # 43 = 2 x 21 + 1 and 85 = 4 x 21 + 1 nodes: the 22-node grid is nested in both
    torch.manual_seed(0)
    down, up = CiNNDown(3, 12).double().eval(), CiNNUp(12).double().eval()
    with torch.no_grad():
        z = down(smooth_field(22), (8, 8))
        for n in (43, 85):
            fine = down(smooth_field(n), (8, 8), grid=(22, 22))
            torch.testing.assert_close(fine, z, atol=1e-12, rtol=0)
            # without the training grid the convolutions see other stencils and middle grids
            assert (down(smooth_field(n), (8, 8)) - z).abs().max() > 1e-2
        y = up(z, (22, 22))
        for n in (43, 85):
            fine = up(z, (n, n), grid=(22, 22))
            stride = (n - 1) // 21
            torch.testing.assert_close(fine[..., ::stride, ::stride], y, atol=1e-12, rtol=0)
            assert (up(z, (n, n))[..., ::stride, ::stride] - y).abs().max() > 1e-2


def test_spectral_conv_on_a_finer_grid_uses_only_the_training_grids_modes():
    # a 22-node axis has rfft modes -11..10 (first axis) and 0..11 (last): the weight of mode +11
    # on the first axis is never trained there, and must not act on a finer grid
    torch.manual_seed(0)
    conv = SpectralConv(2, 2, 12, dim=2).double()
    x = torch.randn(1, 2, 43, 43, dtype=torch.float64)
    before, free = conv(x, grid=(22, 22)), conv(x)
    with torch.no_grad():
        conv.weight[0, :, :, 11] += 1.0  # corner of positive first-axis modes, mode 11
    torch.testing.assert_close(conv(x, grid=(22, 22)), before, atol=1e-12, rtol=0)
    assert (conv(x) - free).abs().max() > 1e-3
    # on the training grid itself nothing changes
    x22 = torch.randn(1, 2, 22, 22, dtype=torch.float64)
    torch.testing.assert_close(conv(x22, grid=(22, 22)), conv(x22), atol=0, rtol=0)


def test_spectral_conv_on_a_finer_grid_transforms_on_the_training_grid():
    # the same non-periodic field on 22 and 43 nodes: the discrete transform's period (n h) and
    # the modes kept differ between the grids, so the layer must transform on the training grid
    torch.manual_seed(0)
    conv = SpectralConv(3, 2, 12, dim=2).double()
    coarse = conv(smooth_field(22))
    for n in (43, 85):
        stride = (n - 1) // 21
        fine = conv(smooth_field(n), grid=(22, 22))[..., ::stride, ::stride]
        torch.testing.assert_close(fine, coarse, atol=1e-12, rtol=0)
        own = conv(smooth_field(n))[..., ::stride, ::stride]
        assert (own - coarse).abs().max() > 1e-2 * coarse.abs().max()

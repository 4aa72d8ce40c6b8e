"""The Galerkin Transformer's grid decoder against the paper's formulas written densely: CiNN down-
and upsampling with their skip connections (App. B, Figs. 6-7) and the spectral regressor
v_l = sigma(K_l v_{l-1} + W_l v_{l-1}) on [features, coordinates] (Table 5), with the Fourier
layer K written as explicit DFT sums."""

import math

import torch
import torch.nn.functional as F

from meshop.nn import CiNNDown, CiNNUp, SpectralConv, SpectralRegressor


def interpolation_matrix(n_out: int, n_in: int) -> torch.Tensor:
    """Linear interpolation between two node sets that both include the ends of [0, 1]."""
    out = torch.zeros(n_out, n_in, dtype=torch.float64)
    for i in range(n_out):
        s = i * (n_in - 1) / (n_out - 1)
        lo = min(math.floor(s), n_in - 2)
        out[i, lo], out[i, lo + 1] = 1 - (s - lo), s - lo
    return out


def resample(x, size):
    """Bilinear resampling of [B, C, H, W] as two interpolation matrices, one per axis."""
    rows, cols = (
        interpolation_matrix(size[0], x.shape[2]),
        interpolation_matrix(size[1], x.shape[3]),
    )
    return torch.einsum("ih,bchw,jw->bcij", rows, x, cols)


def conv(block, x):
    """3x3 convolution (no bias) then SiLU: the CiNN's convolution block."""
    return F.silu(F.conv2d(x, block[0].weight.double(), padding=1))


def middle(fine, coarse):
    return tuple(round(math.sqrt(f * c)) for f, c in zip(fine, coarse))


def dense_cinn_down(layer, a, size):
    """u0 = P_fm s(Conv0 a); u_k = s(Conv_k u_{k-1}); z = P_mc([u1 | u2 | u3] + u0)."""
    u0 = resample(conv(layer.lift, a), middle(a.shape[2:], size))
    u1 = conv(layer.convs[0], u0)
    u2 = conv(layer.convs[1], u1)
    u3 = conv(layer.convs[2], u2)
    return resample(torch.cat([u1, u2, u3], dim=1) + u0, size)


def dense_cinn_up(layer, z, size):
    """u = P_cm z; y = P_mf(s(Conv u) + u)."""
    u = resample(z, middle(size, z.shape[2:]))
    return resample(conv(layer.conv, u) + u, size)


def test_cinn_down_and_up_match_the_papers_formulas_with_their_skip_connections():
    torch.manual_seed(0)
    a = torch.randn(2, 3, 17, 13)
    down, up = CiNNDown(3, 7).eval(), CiNNUp(7).eval()
    with torch.no_grad():
        z = down(a, (6, 5))
        y = up(z, (17, 13))
    close = dict(rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(z.double(), dense_cinn_down(down, a.double(), (6, 5)), **close)
    torch.testing.assert_close(y.double(), dense_cinn_up(up, z.double(), (17, 13)), **close)


def dense_fourier_layer_1d(conv_layer: SpectralConv, v):
    """(K v)(x_j) = (1/n) sum_{|k| < m} R_k (sum_l v(x_l) e^{-2 pi i k l / n}) e^{2 pi i k j / n},
    R_{-k} = conj(R_k): the real Fourier layer with the lowest m modes (m < n / 2)."""
    n, m = v.shape[-1], conv_layer.modes[0]
    weight = torch.view_as_complex(conv_layer.weight.detach().double().contiguous())[0]  # [i, o, m]
    j = torch.arange(n, dtype=torch.float64)
    k = torch.arange(m, dtype=torch.float64)
    forward = torch.exp(-2j * math.pi * k[:, None] * j[None] / n)  # [m, n]
    v_hat = torch.einsum("kl,bil->bik", forward, v.to(torch.complex128))
    z = torch.einsum("bik,iok->bok", v_hat, weight)  # [B, out, m]
    z[..., 0] = z[..., 0].real  # the mean mode of a real signal is real
    factor = torch.full((m,), 2.0, dtype=torch.float64)
    factor[0] = 1.0
    backward = torch.exp(2j * math.pi * k[:, None] * j[None] / n)  # [m, n]
    return torch.einsum("bok,k,kj->boj", z, factor.to(torch.complex128), backward).real / n


def dense_regressor_1d(reg, y, x):
    """v_0 = [y | x]; v_l = s(K_l v_{l-1} + W_l v_{l-1}); u = Q_2 s(Q_1 v_L)."""
    v = torch.cat([y, x], dim=1)
    for k_layer, w_layer in zip(reg.convs, reg.lins):
        wv = torch.einsum("oi,bin->bon", w_layer.weight.double(), v)
        v = F.silu(dense_fourier_layer_1d(k_layer, v) + wv + w_layer.bias.double()[:, None])
    q1, q2 = reg.head[0], reg.head[2]
    h = F.silu(torch.einsum("oi,bin->bon", q1.weight.double(), v) + q1.bias.double()[:, None])
    return torch.einsum("oi,bin->bon", q2.weight.double(), h) + q2.bias.double()[:, None]


def test_spectral_regressor_1d_matches_fourier_sums_plus_the_pointwise_w_term_on_coordinates():
    torch.manual_seed(1)
    reg = SpectralRegressor(3, 2, pos_dim=1, width=5, modes=4, layers=2).eval()
    with torch.no_grad():
        for conv_layer in reg.convs:  # spectral weights as large as the pointwise ones
            conv_layer.weight.normal_(0.0, 0.5)
    y = torch.randn(2, 3, 20)
    x = torch.linspace(0, 1, 20).expand(2, 1, 20) * torch.tensor([1.0, 3.0])[:, None, None]
    with torch.no_grad():
        out = reg(y, x)
    ref = dense_regressor_1d(reg, y.double(), x.double())
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-6)
    # each part of the formula moves the output: the coordinates, W v, K v
    assert (ref - dense_regressor_1d(reg, y.double(), 0 * x.double())).abs().max() > 1e-2
    with torch.no_grad():
        reg.lins[1].weight.zero_()
    assert (ref - dense_regressor_1d(reg, y.double(), x.double())).abs().max() > 1e-2


def test_spectral_regressor_2d_projects_features_and_coordinates_before_the_fourier_layers():
    torch.manual_seed(2)
    reg = SpectralRegressor(4, 1, pos_dim=2, width=6, modes=3, layers=2, project=True).eval()
    y = torch.randn(2, 4, 9, 8)
    gy, gx = torch.meshgrid(torch.linspace(0, 1, 9), torch.linspace(0, 2, 8), indexing="ij")
    pos = torch.stack([gy, gx]).expand(2, 2, 9, 8)

    def pointwise(lin, v):
        return torch.einsum("oi,bihw->bohw", lin.weight, v) + lin.bias[:, None, None]

    with torch.no_grad():
        out = reg(y, pos)
        v = pointwise(reg.lin_in, torch.cat([y, pos], dim=1))
        for k_layer, w_layer in zip(reg.convs, reg.lins):
            v = F.silu(k_layer(v) + pointwise(w_layer, v))
        ref = pointwise(reg.head[2], F.silu(pointwise(reg.head[0], v)))
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)

"""The Burgers dataset: ETDRK4 pseudo-spectral solver, periodic random fields, resolutions."""

import math

import numpy as np
import pytest
import torch

from meshop.data import grid_shape_of
from meshop.datasets import Burgers
from meshop.datasets.burgers import periodic_derivative, periodic_modes, solve_burgers
from meshop.datasets.grf import gaussian_random_field
from meshop.errors import ConfigError, MeshopError

SMALL = dict(fine_resolution=256, num_train=2, num_test=1, progress=False)


def cole_hopf(x, t, nu):
    """Exact periodic solution u = -2 nu phi_x / phi with phi solving the heat equation."""
    e1, e2 = np.exp(-4 * np.pi**2 * nu * t), np.exp(-16 * np.pi**2 * nu * t)
    phi = 1.2 + e1 * np.cos(2 * np.pi * x) + 0.3 * e2 * np.sin(4 * np.pi * x)
    phi_x = -2 * np.pi * e1 * np.sin(2 * np.pi * x) + 1.2 * np.pi * e2 * np.cos(4 * np.pi * x)
    return -2 * nu * phi_x / phi


@pytest.mark.parametrize("nu", [0.1, 0.1 / (2 * math.pi), 0.02])
def test_solution_matches_cole_hopf(nu):
    x = np.arange(256) / 256
    u = solve_burgers(cole_hopf(x, 0.0, nu), nu, t_final=1.0, time_step=2e-3)
    exact = cole_hopf(x, 1.0, nu)
    assert np.abs(u - exact).max() < 1e-8 * max(1.0, np.abs(exact).max())


def test_time_stepping_is_fourth_order():
    nu = 0.02
    x = np.arange(128) / 128
    u0, exact = cole_hopf(x, 0.0, nu), cole_hopf(x, 0.5, nu)
    errors = [np.abs(solve_burgers(u0, nu, 0.5, dt) - exact).max() for dt in (0.05, 0.025)]
    assert 12 < errors[0] / errors[1] < 20


def test_solution_keeps_its_mean_and_loses_energy(rng):
    u0 = 0.3 + gaussian_random_field(rng, 128, alpha=2, tau=5, sigma=25, boundary="periodic")
    u = solve_burgers(u0, 0.01, t_final=0.5)
    assert u.mean() == pytest.approx(u0.mean(), abs=1e-12)
    assert np.sum(u**2) < np.sum(u0**2)


def test_unstable_time_step_is_reported():
    x = np.arange(256) / 256
    with pytest.raises(MeshopError, match="smaller time_step"):
        solve_burgers(20 * np.sin(2 * np.pi * x), 1e-4, t_final=1.0, time_step=0.5)


def test_periodic_field_has_the_stated_variance():
    rng = np.random.default_rng(0)
    n, alpha, tau, sigma = 16, 2.0, 5.0, 25.0
    samples = np.stack(
        [gaussian_random_field(rng, n, alpha, tau, sigma, boundary="periodic") for _ in range(4000)]
    )
    k = np.fft.fftfreq(n, 1 / n)
    k = k[(k != 0) & (np.abs(k) < n // 2)]
    variance = np.sum(sigma**2 * (4 * np.pi**2 * k**2 + tau**2) ** -alpha)
    assert samples.var(axis=0).mean() == pytest.approx(variance, rel=0.03)
    # stationary: the covariance depends on the distance only (circulant)
    cov = np.cov(samples.T)
    assert np.abs(cov - np.roll(np.roll(cov, 3, 0), 3, 1)).max() < 0.1 * variance
    assert np.abs(samples.mean(axis=1)).max() < 1e-12  # mean zero, exactly


def test_samples_and_resolutions(tmp_path):
    fine = Burgers(root=tmp_path, resolution=256, **SMALL)
    coarse = Burgers(root=tmp_path, resolution=64, **SMALL)
    sample = coarse[0]
    assert grid_shape_of(sample) == (64,)
    assert torch.allclose(sample.pos[:, 0], torch.arange(64) / 64)  # periodic: no node at x = 1
    assert sample.weight.sum() == pytest.approx(1.0) and torch.all(sample.weight == 1 / 64)
    for f, c in zip(fine, coarse):
        assert torch.equal(f.x[::4], c.x) and torch.equal(f.y[::4], c.y)
    assert sample.y.abs().max() < sample.x.abs().max()
    assert Burgers.input_names == ("u0",) and Burgers.target_names == ("u",)


def test_resolution_must_divide_the_fine_grid(tmp_path):
    with pytest.raises(ConfigError, match="must divide"):
        Burgers(root=tmp_path, resolution=100, **SMALL)


def mirror(values: torch.Tensor) -> torch.Tensor:
    """Node values of a periodic grid mirrored about x = 0: node j takes the value of node -j."""
    return torch.roll(values.flip(0), 1, 0)


def test_periodic_derivative_is_second_order_and_wraps():
    x = torch.arange(256, dtype=torch.float64) / 256
    du = periodic_derivative(torch.sin(2 * math.pi * x)[:, None])[:, 0]
    exact = 2 * math.pi * torch.cos(2 * math.pi * x)
    # central difference of sin(kx): sin(kh) / h instead of k, relative error (kh)^2 / 6
    assert (du - exact).abs().max() < 2 * math.pi * (2 * math.pi / 256) ** 2 / 5


def test_derivative_changes_sign_under_mirroring():
    """The derivative channel is odd: a mirrored field does not get the mirrored input, so a model
    whose kernels depend on distances only (PiT) can tell left from right."""
    u = torch.randn(64, 1, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(periodic_derivative(mirror(u)), -mirror(periodic_derivative(u)))


def test_pit_on_a_periodic_grid_without_a_directional_input_is_mirror_symmetric():
    """The cause of PiT's Burgers plateau: with distance kernels and no input that tells left from
    right, PiT maps a mirrored field to the mirrored output, but the Burgers map does not (a
    positive u0 moves right), so the part of the target that is even in u0 cannot be learned."""
    from meshop.data import uniform_grid
    from meshop.models import PiT

    torch.manual_seed(0)
    n = 64
    model = PiT(2, 1, 1, width=16, encoder_radius=2.5 / n, decoder_radius=4.5 / n, periodic=1.0)
    with torch.no_grad():
        model.lift.weight[:, 1] = 0  # no absolute coordinate: only the field enters
    u0 = torch.randn(n, 1, generator=torch.Generator().manual_seed(1))

    def predict(values):
        return model(uniform_grid((n,), x=values, bounds=[(0.0, 1 - 1 / n)]))

    with torch.no_grad():
        assert torch.allclose(predict(mirror(u0)), mirror(predict(u0)), atol=1e-5)
        u = solve_burgers(u0[:, 0].double().numpy(), 0.02)
        mirrored = solve_burgers(mirror(u0)[:, 0].double().numpy(), 0.02)
        assert np.abs(mirrored - mirror(torch.from_numpy(u)[:, None])[:, 0].numpy()).max() > 0.1


def test_gradient_appends_the_derivative_of_u0_on_the_same_cache(tmp_path):
    plain = Burgers(root=tmp_path, resolution=64, **SMALL)
    with_gradient = Burgers(root=tmp_path, resolution=64, gradient=True, **SMALL)
    assert with_gradient.config_hash == plain.config_hash  # computed on access, one cache
    sample, base = with_gradient[0], plain[0]
    assert sample.x.shape == (64, 2) and torch.equal(sample.x[:, :1], base.x)
    assert torch.equal(sample.x[:, 1:], periodic_derivative(base.x))
    assert torch.equal(sample.y, base.y) and plain[0].x.shape == (64, 1)
    assert with_gradient.input_names == ("u0", "u0_x") and Burgers.input_names == ("u0",)


def test_coordinate_modes_follow_the_derivative_and_are_periodic(tmp_path):
    data = Burgers(root=tmp_path, resolution=64, gradient=True, coordinate_modes=2, **SMALL)
    sample, pos = data[0], data[0].pos
    assert data.input_names == ("u0", "u0_x", "cos1", "sin1", "cos2", "sin2")
    assert sample.x.shape == (64, 6) and torch.equal(sample.x[:, 2:], periodic_modes(pos, 2))
    angle = 2 * math.pi * pos[:, 0]
    assert torch.allclose(sample.x[:, 4], torch.cos(2 * angle), atol=1e-6)
    # periodic: the last node is as close to the first as to its other neighbour
    step = periodic_modes(pos, 2).diff(dim=0, append=periodic_modes(pos[:1], 2))
    assert step.norm(dim=1).max() / step.norm(dim=1).min() < 1 + 1e-4
    with pytest.raises(ConfigError, match="coordinate_modes"):
        Burgers(root=tmp_path, resolution=64, coordinate_modes=-1, **SMALL)

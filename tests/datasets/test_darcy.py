"""The Darcy dataset: finite differences, Gaussian random fields, resolutions."""

import numpy as np
import pytest
import torch

from meshop.data import grid_shape_of
from meshop.datasets import Darcy
from meshop.datasets.darcy import darcy_matrix, solve_darcy
from meshop.datasets.grf import gaussian_random_field
from meshop.errors import ConfigError

SMALL = dict(fine_resolution=41, num_train=2, num_test=1, progress=False)


def manufactured(n):
    """u = sin(pi x) sin(2 pi y) with a = 1 + sin(2 pi x) cos(3 pi y) / 2 and f = -div(a grad u)."""
    x = np.linspace(0, 1, n)
    x, y = np.meshgrid(x, x, indexing="ij")
    pi = np.pi
    a = 1 + 0.5 * np.sin(2 * pi * x) * np.cos(3 * pi * y)
    a_x = pi * np.cos(2 * pi * x) * np.cos(3 * pi * y)
    a_y = -1.5 * pi * np.sin(2 * pi * x) * np.sin(3 * pi * y)
    u = np.sin(pi * x) * np.sin(2 * pi * y)
    u_x = pi * np.cos(pi * x) * np.sin(2 * pi * y)
    u_y = 2 * pi * np.sin(pi * x) * np.cos(2 * pi * y)
    f = -(a_x * u_x + a_y * u_y) + 5 * pi**2 * a * u
    return a, f, u


def test_finite_differences_converge_at_second_order():
    errors = []
    for n in (17, 33, 65):
        a, f, u = manufactured(n)
        errors.append(np.abs(solve_darcy(a, f) - u).max())
    ratios = np.array(errors[:-1]) / np.array(errors[1:])
    assert np.all(ratios > 3.7) and np.all(ratios < 4.3)
    assert errors[-1] < 1e-3


def test_matrix_is_the_symmetric_five_point_stencil():
    a = np.random.default_rng(0).uniform(1, 2, (6, 6))
    matrix = darcy_matrix(a).toarray()
    h2 = 5**2
    assert np.allclose(matrix, matrix.T)
    # interior node (2, 2) is unknown (1, 1): row 1 * 4 + 1 = 5
    row = matrix[5] / h2
    assert row[5] == pytest.approx(
        0.5 * (a[2, 2] + a[3, 2] + a[2, 2] + a[1, 2] + a[2, 2] + a[2, 3] + a[2, 2] + a[2, 1])
    )
    assert row[9] == pytest.approx(-0.5 * (a[2, 2] + a[3, 2]))  # east neighbour (3, 2)
    assert row[6] == pytest.approx(-0.5 * (a[2, 2] + a[2, 3]))  # north neighbour (2, 3)
    assert matrix[3, 4] == 0.0  # no coupling from the end of one row of unknowns to the next


def test_neumann_field_has_the_stated_covariance():
    rng = np.random.default_rng(0)
    n, alpha, tau = 5, 2.0, 3.0
    samples = np.stack(
        [gaussian_random_field(rng, (n, n), alpha, tau).ravel() for _ in range(6000)]
    )
    k = np.arange(n)
    x = np.linspace(0, 1, n)
    basis = np.sqrt(2) * np.cos(np.pi * np.outer(x, k))
    basis[:, 0] = 1
    phi = np.einsum("ik,jl->ijkl", basis, basis).reshape(n * n, n * n)  # [node, mode]
    eig = (
        tau ** (2 * (alpha - 1)) * (np.pi**2 * (k[:, None] ** 2 + k[None] ** 2) + tau**2) ** -alpha
    )
    eig = eig.ravel()
    eig[0] = 0.0
    exact = phi @ np.diag(eig) @ phi.T
    assert np.abs(np.cov(samples.T) - exact).max() < 0.08 * np.abs(exact).max()


def test_samples_are_thresholded_fields_with_positive_pressure(tmp_path):
    data = Darcy(root=tmp_path, resolution=21, **SMALL)
    sample = data[0]
    assert grid_shape_of(sample) == (21, 21) and sample.pos.shape == (441, 2)
    assert set(sample.x.unique().tolist()) == {3.0, 12.0}
    u = sample.y.view(21, 21)
    assert torch.all(u[1:-1, 1:-1] > 0)  # f = 1 > 0: maximum principle
    assert torch.all(u[0] == 0) and torch.all(u[:, -1] == 0)
    assert sample.weight.sum() == pytest.approx(1.0)
    assert Darcy.input_names == ("a",) and Darcy.target_names == ("u",)


def test_resolutions_subsample_the_same_fields(tmp_path):
    fine = Darcy(root=tmp_path, resolution=41, **SMALL)
    coarse = Darcy(root=tmp_path, resolution=11, **SMALL)
    test = Darcy(root=tmp_path, resolution=11, split="test", **SMALL)
    assert len(fine) == len(coarse) == 2 and len(test) == 1
    for f, c in zip(fine, coarse):
        assert torch.equal(f.x.view(41, 41)[::4, ::4], c.x.view(11, 11))
        assert torch.equal(f.y.view(41, 41)[::4, ::4], c.y.view(11, 11))
        assert torch.equal(f.pos.view(41, 41, 2)[::4, ::4], c.pos.view(11, 11, 2))
    assert not torch.equal(test[0].x, coarse[0].x)


def test_resolution_must_subsample_the_fine_grid(tmp_path):
    with pytest.raises(ConfigError, match=r"choose one of \[2, 3, 5, 6, 9, 11, 21, 41\]"):
        Darcy(root=tmp_path, resolution=12, **SMALL)


def test_cell_weights_are_applied_to_the_cached_samples_at_every_resolution(tmp_path):
    """grid_weights="cells" gives every node its cells within the square at the training grid and
    at the finer ones, over the same cached fields (the cache does not depend on the weights)."""
    for resolution in (11, 21, 41):
        equal = Darcy(root=tmp_path, resolution=resolution, **SMALL)
        cells = Darcy(root=tmp_path, resolution=resolution, grid_weights="cells", **SMALL)
        assert cells.config_hash == equal.config_hash
        h = 1 / (resolution - 1)
        for e, c in zip(equal, cells):
            assert torch.equal(e.x, c.x) and torch.equal(e.y, c.y)
            assert torch.equal(e.weight, torch.full_like(e.weight, 1 / resolution**2))
            weight = c.weight.view(resolution, resolution)
            assert weight.sum().item() == pytest.approx(1.0, rel=1e-6)
            assert weight[5, 5].item() == pytest.approx(h * h)
            assert weight[0, 5].item() == pytest.approx(h * h / 2)
            assert weight[-1, -1].item() == pytest.approx(h * h / 4)


def test_grid_weights_is_a_dataset_option_of_the_command_line(tmp_path):
    """``--dataset-arg grid_weights='"cells"'`` (or unquoted) reaches the samples."""
    from meshop.cli import parse_assignments
    from meshop.datasets.registry import build_dataset

    small = dict(SMALL, resolution=11)
    for value in ('"cells"', "cells"):
        args = parse_assignments([f"grid_weights={value}"], "--dataset-arg")
        test = build_dataset("darcy", "test", str(tmp_path), **args, **small)
        assert test[0].weight.view(11, 11)[0, 0].item() == pytest.approx(1 / 400)
    with pytest.raises(ConfigError, match="'grid_weights' of dataset 'darcy' expects a string"):
        build_dataset("darcy", "test", str(tmp_path), grid_weights=1, **small)


def test_unknown_grid_weights_are_refused_before_generating(tmp_path):
    with pytest.raises(ConfigError, match=r"grid_weights must be one of 'equal', 'cells', got 'x'"):
        Darcy(root=tmp_path, resolution=11, grid_weights="x", **SMALL)
    assert not (tmp_path / "darcy").exists()

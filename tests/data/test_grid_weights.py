"""The quadrature weights of uniform grids: equal (1/n) or each node's cells (trapezoidal)."""

import math

import pytest
import torch

from meshop.data import uniform_grid
from meshop.errors import ConfigError

GRIDS = [
    ((9,), [(0.0, 1.0)]),
    ((22, 22), [(0.0, 1.0), (0.0, 1.0)]),
    ((5, 7), [(-1.0, 2.0), (0.5, 1.25)]),
    ((3, 4, 6), [(0.0, 2.0), (-1.0, 1.0), (0.0, 0.5)]),
]


def box_measure(bounds):
    return math.prod(hi - lo for lo, hi in bounds)


@pytest.mark.parametrize("weights", ["equal", "cells"])
@pytest.mark.parametrize(("shape", "bounds"), GRIDS)
def test_grid_weights_sum_to_the_box_measure(shape, bounds, weights):
    weight = uniform_grid(shape, bounds=bounds, weights=weights).weight
    assert weight.shape == (math.prod(shape),) and weight.dtype == torch.float32
    assert weight.sum().item() == pytest.approx(box_measure(bounds), rel=1e-6)


@pytest.mark.parametrize(("shape", "bounds"), GRIDS)
def test_cell_weights_integrate_multilinear_functions_exactly(shape, bounds):
    """f = 1 + sum_i c_i x_i + prod_i x_i (bilinear in 2D, trilinear in 3D) integrates exactly on
    any grid: the trapezoidal rule is exact for functions linear in each coordinate."""
    data = uniform_grid(shape, bounds=bounds, weights="cells")
    pos = data.pos.double()
    coefficients = [0.7, -1.3, 2.1][: len(shape)]
    f = 1 + sum(c * pos[:, i] for i, c in enumerate(coefficients)) + pos.prod(1)
    measure = box_measure(bounds)
    means = [(lo + hi) / 2 for lo, hi in bounds]  # the integral of x_i over the box / |box|
    exact = measure * (1 + sum(c * m for c, m in zip(coefficients, means)) + math.prod(means))
    assert (data.weight.double() * f).sum().item() == pytest.approx(exact, rel=1e-6)


def test_cell_weights_halve_on_edges_and_quarter_at_corners():
    shape, bounds = (5, 7), [(-1.0, 2.0), (0.5, 1.25)]
    weight = uniform_grid(shape, bounds=bounds, weights="cells").weight.view(*shape)
    interior = (3.0 / 4) * (0.75 / 6)  # the steps' product: |box| / prod(shape - 1)
    assert torch.allclose(weight[1:-1, 1:-1], torch.tensor(interior))
    for edge in (weight[0, 1:-1], weight[-1, 1:-1], weight[1:-1, 0], weight[1:-1, -1]):
        assert torch.allclose(edge, torch.tensor(interior / 2))
    for corner in (weight[0, 0], weight[0, -1], weight[-1, 0], weight[-1, -1]):
        assert corner.item() == pytest.approx(interior / 4)
    cube = uniform_grid((3, 4, 6), weights="cells").weight.view(3, 4, 6)
    h = 1 / (2 * 3 * 5)
    assert cube[1, 1, 1].item() == pytest.approx(h)
    assert cube[0, 1, 1].item() == pytest.approx(h / 2)  # on a face
    assert cube[0, 0, 1].item() == pytest.approx(h / 4)  # on an edge
    assert cube[0, 0, 0].item() == pytest.approx(h / 8)  # at a corner


@pytest.mark.parametrize(("shape", "bounds"), GRIDS)
def test_equal_weights_are_the_default_and_the_box_measure_over_n(shape, bounds):
    default = uniform_grid(shape, bounds=bounds).weight
    assert torch.equal(default, uniform_grid(shape, bounds=bounds, weights="equal").weight)
    measure = 1.0
    for lo, hi in bounds:
        measure *= hi - lo
    assert torch.equal(default, torch.full((math.prod(shape),), measure / math.prod(shape)))


def test_cell_weights_give_the_same_integral_on_finer_grids():
    """The quantity the finer grids change with equal weights: the weighted mean of a field that
    is larger at the boundary."""

    def boundary_mean(n, weights):
        data = uniform_grid((n, n), weights=weights)
        f = (data.pos - 0.5).abs().amax(1)  # 0 at the centre, 1/2 on the boundary
        return (data.weight * f).sum().item()

    exact = 1 / 3
    cells = [boundary_mean(n, "cells") for n in (22, 43, 85)]
    equal = [boundary_mean(n, "equal") for n in (22, 43, 85)]
    assert max(abs(c - exact) for c in cells) < 2e-3
    assert equal[0] - exact > 5 * abs(cells[0] - exact)  # the boundary strip outside the domain


def test_unknown_grid_weights_name_the_choices():
    with pytest.raises(ConfigError, match=r"unknown grid weights 'trapezoid'; choose one of "):
        uniform_grid((4, 4), weights="trapezoid")

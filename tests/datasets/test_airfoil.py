"""The Airfoil dataset: vortex panel method, compressibility, O-mesh, samples."""

import numpy as np
import pytest
import torch

from meshop.data import make_loader, node_features
from meshop.datasets import Airfoil
from meshop.datasets.airfoil import (
    airfoil_flow,
    critical_pressure_coefficient,
    karman_tsien,
    local_mach,
    naca4,
    o_mesh,
)
from meshop.datasets.panel import (
    lift_coefficient,
    panel_velocity,
    solve_vortex_panels,
    surface_speed,
)
from meshop.errors import ConfigError, MeshError

SMALL = dict(num_panels=60, num_layers=12, progress=False)


def karman_trefftz(alpha, num_panels, te_angle_deg=15.0, eps=0.1, delta=0.05):
    """Exact potential flow around a Karman-Trefftz airfoil (a Joukowski airfoil with a finite
    trailing-edge angle) by conformal mapping of the flow around a circle with the Kutta condition.

    Returns the clockwise body polygon, a function giving the exact complex velocity at points of
    the circle plane, the exact surface Cp at the nodes and the exact lift coefficient.
    """
    k = 2 - np.deg2rad(te_angle_deg) / np.pi
    mu = complex(-eps, delta)  # circle centre; the circle passes through zeta = 1
    radius = abs(1 - mu)
    theta = np.angle(1 - mu) - 2 * np.pi * np.arange(num_panels + 1) / num_panels  # clockwise
    zeta = mu + radius * np.exp(1j * theta)
    zeta[0] = zeta[-1] = 1.0
    # circulation that puts the rear stagnation point at zeta = 1 (Kutta condition)
    w1 = np.exp(-1j * alpha) - radius**2 * np.exp(1j * alpha) / (1 - mu) ** 2
    circulation = (2j * np.pi * (1 - mu) * w1).real

    def circle_velocity(z):  # conjugate complex velocity u - i v around the circle
        return (
            np.exp(-1j * alpha)
            - radius**2 * np.exp(1j * alpha) / (z - mu) ** 2
            + 1j * circulation / (2 * np.pi * (z - mu))
        )

    ratio = (zeta - 1) / (zeta + 1)
    z = k * (1 + ratio**k) / (1 - ratio**k)
    with np.errstate(divide="ignore", invalid="ignore"):
        dz = 4 * k**2 * ratio ** (k - 1) / ((1 - ratio**k) ** 2 * (zeta + 1) ** 2)
        cp = 1 - np.abs(circle_velocity(zeta) / dz) ** 2
    nodes = np.stack([z.real, z.imag], axis=1)
    chord = np.max(np.abs(z - z[0]))
    return nodes, cp, 2 * circulation / chord


def circle(num_panels):
    theta = -2 * np.pi * np.arange(num_panels + 1) / num_panels
    nodes = np.stack([0.5 + 0.5 * np.cos(theta), 0.5 * np.sin(theta)], axis=1)
    nodes[-1] = nodes[0]
    return nodes, theta


def test_surface_cp_of_a_circle_matches_potential_flow():
    nodes, theta = circle(100)
    speed = surface_speed(solve_vortex_panels(nodes, 0.0))
    exact = 2 * np.abs(np.sin(theta[:-1]))  # the Kutta point (1, 0) is the rear stagnation point
    assert np.abs(speed - exact).max() < 1e-4


def test_velocity_field_around_a_circle_matches_potential_flow(rng):
    alpha = np.deg2rad(10.0)
    nodes, _ = circle(200)
    gamma = solve_vortex_panels(nodes, alpha)
    r = rng.uniform(0.55, 3.0, 200)
    phi = rng.uniform(0, 2 * np.pi, 200)
    z = 0.5 + r * np.exp(1j * phi)
    # exact: uniform flow + doublet + the circulation that puts the stagnation point at (1, 0)
    circulation = 4 * np.pi * 0.5 * np.sin(alpha)  # clockwise
    w = (
        np.exp(-1j * alpha)
        - 0.25 * np.exp(1j * alpha) / (z - 0.5) ** 2
        + 1j * circulation / (2 * np.pi * (z - 0.5))
    )
    velocity = panel_velocity(np.stack([z.real, z.imag], 1), nodes, gamma, alpha)
    assert np.abs(velocity[:, 0] - w.real).max() < 1e-3
    assert np.abs(velocity[:, 1] + w.imag).max() < 1e-3
    assert lift_coefficient(nodes, gamma) == pytest.approx(2 * circulation, rel=1e-3)


@pytest.mark.parametrize("num_panels, tolerance", [(100, 0.02), (200, 0.006)])
def test_surface_cp_matches_karman_trefftz_airfoil(num_panels, tolerance):
    alpha = np.deg2rad(4.0)
    nodes, cp, cl = karman_trefftz(alpha, num_panels)
    gamma = solve_vortex_panels(nodes, alpha)
    cp_panel = 1 - surface_speed(gamma) ** 2
    chord = np.max(np.linalg.norm(nodes - nodes[0], axis=1))
    # away from the trailing-edge corner, whose singular flow no panel spacing resolves
    away = np.linalg.norm(nodes[:-1] - nodes[0], axis=1) > 0.01 * chord
    assert np.abs(cp_panel - cp[:-1])[away].max() < tolerance
    assert lift_coefficient(nodes, gamma) == pytest.approx(cl, rel=1e-3)


def test_lift_converges_at_second_order_on_karman_trefftz_airfoil():
    alpha = np.deg2rad(4.0)
    errors = []
    for n in (50, 100, 200):
        nodes, _, cl = karman_trefftz(alpha, n)
        errors.append(abs(lift_coefficient(nodes, solve_vortex_panels(nodes, alpha)) - cl))
    assert errors[0] / errors[1] > 3 and errors[1] / errors[2] > 3


def lift_slope(thickness):
    body = naca4(0.0, 0.4, thickness, num_panels=200)
    alpha = np.deg2rad(1.0)
    cl = [lift_coefficient(body, solve_vortex_panels(body, a)) for a in (-alpha, alpha)]
    return (cl[1] - cl[0]) / (2 * alpha)


def test_thin_symmetric_airfoil_has_thin_airfoil_lift_slope():
    slopes = {t: lift_slope(t) / (2 * np.pi) for t in (0.02, 0.04, 0.12)}
    assert slopes[0.02] == pytest.approx(1.0, abs=0.02)  # NACA 0002: thin-airfoil theory
    assert slopes[0.02] < slopes[0.04] < slopes[0.12]  # thicker sections lift more when inviscid
    assert 2 * slopes[0.02] - slopes[0.04] == pytest.approx(1.0, abs=0.003)  # thickness -> 0


def test_symmetric_airfoil_has_no_lift_at_zero_incidence_and_cambered_has_some():
    symmetric = naca4(0.0, 0.4, 0.12)
    assert abs(lift_coefficient(symmetric, solve_vortex_panels(symmetric, 0.0))) < 1e-10
    cambered = naca4(0.04, 0.4, 0.12)
    # thin-airfoil theory: zero-lift angle of NACA 4412 is about -4.2 degrees
    cl = lift_coefficient(cambered, solve_vortex_panels(cambered, 0.0))
    assert 2 * np.pi * np.deg2rad(4.0) < cl < 2 * np.pi * np.deg2rad(5.0)


def test_naca4_is_closed_clockwise_unit_chord_with_given_thickness():
    body = naca4(0.0, 0.4, 0.12, num_panels=400)
    assert np.array_equal(body[0], body[-1]) and np.allclose(body[0], [1.0, 0.0])
    assert np.allclose(body[200], [0.0, 0.0])
    assert body[1:200, 1].max() < 0 < body[201:400, 1].min()  # lower surface first: clockwise
    assert 2 * body[:, 1].max() == pytest.approx(0.12, rel=1e-3)
    with pytest.raises(ConfigError, match="even"):
        naca4(0.0, 0.4, 0.12, num_panels=51)


def test_flow_at_the_first_layer_matches_the_surface_speed():
    body = naca4(0.02, 0.4, 0.12)
    alpha = np.deg2rad(3.0)
    gamma = solve_vortex_panels(body, alpha)
    points, _ = o_mesh(body[:-1], num_layers=40, first_layer=1e-3)
    n = len(body) - 1
    first = np.linalg.norm(panel_velocity(points[n : 2 * n], body, gamma, alpha), axis=1)
    x = body[:-1, 0]
    away_from_edges = (x > 0.05) & (x < 0.95)
    assert np.abs(first - surface_speed(gamma))[away_from_edges].max() < 0.005
    far = np.linalg.norm(panel_velocity(points[-n:], body, gamma, alpha), axis=1)
    assert np.abs(far - 1).max() < 0.01  # free stream at the far field


def test_airfoil_flow_targets_are_consistent_with_the_panel_solution():
    mesh = airfoil_flow(0.02, 0.4, 0.12, alpha=3.0, mach=1e-6, num_panels=100, num_layers=10)
    gamma = solve_vortex_panels(naca4(0.02, 0.4, 0.12, 100), np.deg2rad(3.0))
    cp = mesh.point_data["Cp"]
    assert np.allclose(cp[:100], 1 - surface_speed(gamma) ** 2)  # incompressible limit
    assert mesh.points.shape == (100 * 11, 3) and np.all(mesh.points[:, 2] == 0)
    assert np.all(mesh.point_data["Mach"] < 1e-5)
    hot = airfoil_flow(0.06, 0.2, 0.06, alpha=5.0, mach=0.6, num_panels=100, num_layers=10)
    assert np.nanmax(hot.point_data["Mach"]) > 1 or np.isnan(hot.point_data["Mach"]).any()


def test_karman_tsien_and_isentropic_relations():
    cp0 = np.array([-0.01, 0.0, 0.01])
    mach = 0.5
    # small perturbations: Prandtl-Glauert Cp0 / sqrt(1 - M^2)
    assert np.allclose(karman_tsien(cp0, mach), cp0 / np.sqrt(1 - mach**2), rtol=2e-3)
    assert np.allclose(karman_tsien(cp0, 1e-8), cp0)  # incompressible limit
    assert local_mach(0.0, mach) == pytest.approx(mach)  # free-stream pressure: free-stream Mach
    assert local_mach(critical_pressure_coefficient(mach), mach) == pytest.approx(1.0)
    assert local_mach(2.0, mach) == 0.0  # beyond the total pressure: clipped stagnation
    assert critical_pressure_coefficient(0.6) == pytest.approx(-1.294, abs=1e-3)  # Anderson


@pytest.mark.parametrize("params", [(0.06, 0.2, 0.06), (0.0, 0.4, 0.18), (0.06, 0.6, 0.06)])
def test_o_mesh_cells_are_convex_and_fill_the_annulus(params):
    body = naca4(*params)
    points, quads = o_mesh(body[:-1], num_layers=40, first_layer=1e-3, farfield=15.0)
    assert points.shape == (200 * 41, 2) and quads.shape == (200 * 40, 4)
    corners = points[quads]
    a, b = corners - np.roll(corners, 1, axis=1), np.roll(corners, -1, axis=1) - corners
    assert np.all(a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0] > 0)  # convex, counter-clockwise
    x, y = corners[..., 0], corners[..., 1]
    area = 0.5 * np.sum(x * np.roll(y, -1, axis=1) - np.roll(x, -1, axis=1) * y)
    x, y = body[:-1, 0], body[:-1, 1]
    body_area = -0.5 * np.sum(x * np.roll(y, -1) - np.roll(x, -1) * y)
    outer = points[-200:] - [0.5, 0.0]
    assert np.allclose(np.linalg.norm(outer, axis=1), 15.0)
    outer_area = 0.5 * 200 * 15.0**2 * np.sin(2 * np.pi / 200)
    assert area == pytest.approx(outer_area - body_area, rel=1e-9)
    first = np.linalg.norm(points[200:400] - points[:200], axis=1)
    assert np.allclose(first, 1e-3, rtol=1e-2)  # first layer along the wall normals


def test_airfoil_samples_have_mesh_flow_conditions_and_subsonic_targets(tmp_path):
    data = Airfoil(root=tmp_path, num_train=2, num_test=1, **SMALL)
    assert len(data) == 2 and Airfoil.target_names == ("Cp", "Mach")
    assert data.param_names == ("alpha", "mach")
    sample = data[0]
    n = 60 * 13
    assert sample.pos.shape == (n, 2) and sample.y.shape == (n, 2)
    assert sample.cell_index_quad.shape == (4, 60 * 12)
    assert sample.params.shape == (1, 2) and getattr(sample, "x", None) is None
    alpha, mach = sample.params[0].tolist()
    assert -5 <= alpha <= 5 and 0.2 <= mach <= 0.6
    cp, local = sample.y[:, 0], sample.y[:, 1]
    assert local.max() < 1 and local.min() >= 0
    far = slice(n - 60, n)
    assert torch.allclose(local[far], torch.full((60,), mach), atol=0.01)
    assert cp[far].abs().max() < 0.02
    assert cp[0] > 1.0  # trailing edge: compressible stagnation pressure above Cp = 1
    assert sample.weight.sum() == pytest.approx(np.pi * 15.0**2, rel=3e-3)
    # every model gets [pos, alpha, Mach] per node: the section only through the mesh
    features = node_features(sample)
    assert features.shape == (n, 4) and torch.equal(features[:, :2], sample.pos)


def test_shape_params_option_adds_the_naca_parameters_of_the_same_sections(tmp_path):
    plain = Airfoil(root=tmp_path, num_train=2, num_test=1, **SMALL)
    shaped = Airfoil(root=tmp_path, num_train=2, num_test=1, shape_params=True, **SMALL)
    assert shaped.param_names == ("camber", "camber_position", "thickness", "alpha", "mach")
    for a, b in zip(plain, shaped):
        assert torch.equal(a.pos, b.pos) and torch.equal(a.y, b.y)
        assert b.params.shape == (1, 5) and torch.equal(b.params[:, 3:], a.params)
        camber, position, thickness = b.params[0, :3].tolist()
        assert 0 <= camber <= 0.06 and 0.2 <= position <= 0.6 and 0.06 <= thickness <= 0.18
        body = naca4(camber, position, thickness, 60)[:-1]
        np.testing.assert_allclose(b.pos[:60].numpy(), body, atol=1e-6)  # the wall nodes


def test_airfoil_generation_is_deterministic_and_split(tmp_path):
    first = Airfoil(root=tmp_path / "a", num_train=1, num_test=1, seed=3, **SMALL)
    again = Airfoil(root=tmp_path / "b", num_train=1, num_test=1, seed=3, **SMALL)
    test = Airfoil(root=tmp_path / "a", split="test", num_train=1, num_test=1, seed=3, **SMALL)
    assert torch.equal(first[0].y, again[0].y) and torch.equal(first[0].params, again[0].params)
    assert not torch.equal(first[0].params, test[0].params)
    assert not torch.equal(first[0].pos, test[0].pos)


def test_high_mach_box_still_gives_subsonic_flows(tmp_path):
    data = Airfoil(root=tmp_path, num_train=2, num_test=1, mach=(0.5, 0.6), alpha=(3, 5), **SMALL)
    for sample in data:
        assert sample.y[:, 1].max() < 1 and sample.params[0, 1] >= 0.5


def test_impossible_parameter_box_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="no subsonic flow"):
        Airfoil(root=tmp_path, num_train=1, num_test=1, mach=(0.9, 0.95), alpha=(5, 5), **SMALL)
    with pytest.raises(ConfigError, match="subsonic range"):
        Airfoil(root=tmp_path, mach=(0.5, 1.2))


def test_airfoil_samples_batch_with_their_cells(tmp_path):
    data = Airfoil(root=tmp_path, num_train=2, num_test=1, **SMALL)
    batch = next(iter(make_loader(data, batch_size=2)))
    n = data[0].num_nodes
    assert batch.num_graphs == 2 and batch.params.shape == (2, 2)
    assert batch.cell_index_quad.shape == (4, 2 * 60 * 12)
    assert batch.cell_index_quad[:, 60 * 12 :].min() == n  # second mesh's cells are offset


def test_inverted_mesh_is_reported():
    square = np.array([[1.0, 0.0], [0.0, -0.5], [-3.0, 0.0], [0.0, 0.5]])[::-1]
    with pytest.raises(MeshError, match="inverted"):
        o_mesh(square, num_layers=10, first_layer=0.05, farfield=5.0)
    with pytest.raises(ConfigError, match="first_layer"):
        o_mesh(naca4(0, 0.4, 0.12)[:-1], num_layers=10, first_layer=2.0, farfield=15.0)

"""Elasticity: the FEM solver against known answers; the dataset's samples, refinement levels,
seeding and cache."""

from pathlib import Path

import numpy as np
import pytest
import torch
from matplotlib.tri import LinearTriInterpolator, Triangulation

from meshop.data import lumped_mass_weights, make_loader, node_features
from meshop.datasets import Elasticity
from meshop.datasets.elasticity import random_cavity, refinement_level
from meshop.datasets.fem import cavity_radius, cell_mesh, solve_cell, star_polygon, von_mises
from meshop.datasets.registry import resolve_dataset
from meshop.errors import ConfigError, MeshopError

TINY = dict(num_train=2, num_test=1, max_area=4e-3, progress=False)


def nearest(points, xy):
    return int(np.argmin(np.hypot(points[:, 0] - xy[0], points[:, 1] - xy[1])))


def test_von_mises_of_uniaxial_stress_and_pure_shear():
    assert von_mises(np.array([0.0, 2.0, 0.0, 0.0])) == pytest.approx(2.0)
    assert von_mises(np.array([0.0, 0.0, 0.0, 1.5])) == pytest.approx(np.sqrt(3.0) * 1.5)
    assert von_mises(np.array([1.0, 1.0, 1.0, 0.0])) == pytest.approx(0.0)  # hydrostatic


def test_plate_without_cavity_under_uniform_traction_has_uniform_stress():
    # With nu = 0 the clamp does not restrain any Poisson contraction, so the exact solution is
    # uniaxial: s_yy = t everywhere and u_y = t y / E, which P2 elements represent exactly.
    points, triangles = cell_mesh(None, max_area=0.02)
    sol = solve_cell(points, triangles, youngs_modulus=10.0, poisson_ratio=0.0, traction=2.0)
    np.testing.assert_allclose(
        sol.stress, np.tile([0.0, 2.0, 0.0, 0.0], (len(points), 1)), atol=1e-9
    )
    np.testing.assert_allclose(sol.von_mises, 2.0, atol=1e-9)
    np.testing.assert_allclose(sol.displacement[:, 1], 0.2 * points[:, 1], atol=1e-10)
    np.testing.assert_allclose(sol.displacement[:, 0], 0.0, atol=1e-10)


def test_small_circular_hole_gives_the_kirsch_stress_concentration():
    # Kirsch (infinite plate, uniaxial tension t): s_yy = 3 t beside the hole, s_xx = -t above it.
    # Our hole (radius 0.05, d/W = 0.1) sits in a finite cell: Heywood's finite-width factor gives
    # 3.03 t, and the clamp 0.45 below the hole adds a little. The P2 nodal stress on this mesh is
    # within 2.5% of Kirsch; 6% allows for mesh-size and clamp effects without accepting P1's ~10%
    # underestimate.
    a, t = 0.05, 1.0
    points, triangles = cell_mesh(np.array([a]), max_area=1e-3)
    sol = solve_cell(points, triangles, traction=t)
    beside = nearest(points, (0.5 + a, 0.5))
    above = nearest(points, (0.5, 0.5 + a))
    assert sol.stress[beside, 1] / t == pytest.approx(3.0, rel=0.06)
    assert sol.stress[above, 0] / t == pytest.approx(-1.0, rel=0.06)
    far = nearest(points, (0.05, 0.5))  # near the free side, far from the hole: s_yy ~ t
    assert sol.stress[far, 1] / t == pytest.approx(1.0, rel=0.1)


def test_neo_hookean_uniaxial_plate_matches_the_exact_large_stretch():
    # lambda = 0 (nu = 0): P = mu (F - F^-T); F = diag(1, s) is exact with mu (s - 1/s) = t, and
    # the Cauchy stress s_yy = t (the width does not change).
    E, t = 10.0, 2.0
    mu = E / 2.0
    stretch = (t / mu + np.sqrt((t / mu) ** 2 + 4.0)) / 2.0
    points, triangles = cell_mesh(None, max_area=0.02)
    sol = solve_cell(
        points, triangles, youngs_modulus=E, poisson_ratio=0.0, traction=t, material="neo-hookean"
    )
    np.testing.assert_allclose(sol.displacement[:, 1], (stretch - 1.0) * points[:, 1], atol=1e-8)
    np.testing.assert_allclose(sol.stress[:, 1], t, atol=1e-7)
    np.testing.assert_allclose(sol.von_mises, t, atol=1e-7)
    assert (stretch - 1.0) > 1.05 * t / E  # the exact answer is not the linear one


def test_neo_hookean_tends_to_linear_elasticity_at_small_load():
    points, triangles = cell_mesh(np.array([0.25, 0.04, -0.02, 0.0, 0.03]), max_area=4e-3)
    kw = dict(youngs_modulus=10.0, poisson_ratio=0.3, traction=1e-3)
    linear = solve_cell(points, triangles, **kw)
    hyper = solve_cell(points, triangles, material="neo-hookean", **kw)
    assert hyper.newton_iterations > 1
    rel = np.linalg.norm(hyper.von_mises - linear.von_mises) / np.linalg.norm(linear.von_mises)
    assert rel < 2e-3
    large = solve_cell(points, triangles, material="neo-hookean", **{**kw, "traction": 1.0})
    linear_large = solve_cell(points, triangles, **{**kw, "traction": 1.0})
    rel_large = np.linalg.norm(large.von_mises - linear_large.von_mises)
    assert rel_large / np.linalg.norm(linear_large.von_mises) > 10 * rel


def test_neo_hookean_halves_increments_that_do_not_converge_and_reports_failure():
    points, triangles = cell_mesh(np.array([0.25, 0.04, -0.02, 0.0, 0.03]), max_area=1e-2)
    kw = dict(material="neo-hookean", traction=2.0)
    reference = solve_cell(points, triangles, **kw)  # one full increment, 7 residual evaluations
    halved = solve_cell(points, triangles, max_iter=6, **kw)
    assert halved.newton_iterations > reference.newton_iterations
    np.testing.assert_allclose(halved.displacement, reference.displacement, atol=1e-9)
    with pytest.raises(MeshopError, match="did not converge.*lower the traction"):
        solve_cell(points, triangles, material="neo-hookean", traction=200.0, max_iter=6)


def test_cell_mesh_is_deterministic_and_fits_the_cavity():
    c = np.array([0.22, 0.03, 0.01, -0.02, 0.02])
    p1, t1 = cell_mesh(c, max_area=2e-3)
    p2, t2 = cell_mesh(c, max_area=2e-3)
    np.testing.assert_array_equal(p1, p2)
    np.testing.assert_array_equal(t1, t2)
    theta = np.linspace(0, 2 * np.pi, 64, endpoint=False)
    ring = 0.5 + cavity_radius(theta, c)[:, None] * np.stack([np.cos(theta), np.sin(theta)], 1)
    shoelace = 0.5 * abs(
        np.sum(ring[:, 0] * np.roll(ring[:, 1], -1) - np.roll(ring[:, 0], -1) * ring[:, 1])
    )
    area = lumped_mass_weights(p1, [("triangle", t1)]).sum()
    assert area == pytest.approx(1.0 - shoelace, rel=1e-12)


def test_random_cavities_keep_their_radius_in_range():
    theta = np.linspace(0, 2 * np.pi, 360)
    for i in range(200):
        c = random_cavity(np.random.default_rng([3, i]), num_modes=6, amplitude=0.2)
        r = cavity_radius(theta, c)
        assert 0.1 - 1e-5 <= r.min() and r.max() <= 0.4 + 1e-5


def test_elasticity_samples_have_the_documented_fields(tmp_path):
    ds = Elasticity(tmp_path, **TINY)
    assert len(ds) == 2 and ds.target_names == ("von_mises",)
    data = ds[0]
    n = data.num_nodes
    assert data.pos.shape == (n, 2) and data.y.shape == (n, 1) and data.displacement.shape == (n, 2)
    assert data.face.shape[0] == 3
    assert "latent_pos" not in data and "x" not in data and "params" not in data
    # sample i is drawn from default_rng([seed, i]); the target is von Mises / traction
    coefficients = random_cavity(np.random.default_rng([0, 0]))
    points, triangles = cell_mesh(coefficients, max_area=4e-3)
    np.testing.assert_allclose(data.pos.numpy(), points, atol=1e-6)
    sol = solve_cell(points, triangles, traction=1.0)
    np.testing.assert_allclose(data.y[:, 0].numpy(), sol.von_mises, rtol=1e-5, atol=1e-6)
    assert data.weight.sum().item() == pytest.approx(
        lumped_mass_weights(points, [("triangle", triangles)]).sum(), rel=1e-6
    )
    assert data.weight.sum() < 1.0  # the cavity is cut out
    batch = next(iter(make_loader(ds, batch_size=2)))
    assert batch.num_graphs == 2


def test_by_default_models_see_the_cavity_only_through_the_mesh(tmp_path):
    data = Elasticity(tmp_path, **TINY)[0]
    # every model (the MLP baseline too) gets [x, pos, params] per node: here the positions alone
    torch.testing.assert_close(node_features(data), data.pos)
    with_shape = Elasticity(tmp_path, shape_params=True, **TINY)
    assert with_shape.processed_dir != Elasticity(tmp_path, **TINY).processed_dir
    shaped = with_shape[0]
    torch.testing.assert_close(shaped.pos, data.pos)
    torch.testing.assert_close(shaped.y, data.y)
    coefficients = random_cavity(np.random.default_rng([0, 0]))
    np.testing.assert_allclose(shaped.params[0].numpy(), coefficients, rtol=1e-6)
    assert node_features(shaped).shape == (data.num_nodes, 2 + 9)
    batch = next(iter(make_loader(with_shape, batch_size=2)))
    assert batch.params.shape == (2, 9)


def test_elasticity_is_seeded_split_by_index_and_cached(tmp_path, monkeypatch):
    train = Elasticity(tmp_path, **TINY)
    test = Elasticity(tmp_path, split="test", **TINY)
    bigger = Elasticity(tmp_path, **{**TINY, "num_train": 3})  # sample i depends only on (seed, i)
    torch.testing.assert_close(bigger[1].y, train[1].y)
    torch.testing.assert_close(bigger[2].pos, test[0].pos)
    torch.testing.assert_close(bigger[2].y, test[0].y)
    other = Elasticity(tmp_path, seed=1, **TINY)
    assert other[0].pos.shape != train[0].pos.shape or not torch.equal(other[0].pos, train[0].pos)

    def no_generation(*args):
        raise AssertionError("a cached dataset must not be generated again")

    monkeypatch.setattr(Elasticity, "generate", no_generation)
    again = Elasticity(tmp_path, **TINY)
    torch.testing.assert_close(again[1].y, train[1].y)


def test_elasticity_neo_hookean_option_changes_the_stress(tmp_path):
    kw = {**TINY, "num_train": 1}
    linear = Elasticity(tmp_path, **kw)[0]
    hyper = Elasticity(tmp_path, material="neo-hookean", **kw)[0]
    torch.testing.assert_close(hyper.pos, linear.pos)
    assert not torch.allclose(hyper.y, linear.y, rtol=1e-2)


def test_elasticity_rejects_unknown_material(tmp_path):
    with pytest.raises(ConfigError, match="neo-hookean"):
        Elasticity(tmp_path, material="plastic", **TINY)


def test_demo_new_points_are_uniform_in_the_cell_outside_the_cavity(tmp_path):
    from meshop.train.demo import points_in_mesh

    data = Elasticity(tmp_path, **TINY)[0]
    points = points_in_mesh(data, 4000, seed=1)
    coefficients = random_cavity(np.random.default_rng([0, 0]))
    d = points - 0.5
    radius = cavity_radius(np.arctan2(d[:, 1], d[:, 0]), coefficients)
    assert points.min() >= 0 and points.max() <= 1
    # outside the cavity (up to the 64-gon's chords: inside the circle through its vertices)
    assert np.all(np.hypot(d[:, 0], d[:, 1]) > radius - 2e-3)
    # uniform: a quarter of the cell's area holds a quarter of the points
    left = (points[:, 0] < 0.5) & (points[:, 1] < 0.5)
    quarter = data.weight[(data.pos[:, 0] < 0.5) & (data.pos[:, 1] < 0.5)].sum() / data.weight.sum()
    assert left.mean() == pytest.approx(float(quarter), abs=0.03)


REFINED = dict(num_train=2, num_test=2, max_area=4e-3, progress=False)


@pytest.fixture(scope="module")
def levels(tmp_path_factory):
    """The two test samples at refinement levels 0, 1 and 2 (with their cavity coefficients)."""
    root = tmp_path_factory.mktemp("refined")
    return [
        Elasticity(root, split="test", refinement=r, shape_params=True, **REFINED) for r in (0, 1, 2)
    ]


def boundary_edges(data) -> np.ndarray:
    """[E, 2] the mesh's edges that belong to one triangle only."""
    face = data.face.T.numpy()
    edges = np.sort(np.concatenate([face[:, [0, 1]], face[:, [1, 2]], face[:, [2, 0]]]), axis=1)
    unique, counts = np.unique(edges, axis=0, return_counts=True)
    return unique[counts == 1]


def distance_to_segments(points: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """[P] the distance of each point to the nearest of the segments a[i] -- b[i]."""
    ab = b - a
    t = np.einsum("psd,sd->ps", points[:, None] - a[None], ab) / np.sum(ab**2, axis=1)
    closest = a[None] + np.clip(t, 0.0, 1.0)[..., None] * ab[None]
    return np.linalg.norm(points[:, None] - closest, axis=-1).min(axis=1)


def interpolate(data, field: torch.Tensor, points: np.ndarray) -> np.ndarray:
    """``field`` [N, 1] of ``data`` linearly interpolated at ``points`` (NaN outside its mesh)."""
    mesh = Triangulation(*data.pos.double().numpy().T, data.face.T.numpy())
    values = LinearTriInterpolator(mesh, field[:, 0].double().numpy())(*points.T)
    return np.ma.filled(values, np.nan)


def test_refined_samples_have_the_fields_and_parameters_of_the_coarse_ones(levels):
    assert all(level.target_names == ("von_mises",) for level in levels)
    means = []
    for i in range(2):
        samples = [level[i] for level in levels]
        coarse = samples[0]
        coefficients = random_cavity(np.random.default_rng([0, 2 + i]))  # sample num_train + i
        means.append(((coarse.weight * coarse.y[:, 0]).sum() / coarse.weight.sum()).item())
        for data in samples:
            assert sorted(data.keys()) == sorted(coarse.keys())
            for key in ("pos", "y", "displacement", "weight", "face"):
                assert data[key].dtype == coarse[key].dtype
                assert data[key].shape[1:] == coarse[key].shape[1:] or key == "face"
            assert data.face.shape[0] == 3 and data.face.max() == data.num_nodes - 1
            assert data.sample_id.item() == coarse.sample_id.item() == 2 + i
            # the same cavity and load: the coefficients, and the target's scale (stress / t)
            np.testing.assert_allclose(data.params[0].numpy(), coefficients, rtol=1e-6)
            assert data.y.min() >= 0 and data.y.max() < 20
            mean = (data.weight * data.y[:, 0]).sum() / data.weight.sum()  # over the cell
            assert mean.item() == pytest.approx(means[i], rel=0.05)


def test_refined_levels_mesh_the_same_cavity_with_4x_then_16x_the_nodes(levels):
    for i in range(2):
        samples = [level[i] for level in levels]
        nodes = [data.num_nodes for data in samples]
        # 2x finer per level: about 4x the nodes (less on these tiny meshes, where the nodes on
        # the boundary, which only double, are a larger share)
        assert 2.5 < nodes[1] / nodes[0] < 5 and 2.5 < nodes[2] / nodes[1] < 5
        assert 8 < nodes[2] / nodes[0] < 20
        # the coarse mesh's boundary nodes (the square's sides and the cavity's 64-gon) lie on
        # the boundary of every finer mesh, and the cavity's vertices are nodes of every level
        coarse = samples[0].pos.double().numpy()
        on_boundary = coarse[np.unique(boundary_edges(samples[0]))]
        r0, *modes = samples[0].params[0].double().numpy()
        ring = star_polygon(np.array([0.5, 0.5]), np.array([r0, *modes]), 64)
        for data in samples[1:]:
            fine = data.pos.double().numpy()
            edges = boundary_edges(data)
            distance = distance_to_segments(on_boundary, fine[edges[:, 0]], fine[edges[:, 1]])
            assert distance.max() < 1e-6
            nearest = np.linalg.norm(ring[:, None] - fine[None], axis=-1).min(axis=1)
            assert nearest.max() < 1e-6
        # the areas agree within the polygon's discretisation of the curve, and tend to the area
        # of the cell minus the smooth cavity (the polygon's chords cut ~4x less per level)
        exact = 1.0 - np.pi * r0**2 - np.pi / 2 * np.sum(np.square(modes))
        gaps = [abs(data.weight.double().sum().item() - exact) for data in samples]
        assert gaps[0] < 1e-3 * exact and gaps[1] < gaps[0] / 3 and gaps[2] < gaps[1] / 3


def test_refined_solutions_converge(levels):
    """The same problem at every level: the von Mises stress of the finer levels, interpolated at
    the coarse nodes, is close to the coarse one, and the levels' differences shrink (about 4x
    per level, second order). Compared away from the clamped bottom corners, whose stress is
    singular, with the quadrature weights; and at the cavity's 64 vertices, nodes of every level,
    where the stress peaks."""
    for i in range(2):
        coarse, finer, finest = (level[i] for level in levels)
        points = coarse.pos.double().numpy()
        weight = coarse.weight.double().numpy()
        y0 = coarse.y[:, 0].double().numpy()
        y1, y2 = (interpolate(data, data.y, points) for data in (finer, finest))
        corners = np.minimum(np.hypot(*points.T), np.hypot(points[:, 0] - 1, points[:, 1]))
        kept = (corners > 0.15) & np.isfinite(y1) & np.isfinite(y2)
        assert kept.mean() > 0.9  # a few nodes on the coarse chords lie inside the finer cavity

        def norm(values):
            return np.sqrt(np.sum(weight[kept] * values[kept] ** 2))

        e01, e12 = norm(y1 - y0) / norm(y0), norm(y2 - y1) / norm(y0)
        assert e01 < 0.06 and e12 < e01 / 2

        r0, *modes = coarse.params[0].double().numpy()
        ring = star_polygon(np.array([0.5, 0.5]), np.array([r0, *modes]), 64)
        at_ring = []
        for data in (coarse, finer, finest):
            pos = data.pos.double().numpy()
            nodes = np.linalg.norm(ring[:, None] - pos[None], axis=-1).argmin(axis=1)
            at_ring.append(data.y[nodes, 0].double().numpy())
        v0, v1, v2 = at_ring
        d01 = np.linalg.norm(v1 - v0) / np.linalg.norm(v0)
        d12 = np.linalg.norm(v2 - v1) / np.linalg.norm(v0)
        assert d01 < 0.08 and d12 < d01 / 2


def test_refinement_levels_are_cached_apart(levels, monkeypatch):
    coarse, finer, _ = levels
    assert "refinement" not in coarse.config  # level 0 keeps the cache of earlier versions
    assert finer.config["refinement"] == 1 and finer.processed_dir != coarse.processed_dir

    def no_generation(*args):
        raise AssertionError("a cached level must not be generated again")

    monkeypatch.setattr(Elasticity, "generate", no_generation)
    root = Path(finer.root).parent
    again = Elasticity(root, split="test", refinement=1, shape_params=True, **REFINED)
    torch.testing.assert_close(again[1].y, finer[1].y)
    # the registry passes the option through, as ``--dataset-arg refinement=1`` does
    cls, options = resolve_dataset("elasticity", str(root), {"refinement": 1})
    assert cls is Elasticity and options["refinement"] == 1
    assert refinement_level(2.0) == 2 and refinement_level(np.int64(1)) == 1


@pytest.mark.parametrize("bad", [-1, 1.5, "2", True, None])
def test_bad_refinement_values_are_refused(tmp_path, bad):
    with pytest.raises(ConfigError, match="refinement must be an integer >= 0"):
        Elasticity(tmp_path, refinement=bad, **TINY)
    assert not (tmp_path / "elasticity").exists()  # refused before anything is written

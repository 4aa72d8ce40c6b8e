"""DarcyMesh: the finite element solver against manufactured solutions, the random domains and
fields, and the dataset's samples, refinement levels, seeding and cache."""

import numpy as np
import pytest
import torch
from matplotlib.path import Path as PolygonPath
from matplotlib.tri import LinearTriInterpolator, Triangulation
from skfem import Functional

from meshop.data import lumped_mass_weights, make_loader, node_features
from meshop.datasets import DarcyMesh
from meshop.datasets.darcy_mesh import FINEST_P2, random_domain, solve_diffusion
from meshop.datasets.fem import triangulate
from meshop.datasets.grf import CosineSeriesField, gaussian_random_field
from meshop.errors import ConfigError

TINY = dict(num_train=2, num_test=2, max_area=4e-3, progress=False)


def circle(radius, count=128, centre=(0.0, 0.0)):
    theta = np.linspace(0, 2 * np.pi, count, endpoint=False)
    return np.asarray(centre) + radius * np.stack([np.cos(theta), np.sin(theta)], axis=1)


def l2_error(solution, exact):
    u = solution.basis.interpolate(solution.dofs)
    error = Functional(lambda w: (w["u"] - exact(w.x)) ** 2).assemble(solution.basis, u=u)
    return float(np.sqrt(error))


# manufactured: u = sin(pi x) cos(pi y) + x y, a = 1 + sin(2x + y) / 2, f = -div(a grad u)
def exact(x):
    return np.sin(np.pi * x[0]) * np.cos(np.pi * x[1]) + x[0] * x[1]


def coefficient(x):
    return 1 + 0.5 * np.sin(2 * x[0] + x[1])


def source(x):
    s, c = np.sin(np.pi * x[0]) * np.cos(np.pi * x[1]), np.cos(np.pi * x[0]) * np.cos(np.pi * x[1])
    ux = np.pi * c + x[1]
    uy = -np.pi * np.sin(np.pi * x[0]) * np.sin(np.pi * x[1]) + x[0]
    ax, ay = np.cos(2 * x[0] + x[1]), 0.5 * np.cos(2 * x[0] + x[1])
    return -(coefficient(x) * (-2 * np.pi**2 * s) + ax * ux + ay * uy)


@pytest.mark.parametrize(("degree", "order"), [(1, 2), (2, 3)])
def test_solver_converges_at_the_finite_element_rate_on_a_disc(degree, order):
    # L2 error O(h^(degree + 1)); each max_area / 4 halves h. Measured: P1 rates 1.85, 1.84;
    # P2 2.86, 2.99 (errors 1.7e-4, 2.4e-5, 3.0e-6)
    errors = []
    for area in (4e-3, 1e-3, 2.5e-4):
        points, triangles, boundary = triangulate([circle(1.0, 256)], max_area=area)
        solution = solve_diffusion(
            points, triangles, boundary == 1, coefficient, source, exact, degree=degree
        )
        errors.append(l2_error(solution, exact))
        assert np.abs(solution.u - exact(points.T)).max() < 50 * errors[-1]
    rates = np.log2(np.array(errors[:-1]) / np.array(errors[1:]))
    assert np.all(rates > order - 0.3), rates
    assert errors[-1] < (3e-3 if degree == 1 else 1e-5)


def test_holes_have_no_flux_and_the_outer_boundary_is_dirichlet():
    # u = cos(2 pi x) cos(2 pi y) has zero normal derivative on the square hole [-1/2, 1/2]^2, so
    # it solves the dataset's problem (Dirichlet outside, no flux through the hole) with its own f
    def u(x):
        return np.cos(2 * np.pi * x[0]) * np.cos(2 * np.pi * x[1])

    def f(x):
        grad_a = np.stack([np.cos(2 * x[0] + x[1]), 0.5 * np.cos(2 * x[0] + x[1])])
        grad_u = (
            -2
            * np.pi
            * np.stack(
                [
                    np.sin(2 * np.pi * x[0]) * np.cos(2 * np.pi * x[1]),
                    np.cos(2 * np.pi * x[0]) * np.sin(2 * np.pi * x[1]),
                ]
            )
        )
        return coefficient(x) * 8 * np.pi**2 * u(x) - np.sum(grad_a * grad_u, axis=0)

    def outer_only(x):  # u on the outer circle, 0 elsewhere: only the Dirichlet nodes read it
        return np.where(np.hypot(x[0], x[1]) > 1.0, u(x), 0.0)

    square = np.array([[-0.5, -0.5], [0.5, -0.5], [0.5, 0.5], [-0.5, 0.5]])
    errors = []
    for area in (2e-3, 5e-4):
        points, triangles, boundary = triangulate(
            [circle(1.2, 256), square], [[0.0, 0.0]], max_area=area
        )
        assert set(np.unique(boundary)) == {0, 1, 2}
        solution = solve_diffusion(points, triangles, boundary == 1, coefficient, f, outer_only)
        errors.append(l2_error(solution, u))
        # Dirichlet only outside: the hole's nodes are free, and there the solution matches u
        on_hole = boundary == 2
        assert np.abs(solution.u[on_hole] - u(points[on_hole].T)).max() < 1e-3
    assert errors[1] < errors[0] / 6  # third order: / 8
    wrong = solve_diffusion(points, triangles, boundary >= 1, coefficient, f, outer_only)
    assert l2_error(wrong, u) > 100 * errors[1]  # a Dirichlet hole would not solve it


def test_cosine_series_field_is_the_grid_field_as_a_function():
    field = CosineSeriesField(np.random.default_rng(1), dim=2, modes=8, sigma=3.0)
    x = np.linspace(0, 1, 17)
    grid = np.stack(np.meshgrid(x, x, indexing="ij"))
    expected = gaussian_random_field(np.random.default_rng(1), (17, 17), modes=7)
    np.testing.assert_allclose(field(grid), expected, atol=1e-12)
    # sigma=None: unit variance averaged over the box (the cell midpoints of a 16 x 16 grid
    # average the 16 cosines' squares exactly)
    mid = (np.arange(16) + 0.5) / 16
    cells = np.stack(np.meshgrid(mid, mid, indexing="ij"))
    samples = np.stack([CosineSeriesField(np.random.default_rng(i))(cells) for i in range(400)])
    assert samples.var(axis=0).mean() == pytest.approx(1.0, rel=0.1)
    with pytest.raises(ConfigError, match="shape"):
        field(np.zeros((3, 4)))


def test_random_domains_mix_smooth_and_polygonal_boundaries_and_keep_holes_inside():
    kinds, holes = set(), []
    for i in range(60):
        loops, centres = random_domain(np.random.default_rng([7, i]))
        outer = loops[0]
        kinds.add(len(outer) == 64)
        holes.append(len(loops) - 1)
        assert len(centres) == len(loops) - 1
        assert outer.min() > 0 and outer.max() < 1
        inside = PolygonPath(outer)
        for loop, centre in zip(loops[1:], centres):
            assert inside.contains_points(loop).all() and PolygonPath(loop).contains_point(centre)
    assert kinds == {True, False}  # smooth (64 points) and polygonal (5 to 9 corners)
    assert 0 in holes and 1 in holes and 2 in holes and max(holes) == 2


def test_samples_have_the_documented_fields_and_no_params(tmp_path):
    ds = DarcyMesh(tmp_path, **TINY)
    assert len(ds) == 2 and ds.input_names == ("a",) and ds.target_names == ("u",)
    data = ds[0]
    n = data.num_nodes
    assert data.pos.shape == (n, 2) and data.x.shape == (n, 1) and data.y.shape == (n, 1)
    assert data.face.shape[0] == 3 and "params" not in data
    # every model gets [a, x, y] per node: the domain only through the mesh
    features = node_features(data)
    assert features.shape == (n, 3) and torch.equal(features[:, 1:], data.pos)
    # the sample is what the documented steps give: domain, field, mesh, solve
    rng = np.random.default_rng([0, 0])
    loops, centres = random_domain(rng)
    field = CosineSeriesField(rng)
    points, triangles, boundary = triangulate(loops, centres, max_area=4e-3)
    np.testing.assert_allclose(data.pos.numpy(), points, atol=1e-6)
    np.testing.assert_allclose(data.x[:, 0].numpy(), np.exp(field(points.T)), rtol=1e-5)
    u = data.y[:, 0].numpy()
    assert np.abs(u[boundary == 1]).max() < 1e-7 and u[boundary == 0].min() > 0  # f = 1 > 0
    area = lumped_mass_weights(points, [("triangle", triangles)]).sum()
    assert data.weight.sum().item() == pytest.approx(area, rel=1e-6)
    batch = next(iter(make_loader(ds, batch_size=2)))
    assert batch.num_graphs == 2 and batch.x.shape == (batch.num_nodes, 1)


def test_refinement_levels_share_the_domain_and_the_field(tmp_path):
    levels = [DarcyMesh(tmp_path, split="test", refinement=r, **TINY) for r in (0, 1, 2)]
    for i in range(2):
        coarse, finer, finest = (level[i] for level in levels)
        assert finer.num_nodes > 2 * coarse.num_nodes and finest.num_nodes > 3 * finer.num_nodes
        rng = np.random.default_rng([0, 2 + i])  # test sample i is sample num_train + i
        loops, _ = random_domain(rng)
        field = CosineSeriesField(rng)
        vertices = np.concatenate(loops)
        for data in (coarse, finer, finest):
            # the same polygon: its vertices are nodes, the areas agree, a is the same field
            assert data.weight.sum().item() == pytest.approx(coarse.weight.sum().item(), rel=1e-6)
            exact = "donot_use_mm_for_euclid_dist"
            distance = torch.cdist(torch.as_tensor(vertices), data.pos.double(), compute_mode=exact)
            assert distance.min(dim=1).values.max() < 1e-6
            np.testing.assert_allclose(
                data.x[:, 0].numpy(), np.exp(field(data.pos.double().numpy().T)), rtol=1e-5
            )
        # the same problem: the finest solution interpolated at the coarse nodes agrees
        mesh = Triangulation(*finest.pos.double().numpy().T, finest.face.T.numpy())
        at_coarse = LinearTriInterpolator(mesh, finest.y[:, 0].double().numpy())(
            *coarse.pos.double().numpy().T
        )
        at_coarse = np.where(np.ma.getmaskarray(at_coarse), 0.0, at_coarse)  # boundary: u = 0
        u = coarse.y[:, 0].double().numpy()
        assert np.linalg.norm(at_coarse - u) / np.linalg.norm(u) < 0.01


def test_samples_are_seeded_by_index_and_cached(tmp_path, monkeypatch):
    train = DarcyMesh(tmp_path, **TINY)
    test = DarcyMesh(tmp_path, split="test", **TINY)
    bigger = DarcyMesh(tmp_path, **{**TINY, "num_train": 3})
    torch.testing.assert_close(bigger[1].y, train[1].y)
    torch.testing.assert_close(bigger[2].pos, test[0].pos)
    other = DarcyMesh(tmp_path, seed=1, **TINY)
    assert other[0].num_nodes != train[0].num_nodes or not torch.equal(other[0].x, train[0].x)
    threshold = DarcyMesh(tmp_path, coefficient="threshold", **TINY)[0]
    torch.testing.assert_close(threshold.pos, train[0].pos)
    assert set(threshold.x.unique().tolist()) == {3.0, 12.0}

    def no_generation(*args):
        raise AssertionError("a cached dataset must not be generated again")

    monkeypatch.setattr(DarcyMesh, "generate", no_generation)
    again = DarcyMesh(tmp_path, **TINY)
    torch.testing.assert_close(again[1].y, train[1].y)


def test_bad_options_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="coefficient must be one of"):
        DarcyMesh(tmp_path, coefficient="uniform", **TINY)
    with pytest.raises(ConfigError, match="refinement must be an integer >= 0"):
        DarcyMesh(tmp_path, refinement=-1, **TINY)
    with pytest.raises(ConfigError, match="degree must be 1"):
        DarcyMesh(tmp_path, degree=3, **TINY)


def test_levels_above_the_finest_p2_one_are_p1_solutions_with_4x_the_nodes_per_level(tmp_path):
    options = {**TINY, "num_test": 1}
    coarse, fine = (DarcyMesh(tmp_path, split="test", refinement=r, **options) for r in (2, 4))
    assert (coarse.config["degree"], fine.config["degree"]) == (2, 1) and FINEST_P2 == 3
    coarse, fine = coarse[0], fine[0]
    assert 12 < fine.num_nodes / coarse.num_nodes < 20  # 2x finer per level: 4x the nodes
    # the level-4 sample is the P1 solution on its mesh (P2's differs by more than float32)
    rng = np.random.default_rng([0, 2])  # test sample 0 is sample num_train = 2
    loops, centres = random_domain(rng)
    field = CosineSeriesField(rng)
    points, triangles, boundary = triangulate(loops, centres, max_area=4e-3 / 4**4)
    solutions = [
        solve_diffusion(points, triangles, boundary == 1, lambda x: np.exp(field(x)), degree=d).u
        for d in (1, 2)
    ]
    u = fine.y[:, 0].double().numpy()
    assert np.abs(u - solutions[0]).max() < 1e-6 * np.abs(u).max()
    assert np.abs(u - solutions[1]).max() > 1e-4 * np.abs(u).max()
    # the same problem as the P2 level below: the fine solution at the coarse nodes agrees
    mesh = Triangulation(*fine.pos.double().numpy().T, fine.face.T.numpy())
    at_coarse = LinearTriInterpolator(mesh, u)(*coarse.pos.double().numpy().T)
    at_coarse = np.where(np.ma.getmaskarray(at_coarse), 0.0, at_coarse)  # boundary: u = 0
    coarse_u = coarse.y[:, 0].double().numpy()
    assert np.linalg.norm(at_coarse - coarse_u) / np.linalg.norm(coarse_u) < 0.01

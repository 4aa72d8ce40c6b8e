"""Quadrature weights of point clouds without cells (kNN estimate) and of 3D surfaces (areas)."""

import meshio
import numpy as np
import pytest
import torch

from meshop.data import from_meshio, mesh_integrals
from meshop.data.weights import intrinsic_dimension, knn_weights


def graded_cloud(rng, n: int = 3000) -> np.ndarray:
    """Points in the unit square, four times denser in the left half than in the right."""
    left = rng.random((4 * n // 5, 2)) * [0.5, 1.0]
    right = rng.random((n // 5, 2)) * [0.5, 1.0] + [0.5, 0.0]
    return np.concatenate([left, right])


def test_knn_weights_make_integrals_independent_of_the_sampling_density(rng):
    points = graded_cloud(rng)
    data = from_meshio(meshio.Mesh(points, []))
    w = data.weight.double().numpy()
    x = points[:, 0]
    assert np.sum(w * x) / np.sum(w) == pytest.approx(0.5, abs=0.02)  # mean of x over the square
    assert np.sum(w) == pytest.approx(1.0, rel=0.1)  # about the square's area
    uniform = from_meshio(meshio.Mesh(points, []), point_weights="uniform").weight.double()
    assert torch.allclose(uniform, torch.full_like(uniform, 1 / len(points)))
    assert float((uniform * torch.as_tensor(x)).sum()) == pytest.approx(0.35, abs=0.02)


def test_points_on_a_surface_get_areas(rng):
    v = rng.normal(size=(4000, 3))
    v[:, 2] = np.where(v[:, 2] > 0, 3 * v[:, 2], v[:, 2])  # more points near the north pole
    points = v / np.linalg.norm(v, axis=1, keepdims=True)
    assert intrinsic_dimension(points) == 2
    w = knn_weights(points)
    assert w.sum() == pytest.approx(4 * np.pi, rel=0.1)
    assert np.sum(w * points[:, 2]) / w.sum() == pytest.approx(0.0, abs=0.05)
    assert np.mean(points[:, 2]) > 0.1  # what uniform weights give


def test_3d_surface_mesh_weights_are_triangle_areas():
    """A sphere triangulated through points on it: the weights sum to the polyhedron's area."""
    from scipy.spatial import ConvexHull

    i = np.arange(500) + 0.5
    polar, azimuth = np.arccos(1 - 2 * i / 500), np.pi * (1 + 5**0.5) * i
    points = np.c_[np.cos(azimuth) * np.sin(polar), np.sin(azimuth) * np.sin(polar), np.cos(polar)]
    hull = ConvexHull(points)
    data = from_meshio(meshio.Mesh(points, [("triangle", hull.simplices)]))
    assert data.pos.shape == (500, 3)
    assert float(data.weight.double().sum()) == pytest.approx(hull.area, rel=1e-6)
    assert hull.area == pytest.approx(4 * np.pi, rel=0.01)


def test_unknown_point_weights_are_refused():
    from meshop.errors import MeshError

    with pytest.raises(MeshError, match="point_weights must be one of"):
        from_meshio(meshio.Mesh(np.random.default_rng(0).random((5, 2)), []), point_weights="x")


def test_a_point_cloud_on_an_ellipsoid_integrates_to_its_area(rng):
    """3,586 points on an ellipsoid (semi-axes 2, 1, 0.7), denser where it is flat, without cells:
    the area from the weights, and from mesh_integrals, is the ellipsoid's (17.96, Thomsen's
    formula, within 1 %); uniform weights would sum to 1."""
    points = rng.normal(size=(3586, 3))
    points = points / np.linalg.norm(points, axis=1, keepdims=True) * [2.0, 1.0, 0.7]
    cloud = meshio.Mesh(points, [("vertex", np.arange(3586)[:, None])])
    p, axes = 1.6075, np.array([2.0, 1.0, 0.7]) ** 1.6075
    area = 4 * np.pi * ((axes[0] * axes[1] + axes[0] * axes[2] + axes[1] * axes[2]) / 3) ** (1 / p)
    assert float(from_meshio(cloud).weight.double().sum()) == pytest.approx(area, rel=0.02)
    integral = mesh_integrals(cloud, {"one": np.ones(3586)})["domain"]["one"]
    assert integral == pytest.approx(area, rel=0.02)

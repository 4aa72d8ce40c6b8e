"""The weights of a point cloud on regular samplings, where the k-th neighbour's distance and the
cloud's dimension are known: node ``i`` weighs ``V_dim r_k(i)^dim / k`` (``V_dim`` the volume of
the unit ball: 2, pi, 4 pi / 3), with ``k = 8`` neighbours by default, the dimension estimated from
the same ``k`` neighbours unless given."""

import numpy as np
import pytest

from meshop.data.weights import intrinsic_dimension, knn_weights

H = 0.1  # the samplings' spacing


def grid(dim: int, nodes: int) -> np.ndarray:
    """A regular grid of ``nodes ** dim`` points with spacing H, the last axis fastest."""
    axes = np.meshgrid(*[np.arange(nodes) * H] * dim, indexing="ij")
    return np.stack(axes, -1).reshape(-1, dim)


def test_a_uniform_line_weighs_its_spacing_inside_and_twice_it_at_the_ends():
    """1D: r_8 = 4h inside (two neighbours at each of h, 2h, 3h, 4h), 8h at an end; V_1 = 2."""
    w = knn_weights(grid(1, 20))
    assert w[4:-4] == pytest.approx(np.full(12, H))
    assert [w[0], w[-1]] == pytest.approx([2 * H, 2 * H])


def test_interior_nodes_of_a_square_grid_weigh_a_disc_reaching_the_diagonal_neighbours():
    """2D: 4 neighbours at h and 4 at sqrt(2) h, so r_8 = sqrt(2) h and w = pi 2 h^2 / 8."""
    w = knn_weights(grid(2, 9)).reshape(9, 9)
    assert w[2:-2, 2:-2] == pytest.approx(np.full((5, 5), np.pi * H**2 / 4))


def test_interior_nodes_of_a_cubic_grid_weigh_a_ball_reaching_the_edge_neighbours():
    """3D: 6 neighbours at h, 12 at sqrt(2) h: r_8 = sqrt(2) h, w = (4 pi / 3) 2 sqrt(2) h^3 / 8."""
    w = knn_weights(grid(3, 7)).reshape(7, 7, 7)
    assert w[3, 3, 3] == pytest.approx(np.sqrt(2) * np.pi * H**3 / 3)


def test_a_given_dimension_is_used_instead_of_the_estimate():
    """A line in the plane, weighed as a 2D domain: discs of radius r_8 = 4h, w = pi 16 h^2 / 8."""
    line = np.c_[grid(1, 20), np.zeros(20)]
    assert intrinsic_dimension(line) == 1
    assert knn_weights(line)[4:-4] == pytest.approx(np.full(12, H))
    assert knn_weights(line, dim=2)[4:-4] == pytest.approx(np.full(12, 2 * np.pi * H**2))


def test_a_cloud_of_fewer_than_k_plus_one_points_reaches_every_other_point():
    """Five points 1 apart on a line: k becomes 4; an end's 4th neighbour is 4 away (w = 2 * 4 /
    4), the next node's 3 away, the middle's 2 away."""
    assert knn_weights(np.arange(5.0)[:, None]).tolist() == pytest.approx([2, 1.5, 1, 1.5, 2])
    assert knn_weights(np.array([[0.0], [3.0]])).tolist() == pytest.approx([6.0, 6.0])


def test_a_cloud_of_one_point_weighs_one_and_an_empty_cloud_nothing():
    assert knn_weights(np.zeros((1, 2))).tolist() == [1.0]
    empty = knn_weights(np.zeros((0, 2)))
    assert empty.shape == (0,)


def test_the_dimension_is_estimated_from_the_same_k_neighbours():
    """Rows 5.5 apart of points 1 apart: 8 neighbours lie on a node's own row (a line), 20 reach
    the next rows (a plane); knn_weights(k=20) weighs the plane."""
    x, y = np.meshgrid(np.arange(40.0), np.arange(5) * 5.5)
    rows = np.c_[x.ravel(), y.ravel()]
    assert intrinsic_dimension(rows) == 1
    assert intrinsic_dimension(rows, k=20) == 2
    np.testing.assert_array_equal(knn_weights(rows, k=20), knn_weights(rows, k=20, dim=2))


def test_intrinsic_dimension_looks_at_eight_neighbours_by_default():
    """Eight points on a line and one 10 above its middle: with 8 neighbours (the point itself
    and 7 others) every point of the line sees only the line; with 9 every point sees all."""
    cloud = np.r_[np.c_[np.arange(8.0), np.zeros(8)], [[3.5, 10.0]]]
    assert intrinsic_dimension(cloud) == 1
    assert intrinsic_dimension(cloud, k=9) == 2


def test_intrinsic_dimension_is_the_spaces_below_three_neighbours():
    """With fewer than 3 neighbours nothing can be told: the space's dimension; with 3, points on
    a line in 3D are a line."""
    line = np.c_[np.arange(10.0), 2 * np.arange(10.0), np.zeros(10)]
    assert intrinsic_dimension(line, k=2) == 3
    assert intrinsic_dimension(line, k=3) == 1
    assert intrinsic_dimension(np.c_[np.arange(10.0), np.zeros(10)], k=3) == 1
    assert intrinsic_dimension(np.arange(10.0)[:, None]) == 1


def test_a_direction_counts_only_where_the_points_spread_along_it():
    """With ratio 0 every direction of positive spread counts: points on the x axis spread along
    x only, so their dimension is 1, not 2."""
    assert intrinsic_dimension(np.c_[np.arange(20.0), np.zeros(20)], ratio=0.0) == 1

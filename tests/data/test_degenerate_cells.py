"""Which cells :func:`lumped_mass_weights` refuses, and what it says: a cell is degenerate when its
measure is at most ``rtol`` times the mesh's extent (the largest spread of one coordinate) to the
power of the cells' dimension, so the test is the same for a mesh in micrometres, in metres far
from the origin and in kilometres. Cell types meshop does not know are left out of the weights.
"""

import numpy as np
import pytest

from meshop.data import cell_measures, lumped_mass_weights
from meshop.data.weights import cell_dimension, cell_family, top_dimensional_cells
from meshop.errors import MeshError

#: two triangles of the unit square, and a sliver on its bottom edge (node 4 just above node 0)
SQUARE = np.array([[0, 1, 2], [0, 2, 3]])
SLIVER = np.array([[0, 1, 4]])


def square_with_sliver(size: float, height: float) -> np.ndarray:
    """The corners of the square [0, size]^2 and a node at (0, height): the sliver is a right
    triangle, whose area the Gram determinant gives without cancellation."""
    return np.array([[0, 0], [size, 0], [size, size], [0, size], [0, height]])


def grid_triangles(nx: int, ny: int) -> np.ndarray:
    """Two triangles per cell of an nx x ny grid of nodes numbered row by row."""
    node = np.arange(nx * ny).reshape(ny, nx)
    a, b, c, d = node[:-1, :-1], node[:-1, 1:], node[1:, 1:], node[1:, :-1]
    return np.concatenate([np.stack([a, b, c], -1), np.stack([a, c, d], -1)]).reshape(-1, 3)


def test_a_mesh_a_micrometre_across_is_not_degenerate():
    """Triangles of 1e-14 m^2 in a mesh 1 micrometre across: far above 1e-12 of its extent^2."""
    x, y = np.meshgrid(np.linspace(0, 1e-6, 11), np.linspace(0, 1e-6, 11))
    points = np.c_[x.ravel(), y.ravel()]
    w = lumped_mass_weights(points, [("triangle", grid_triangles(11, 11))])
    assert w.sum() == pytest.approx(1e-12, rel=1e-12)


def test_a_site_far_from_the_origin_is_measured_by_its_own_extent():
    """A site 100 m across at (4.5e5, 5.2e6) m: the extent is 100 m (per coordinate), not the
    distance between its easting and its northing, so its 0.5 m^2 triangles are accepted."""
    x, y = np.meshgrid(4.5e5 + np.linspace(0, 100, 101), 5.2e6 + np.linspace(0, 100, 101))
    points = np.c_[x.ravel(), y.ravel()]
    w = lumped_mass_weights(points, [("triangle", grid_triangles(101, 101))])
    assert w.sum() == pytest.approx(1e4, rel=1e-9)


@pytest.mark.parametrize("size", [1e-6, 1.0, 1e3])
def test_a_sliver_of_relative_area_1e_13_is_degenerate_at_every_scale(size):
    points = square_with_sliver(size, 2e-13 * size)  # the sliver's area: 1e-13 size^2
    lumped_mass_weights(points, [("triangle", SQUARE)])  # the square alone is fine
    message = (
        "<arrays>: 1 degenerate triangle cell(s) with zero measure (first: cell 2 with nodes "
        "[0, 1, 4]); remove or repair them in the mesh generator"
    )
    with pytest.raises(MeshError) as error:
        lumped_mass_weights(points, [("triangle", np.concatenate([SQUARE, SLIVER]))])
    assert str(error.value) == message
    with pytest.raises(MeshError, match=r"^plate\.msh: 1 degenerate triangle"):
        lumped_mass_weights(points, [("triangle", SLIVER)], source="plate.msh")


def test_with_rtol_zero_only_cells_of_zero_measure_are_degenerate():
    thin = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1e-13]])  # area 5e-14
    with pytest.raises(MeshError, match="1 degenerate triangle"):
        lumped_mass_weights(thin, [("triangle", np.array([[0, 1, 2]]))])
    w = lumped_mass_weights(thin, [("triangle", np.array([[0, 1, 2]]))], rtol=0.0)
    assert w.sum() == pytest.approx(5e-14, rel=1e-12)
    flat = np.array([[0.0, 0.0], [1.0, 0.0], [2.0, 0.0]])
    with pytest.raises(MeshError, match="1 degenerate triangle"):
        lumped_mass_weights(flat, [("triangle", np.array([[0, 1, 2]]))], rtol=0.0)


def test_collinear_triangles_in_3d_have_zero_area_not_nan():
    """Their areas come out at rounding level (a Gram determinant slightly negative, down to
    -5e-17, would give NaN under the square root): numbers near 0, and every triangle refused as
    degenerate."""
    ends = [[0.1, 0.1, 0.4], [0.1, 0.3, 0.4], [0.1, 0.6, 0.2], [0.2, 0.1, 0.9]]
    middles = [[0.07, 0.07, 0.28], [0.07, 0.21, 0.28], [0.07, 0.42, 0.14], [0.14, 0.07, 0.63]]
    points = np.array([[0.0, 0.0, 0.0], *ends, *middles])
    triangles = np.array([[0, 1 + i, 5 + i] for i in range(4)])
    areas = cell_measures(points, "triangle", triangles)
    assert np.isfinite(areas).all() and np.abs(areas).max() < 1e-15
    with pytest.raises(MeshError, match="4 degenerate triangle"):
        lumped_mass_weights(points, [("triangle", triangles)])


def test_cells_of_a_higher_dimension_than_the_points_are_refused_with_the_whole_message():
    points = np.array([[0, 0], [1, 0], [0, 1], [1, 1]], float)
    message = (
        "<arrays>: mixed dimensions: 3D cells on 2D points; check that the file's points have "
        "all their coordinates"
    )
    with pytest.raises(MeshError) as error:
        lumped_mass_weights(points, [("tetra", np.array([[0, 1, 2, 3]]))])
    assert str(error.value) == message


def test_cell_types_meshop_does_not_know_have_no_family_and_no_weight():
    assert cell_family("triangle6") == "triangle"
    assert cell_dimension("hexahedron27") == 3
    assert cell_family("polygon") is None
    assert cell_dimension("polygon") is None
    points = np.array([[0, 0], [1, 0], [1, 1], [0, 1]], float)
    cells = [("polygon", np.array([[0, 1, 2, 3]])), ("triangle", np.array([[0, 1, 2]]))]
    assert top_dimensional_cells(cells) == (2, [cells[1]])
    assert lumped_mass_weights(points, cells).tolist() == pytest.approx([1 / 6, 1 / 6, 1 / 6, 0])
    with pytest.raises(MeshError) as error:
        cell_measures(points, "polygon", np.array([[0, 1, 2, 3]]))
    assert str(error.value) == "cell type 'polygon' is not supported for quadrature weights"


def test_vertex_cells_measure_zero_each():
    points = np.zeros((3, 2))
    assert cell_measures(points, "vertex", np.arange(3)[:, None]).tolist() == [0.0, 0.0, 0.0]


def test_float32_coordinates_are_measured_in_float64():
    """Coordinates read from a float32 file: the weights are those of the same numbers in
    float64, not areas rounded to float32."""
    rng = np.random.default_rng(0)
    x, y = np.meshgrid(np.linspace(0, 1, 21), np.linspace(0, 1, 21))
    points = (np.c_[x.ravel(), y.ravel()] + rng.uniform(-0.01, 0.01, (441, 2))).astype(np.float32)
    cells = [("triangle", grid_triangles(21, 21))]
    exact = lumped_mass_weights(points.astype(np.float64), cells)
    np.testing.assert_array_equal(lumped_mass_weights(points, cells), exact)

"""Quadrature weights of distorted 3D cells, as real FEM meshes have them: skewed, tapered, twisted
and warped hexahedra, wedges and pyramids. A cell's volume is the volume of the isoparametric
cell, the integral of its Jacobian determinant (what a FEM solver integrates over, and what tiles
the domain: neighbours share the bilinear face between them); its nodes share it equally.

On a box every split into tetrahedra gives the right volume; here the known answers are closed
forms (a parallelepiped's determinant, the prismatoid formula) and, for warped cells, the Jacobian
integrated by Gauss quadrature in the test (exact: the determinant of a trilinear map is of degree
at most 2 in each reference coordinate). Wedges and pyramids are hexahedra with collapsed corners.
"""

from itertools import product

import numpy as np
import pytest

from meshop.data import cell_measures, lumped_mass_weights

#: the unit cube's corners in VTK order
CUBE = np.array(
    [[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [0, 0, 1], [1, 0, 1], [1, 1, 1], [0, 1, 1]],
    dtype=float,
)
#: the corners of a hexahedron that a wedge and a pyramid (VTK order) collapse into
AS_HEXAHEDRON = {
    "hexahedron": [0, 1, 2, 3, 4, 5, 6, 7],
    "wedge": [0, 1, 2, 2, 3, 4, 5, 5],
    "pyramid": [0, 1, 2, 3, 4, 4, 4, 4],
}
CORNERS = {"hexahedron": 8, "wedge": 6, "pyramid": 5}


def isoparametric_volume(points: np.ndarray, cell_type: str) -> float:
    """``int det J`` of the trilinear map of the (collapsed) hexahedron, 2 x 2 x 2 Gauss points."""
    corners = points[AS_HEXAHEDRON[cell_type]]  # [8, 3]
    gauss = (1 + np.array([-1, 1]) / np.sqrt(3)) / 2  # on [0, 1], weights 1/2 each
    volume = 0.0
    for xi in product(gauss, repeat=3):
        xi = np.array(xi)
        shape = np.where(CUBE == 1, xi, 1 - xi)  # [8, 3]: the 1D factors of each corner
        sign = np.where(CUBE == 1, 1.0, -1.0)
        grad = np.stack([sign[:, d] * np.prod(np.delete(shape, d, 1), 1) for d in range(3)], 1)
        volume += np.linalg.det(corners.T @ grad) / 8
    return volume


def one_cell(cell_type: str, points: np.ndarray) -> tuple[float, np.ndarray]:
    """The cell's measure and its nodes' weights."""
    conn = np.arange(len(points))[None]
    measure = float(cell_measures(points, cell_type, conn)[0])
    return measure, lumped_mass_weights(points, [(cell_type, conn)])


def skewed_hexahedron():
    """A parallelepiped on the edges a, b, c: volume |det [a b c]|."""
    edges = np.array([[2.0, 0.3, -0.2], [0.7, 1.5, 0.1], [-0.4, 0.6, 1.2]])
    return CUBE @ edges, abs(np.linalg.det(edges))


def frustum(bottom, top, height, sides=4):
    """The frustum of a regular pyramid (``sides`` 4: a tapered hexahedron, 3: a tapered wedge),
    bases of circumradius ``bottom`` and ``top``: volume h / 3 (A1 + A2 + sqrt(A1 A2))."""
    angles = 2 * np.pi * np.arange(sides) / sides + 0.3
    ring = np.c_[np.cos(angles), np.sin(angles)]
    points = np.vstack(
        [np.c_[bottom * ring, np.zeros(sides)], np.c_[top * ring, np.full(sides, height)]]
    )
    area = 0.5 * sides * np.sin(2 * np.pi / sides)  # of the unit-circumradius polygon
    a1, a2 = area * bottom**2, area * top**2
    return points, height / 3 * (a1 + a2 + np.sqrt(a1 * a2))


def twisted_hexahedron(theta=0.6, height=1.5):
    """A square [-1, 1]^2 below, the same square turned by ``theta`` above: the side faces are not
    plane. Simpson's rule is exact for the trilinear cell (its sections' area is quadratic in z):
    h / 6 (4 + 4 * 4 cos^2(theta / 2) + 4)."""
    square = np.array([[-1, -1], [1, -1], [1, 1], [-1, 1]], dtype=float)
    c, s = np.cos(theta), np.sin(theta)
    top = square @ np.array([[c, s], [-s, c]])
    points = np.vstack([np.c_[square, np.zeros(4)], np.c_[top, np.full(4, height)]])
    return points, height / 6 * (8 + 16 * np.cos(theta / 2) ** 2)


def warped(cell_type: str, seed: int) -> np.ndarray:
    """The cell of a 2 x 1 x 3 box with every corner moved by about a tenth of its size."""
    reference = {
        "hexahedron": CUBE,
        "wedge": CUBE[[0, 1, 3, 4, 5, 7]],
        "pyramid": np.vstack([CUBE[:4], [[0.5, 0.5, 1.0]]]),
    }[cell_type]
    noise = np.random.default_rng(seed).normal(0.0, 0.15, reference.shape)
    return reference * [2.0, 1.0, 3.0] + noise


@pytest.mark.parametrize(
    ("case", "points", "volume"),
    [
        ("skewed", *skewed_hexahedron()),
        ("tapered", *frustum(1.0, 0.4, 2.0)),
        ("widening", *frustum(0.5, 1.5, 0.7)),
        ("twisted", *twisted_hexahedron()),
    ],
)
def test_hexahedra_weigh_their_exact_volume_an_eighth_per_node(case, points, volume):
    measure, weights = one_cell("hexahedron", points)
    assert measure == pytest.approx(volume, rel=1e-12)
    assert isoparametric_volume(points, "hexahedron") == pytest.approx(volume, rel=1e-12)
    np.testing.assert_allclose(weights, np.full(8, volume / 8), rtol=1e-12)


def test_tapered_wedges_weigh_their_exact_volume_a_sixth_per_node():
    for bottom, top, height in [(1.0, 0.5, 2.0), (0.3, 1.2, 0.5)]:
        points, volume = frustum(bottom, top, height, sides=3)
        measure, weights = one_cell("wedge", points)
        assert measure == pytest.approx(volume, rel=1e-12)
        np.testing.assert_allclose(weights, np.full(6, volume / 6), rtol=1e-12)


@pytest.mark.parametrize("cell_type", ["hexahedron", "wedge", "pyramid"])
@pytest.mark.parametrize("seed", range(4))
def test_warped_cells_weigh_the_volume_of_the_isoparametric_cell(cell_type, seed):
    points = warped(cell_type, seed)
    volume = isoparametric_volume(points, cell_type)
    measure, weights = one_cell(cell_type, points)
    assert measure == pytest.approx(volume, rel=1e-12)
    n = CORNERS[cell_type]
    np.testing.assert_allclose(weights, np.full(n, volume / n), rtol=1e-12)


def test_corner_order_does_not_change_a_warped_cells_volume():
    """The same hexahedron numbered from another corner (a rotation of the cube's corners about
    the z axis and a turn upside down): the same isoparametric volume."""
    points = warped("hexahedron", 7)
    volume = isoparametric_volume(points, "hexahedron")
    for order in ([1, 2, 3, 0, 5, 6, 7, 4], [2, 3, 0, 1, 6, 7, 4, 5], [4, 7, 6, 5, 0, 3, 2, 1]):
        measure = cell_measures(points, "hexahedron", np.array([order]))[0]
        assert measure == pytest.approx(volume, rel=1e-12), order


def test_a_mesh_of_warped_hexahedra_weighs_the_volume_of_its_box():
    """2 x 2 x 2 hexahedra filling [0, 2]^3 with the inner nodes moved: the cells' faces inside
    are warped, the box's are plane; the weights sum to 8 and every node gets an eighth of each of
    its cells."""
    grid = np.stack(np.meshgrid(*[np.arange(3.0)] * 3, indexing="ij"), -1).reshape(-1, 3)
    inner = np.all((grid > 0) & (grid < 2), axis=1)
    on_face = np.sum((grid > 0) & (grid < 2), axis=1) == 2  # the middle of a box's face
    rng = np.random.default_rng(3)
    moved = grid.copy()
    moved[inner] += rng.normal(0, 0.2, (int(inner.sum()), 3))
    for node in np.flatnonzero(on_face):  # within the box's face
        moved[node] += rng.normal(0, 0.2, 3) * ((grid[node] > 0) & (grid[node] < 2))
    index = np.arange(27).reshape(3, 3, 3)
    cells = np.array(
        [
            [index[i + a, j + b, k + c] for a, b, c in CUBE.astype(int)]
            for i, j, k in product(range(2), repeat=3)
        ]
    )
    weights = lumped_mass_weights(moved, [("hexahedron", cells)])
    assert weights.sum() == pytest.approx(8.0, rel=1e-12)
    volumes = [isoparametric_volume(moved[cell], "hexahedron") for cell in cells]
    expected = np.zeros(27)
    for cell, volume in zip(cells, volumes):
        expected[cell] += volume / 8
    np.testing.assert_allclose(weights, expected, rtol=1e-12)

import warnings

import numpy as np
import pytest
import torch
from scipy.spatial import ConvexHull, Delaunay

from meshop.data import lumped_mass_weights
from meshop.data import weights as weights_module
from meshop.data.weights import _simplex_measure, cell_measures, default_weight
from meshop.errors import MeshError
from tests.helpers import square_with_hole


def test_weights_of_square_with_hole_sum_to_its_area():
    points, triangles, area = square_with_hole()
    w = lumped_mass_weights(points, [("triangle", triangles)])
    assert w.sum() == pytest.approx(area, rel=1e-12)
    assert (w > 0).all()


def test_weights_of_tetrahedral_cube_sum_to_its_volume(rng):
    corners = np.stack(np.meshgrid([0, 1], [0, 1], [0, 1], indexing="ij"), -1).reshape(-1, 3)
    points = np.concatenate([corners, rng.random((40, 3))])  # hull = the unit cube
    tets = Delaunay(points).simplices
    w = lumped_mass_weights(points, [("tetra", tets), ("triangle", np.array([[0, 1, 2]]))])
    assert w.sum() == pytest.approx(1.0, rel=1e-10)


def test_hexahedra_quads_and_segments_are_measured():
    cube = np.array(
        [[0, 0, 0], [2, 0, 0], [2, 1, 0], [0, 1, 0], [0, 0, 3], [2, 0, 3], [2, 1, 3], [0, 1, 3]],
        float,
    )
    assert lumped_mass_weights(cube, [("hexahedron", np.arange(8)[None])]).sum() == pytest.approx(6)
    w = lumped_mass_weights(cube[:4, :2], [("quad", np.arange(4)[None])])
    assert w.tolist() == pytest.approx([0.5] * 4)
    line = np.array([[0.0], [0.5], [2.0]])
    w = lumped_mass_weights(line, [("line", np.array([[0, 1], [1, 2]]))])
    assert w.tolist() == pytest.approx([0.25, 1.0, 0.75])


def test_weights_equal_each_cells_share_whatever_the_arrays_layout():
    # the corners are gathered by torch from any numpy layout (reversed rows, int32 cells) and
    # added over the range of nodes a block of cells holds: the same as adding every share
    rng = np.random.default_rng(5)
    points = rng.random((80, 2))
    triangles = Delaunay(points).simplices
    expected = np.zeros(len(points))
    for corners in triangles:
        a, b, c = points[corners]
        area = 0.5 * abs((b - a)[0] * (c - a)[1] - (b - a)[1] * (c - a)[0])
        expected[corners] += area / 3
    reversed_points = points[::-1]  # negative strides
    renumbered = (len(points) - 1 - triangles).astype(np.int32)
    w = lumped_mass_weights(reversed_points, [("triangle", renumbered)])
    np.testing.assert_allclose(w[::-1], expected, rtol=1e-12)
    flipped = triangles[:, ::-1]  # int64 cells of negative strides (orientation flipped)
    read_only = points.copy()
    read_only.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch's warning about a read-only array
        w = lumped_mass_weights(read_only, [("triangle", flipped)])
    np.testing.assert_allclose(w, expected, rtol=1e-12)
    local = lumped_mass_weights(points, [("triangle", triangles[triangles.min(1) >= 40])])
    assert (local[:40] == 0).all() and local[40:].sum() > 0


def test_lower_dimensional_cells_do_not_count():
    points = np.array([[0, 0], [1, 0], [1, 1], [0, 1]], float)
    cells = [
        ("line", np.array([[0, 1], [1, 2], [2, 3], [3, 0]])),
        ("triangle", np.array([[0, 1, 2]])),
    ]
    w = lumped_mass_weights(points, cells)
    assert w.sum() == pytest.approx(0.5)
    assert w[3] == 0


def test_point_cloud_weights_are_uniform():
    w = lumped_mass_weights(np.zeros((4, 2)), [])
    assert w.tolist() == [0.25] * 4


def test_degenerate_tetrahedron_is_rejected():
    points = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0], [0, 0, 1]], float)
    with pytest.raises(MeshError, match="degenerate tetra"):
        lumped_mass_weights(points, [("tetra", np.array([[0, 1, 2, 4], [0, 1, 2, 3]]))])


def test_weights_in_blocks_of_cells_equal_one_block_and_name_the_first_degenerate_cell(
    monkeypatch,
):
    # huge meshes are weighted a block of cells at a time
    rng = np.random.default_rng(3)
    points = rng.random((60, 2))
    triangles = Delaunay(points).simplices
    whole = lumped_mass_weights(points, [("triangle", triangles)])
    monkeypatch.setattr(weights_module, "WEIGHT_CELLS", 7)
    blocks = lumped_mass_weights(points, [("triangle", triangles)])
    np.testing.assert_allclose(blocks, whole, rtol=1e-14)
    assert blocks.sum() == pytest.approx(ConvexHull(points).volume)  # the hull's area
    flat = triangles.copy()
    flat[[9, 20]] = [0, 0, 1]  # two degenerate cells in the second and third blocks
    with pytest.raises(MeshError, match=r"2 degenerate triangle cell\(s\).*first: cell 9 with"):
        lumped_mass_weights(points, [("triangle", flat)])


def test_default_weight_is_one_over_n_in_every_sample():
    like = torch.zeros(1, dtype=torch.float64)
    torch.testing.assert_close(
        default_weight(4, None, like), torch.full((4,), 0.25, dtype=like.dtype)
    )
    batch = torch.tensor([0, 0, 1, 1, 1, 1, 2])
    expected = torch.tensor([0.5, 0.5, 0.25, 0.25, 0.25, 0.25, 1.0], dtype=like.dtype)
    torch.testing.assert_close(default_weight(7, batch, like), expected)


@pytest.mark.parametrize(
    "cell_type, space", [("line", 2), ("line", 3), ("triangle", 2), ("triangle", 3), ("tetra", 3)]
)
def test_closed_form_measures_equal_the_gram_determinant(cell_type, space):
    """Segments, triangles and tetrahedra are measured by closed forms (cross and triple
    products): the same numbers as sqrt(det(E E^T)) / k! of their edge vectors E, and signed
    volumes as det(E) / k! when the cells fill the space."""
    rng = np.random.default_rng(0)
    k = {"line": 1, "triangle": 2, "tetra": 3}[cell_type]
    points = rng.random((40, space))
    simplices = np.array([rng.choice(40, k + 1, replace=False) for _ in range(50)])
    edges = points[simplices[:, 1:]] - points[simplices[:, :1]]
    factorial = float(np.prod(np.arange(1, k + 1)))
    gram = np.sqrt(np.linalg.det(edges @ edges.transpose(0, 2, 1))) / factorial
    np.testing.assert_allclose(cell_measures(points, cell_type, simplices), gram, rtol=1e-10)
    if k == space:
        signed = _simplex_measure(points, simplices, signed=True)
        np.testing.assert_allclose(signed, np.linalg.det(edges) / factorial, rtol=1e-10)
        assert (signed < 0).any() and (signed > 0).any()

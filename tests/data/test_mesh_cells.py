"""What docs/domains.md promises about mesh files: quadrature weights of wedges, pyramids and
higher-order cells (measured by their corners, shared equally by all their nodes), and a failed
`write_mesh` leaves nothing half-written."""

import meshio
import numpy as np
import pytest

from meshop.data import from_points, read_mesh, write_mesh
from meshop.data.weights import lumped_mass_weights

TRIANGLE = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])


def prism(shear=(0.3, -0.2), height=2.0):
    """A triangular prism over the unit right triangle, its top shifted by ``shear``:
    volume 0.5 * height whatever the shear."""
    bottom = np.hstack([TRIANGLE, np.zeros((3, 1))])
    top = np.hstack([TRIANGLE + shear, np.full((3, 1), height)])
    return np.vstack([bottom, top])


def test_wedge_weights_share_the_prism_volume_equally():
    weights = lumped_mass_weights(prism(), [("wedge", np.array([[0, 1, 2, 3, 4, 5]]))])
    assert weights == pytest.approx(np.full(6, 1.0 / 6))


def test_two_wedges_read_from_a_file_weigh_their_shared_nodes_twice(tmp_path):
    points = np.vstack(
        [prism(shear=(0, 0), height=1), prism(shear=(0, 0), height=1)[3:] + np.array([0, 0, 1])]
    )
    cells = [("wedge", np.array([[0, 1, 2, 3, 4, 5], [3, 4, 5, 6, 7, 8]]))]
    meshio.write(tmp_path / "prisms.vtu", meshio.Mesh(points, cells))
    weights = read_mesh(tmp_path / "prisms.vtu").weight.double().numpy()
    assert weights.sum() == pytest.approx(1.0)  # two prisms of volume 0.5
    assert weights == pytest.approx(np.array([1, 1, 1, 2, 2, 2, 1, 1, 1]) / 12)


def test_pyramid_weights_are_a_fifth_of_base_times_height_over_three():
    base = np.array([[0.0, 0, 0], [2, 0, 0], [1.5, 1, 0], [0, 1.5, 0]])  # no parallelogram
    area = 0.5 * (2 * 1 + 1.5 * 1.5)  # shoelace: (x0 y1 - x1 y0) + ... over the four edges
    points = np.vstack([base, [[0.4, 1.1, 3.0]]])  # apex off-centre
    weights = lumped_mass_weights(points, [("pyramid", np.array([[0, 1, 2, 3, 4]]))])
    assert weights == pytest.approx(np.full(5, area * 3.0 / 3 / 5))


@pytest.mark.parametrize(
    ("cell_type", "points", "measure"),
    [
        # corners, then midside nodes (moved off the straight edges: only corners count)
        ("triangle6", np.vstack([TRIANGLE, [[0.5, -0.1], [0.6, 0.6], [-0.1, 0.5]]]), 0.5),
        (
            "quad8",
            np.array([[0, 0], [2, 0], [2, 1], [0, 1], [1, -0.2], [2.1, 0.5], [1, 1.2], [0, 0.5]]),
            2.0,
        ),
        (
            "tetra10",
            np.vstack([3 * np.eye(3, 4, 1).T, np.random.default_rng(0).random((6, 3))]),
            27 / 6,
        ),
    ],
)
def test_higher_order_cells_are_measured_by_their_corners_and_shared_by_all_nodes(
    cell_type, points, measure
):
    n = len(points)
    weights = lumped_mass_weights(points, [(cell_type, np.arange(n)[None])])
    assert weights == pytest.approx(np.full(n, measure / n))


#: the writer that ``write_mesh`` calls for a .vtu file with and without meshio's arguments
WRITERS = [
    pytest.param("meshop.data.mesh_io.write_vtu", {}, id="write_vtu"),
    pytest.param("meshio.write", {"compression": None}, id="meshio"),
]


@pytest.mark.parametrize(("writer", "kwargs"), WRITERS)
def test_a_failed_write_leaves_nothing_half_written(tmp_path, monkeypatch, writer, kwargs):
    data = from_points(np.random.default_rng(0).random((5, 2)))
    target = tmp_path / "out.vtu"

    def failing_write(path, *args, **kwargs):
        with open(path, "w") as f:
            f.write("<VTKFile half")
        raise OSError("disk full")

    monkeypatch.setattr(writer, failing_write)
    with pytest.raises(OSError, match="disk full"):
        write_mesh(target, data, {"u": np.ones(5)}, **kwargs)
    assert list(tmp_path.iterdir()) == []

    monkeypatch.undo()
    write_mesh(target, data, {"u": np.ones(5)}, **kwargs)
    before = target.read_bytes()
    monkeypatch.setattr(writer, failing_write)
    with pytest.raises(OSError, match="disk full"):
        write_mesh(target, data, {"u": np.zeros(5)}, overwrite=True, **kwargs)
    assert [p.name for p in tmp_path.iterdir()] == ["out.vtu"]
    assert target.read_bytes() == before

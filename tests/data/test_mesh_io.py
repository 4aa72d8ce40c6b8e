import meshio
import numpy as np
import pytest
import torch

from meshop import read_mesh, write_mesh
from meshop.data import from_meshio, mesh_cells
from meshop.errors import FieldError, FileExistsMeshopError, MeshError, MeshReadError
from tests.helpers import square_with_hole


@pytest.fixture
def plate(tmp_path):
    points, triangles, _ = square_with_hole()
    n = len(points)
    mesh = meshio.Mesh(
        np.c_[points, np.zeros(n)],
        [("triangle", triangles), ("line", np.array([[0, 1], [1, 2]]))],
        point_data={
            "u": np.c_[points[:, 0] ** 2, points[:, 1]],
            "sigma_vm": np.sin(points[:, 0]) + points[:, 1],
        },
        cell_data={"region": [np.arange(len(triangles), dtype=float), np.zeros(2)]},
    )
    path = tmp_path / "plate.vtu"
    meshio.write(path, mesh)
    return path, mesh


def test_read_mesh_stacks_selected_fields_in_order_and_drops_zero_z(plate):
    path, mesh = plate
    data = read_mesh(path, inputs=["u"], targets="sigma_vm")
    assert data.pos.shape == (len(mesh.points), 2)
    assert data.pos.dtype == torch.float32
    assert torch.allclose(data.x, torch.as_tensor(mesh.point_data["u"], dtype=torch.float32))
    assert data.y.shape == (len(mesh.points), 1)
    assert data.face.shape == (3, len(mesh.cells[0].data))
    assert data.cell_index_line.shape == (2, 2)
    assert data.source == str(path)


def test_weights_come_from_top_dimensional_cells_only(plate):
    data = read_mesh(plate[0])
    *_, area = square_with_hole()
    assert data.weight.sum().item() == pytest.approx(area, rel=1e-6)


@pytest.mark.parametrize(
    ("suffix", "file_format"),
    [(".vtu", None), (".msh", "gmsh22"), (".msh", "gmsh"), (".xdmf", None), (".vtk", None)],
)
def test_round_trip_preserves_points_cells_and_fields(plate, tmp_path, suffix, file_format):
    path, _ = plate
    first = read_mesh(path, inputs=["u"], targets=["sigma_vm"])
    out = tmp_path / f"copy_{file_format}{suffix}"
    write_mesh(out, first, {"u": first.x, "sigma_vm": first.y[:, 0]}, file_format=file_format)
    second = read_mesh(out, inputs=["u"], targets=["sigma_vm"])
    assert torch.equal(first.pos, second.pos)
    assert torch.equal(first.face, second.face)
    assert torch.equal(first.cell_index_line, second.cell_index_line)
    assert torch.equal(first.x, second.x)
    assert torch.equal(first.y, second.y)
    assert torch.allclose(first.weight, second.weight, rtol=1e-6)  # from float32 points


def test_gmsh_files_written_by_meshio_read_in_both_ascii_versions(tmp_path):
    points, triangles, area = square_with_hole()
    mesh = meshio.Mesh(np.c_[points, np.zeros(len(points))], [("triangle", triangles)])
    for fmt in ("gmsh22", "gmsh"):
        path = tmp_path / f"m_{fmt}.msh"
        meshio.write(path, mesh, file_format=fmt, binary=False)
        assert path.read_text().startswith("$MeshFormat")
        data = read_mesh(path)
        assert data.weight.sum().item() == pytest.approx(area, rel=1e-6)


def test_cell_data_is_averaged_to_nodes_when_asked(tmp_path):
    points = np.array([[0, 0], [1, 0], [1, 1], [0, 1]], float)
    cells = [("triangle", np.array([[0, 1, 2], [0, 2, 3]]))]
    mesh = meshio.Mesh(points, cells, cell_data={"k": [np.array([1.0, 3.0])]})
    path = tmp_path / "k.vtu"
    meshio.write(path, mesh)
    with pytest.raises(FieldError, match="cell_data_to_nodes=True"):
        read_mesh(path, inputs="k")
    data = read_mesh(path, inputs="k", cell_data_to_nodes=True)
    # nodes 1 and 3 touch one cell each; nodes 0 and 2 touch both equal-area cells
    assert data.x[:, 0].tolist() == pytest.approx([2.0, 1.0, 2.0, 3.0])


def test_point_cloud_without_cells_gets_uniform_weights_and_writes_vertices(tmp_path):
    cloud = meshio.Mesh(np.random.default_rng(0).random((10, 3)), [])
    data = from_meshio(cloud, point_weights="uniform")
    assert torch.allclose(data.weight, torch.full((10,), 0.1))
    path = write_mesh(tmp_path / "cloud.vtu", data)
    back = read_mesh(path, point_weights="uniform")
    assert torch.equal(back.pos, data.pos)
    assert torch.allclose(back.weight, data.weight)
    assert mesh_cells(back)[0][0] == "vertex"


def test_write_refuses_to_overwrite_unless_asked(plate, tmp_path):
    path, _ = plate
    data = read_mesh(path)
    before = path.read_bytes()
    with pytest.raises(FileExistsMeshopError, match="overwrite=True"):
        write_mesh(path, data)
    assert path.read_bytes() == before
    write_mesh(path, data, {"p": data.pos[:, 0]}, overwrite=True)
    assert "p" in meshio.read(path).point_data


def test_missing_file_names_the_file(tmp_path):
    with pytest.raises(MeshReadError, match="nope.vtu' does not exist"):
        read_mesh(tmp_path / "nope.vtu")


def test_unreadable_file_names_the_file_and_formats(tmp_path):
    bad = tmp_path / "garbage.vtu"
    bad.write_text("this is not a mesh")
    with pytest.raises(MeshReadError, match="cannot read mesh file .*garbage.vtu") as info:
        read_mesh(bad)
    assert "meshio said: " in str(info.value) and "Couldn't read file" in str(info.value)
    assert "SystemExit" not in str(info.value) and info.value.__cause__ is None
    unknown = tmp_path / "mesh.unknownext"
    unknown.write_text("1 2 3")
    with pytest.raises(MeshReadError, match="file_format"):
        read_mesh(unknown)


def test_missing_field_lists_available_fields(plate):
    path, _ = plate
    with pytest.raises(FieldError) as err:
        read_mesh(path, targets=["stress"])
    msg = str(err.value)
    assert "no point field 'stress'" in msg and "'sigma_vm'" in msg and "'u'" in msg
    assert str(path) in msg


def test_nan_in_coordinates_or_fields_is_rejected(tmp_path):
    points = np.array([[0, 0], [1, 0], [0, 1]], float)
    tri = [("triangle", np.array([[0, 1, 2]]))]
    meshio.write(tmp_path / "f.vtu", meshio.Mesh(points, tri, point_data={"f": [1.0, np.nan, 0]}))
    with pytest.raises(MeshError, match="field 'f' contains NaN"):
        read_mesh(tmp_path / "f.vtu", inputs="f")
    bad = points.copy()
    bad[1, 0] = np.inf
    meshio.write(tmp_path / "p.vtu", meshio.Mesh(bad, tri))
    with pytest.raises(MeshError, match=r"p.vtu: point coordinates contains NaN or Inf"):
        read_mesh(tmp_path / "p.vtu")


def test_empty_mesh_is_rejected():
    with pytest.raises(MeshError, match="empty"):
        from_meshio(meshio.Mesh(np.zeros((0, 3)), []), source="empty.vtu")


def test_mixed_dimensions_are_rejected(tmp_path):
    # tetrahedra on points whose z is all zero: a 3D volume mesh stored flat
    points = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0]], float)
    meshio.write(tmp_path / "flat.vtu", meshio.Mesh(points, [("tetra", np.array([[0, 1, 2, 3]]))]))
    with pytest.raises(MeshError, match="mixed dimensions"):
        read_mesh(tmp_path / "flat.vtu")


def test_degenerate_cell_is_rejected_with_its_index(tmp_path):
    points = np.array([[0, 0], [1, 0], [0, 1], [2, 0]], float)
    cells = [("triangle", np.array([[0, 1, 2], [0, 1, 3]]))]  # second cell is collinear
    meshio.write(tmp_path / "deg.vtu", meshio.Mesh(points, cells))
    with pytest.raises(MeshError, match=r"deg.vtu: 1 degenerate triangle.*cell 1"):
        read_mesh(tmp_path / "deg.vtu")


def test_field_with_wrong_length_is_rejected_on_write(plate, tmp_path):
    data = read_mesh(plate[0])
    with pytest.raises(FieldError, match="one row per node"):
        write_mesh(tmp_path / "w.vtu", data, {"bad": torch.zeros(3)})
    assert not (tmp_path / "w.vtu").exists()


def test_cells_of_any_layout_are_kept_as_given():
    # the cells are kept as a view of the mesh's connectivity where torch can share it
    points, triangles, _ = square_with_hole()
    flipped = np.asarray(triangles, dtype=np.int64)[:, ::-1]  # negative strides
    read_only = np.asarray(triangles, dtype=np.int64).copy()
    read_only.flags.writeable = False
    for cells in (flipped, read_only):
        data = from_meshio(meshio.Mesh(points, [("triangle", cells)]))
        assert torch.equal(data.face, torch.as_tensor(np.array(cells)).t())
        np.testing.assert_array_equal(mesh_cells(data)[0][1], cells)

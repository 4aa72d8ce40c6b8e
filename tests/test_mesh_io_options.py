"""The options of reading and writing meshes reach what they promise (the survivors of a mutation
run of meshop/data/mesh_io.py): cell fields of every kind averaged to nodes, point sets as masks,
``field_layout`` and ``read_mesh`` with their keyword arguments, and what ``write_mesh`` writes."""

import meshio
import numpy as np
import pytest
import torch

from meshop.data import (
    field_layout,
    from_meshio,
    from_points,
    group_masks,
    read_mesh,
    to_meshio,
    write_mesh,
)
from meshop.errors import FieldError, MeshError, MeshReadError

#: the unit square as two triangles and the square [1, 2] x [0, 1] as one quad
POINTS = np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [2, 0, 0], [2, 1, 0]], dtype=float)
CELLS = [("triangle", np.array([[0, 1, 2], [0, 2, 3]])), ("quad", np.array([[1, 4, 5, 2]]))]


def mixed_plate(**cell_data) -> meshio.Mesh:
    return meshio.Mesh(POINTS, CELLS, point_data={"u": POINTS[:, :2] * 1.0}, cell_data=cell_data)


def test_cell_fields_of_mixed_blocks_and_vector_cell_fields_are_averaged_to_nodes():
    """Each node gets the mean of its cells' values weighted by the cells' shares of its
    quadrature weight (a cell's measure over its corners), over triangles and quads alike."""
    scalar = [np.array([1.0, 3.0]), np.array([10.0])]
    vector = [np.array([[1.0, 0, 0], [3.0, 0, 0]]), np.array([[10.0, 1, 0]])]
    mesh = mixed_plate(s=scalar, v=vector)
    out = read_mesh_from(mesh, inputs=["s", "v"], cell_data_to_nodes=True)
    t, q = 0.5 / 3, 1.0 / 4  # a triangle's and the quad's share of their nodes' weights
    expected = [
        2.0,  # both triangles
        (t * 1 + q * 10) / (t + q),  # the first triangle and the quad
        (t * 1 + t * 3 + q * 10) / (2 * t + q),  # all three cells
        3.0,
        10.0,
        10.0,
    ]
    np.testing.assert_allclose(out.x[:, 0].double().numpy(), expected, rtol=1e-6)
    np.testing.assert_allclose(out.x[:, 1].double().numpy(), expected, rtol=1e-6)  # a vector
    np.testing.assert_allclose(out.x[4:, 2].double().numpy(), [1.0, 1.0], rtol=1e-6)
    assert field_layout(mesh, ["s"], cell_data_to_nodes=True) == [("s", 1)]


def read_mesh_from(mesh: meshio.Mesh, **options):
    return from_meshio(mesh, **options)


def test_nan_in_a_cell_field_names_the_field_and_the_mesh():
    mesh = mixed_plate(s=[np.array([1.0, np.nan]), np.array([1.0])])
    with pytest.raises(MeshError, match=r"^plate\.vtu: cell field 's' contains NaN or Inf"):
        read_mesh_from(mesh, inputs="s", cell_data_to_nodes=True, source="plate.vtu")


def test_point_sets_are_bool_masks_and_neither_gmsh_sets_nor_a_set_of_a_group_name_override():
    mesh = meshio.Mesh(
        POINTS,
        CELLS,
        cell_sets={"wall": [np.array([0]), np.array([], dtype=int)]},  # the first triangle
        point_sets={"probe": [4, 5], "wall": [5], "gmsh:dim_tags": [0, 1]},
    )
    masks = group_masks(mesh)
    assert list(masks) == ["probe", "wall"]
    assert masks["probe"].dtype == masks["wall"].dtype == np.bool_
    assert np.flatnonzero(masks["probe"]).tolist() == [4, 5]
    assert np.flatnonzero(masks["wall"]).tolist() == [0, 1, 2]  # the cell set's nodes


def test_field_layout_takes_the_options_of_from_meshio_and_names_the_mesh_in_errors():
    mesh = mixed_plate(s=[np.ones(2), np.ones(1)])
    assert field_layout(mesh, ["u"]) == [("u", 2)]  # the points' zero z dropped
    assert field_layout(mesh, ["u"], drop_zero_z=False) == [("u", 2)]  # u itself is 2D
    three = meshio.Mesh(POINTS, CELLS, point_data={"w": np.c_[POINTS[:, :2], np.zeros(6)]})
    assert field_layout(three, ["w"]) == [("w", 2)]
    assert field_layout(three, ["w"], drop_zero_z=False) == [("w", 3)]
    with pytest.raises(FieldError, match=r"^<meshio\.Mesh>: mesh has no point field 's' \('s' is"):
        field_layout(mesh, ["s"])
    with pytest.raises(FieldError, match=r"^plate\.msh: mesh has no point field 't'"):
        field_layout(mesh, ["t"], cell_data_to_nodes=True, source="plate.msh")
    with pytest.raises(MeshError, match=r"^plate\.msh: the mesh is empty"):
        field_layout(meshio.Mesh(np.zeros((0, 3)), []), ["u"], source="plate.msh")


def test_read_mesh_passes_its_options_on(tmp_path):
    cloud = tmp_path / "cloud"  # no extension: the format is given
    rng = np.random.default_rng(0)
    points = np.c_[rng.random((40, 2)), np.zeros(40)]
    meshio.write(cloud, meshio.Mesh(points, [("vertex", np.arange(40)[:, None])]), "vtu")
    data = read_mesh(cloud, file_format="vtu", params=[1.5, 2.0])
    assert data.params.tolist() == [[1.5, 2.0]]
    assert data.pos.shape == (40, 2)
    assert not torch.allclose(data.weight, torch.full((40,), 1 / 40))  # knn weights by default
    assert read_mesh(cloud, file_format="vtu", drop_zero_z=False).pos.shape == (40, 3)
    uniform = read_mesh(cloud, file_format="vtu", point_weights="uniform").weight
    torch.testing.assert_close(uniform, torch.full((40,), 1 / 40))


def test_to_meshio_writes_float64_fields_tensors_with_gradients_and_flattened_tensors():
    data = from_points(torch.rand(5, 2))
    u = torch.rand(5, 2, requires_grad=True)  # a prediction still attached to its graph
    stress = torch.rand(5, 3, 3)
    mesh = to_meshio(data, {"u": u, "stress": stress, "p": np.ones(5, dtype=np.float32)})
    assert mesh.point_data["u"].shape == (5, 3) and mesh.point_data["u"].dtype == np.float64
    assert mesh.point_data["stress"].shape == (5, 9)
    assert mesh.point_data["p"].dtype == np.float64


def test_write_mesh_writes_ascii_gmsh_for_a_msh_file_and_says_which_folder_is_missing(tmp_path):
    data = from_points(torch.rand(6, 2))
    data.face = torch.tensor([[0, 1, 2], [3, 4, 5]]).T.contiguous()
    path = write_mesh(tmp_path / "out.msh", data, {"u": torch.arange(6.0)})
    assert path.read_text().startswith("$MeshFormat\n4.1 0 8\n")  # ASCII gmsh 4.1
    back = meshio.read(path)
    assert set(back.cell_data) >= {"gmsh:physical", "gmsh:geometrical"}
    np.testing.assert_allclose(back.point_data["u"], np.arange(6.0))
    missing = tmp_path / "no" / "out.vtu"
    with pytest.raises(
        MeshReadError, match=r"cannot write '.*out\.vtu': directory '.*no' does not"
    ):
        write_mesh(missing, data)


def test_every_node_written_to_gmsh_belongs_to_the_lowest_dimensional_entity_it_is_on(tmp_path):
    """gmsh 4.1 files list the nodes by entity, one entity per cell block: a node belongs to the
    block of lowest dimension that has it (a vertex cell's node to the vertex's point, a face's to
    the surface), and a node in no cell to the block of highest dimension (the volume)."""
    data = from_points(torch.tensor([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1], [2, 2, 2.0]]))
    data.face = torch.tensor([[0, 1, 2]]).T.contiguous()  # a boundary triangle: the first block
    data["cell_index_tetra"] = torch.tensor([[0, 1, 2, 3]]).T.contiguous()
    data["cell_index_vertex"] = torch.tensor([[0]]).T.contiguous()
    back = meshio.read(write_mesh(tmp_path / "tet.msh", data))
    entity = {
        block.type: int(tags[0])
        for block, tags in zip(back.cells, back.cell_data["gmsh:geometrical"])
    }
    assert sorted(entity.values()) == [1, 2, 3]  # one entity per block
    expected = [
        (0, entity["vertex"]),
        (2, entity["triangle"]),
        (2, entity["triangle"]),
        (3, entity["tetra"]),
        (3, entity["tetra"]),  # in no cell
    ]
    assert [tuple(row) for row in back.point_data["gmsh:dim_tags"].tolist()] == expected


def test_integer_fields_are_written_as_integers():
    data = from_points(torch.rand(4, 2))
    mesh = to_meshio(data, {"label": np.arange(4), "id": torch.arange(4), "u": torch.ones(4)})
    assert mesh.point_data["label"].dtype == np.int64
    assert mesh.point_data["id"].dtype == np.int64
    assert mesh.point_data["u"].dtype == np.float64


def test_a_cell_field_on_cells_meshop_does_not_measure_names_the_field_and_the_file():
    """Polygons have no quadrature weights, so their cell values cannot be averaged to nodes."""
    mesh = meshio.Mesh(
        POINTS[:4], [("polygon", np.array([[0, 1, 2, 3]]))], cell_data={"t": [np.array([1.0])]}
    )
    with pytest.raises(FieldError) as error:
        read_mesh_from(mesh, inputs=["t"], cell_data_to_nodes=True, source="poly.vtu")
    assert str(error.value) == "poly.vtu: cell field 't' has no values on the top-dimensional cells"

"""The options of reading and writing meshes reach what they promise (the survivors of a mutation
run of meshop/data/mesh_io.py): cell fields of every kind averaged to nodes, point sets as masks,
``field_layout`` and ``read_mesh`` with their keyword arguments, and what ``write_mesh`` writes."""

import sys
from pathlib import Path

import meshio
import numpy as np
import pytest
import torch

from meshop.data import (
    field_layout,
    from_meshio,
    from_points,
    group_cells,
    group_masks,
    read_mesh,
    read_meshio,
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


def test_vtu_files_keep_float32_values_and_int32_connectivity_and_read_back_the_same(tmp_path):
    # half the memory of float64 / int64 copies when a huge mesh is written
    mesh = meshio.Mesh(POINTS, CELLS, point_data={"a": np.arange(6.0)})
    data = from_meshio(mesh, "a")
    u = torch.rand(6, 2)
    path = write_mesh(tmp_path / "out.vtu", data, {"u": u, "a": data.x})
    written = meshio.read(path)
    assert written.points.dtype == np.float32 and written.points.shape == (6, 3)
    assert b'type="Int32" Name="connectivity"' in path.read_bytes()  # meshio reads it as int64
    assert written.point_data["u"].dtype == np.float32 and written.point_data["u"].shape == (6, 3)
    np.testing.assert_array_equal(written.point_data["u"][:, :2], u.numpy())
    again = read_mesh(path, "a")
    assert torch.equal(again.pos, data.pos) and torch.equal(again.x, data.x)
    assert torch.equal(again.face, data.face) and torch.equal(again.weight, data.weight)
    # other formats still get float64 and int64
    assert to_meshio(data, {"u": u}).points.dtype == np.float64
    assert to_meshio(data).cells[0].data.dtype == np.int64


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


def test_groups_skip_what_is_not_a_group_and_keep_reading_the_next():
    """A field_data entry without a dimension, a ``gmsh:`` cell set and a cell set's empty block
    are skipped; the groups after them are read (the line group "wall", the cell set "probe")."""
    points = POINTS[:4]
    cells = [("triangle", np.array([[0, 1, 2], [0, 2, 3]])), ("line", np.array([[0, 1], [1, 2]]))]
    mesh = meshio.Mesh(
        points,
        cells,
        cell_data={"gmsh:physical": [np.array([1, 1]), np.array([1, 2])]},
        field_data={"bad": np.array([7]), "wall": np.array([1, 1])},
        cell_sets={
            "gmsh:bounding_entities": [np.array([0]), np.array([0])],
            "probe": [np.array([], dtype=np.int64), np.array([1])],
        },
        point_sets={"empty": []},  # as a reader may give it: a list
    )
    groups = group_cells(mesh)
    assert list(groups) == ["wall", "probe"]
    assert [(t, c.tolist()) for t, c in groups["wall"]] == [("line", [[0, 1]])]
    assert [(t, c.tolist()) for t, c in groups["probe"]] == [("line", [[1, 2]])]
    masks = group_masks(mesh)
    assert masks["empty"].tolist() == [False] * 4
    assert masks["probe"].tolist() == [False, True, True, False]


def test_a_mesh_reads_point_fields_only_unless_cell_data_to_nodes_and_then_targets_too():
    mesh = mixed_plate(s=[np.array([1.0, 1.0]), np.array([3.0])])
    with pytest.raises(FieldError, match=r"^<meshio\.Mesh>: mesh has no point field 's'"):
        from_meshio(mesh, inputs=["u"], targets=["s"])
    data = from_meshio(mesh, inputs=["u"], targets=["s"], cell_data_to_nodes=True)
    t, q = 0.5 / 3, 1.0 / 4  # a triangle's and the quad's share of their nodes' weights
    expected = [1.0, (t + 3 * q) / (t + q), (2 * t + 3 * q) / (2 * t + q), 1.0, 3.0, 3.0]
    np.testing.assert_allclose(data.y[:, 0].numpy(), expected, rtol=1e-6)


def test_a_point_field_of_the_wrong_length_or_with_nan_names_the_mesh():
    mesh = mixed_plate()
    mesh.point_data["short"] = np.zeros(5)
    mesh.point_data["nan"] = np.r_[np.zeros(5), np.nan]
    with pytest.raises(FieldError) as error:
        from_meshio(mesh, inputs=["short"], source="plate.vtu")
    assert str(error.value) == (
        "plate.vtu: field 'short' has shape (5,), expected one value per node (6)"
    )
    with pytest.raises(MeshError, match=r"^plate\.vtu: field 'nan' contains NaN or Inf"):
        from_meshio(mesh, inputs=["nan"], source="plate.vtu")


@pytest.mark.parametrize("bad", [6, -1])
def test_cells_referring_to_nodes_outside_the_mesh_are_refused_with_the_whole_message(bad):
    mesh = meshio.Mesh(POINTS, [("triangle", np.array([[0, 1, 2], [0, 2, bad]]))])
    with pytest.raises(MeshError) as error:
        from_meshio(mesh)
    assert str(error.value) == (
        "<meshio.Mesh>: triangle cells refer to nodes outside 0..5; the file is corrupt or was "
        "written with another node numbering"
    )
    assert from_meshio(meshio.Mesh(POINTS, [("triangle", np.array([[0, 1, 5]]))])).num_nodes == 6


def test_gmsh_takes_fields_of_1_3_and_9_components_and_names_any_other(tmp_path):
    data = from_points(torch.rand(4, 3))
    data["cell_index_tetra"] = torch.tensor([[0, 1, 2, 3]]).T.contiguous()
    fields = {"one": torch.ones(4, 1), "vector": torch.ones(4, 3), "tensor": torch.ones(4, 3, 3)}
    back = meshio.read(write_mesh(tmp_path / "ok.msh", data, fields))
    assert {k: v.shape for k, v in back.point_data.items() if k in fields} == {
        "one": (4,),
        "vector": (4, 3),
        "tensor": (4, 9),
    }
    with pytest.raises(FieldError) as error:
        write_mesh(tmp_path / "bad.msh", data, {"q": torch.ones(4, 4)})
    assert str(error.value) == (
        "gmsh stores fields with 1, 3 or 9 components; 'q' has 4: write it as separate fields or "
        "use .vtu"
    )


@pytest.mark.parametrize(("file_format", "version"), [("gmsh", "4.1"), ("gmsh22", "2.2")])
def test_a_named_gmsh_format_is_written_as_ascii(tmp_path, file_format, version):
    data = from_points(torch.rand(3, 2))
    data.face = torch.tensor([[0, 1, 2]]).T.contiguous()
    path = write_mesh(tmp_path / "out.mesh", data, {"u": torch.ones(3)}, file_format=file_format)
    assert path.read_text().startswith(f"$MeshFormat\n{version} 0 8\n")


@pytest.mark.parametrize("suffix", [".xdmf", ".xmf"])
def test_xdmf_is_written_with_its_data_inline(tmp_path, suffix):
    data = from_points(torch.rand(3, 2))
    data.face = torch.tensor([[0, 1, 2]]).T.contiguous()
    path = write_mesh(tmp_path / f"out{suffix}", data, {"u": torch.arange(3.0)})
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no HDF5 file beside it
    np.testing.assert_array_equal(meshio.read(path).point_data["u"], [0.0, 1.0, 2.0])


@pytest.mark.parametrize(
    ("writer", "kwargs"),
    [
        pytest.param("meshop.data.mesh_io.write_vtu", {}, id="write_vtu"),
        pytest.param("meshio.write", {"compression": None}, id="meshio"),
    ],
)
def test_a_mesh_is_written_to_a_hidden_temporary_file_beside_the_target(
    tmp_path, monkeypatch, writer, kwargs
):
    """Renamed within one folder (one filesystem: the rename is atomic), hidden meanwhile."""
    written = []
    module, name = writer.rsplit(".", 1)
    write = getattr(sys.modules[module], name)

    def spy(filename, *args, **kwargs):
        written.append(filename)
        return write(filename, *args, **kwargs)

    monkeypatch.setattr(writer, spy)
    path = write_mesh(tmp_path / "plate.vtu", from_points(torch.rand(3, 2)), **kwargs)
    (tmp,) = map(Path, written)
    assert tmp.parent == tmp_path and tmp.name.startswith(".plate.") and tmp.suffix == ".vtu"
    assert not tmp.exists() and path.exists()


def test_a_missing_field_or_group_is_named_in_a_whole_sentence_with_what_the_mesh_has():
    """Only a name that is cell data gets the hint of ``cell_data_to_nodes``."""
    mesh = meshio.Mesh(
        POINTS,
        CELLS,
        point_data={"u": POINTS[:, :2] * 1.0},
        cell_data={"s": [np.ones(2), np.ones(1)]},
        point_sets={"probe": [4, 5]},
    )
    has = "it has point fields ['u'] and cell fields ['s']"
    for to_nodes in (False, True):
        with pytest.raises(FieldError) as info:
            from_meshio(mesh, inputs=["t"], cell_data_to_nodes=to_nodes, source="plate.vtu")
        assert str(info.value) == f"plate.vtu: mesh has no point field 't'; {has}"
    with pytest.raises(FieldError) as info:
        from_meshio(mesh, inputs=["s"], source="plate.vtu")
    assert str(info.value) == (
        "plate.vtu: mesh has no point field 's' ('s' is cell data: pass cell_data_to_nodes=True "
        f"to average it to nodes); {has}"
    )
    with pytest.raises(FieldError) as info:
        from_meshio(mesh, inputs=["group:wall"], source="plate.vtu")
    assert str(info.value) == (
        "plate.vtu: mesh has no group 'wall'; its groups are ['probe'] "
        "(gmsh physical groups, cell sets and point sets)"
    )


def test_blocks_of_one_cell_type_are_all_kept_and_fields_and_params_are_float32():
    """gmsh writes one block per entity, so a file often has several triangle blocks: the domain
    keeps every cell, in the file's order; ``x``, ``y`` and ``params`` are float32 whatever they
    are given in (an integer field, float64 parameters here)."""
    cells = [
        ("triangle", np.array([[0, 1, 2]])),
        ("quad", np.array([[1, 4, 5, 2]])),
        ("triangle", np.array([[0, 2, 3]])),
    ]
    point_data = {"u": POINTS[:, :2] * 1.0, "p": np.arange(6)}
    mesh = meshio.Mesh(POINTS, cells, point_data=point_data)
    data = from_meshio(mesh, "u", "p", params=np.array([1.5, 2.0]))
    assert data.face.tolist() == [[0, 0], [1, 2], [2, 3]]
    assert data.cell_index_quad.tolist() == [[1], [4], [5], [2]]
    assert data.x.dtype == data.y.dtype == data.params.dtype == torch.float32
    assert data.params.tolist() == [[1.5, 2.0]]
    assert data.y[:, 0].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_nan_or_inf_is_reported_at_its_first_index_in_a_whole_sentence():
    points = POINTS.copy()
    points[4, 1] = np.inf
    with pytest.raises(MeshError) as info:
        from_meshio(meshio.Mesh(points, CELLS), source="plate.vtu")
    assert str(info.value) == (
        "plate.vtu: point coordinates contains NaN or Inf (first at index [4, 1]); "
        "clean the simulation output before loading it"
    )
    u = POINTS[:, :2] * 1.0
    u[2, 1], u[5, 0] = np.nan, -np.inf
    with pytest.raises(MeshError) as info:
        from_meshio(meshio.Mesh(POINTS, CELLS, point_data={"u": u}), "u", source="plate.vtu")
    assert str(info.value) == (
        "plate.vtu: field 'u' contains NaN or Inf (first at index [2, 1]); "
        "clean the simulation output before loading it"
    )


def fake_meshio_read(stdout="", stderr="", error=None, exit=False):
    """A ``meshio.read`` that prints on both streams, then raises ``error``, exits as meshio does
    for some files, or returns the plate."""

    def read(path, file_format=None):
        print(stdout, end="")
        print(stderr, end="", file=sys.stderr)
        if exit:
            raise SystemExit(1)
        if error is not None:
            raise error
        return meshio.Mesh(POINTS, CELLS)

    return read


def test_what_meshio_says_on_either_stream_is_in_the_error_and_its_warnings_go_to_stderr(
    tmp_path, monkeypatch, capsys
):
    path = tmp_path / "part.vtu"
    path.write_text("anything")
    head = f"cannot read mesh file '{path}': meshio said: "
    tail = (
        ". meshio reads e.g. .msh, .vtu, .vtk, .xdmf, .inp, .med, .obj, .ply, .stl; "
        "pass file_format=... if the extension does not tell the format"
    )
    monkeypatch.setattr(meshio, "read", fake_meshio_read("no header\n", "  giving up\n", exit=True))
    with pytest.raises(MeshReadError) as info:
        read_meshio(path)
    assert str(info.value) == f"{head}no header giving up{tail}"
    assert info.value.__cause__ is None  # the exit says nothing more
    error = ValueError("bad cell type")
    monkeypatch.setattr(meshio, "read", fake_meshio_read("reading\n", error=error))
    with pytest.raises(MeshReadError) as info:
        read_meshio(path)
    assert str(info.value) == f"{head}reading ValueError: bad cell type{tail}"
    assert info.value.__cause__ is error
    capsys.readouterr()
    monkeypatch.setattr(meshio, "read", fake_meshio_read("warning 1\n", "warning 2\n"))
    assert len(read_meshio(path).points) == 6
    assert capsys.readouterr() == ("", "warning 1\nwarning 2\n")

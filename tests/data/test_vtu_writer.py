"""The lean .vtu writer: raw appended arrays that meshio and meshop's own reader read back as the
domain that was written, converted a block at a time; ``write_mesh`` uses it for .vtu files."""

import sys
import tracemalloc

import meshio
import numpy as np
import pytest
import torch

from meshop._pyg import Data
from meshop.data import mesh_cells, read_mesh, write_mesh
from meshop.data import vtu as vtu_module
from meshop.data.vtu import read_vtu, write_vtu
from tests.helpers import square_mesh

#: meshio's VTK cell type ids (``meshio._vtk_common.meshio_to_vtk_type``) of the cells meshop
#: reads and writes (not wedge15 and pyramid13: meshio 5.3 has no dimension for them, so no
#: ``meshio.Mesh`` holds them)
VTK_TYPES = {
    "vertex": 1,
    "line": 3,
    "triangle": 5,
    "quad": 9,
    "tetra": 10,
    "hexahedron": 12,
    "wedge": 13,
    "pyramid": 14,
    "line3": 21,
    "triangle6": 22,
    "quad8": 23,
    "tetra10": 24,
    "hexahedron20": 25,
    "quad9": 28,
    "hexahedron27": 29,
}


def solid(real=torch.float32) -> Data:
    """A 3D domain of 12 nodes with tetra, wedge, hexahedron and pyramid blocks (node indices
    only: nothing measures these cells)."""
    rng = np.random.default_rng(1)
    data = Data(pos=torch.as_tensor(rng.random((12, 3)), dtype=real))
    data.cell_index_tetra = torch.tensor([[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]).T
    data.cell_index_wedge = torch.tensor([[0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11]]).T
    data.cell_index_hexahedron = torch.arange(8)[:, None]
    data.cell_index_pyramid = torch.tensor([[7, 8, 9, 10, 11]]).T
    return data


def fields(n: int, dim: int) -> dict[str, torch.Tensor | np.ndarray]:
    g = torch.Generator().manual_seed(n)
    return {
        "p": torch.rand(n, generator=g),
        "one": torch.rand(n, 1, generator=g),
        "u": torch.rand(n, dim, generator=g),
        "k": torch.rand(n, 4, generator=g, dtype=torch.float64),
        "flag": np.arange(n, dtype=np.int32),
    }


def header(path) -> str:
    """The XML before the appended data."""
    return path.read_bytes().split(b"\n   _", 1)[0].decode()


def expected_field(values, dim: int) -> np.ndarray:
    """A field as the file stores it: its own type, 2D vectors padded with zeros to 3."""
    values = values.numpy() if torch.is_tensor(values) else values
    if dim == 2 and values.ndim == 2 and values.shape[1] == 2:
        values = np.c_[values, np.zeros(len(values), dtype=values.dtype)]
    return values


def assert_mesh_is_domain(mesh: meshio.Mesh, data: Data, written: dict) -> None:
    """``mesh`` (from ``meshio.read`` or ``read_vtu``) holds ``data`` and ``written``: points
    in 3D in the domain's float type, every cell block in order, every field in its own type."""
    pos = data.pos.numpy()
    assert mesh.points.dtype == pos.dtype and mesh.points.shape == (len(pos), 3)
    np.testing.assert_array_equal(mesh.points[:, : pos.shape[1]], pos)
    assert not mesh.points[:, pos.shape[1] :].any()
    cells = mesh_cells(data) or [("vertex", np.arange(len(pos))[:, None])]
    assert [b.type for b in mesh.cells] == [kind for kind, _ in cells]
    for block, (_, conn) in zip(mesh.cells, cells, strict=True):
        assert block.data.dtype == np.int64
        np.testing.assert_array_equal(block.data, conn)
    assert list(mesh.point_data) == list(written)
    for name, values in written.items():
        stored = expected_field(values, pos.shape[1])
        assert mesh.point_data[name].dtype == stored.dtype, name
        assert mesh.point_data[name].shape == stored.shape, name
        np.testing.assert_array_equal(mesh.point_data[name], stored)


def read_both(path) -> list[meshio.Mesh]:
    ours = read_vtu(path)
    assert ours is not None, "the lean reader refused a file of the lean writer"
    return [ours, meshio.read(path)]


DOMAINS = [
    pytest.param(lambda: square_mesh(7), id="2d-triangles"),
    pytest.param(solid, id="3d-mixed-blocks"),
    pytest.param(lambda: solid(torch.float64), id="3d-float64"),
]


@pytest.mark.parametrize("make", DOMAINS)
def test_a_written_domain_reads_back_with_meshio_and_the_lean_reader(tmp_path, make):
    data = make()
    written = fields(len(data.pos), data.pos.shape[1])
    path = write_mesh(tmp_path / "out.vtu", data, written)
    real = "Float64" if data.pos.dtype == torch.float64 else "Float32"
    text = header(path)
    assert f'<DataArray type="{real}" Name="Points" NumberOfComponents="3"' in text
    assert 'type="Int32" Name="connectivity"' in text and 'type="UInt8" Name="types"' in text
    for mesh in read_both(path):
        assert_mesh_is_domain(mesh, data, written)


def test_the_file_is_vtk_xml_1_0_with_every_array_raw_in_one_appended_section(tmp_path):
    path = write_mesh(tmp_path / "out.vtu", square_mesh(4), {"p": torch.rand(16)})
    text = header(path)
    assert text.startswith('<?xml version="1.0"?>\n<VTKFile type="UnstructuredGrid" version="1.0"')
    assert 'byte_order="LittleEndian" header_type="UInt64"' in text
    assert "compressor" not in text and text.count("<AppendedData") == 1
    assert text.rstrip().endswith('<AppendedData encoding="raw">')
    assert text.count('format="appended"') == 5  # points, 3 cell arrays, 1 field
    assert path.read_bytes().endswith(b"\n  </AppendedData>\n</VTKFile>\n")


def test_read_mesh_gives_back_the_domain_and_its_fields(tmp_path):
    data = square_mesh(6)
    u, p = torch.rand(36, 2), torch.rand(36)
    back = read_mesh(write_mesh(tmp_path / "out.vtu", data, {"u": u, "p": p}), ["u", "p"])
    assert torch.equal(back.pos, data.pos) and torch.equal(back.face, data.face)
    assert torch.equal(back.x, torch.cat([u, p[:, None]], 1))


def test_a_domain_without_connectivity_is_written_as_one_vertex_per_node(tmp_path):
    data = Data(pos=torch.rand(9, 2))
    written = {"p": torch.rand(9)}
    path = write_mesh(tmp_path / "cloud.vtu", data, written)
    for mesh in read_both(path):
        assert_mesh_is_domain(mesh, data, written)
        assert [b.type for b in mesh.cells] == ["vertex"]
    assert torch.equal(read_mesh(path, point_weights="uniform").pos, data.pos)


def test_every_cell_type_is_written_with_its_vtk_id(tmp_path):
    """Linear and quadratic blocks in one file, their order kept; the wedge in meshio's node
    order (VTK's has its triangles turned the other way)."""
    rng = np.random.default_rng(0)
    cells = [
        (kind, rng.integers(0, 30, size=(2, vtu_module.num_nodes_per_cell[kind])))
        for kind in VTK_TYPES
    ]
    path = tmp_path / "all.vtu"
    write_vtu(path, rng.random((30, 3)), cells)
    for mesh in read_both(path):
        assert [b.type for b in mesh.cells] == list(VTK_TYPES)
        for block, (_, conn) in zip(mesh.cells, cells, strict=True):
            np.testing.assert_array_equal(block.data, conn)
    # the types array: the last one, just before the appended section ends
    end = path.read_bytes().rindex(b"\n  </AppendedData>")
    types = np.frombuffer(path.read_bytes()[end - 2 * len(cells) : end], np.uint8)
    np.testing.assert_array_equal(types, np.repeat(list(VTK_TYPES.values()), 2))
    wedge = path.read_bytes()  # VTK's order of the first wedge [a, b, c, d, e, f]: a c b d f e
    conn = dict(cells)["wedge"][0]
    assert np.asarray(conn[[0, 2, 1, 3, 5, 4]], dtype="<i4").tobytes() in wedge


def test_arrays_cast_padded_and_reordered_a_block_at_a_time_are_whole(tmp_path, monkeypatch):
    """Blocks of a few rows give the file that one block gives, and the reader reads it back
    through windows of a few bytes (the appended section found across two of them)."""
    data = solid(torch.float64)
    data.face = torch.tensor([[0, 1, 2], [2, 3, 4], [5, 6, 7], [8, 9, 10], [9, 10, 11]]).T
    written = fields(12, 3)
    whole = write_mesh(tmp_path / "whole.vtu", data, written)
    monkeypatch.setattr(vtu_module, "_BLOCK", 40)
    blocks = write_mesh(tmp_path / "blocks.vtu", data, written)
    assert blocks.read_bytes() == whole.read_bytes()
    cloud = Data(pos=torch.rand(50, 2))
    vertices = write_mesh(tmp_path / "cloud.vtu", cloud, {"u": torch.rand(50, 2)})
    for window in (8, 24, 4096):
        monkeypatch.setattr(vtu_module, "_FEED", window)
        monkeypatch.setattr(vtu_module, "_WINDOW", window)
        for mesh in read_both(blocks):
            assert_mesh_is_domain(mesh, data, written)
        assert [b.type for b in read_vtu(vertices).cells] == ["vertex"]
        np.testing.assert_array_equal(read_vtu(vertices).cells[0].data[:, 0], np.arange(50))


def test_write_vtu_converts_a_block_at_a_time_without_a_whole_copy(tmp_path, monkeypatch):
    """The int64 connectivity cast to int32, the 2D points and vectors padded to 3D: numpy's
    allocations while writing stay far below the size of any of those arrays (blocks of 64 kB
    here; 1 MiB by default)."""
    monkeypatch.setattr(vtu_module, "_BLOCK", 1 << 16)
    data = square_mesh(300)  # 90,000 nodes, 178,802 triangles: 2.1 MB of int32 connectivity
    u = torch.rand(len(data.pos), 2)
    tracemalloc.start()
    try:
        write_mesh(tmp_path / "big.vtu", data, {"u": u})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 0.25 * 4 * data.face.numel()
    assert peak < 0.25 * 12 * len(data.pos)


def test_write_mesh_uses_write_vtu_for_vtu_and_meshio_when_given_its_arguments(
    tmp_path, monkeypatch
):
    calls = []
    mesh_io = sys.modules["meshop.data.mesh_io"]
    real_vtu, real_meshio = mesh_io.write_vtu, meshio.write
    monkeypatch.setattr(mesh_io, "write_vtu", lambda *a, **k: calls.append("vtu") or real_vtu(*a))
    monkeypatch.setattr(
        meshio, "write", lambda *a, **k: calls.append("meshio") or real_meshio(*a, **k)
    )
    data, u = square_mesh(4), {"u": torch.rand(16)}
    write_mesh(tmp_path / "lean.vtu", data, u)
    write_mesh(tmp_path / "zlib.vtu", data, u, compression="zlib")
    write_mesh(tmp_path / "ascii.vtu", data, u, binary=False)
    write_mesh(tmp_path / "named", data, u, file_format="vtu")
    assert calls == ["vtu", "meshio", "meshio", "vtu"]
    assert b"vtkZLibDataCompressor" in (tmp_path / "zlib.vtu").read_bytes()
    for name in ("lean.vtu", "zlib.vtu", "ascii.vtu", "named"):
        back = meshio.read(tmp_path / name, file_format="vtu")
        np.testing.assert_array_equal(back.point_data["u"], u["u"].numpy())

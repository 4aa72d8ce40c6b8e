"""The lean .vtu reader gives meshio's mesh for the common layouts and leaves the rest to meshio."""

import base64
import re
import warnings
import zlib

import meshio
import numpy as np
import pytest
import torch

from meshop._pyg import Data
from meshop.data import read_meshio, write_mesh
from meshop.data import vtu as vtu_module
from meshop.data.vtu import read_vtu
from tests.helpers import decoded_arrays


def assert_same_mesh(ours: meshio.Mesh, theirs: meshio.Mesh) -> None:
    assert ours.points.dtype == theirs.points.dtype
    assert ours.points.shape == theirs.points.shape
    np.testing.assert_array_equal(ours.points, theirs.points)
    assert [b.type for b in ours.cells] == [b.type for b in theirs.cells]
    for mine, meshios in zip(ours.cells, theirs.cells, strict=True):
        assert mine.data.dtype == meshios.data.dtype
        assert mine.data.shape == meshios.data.shape
        np.testing.assert_array_equal(mine.data, meshios.data)
    assert list(ours.point_data) == list(theirs.point_data)
    for name, values in theirs.point_data.items():
        assert ours.point_data[name].dtype == values.dtype
        assert ours.point_data[name].shape == values.shape
        np.testing.assert_array_equal(ours.point_data[name], values)
    assert list(ours.cell_data) == list(theirs.cell_data)
    for name, blocks in theirs.cell_data.items():
        for mine, meshios in zip(ours.cell_data[name], blocks, strict=True):
            assert mine.dtype == meshios.dtype
            assert mine.shape == meshios.shape
            np.testing.assert_array_equal(mine, meshios)


def read_both(path) -> tuple[meshio.Mesh, meshio.Mesh]:
    ours = read_vtu(path)
    assert ours is not None, "the lean reader refused a file it handles"
    return ours, meshio.read(path)


def write(path, mesh, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # meshio warns about ASCII .vtu files
        meshio.write(path, mesh, **kwargs)
    return path


def mixed_mesh(real=np.float64, index=np.int64) -> meshio.Mesh:
    rng = np.random.default_rng(0)
    points = rng.random((9, 3)).astype(real)
    triangles = np.array([[0, 1, 2], [1, 2, 3], [2, 3, 4]], dtype=index)
    quads = np.array([[4, 5, 6, 7], [5, 6, 7, 8]], dtype=index)
    return meshio.Mesh(
        points,
        [("triangle", triangles), ("quad", quads)],
        point_data={
            "p": rng.random(9).astype(real),
            "u": rng.random((9, 3)),
            "flag": np.arange(9, dtype=np.int32),
        },
        cell_data={
            "region": [np.array([1, 2, 3], dtype=np.int32), np.array([4, 5], dtype=np.int32)],
            "s": [rng.random(3), rng.random(2)],
        },
    )


LAYOUTS = [
    pytest.param({}, id="zlib"),
    pytest.param({"compression": None}, id="uncompressed"),
    pytest.param({"binary": False}, id="ascii"),
    pytest.param({"header_type": "UInt64"}, id="zlib-uint64-header"),
    pytest.param({"header_type": "UInt64", "compression": None}, id="uncompressed-uint64-header"),
]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("real", [np.float32, np.float64])
@pytest.mark.parametrize("index", [np.int32, np.int64])
def test_mixed_triangles_and_quads_equal_meshio(tmp_path, layout, real, index):
    ours, theirs = read_both(write(tmp_path / "m.vtu", mixed_mesh(real, index), **layout))
    assert [b.type for b in ours.cells] == ["triangle", "quad"]
    assert ours.points.dtype == real
    assert ours.point_data["u"].shape == (9, 3)
    assert_same_mesh(ours, theirs)


@pytest.mark.parametrize("layout", [*LAYOUTS, pytest.param("raw", id="raw-appended")])
def test_only_the_fields_asked_for_are_read(tmp_path, layout, monkeypatch):
    path = tmp_path / "m.vtu"
    if layout == "raw":  # write_vtu: no cell data
        mesh = mixed_mesh()
        vtu_module.write_vtu(path, mesh.points, mesh.cells_dict.items(), mesh.point_data)
    else:
        write(path, mixed_mesh(), **layout)
    whole = read_vtu(path)
    decoded = decoded_arrays(monkeypatch)
    some = read_vtu(path, fields=["u", "s", "absent"])
    assert set(some.point_data) == {"u"} and set(some.cell_data) == ({"s"} & set(whole.cell_data))
    assert not {"p", "flag", "region"} & set(decoded)  # the others not decoded
    np.testing.assert_array_equal(some.point_data["u"], whole.point_data["u"])
    for ours, theirs in zip(some.cell_data.get("s", []), whole.cell_data.get("s", []), strict=True):
        np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(some.points, whole.points)
    assert [b.type for b in some.cells] == [b.type for b in whole.cells]
    assert set(read_vtu(path, fields=[]).point_data) == set()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_tetrahedra_wedges_lines_and_vertices_equal_meshio(tmp_path, layout):
    rng = np.random.default_rng(1)
    points = rng.random((8, 3))
    mesh = meshio.Mesh(
        points,
        [
            ("tetra", np.array([[0, 1, 2, 3], [1, 2, 3, 4]])),
            ("wedge", np.array([[0, 1, 2, 3, 4, 5]])),  # meshio reorders its nodes
            ("line", np.array([[5, 6], [6, 7]])),
            ("vertex", np.array([[7], [0]])),
        ],
        point_data={"t": rng.random(8)},
        cell_data={"id": [np.arange(2), np.arange(1), np.arange(2), np.arange(2)]},
    )
    ours, theirs = read_both(write(tmp_path / "t.vtu", mesh, **layout))
    assert [b.type for b in ours.cells] == ["tetra", "wedge", "line", "vertex"]
    np.testing.assert_array_equal(ours.cells[1].data, [[0, 1, 2, 3, 4, 5]])
    assert_same_mesh(ours, theirs)


@pytest.mark.parametrize("kwargs", [{}, {"binary": False}])
def test_files_of_write_mesh_equal_meshio(tmp_path, kwargs):
    pos = torch.rand(6, 2)
    data = Data(pos=pos, face=torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4], [2, 3, 4, 5]]))
    fields = {"u": torch.rand(6, 2), "p": torch.rand(6)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = write_mesh(tmp_path / "d.vtu", data, fields, **kwargs)
    ours, theirs = read_both(path)
    assert ours.points.dtype == np.float32
    assert ours.point_data["u"].shape == (6, 3)
    assert_same_mesh(ours, theirs)

    tets = Data(
        pos=torch.rand(5, 3), cell_index_tetra=torch.tensor([[0, 1], [1, 2], [2, 3], [3, 4]])
    )
    assert_same_mesh(*read_both(write_mesh(tmp_path / "tet.vtu", tets, {"p": torch.rand(5)})))


@pytest.fixture(params=[1, 2], ids=["one-thread", "two-threads"])
def threads(request):
    """torch's thread count while the test runs: the reader inflates blocks on that many."""
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)


def test_many_compression_blocks_equal_meshio(tmp_path, threads):
    rng = np.random.default_rng(2)
    n = 200_000
    triangles = rng.integers(0, n, size=(2 * n, 3)).astype(np.int32)
    mesh = meshio.Mesh(
        rng.random((n, 3)), [("triangle", triangles)], point_data={"u": rng.random((n, 3))}
    )
    path = write(tmp_path / "big.vtu", mesh)
    text = path.read_text()
    # the points' zlib header says how many 32 KiB blocks they take: well over one
    header = text.split('Name="Points" NumberOfComponents="3" format="binary">')[1].lstrip()
    assert int(np.frombuffer(base64.b64decode(header[:8])[:4], "<u4")[0]) > 100
    ours, theirs = read_both(path)
    assert_same_mesh(ours, theirs)
    # a block in the middle of the connectivity damaged: an error, from whichever thread
    cells = text.index('Name="connectivity"')
    middle = text.index(">", cells) + (text.index("</DataArray>", cells) - cells) // 2
    damaged = text[:middle] + ("A" if text[middle] != "A" else "B") * 8 + text[middle + 8 :]
    path.write_text(damaged)
    with pytest.raises((ValueError, zlib.error)):
        read_vtu(path)


def test_connectivity_is_decoded_as_meshio_int64(tmp_path):
    ours = read_vtu(write(tmp_path / "m.vtu", mixed_mesh(index=np.int32)))
    assert all(b.data.dtype == np.int64 for b in ours.cells)
    ours.points[0, 0] = 5.0  # writable arrays, as meshio gives
    ours.cells[0].data[0, 0] = 1


@pytest.mark.parametrize(
    ("old", "new"),
    [
        pytest.param('format="binary"', 'format="appended"', id="appended"),
        pytest.param("LittleEndian", "BigEndian", id="big-endian"),
        pytest.param("<Piece", "<FieldData></FieldData><Piece", id="field-data"),
        pytest.param(
            "</UnstructuredGrid>",
            '<Piece NumberOfPoints="0" NumberOfCells="0"/></UnstructuredGrid>',
            id="two-pieces",
        ),
    ],
)
def test_unsupported_layouts_give_none(tmp_path, old, new):
    path = tmp_path / "m.vtu"
    text = write(path, mixed_mesh(), compression=None).read_text()
    assert read_vtu(path) is not None
    assert old in text
    path.write_text(text.replace(old, new, 1))
    assert read_vtu(path) is None


def test_read_meshio_falls_back_to_meshio_for_lzma_and_polygons(tmp_path):
    lzma = write(tmp_path / "lzma.vtu", mixed_mesh(), compression="lzma")
    assert read_vtu(lzma) is None
    assert_same_mesh(read_meshio(lzma), meshio.read(lzma))

    polygons = meshio.Mesh(
        np.random.default_rng(3).random((6, 3)),
        [("triangle", np.array([[0, 1, 2]])), ("polygon", np.array([[1, 2, 3, 4, 5]]))],
    )
    path = write(tmp_path / "poly.vtu", polygons)
    assert read_vtu(path) is None
    mesh = read_meshio(path)
    assert [b.type for b in mesh.cells] == ["triangle", "polygon"]


def test_read_meshio_uses_the_lean_reader_and_meshio_for_what_it_refuses(tmp_path, monkeypatch):
    path = write(tmp_path / "m.vtu", mixed_mesh())
    calls = []
    real_read = meshio.read
    monkeypatch.setattr(meshio, "read", lambda *a, **k: calls.append(a) or real_read(*a, **k))
    assert_same_mesh(read_meshio(path), real_read(path))
    assert calls == []
    monkeypatch.setattr(vtu_module, "_FIXED_CELLS", {})  # refuses every cell type
    monkeypatch.setattr("meshop.data.mesh_io.read_vtu", vtu_module.read_vtu)
    assert_same_mesh(read_meshio(path), real_read(path))
    assert len(calls) == 1


def test_a_corrupt_vtu_gives_meshio_error(tmp_path):
    from meshop.errors import MeshReadError

    path = tmp_path / "bad.vtu"
    text = write(path, mixed_mesh()).read_text()
    path.write_text(text[: len(text) // 2])
    with pytest.raises(Exception):  # noqa: B017
        read_vtu(path)
    with pytest.raises(MeshReadError, match="cannot read mesh file .*bad.vtu.*meshio said"):
        read_meshio(path)


def test_appended_data_is_read_by_meshio(tmp_path):
    inline = write(tmp_path / "inline.vtu", mixed_mesh(), compression=None)
    runs = []

    def to_appended(match):
        offset = sum(len(run) for run in runs)
        runs.append(match.group(2).strip())
        start = match.group(1).replace('format="binary"', f'format="appended" offset="{offset}"')
        return start + "</DataArray>"

    text = re.sub(
        r"(<DataArray[^>]*>)(.*?)</DataArray>", to_appended, inline.read_text(), flags=re.S
    )
    appended = '<AppendedData encoding="base64">_' + "".join(runs) + "</AppendedData>\n</VTKFile>"
    path = tmp_path / "appended.vtu"
    path.write_text(text.replace("</VTKFile>", appended))
    assert read_vtu(path) is None
    assert_same_mesh(read_meshio(path), meshio.read(inline))


def raw_appended(inline_path, path) -> None:
    """Rewrite a meshio-written zlib ``.vtu`` file (inline base64 arrays) as VTK's own writers
    store one: every array in one raw ``AppendedData`` section, its block header (block count,
    block size, last block's size, each block's compressed size) and then its zlib blocks."""
    text = inline_path.read_text()
    match = re.search(r'header_type="(\w+)"', text)
    item = {"UInt32": 4, "UInt64": 8}[match.group(1) if match else "UInt32"]
    raw = []

    def to_appended(match):
        run = "".join(match.group(2).split())
        blocks = int(np.frombuffer(base64.b64decode(run[:8])[:item], f"<u{item}")[0])
        head_chars = -(-(3 + blocks) * item // 3) * 4  # the header is a base64 run of its own
        data = base64.b64decode(run[:head_chars]) + base64.b64decode(run[head_chars:])
        offset = sum(len(r) for r in raw)
        raw.append(data)
        start = match.group(1).replace('format="binary"', f'format="appended" offset="{offset}"')
        return start + "</DataArray>"

    text = re.sub(r"(<DataArray[^>]*>)(.*?)</DataArray>", to_appended, text, flags=re.S)
    head, tail = text.rsplit("</VTKFile>", 1)
    with open(path, "wb") as file:
        file.write(head.encode())
        file.write(b'<AppendedData encoding="raw">\n_')
        for data in raw:
            file.write(data)
        file.write(b"\n</AppendedData>\n</VTKFile>" + tail.encode())


@pytest.mark.parametrize("n", [9, 200_000], ids=["one-block", "many-blocks"])
def test_zlib_compressed_raw_appended_data_equals_meshio(tmp_path, n, threads):
    """VTK's own writers (ParaView's too) store zlib blocks in a raw AppendedData section by
    default: read by the lean reader as meshio reads it."""
    rng = np.random.default_rng(4)
    mesh = (
        mixed_mesh()
        if n == 9
        else meshio.Mesh(
            rng.random((n, 3)),
            [("triangle", rng.integers(0, n, size=(2 * n, 3)).astype(np.int32))],
            point_data={"u": rng.random((n, 3)), "p": rng.random(n).astype(np.float32)},
        )
    )
    inline = write(tmp_path / "inline.vtu", mesh)
    assert 'compressor="vtkZLibDataCompressor"' in inline.read_text()
    path = tmp_path / "appended.vtu"
    raw_appended(inline, path)
    assert b'format="appended"' in path.read_bytes() and b'format="binary"' not in path.read_bytes()
    ours, theirs = read_both(path)
    assert_same_mesh(ours, theirs)
    assert_same_mesh(ours, meshio.read(inline))


def test_a_truncated_zlib_appended_block_is_an_error(tmp_path):
    inline = write(tmp_path / "inline.vtu", mixed_mesh())
    path = tmp_path / "appended.vtu"
    raw_appended(inline, path)
    data = path.read_bytes()
    end = data.index(b"\n</AppendedData>")
    path.write_bytes(data[: end - 5] + data[end:])  # the last block loses its last bytes
    with pytest.raises((ValueError, zlib.error)):
        read_vtu(path)


@pytest.mark.parametrize("layout", [*LAYOUTS, pytest.param("raw", id="raw-appended")])
@pytest.mark.parametrize("feed", [1, 7, 64])
def test_tags_and_data_cut_anywhere_by_the_feed_read_alike(tmp_path, layout, feed, monkeypatch):
    """The file is read ``feed`` bytes at a time: a DataArray's start tag, its data, its end tag
    and the AppendedData tag are cut at every place, and the mesh is the same."""
    path = tmp_path / "m.vtu"
    mesh = mixed_mesh()
    if layout == "raw":
        vtu_module.write_vtu(path, mesh.points, mesh.cells_dict.items(), mesh.point_data)
    else:
        write(path, mesh, **layout)
    whole = read_vtu(path)
    monkeypatch.setattr(vtu_module, "_FEED", feed)
    assert_same_mesh(read_vtu(path), whole)


def test_the_parser_never_holds_an_arrays_data(tmp_path, monkeypatch):
    """The XML parser is given the tags, not the base64 text between them (which expat would
    build into a string as long as the array's data)."""
    path = write(tmp_path / "m.vtu", mixed_mesh(), compression=None)
    fed = []
    feed = vtu_module.ElementTree.XMLPullParser.feed
    monkeypatch.setattr(
        vtu_module.ElementTree.XMLPullParser,
        "feed",
        lambda self, data: fed.append(bytes(data)) or feed(self, data),
    )
    ours, theirs = read_both(path)
    assert_same_mesh(ours, theirs)
    given = b"".join(fed)
    texts = re.findall(rb"<DataArray[^>]*>\s*(\S{20,})\s*</DataArray>", path.read_bytes())
    assert len(texts) == 9 and not any(text in given for text in texts)
    assert given.count(b"<DataArray") == given.count(b"</DataArray>") == 9
    assert len(given) < path.stat().st_size / 2


def test_a_tag_with_a_quoted_bracket_is_read(tmp_path):
    path = write(tmp_path / "m.vtu", mixed_mesh(), compression=None)
    path.write_text(path.read_text().replace('Name="p"', 'Name="p" Info="a>b"', 1))  # legal XML
    mesh = read_vtu(path)
    assert mesh is not None
    np.testing.assert_array_equal(mesh.point_data["p"], mixed_mesh().point_data["p"])


def test_every_array_gets_its_data_self_closing_ones_none(tmp_path):
    path = tmp_path / "a.xml"
    path.write_bytes(
        b'<A><DataArray Name="x>"> 12 3 </DataArray><DataArray Name="e"/>'
        b"<DataArray>\n</DataArray><B>text</B><DataArray>45</DataArray></A>"
    )
    with open(path, "rb") as file:
        events = vtu_module._Events(file)
        ends = [elem.get("Name", elem.tag) for event, elem in events if event == "end"]
        texts = [text[:] for text in events.texts]
    assert ends == ["x>", "e", "DataArray", "B", "DataArray", "A"]
    assert texts == [b" 12 3 ", b"", b"\n", b"45"]


def test_a_file_cut_inside_an_arrays_data_is_an_error(tmp_path):
    path = write(tmp_path / "m.vtu", mixed_mesh(), compression=None)
    data = path.read_bytes()
    path.write_bytes(data[: data.index(b"</DataArray>") - 10])
    with pytest.raises(ValueError, match="ends inside a DataArray"):
        read_vtu(path)

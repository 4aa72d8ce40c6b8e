"""A lean reader of VTK XML ``.vtu`` files: the common layout, at a fraction of meshio's memory.

``meshio.read`` parses the whole XML tree first (every DataArray's text held at once) and
decompresses each array into a list of blocks that it then joins, so reading a 1e7-node mesh
peaks at several times the size of its arrays. :func:`read_vtu` streams the file instead: each
DataArray is decoded into its final numpy array when its closing tag is parsed and its text is
dropped at once; base64 runs are decoded a window at a time and zlib blocks are decompressed
straight into the array that holds the result (connectivity straight into meshio's int64).

It reads one ``Piece`` of an ``UnstructuredGrid`` stored little-endian with inline ``binary``
(uncompressed or ``vtkZLibDataCompressor``) or ``ascii`` DataArrays, and cells of a fixed number
of nodes. Anything else (appended data, other compressors, polygons, polyhedra, higher-order
Lagrange/Bezier cells, several pieces, big-endian data, FieldData, irregular offsets) gives
None, so that the caller falls back to ``meshio.read``. The mesh it returns equals
``meshio.read``'s: same points, cell blocks (meshio's type names, node order and int64
connectivity), point data and cell data split per block.
"""

from __future__ import annotations

import binascii
import os
import re
import zlib
from xml.etree import ElementTree

import meshio
import numpy as np
from meshio._common import num_nodes_per_cell
from meshio._vtk_common import vtk_to_meshio_order, vtk_to_meshio_type

_TYPES = {
    "Int8": np.int8,
    "Int16": np.int16,
    "Int32": np.int32,
    "Int64": np.int64,
    "UInt8": np.uint8,
    "UInt16": np.uint16,
    "UInt32": np.uint32,
    "UInt64": np.uint64,
    "Float32": np.float32,
    "Float64": np.float64,
}
_HEADER_TYPES = {"UInt32": np.dtype("<u4"), "UInt64": np.dtype("<u8")}
#: cell types with a fixed number of nodes, which meshio reads as plain blocks
_FIXED_CELLS = {
    vtk: name
    for vtk, name in vtk_to_meshio_type.items()
    if name in num_nodes_per_cell and vtk != 42
}
_SECTIONS = ("Points", "Cells", "PointData", "CellData")
#: bytes decoded at a time from an uncompressed base64 run (a multiple of 3 and of 8)
_WINDOW = 3 << 20
_NON_SPACE = re.compile(r"\S")


class _Unsupported(Exception):
    """The file is outside the layout this reader handles; meshio reads it."""


def _little(name: str) -> np.dtype:
    try:
        return np.dtype(_TYPES[name]).newbyteorder("<")
    except KeyError:
        raise _Unsupported(f"data type {name!r}") from None


def _b64_bytes(text: str, start: int, lo: int, hi: int) -> bytes:
    """Bytes ``[lo, hi)`` of the base64 run that begins at ``text[start]``, decoding only the
    characters that encode them."""
    first, last = lo // 3, -(-hi // 3)
    raw = binascii.a2b_base64(text[start + 4 * first : start + 4 * last], strict_mode=True)
    out = raw[lo - 3 * first : hi - 3 * first]
    if len(out) != hi - lo:
        raise ValueError("base64 data ends early")
    return out


def _check_run_end(text: str, end: int) -> None:
    # an embedded space or newline would shift the run past where its length says it ends
    if _NON_SPACE.search(text, end) is not None:
        raise _Unsupported("base64 run with characters after its end")


class _Sink:
    """A 1D array of ``count`` items of ``dtype`` filled from the stored bytes of ``stored``
    items, converting a chunk at a time when the two types differ."""

    def __init__(self, count: int, stored: np.dtype, dtype: np.dtype):
        self.stored = stored
        self.array = np.empty(count, dtype=dtype)
        self.raw = self.array.view(np.uint8) if dtype == stored else None

    def write(self, pos: int, chunk: bytes) -> None:
        if self.raw is not None:
            self.raw[pos : pos + len(chunk)] = np.frombuffer(chunk, dtype=np.uint8)
            return
        size = self.stored.itemsize
        if pos % size or len(chunk) % size:
            raise _Unsupported("compression blocks not aligned with the data items")
        self.array[pos // size : (pos + len(chunk)) // size] = np.frombuffer(chunk, self.stored)


class _Reader:
    def __init__(self, header_type: str, compressor: str | None):
        if header_type not in _HEADER_TYPES:
            raise _Unsupported(f"header_type {header_type!r}")
        if compressor not in (None, "vtkZLibDataCompressor"):
            raise _Unsupported(f"compressor {compressor!r}")
        self.header = _HEADER_TYPES[header_type]
        self.compressed = compressor is not None

    def data_array(self, elem: ElementTree.Element, target=None) -> np.ndarray:
        """The values of a DataArray, as ``target`` (default: the stored type), shaped [n, c]
        when it names its NumberOfComponents."""
        stored = _little(elem.get("type", ""))
        dtype = stored if target is None else np.dtype(target)
        fmt = elem.get("format", "ascii")
        text = elem.text
        if fmt == "ascii":
            values = np.fromstring(text or "", dtype=stored, sep=" ")
            values = values.astype(dtype, copy=False)
        elif fmt == "binary":
            if text is None:
                raise _Unsupported("binary DataArray without text")
            match = _NON_SPACE.search(text)
            start = len(text) if match is None else match.start()
            read = self._compressed if self.compressed else self._uncompressed
            values = read(text, start, stored, dtype)
        else:
            raise _Unsupported(f"DataArray format {fmt!r}")
        components = elem.get("NumberOfComponents") or None  # Firedrake writes ""
        if components is not None:
            components = int(components)
            if components < 1 or values.size % components:
                raise _Unsupported("data size not a multiple of NumberOfComponents")
            values = values.reshape(-1, components)
        return values

    def _uncompressed(self, text: str, start: int, stored: np.dtype, dtype: np.dtype):
        size = self.header.itemsize
        head_chars = -(-size // 3) * 4
        total = int(np.frombuffer(_b64_bytes(text, start, 0, size), self.header)[0])
        if total % stored.itemsize:
            raise _Unsupported("data size not a multiple of the item size")
        if total and text[start + head_chars - 1 : start + head_chars] == "=":
            run, skip = start + head_chars, 0  # the header is a base64 run of its own
        else:
            run, skip = start, size  # header and data are one base64 run
        sink = _Sink(total // stored.itemsize, stored, dtype)
        for lo in range(0, total, _WINDOW):
            hi = min(lo + _WINDOW, total)
            sink.write(lo, _b64_bytes(text, run, skip + lo, skip + hi))
        _check_run_end(text, run + -(-(skip + total) // 3) * 4)
        return sink.array

    def _compressed(self, text: str, start: int, stored: np.dtype, dtype: np.dtype):
        size = self.header.itemsize
        blocks = int(np.frombuffer(_b64_bytes(text, start, 0, size), self.header)[0])
        head_bytes = (3 + blocks) * size
        header = np.frombuffer(_b64_bytes(text, start, 0, head_bytes), self.header)
        block_size, last_size = int(header[1]), int(header[2])
        if blocks and last_size == 0:
            last_size = block_size  # VTK: a zero last size means a full last block
        total = (blocks - 1) * block_size + last_size if blocks else 0
        if total % stored.itemsize:
            raise _Unsupported("data size not a multiple of the item size")
        run = start + -(-head_bytes // 3) * 4  # the data's own base64 run follows the header's
        ends = np.concatenate([[0], np.cumsum(header[3:], dtype=np.int64)]).tolist()
        sink = _Sink(total // stored.itemsize, stored, dtype)
        for k in range(blocks):
            expected = last_size if k == blocks - 1 else block_size
            block = zlib.decompress(_b64_bytes(text, run, ends[k], ends[k + 1]), bufsize=expected)
            if len(block) != expected:
                raise ValueError(f"zlib block {k} holds {len(block)} bytes, not {expected}")
            sink.write(k * block_size, block)
        _check_run_end(text, run + -(-ends[-1] // 3) * 4)
        return sink.array


def _connectivity_dtype(stored: np.dtype) -> np.dtype:
    # meshio adds its int64 piece offset to every block, so its connectivity is that sum's type
    dtype = (np.zeros(1, dtype=stored) + np.int64(0)).dtype
    if dtype.kind != "i":
        raise _Unsupported(f"connectivity of type {stored}")
    return dtype


def _regular(offsets: np.ndarray, first: int, nodes: int) -> bool:
    """Whether ``offsets`` are ``first + nodes * (1, 2, ...)``: cells stored back to back."""
    step = 1 << 20
    for lo in range(0, len(offsets), step):
        chunk = offsets[lo : lo + step]
        expected = first + nodes * np.arange(lo + 1, lo + 1 + len(chunk), dtype=np.int64)
        if not np.array_equal(chunk, expected):
            return False
    return True


def _cell_blocks(cells: dict, num_cells: int, cell_data_raw: dict):
    """meshio's cell blocks (consecutive cells of one type) and cell data split per block."""
    if set(cells) != {"connectivity", "offsets", "types"} or num_cells == 0:
        raise _Unsupported("Cells without connectivity, offsets and types")
    conn, offsets, types = (cells[k].reshape(-1) for k in ("connectivity", "offsets", "types"))
    if len(offsets) != num_cells or len(types) != num_cells:
        raise _Unsupported("cell arrays of a length other than NumberOfCells")
    if any(len(v) != num_cells for v in cell_data_raw.values()):
        raise _Unsupported("cell data of a length other than NumberOfCells")
    breaks = (np.flatnonzero(types[1:] != types[:-1]) + 1).tolist()
    blocks, cell_data = [], {name: [] for name in cell_data_raw}
    for start, end in zip([0, *breaks], [*breaks, num_cells], strict=True):
        vtk_type = int(types[start])
        if vtk_type not in _FIXED_CELLS:
            raise _Unsupported(f"VTK cell type {vtk_type}")
        name = _FIXED_CELLS[vtk_type]
        nodes = num_nodes_per_cell[name]
        first, last = int(offsets[start]) - nodes, int(offsets[end - 1])
        if first < 0 or last > len(conn) or not _regular(offsets[start:end], first, nodes):
            raise _Unsupported("cells not stored back to back")
        data = conn[first:last].reshape(-1, nodes)
        order = vtk_to_meshio_order(vtk_type)
        if order is not None:
            data = data[:, order]
        blocks.append(meshio.CellBlock(name, data))
        for key, values in cell_data_raw.items():
            cell_data[key].append(values[start:end])
    return blocks, cell_data


def _read(path: str | os.PathLike) -> meshio.Mesh:
    reader = None
    stack: list[str] = []
    pending: list[tuple[str, np.ndarray]] = []
    sections: dict[str, dict[str, np.ndarray]] = {}
    piece: dict[str, str] | None = None
    with open(path, "rb") as file:
        for event, elem in ElementTree.iterparse(file, events=("start", "end")):
            tag = elem.tag
            if event == "start":
                if not stack:
                    if tag != "VTKFile" or elem.get("type") != "UnstructuredGrid":
                        raise _Unsupported("not a VTKFile of type UnstructuredGrid")
                    if elem.get("version", "0.1") not in ("0.1", "1.0"):
                        raise _Unsupported(f"version {elem.get('version')!r}")
                    if elem.get("byte_order") != "LittleEndian":
                        raise _Unsupported(f"byte_order {elem.get('byte_order')!r}")
                    reader = _Reader(elem.get("header_type", "UInt32"), elem.get("compressor"))
                elif tag == "Piece":
                    if piece is not None:
                        raise _Unsupported("several Pieces")
                    piece = dict(elem.attrib)
                stack.append(tag)
                continue
            stack.pop()
            parent = stack[-1] if stack else None
            if tag == "DataArray":
                if parent not in _SECTIONS or reader is None:
                    raise _Unsupported(f"DataArray in {parent}")
                name = "Points" if parent == "Points" else elem.get("Name")
                target = None
                if parent == "Cells" and name == "connectivity":
                    target = _connectivity_dtype(_little(elem.get("type", "")))
                pending.append((name, reader.data_array(elem, target)))
            elif tag in _SECTIONS and parent == "Piece" and tag not in sections:
                sections[tag] = dict(pending)
                if len(sections[tag]) != len(pending) or (tag == "Points" and len(pending) != 1):
                    raise _Unsupported(f"{tag} with repeated or missing arrays")
                pending = []
            elif not (
                (tag == "Piece" and parent == "UnstructuredGrid")
                or (tag == "UnstructuredGrid" and parent == "VTKFile")
                or (tag == "VTKFile" and parent is None)
            ):
                raise _Unsupported(f"element {tag} in {parent}")  # FieldData, AppendedData, ...
            elem.clear()
    if piece is None or "Points" not in sections or "Cells" not in sections:
        raise _Unsupported("no Piece with Points and Cells")
    num_points, num_cells = int(piece["NumberOfPoints"]), int(piece["NumberOfCells"])
    points = sections["Points"]["Points"]
    if points.ndim != 2 or len(points) != num_points:
        raise _Unsupported("Points without NumberOfComponents or of another length")
    cells, cell_data = _cell_blocks(sections["Cells"], num_cells, sections.get("CellData", {}))
    return meshio.Mesh(points, cells, point_data=sections.get("PointData", {}), cell_data=cell_data)


def read_vtu(path: str | os.PathLike) -> meshio.Mesh | None:
    """The mesh of a ``.vtu`` file, equal to ``meshio.read``'s, or None for a layout this reader
    leaves to meshio (see the module's docstring).

    Raises:
        OSError, xml.etree.ElementTree.ParseError, ValueError, zlib.error: the file is missing
            or corrupt (meshio's reading gives the message to show).
    """
    try:
        return _read(path)
    except _Unsupported:
        return None

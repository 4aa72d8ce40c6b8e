"""Lean VTK XML ``.vtu`` files: a reader and a writer at a fraction of meshio's memory.

``meshio.read`` parses the whole XML tree first (every DataArray's text held at once) and
decompresses each array into a list of blocks that it then joins, so reading a 1e7-node mesh
peaks at several times the size of its arrays. :func:`read_vtu` streams the file instead: the
XML parser is given the tags only, and each DataArray's data is read from the file where it lies
when its closing tag is parsed, decoded into its final numpy array (expat, given the data, would
build a string as long as it first: over a third of the reading time); base64 runs are decoded a
window at a time and zlib blocks are decompressed straight into the array that holds the result
(connectivity straight into meshio's int64).

It reads one ``Piece`` of an ``UnstructuredGrid`` stored little-endian with inline ``binary``
(uncompressed or ``vtkZLibDataCompressor``) or ``ascii`` DataArrays, or DataArrays in an
``AppendedData`` section of ``raw`` encoding, uncompressed (what :func:`write_vtu` writes: each
array is read straight from the file into its numpy array) or zlib-compressed (what VTK's own
writers, ParaView's included, write by default), and cells of a fixed number of nodes.
Anything else (base64 appended data, other compressors, polygons, polyhedra,
higher-order Lagrange/Bezier cells, several pieces, big-endian data, FieldData, irregular
offsets) gives None, so that the caller falls back to ``meshio.read``. The mesh it returns
equals ``meshio.read``'s: same points, cell blocks (meshio's type names, node order and int64
connectivity), point data and cell data split per block.

``meshio.write`` zlib-compresses and base64-encodes every array, with several full copies of
each. :func:`write_vtu` writes every array uncompressed into one raw ``AppendedData`` section,
straight from numpy to the file; an array that must be cast, padded to three components or
reordered is converted a block of rows at a time.
"""

from __future__ import annotations

import binascii
import collections
import os
import re
import zlib
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple
from xml.etree import ElementTree
from xml.sax.saxutils import quoteattr

import meshio
import numpy as np
import torch
from meshio._common import num_nodes_per_cell
from meshio._vtk_common import (
    meshio_to_vtk_order,
    meshio_to_vtk_type,
    vtk_to_meshio_order,
    vtk_to_meshio_type,
)

from meshop.errors import FieldError

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
_FIELDS = ("PointData", "CellData")
#: bytes decoded at a time from an uncompressed base64 run (a multiple of 3 and of 8)
_WINDOW = 3 << 20
#: consecutive compressed blocks a reading thread inflates in one task (meshio writes blocks of
#: 32 KiB, VTK of 32 or 64 KiB)
_TASK_BLOCKS = 128
_NON_SPACE = re.compile(rb"\S")
#: a DataArray's start tag (attribute values may hold ">")
_DATA_ARRAY = re.compile(rb"""<DataArray\b(?:[^>"']|"[^"]*"|'[^']*')*>""")
#: bytes of XML given to the parser at a time
_FEED = 1 << 16
_APPENDED = b"<AppendedData"
#: the AppendedData start tag and the underscore after which its data begin
_APPENDED_START = re.compile(rb"<AppendedData\b([^>]*)>\s*_")
_ENCODING = re.compile(rb"""\bencoding\s*=\s*["']([^"']*)["']""")


class _Unsupported(Exception):
    """The file is outside the layout this reader handles; meshio reads it."""


def _little(name: str) -> np.dtype:
    try:
        return np.dtype(_TYPES[name]).newbyteorder("<")
    except KeyError:
        raise _Unsupported(f"data type {name!r}") from None


def _b64_bytes(text: _Text, start: int, lo: int, hi: int) -> bytes:
    """Bytes ``[lo, hi)`` of the base64 run that begins at ``text[start]``, decoding only the
    characters that encode them."""
    first, last = lo // 3, -(-hi // 3)
    raw = binascii.a2b_base64(text[start + 4 * first : start + 4 * last], strict_mode=True)
    out = raw[lo - 3 * first : hi - 3 * first]
    if len(out) != hi - lo:
        raise ValueError("base64 data ends early")
    return out


def _check_run_end(text: _Text, end: int) -> None:
    # an embedded space or newline would shift the run past where its length says it ends
    if text.non_space(end) is not None:
        raise _Unsupported("base64 run with characters after its end")


class _Text:
    """The character data of a DataArray where it lies in the file, bytes ``[start, stop)``: read
    a slice at a time (``text[a:b]``, bytes) when it is decoded, never given to the XML parser
    nor held whole."""

    def __init__(self, fd: int, start: int, stop: int):
        self.fd, self.start, self.stop = fd, start, stop

    def __len__(self) -> int:
        return self.stop - self.start

    def __getitem__(self, part: slice) -> bytes:
        lo, hi, _ = part.indices(len(self))
        pieces, at = [], lo
        while at < hi:  # a read may return less than asked
            piece = os.pread(self.fd, hi - at, self.start + at)
            if not piece:
                raise ValueError("the file ends inside a DataArray")
            pieces.append(piece)
            at += len(piece)
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    def non_space(self, at: int = 0) -> int | None:
        """The first character at or after ``at`` that is not white space (None: none)."""
        while at < len(self):
            window = self[at : at + _FEED]
            match = _NON_SPACE.search(window)
            if match is not None:
                return at + match.start()
            at += len(window)
        return None


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


class _Appended(NamedTuple):
    """A DataArray stored in the AppendedData section, ``offset`` bytes after its start."""

    offset: int
    stored: np.dtype
    dtype: np.dtype
    components: str | None


def _shaped(values: np.ndarray, components: str | None) -> np.ndarray:
    """``values`` shaped [n, c] when the DataArray names its NumberOfComponents c."""
    if components is None:
        return values
    count = int(components)
    if count < 1 or values.size % count:
        raise _Unsupported("data size not a multiple of NumberOfComponents")
    return values.reshape(-1, count)


class _Reader:
    def __init__(self, header_type: str, compressor: str | None):
        if header_type not in _HEADER_TYPES:
            raise _Unsupported(f"header_type {header_type!r}")
        if compressor not in (None, "vtkZLibDataCompressor"):
            raise _Unsupported(f"compressor {compressor!r}")
        self.header = _HEADER_TYPES[header_type]
        self.compressed = compressor is not None

    def data_array(
        self, elem: ElementTree.Element, text: _Text, target=None
    ) -> np.ndarray | _Appended:
        """The values of a DataArray whose character data is ``text``, as ``target`` (default:
        the stored type), shaped [n, c] when it names its NumberOfComponents; where they lie in
        the AppendedData section for an appended one."""
        stored = _little(elem.get("type", ""))
        dtype = stored if target is None else np.dtype(target)
        components = elem.get("NumberOfComponents") or None  # Firedrake writes ""
        fmt = elem.get("format", "ascii")
        if fmt == "appended":
            offset = elem.get("offset", "")
            if not offset.isdigit():
                raise _Unsupported("appended DataArray without an offset")
            return _Appended(int(offset), stored, dtype, components)
        if fmt == "ascii":
            values = np.fromstring(text[:].decode("ascii"), dtype=stored, sep=" ")
            values = values.astype(dtype, copy=False)
        elif fmt == "binary":
            start = text.non_space()
            if start is None:
                raise _Unsupported("binary DataArray without text")
            read = self._compressed if self.compressed else self._uncompressed
            values = read(text, start, stored, dtype)
        else:
            raise _Unsupported(f"DataArray format {fmt!r}")
        return _shaped(values, components)

    def appended(self, file, start: int, array: _Appended) -> np.ndarray:
        """The values of an appended DataArray, read from the raw AppendedData section of
        ``file`` that begins at byte ``start``."""
        size = self.header.itemsize
        file.seek(start + array.offset)
        head = file.read(size)
        if len(head) != size:
            raise ValueError("appended data ends early")
        if self.compressed:
            return _shaped(self._appended_blocks(file, head, array), array.components)
        total = int(np.frombuffer(head, self.header)[0])
        if total % array.stored.itemsize:
            raise _Unsupported("data size not a multiple of the item size")
        sink = _Sink(total // array.stored.itemsize, array.stored, array.dtype)
        if sink.raw is not None:
            complete = file.readinto(memoryview(sink.raw)) == total
        else:
            complete = True
            for lo in range(0, total, _WINDOW):
                chunk = file.read(min(_WINDOW, total - lo))
                complete = len(chunk) == min(_WINDOW, total - lo)
                if not complete:
                    break
                sink.write(lo, chunk)
        if not complete:
            raise ValueError("appended data ends early")
        return _shaped(sink.array, array.components)

    def _appended_blocks(self, file, head: bytes, array: _Appended) -> np.ndarray:
        """A zlib-compressed appended array (VTK's own writers' default: the block count, block
        size, last block's size and each block's compressed size, then the blocks), read from
        ``file`` just after its first header item ``head``, a block at a time."""
        size = self.header.itemsize
        blocks = int(np.frombuffer(head, self.header)[0])
        rest = file.read((2 + blocks) * size)
        if len(rest) != (2 + blocks) * size:
            raise ValueError("appended data ends early")
        header = np.frombuffer(rest, self.header)
        block_size, last_size = int(header[0]), int(header[1])
        sink = self._blocks_sink(blocks, block_size, last_size, array.stored, array.dtype)

        def fetch(lo: int, hi: int) -> bytes:  # the blocks follow each other in the file
            data = file.read(hi - lo)
            if len(data) != hi - lo:
                raise ValueError("appended data ends early")
            return data

        _inflate_blocks(sink, header[2:].tolist(), block_size, last_size, fetch)
        return sink.array

    @staticmethod
    def _blocks_sink(blocks: int, block_size: int, last_size: int, stored, dtype) -> _Sink:
        """The array that ``blocks`` blocks of ``block_size`` bytes (the last ``last_size``)
        fill."""
        last_size = last_size or block_size  # VTK: a zero last size means a full last block
        total = (blocks - 1) * block_size + last_size if blocks else 0
        if total % stored.itemsize:
            raise _Unsupported("data size not a multiple of the item size")
        return _Sink(total // stored.itemsize, stored, dtype)

    @staticmethod
    def _inflate(data: bytes, k: int, blocks: int, block_size: int, last_size: int) -> bytes:
        """Block ``k`` of ``blocks``, decompressed and checked against its declared size."""
        expected = (last_size or block_size) if k == blocks - 1 else block_size
        block = zlib.decompress(data, bufsize=max(expected, 1))
        if len(block) != expected:
            raise ValueError(f"zlib block {k} holds {len(block)} bytes, not {expected}")
        return block

    def _uncompressed(self, text: _Text, start: int, stored: np.dtype, dtype: np.dtype):
        size = self.header.itemsize
        head_chars = -(-size // 3) * 4
        total = int(np.frombuffer(_b64_bytes(text, start, 0, size), self.header)[0])
        if total % stored.itemsize:
            raise _Unsupported("data size not a multiple of the item size")
        if total and text[start + head_chars - 1 : start + head_chars] == b"=":
            run, skip = start + head_chars, 0  # the header is a base64 run of its own
        else:
            run, skip = start, size  # header and data are one base64 run
        sink = _Sink(total // stored.itemsize, stored, dtype)
        for lo in range(0, total, _WINDOW):
            hi = min(lo + _WINDOW, total)
            sink.write(lo, _b64_bytes(text, run, skip + lo, skip + hi))
        _check_run_end(text, run + -(-(skip + total) // 3) * 4)
        return sink.array

    def _compressed(self, text: _Text, start: int, stored: np.dtype, dtype: np.dtype):
        size = self.header.itemsize
        blocks = int(np.frombuffer(_b64_bytes(text, start, 0, size), self.header)[0])
        head_bytes = (3 + blocks) * size
        header = np.frombuffer(_b64_bytes(text, start, 0, head_bytes), self.header)
        block_size, last_size = int(header[1]), int(header[2])
        sink = self._blocks_sink(blocks, block_size, last_size, stored, dtype)
        run = start + -(-head_bytes // 3) * 4  # the data's own base64 run follows the header's
        sizes = header[3:].tolist()
        fetch = lambda lo, hi: _b64_bytes(text, run, lo, hi)  # noqa: E731
        _inflate_blocks(sink, sizes, block_size, last_size, fetch)
        _check_run_end(text, run + -(-sum(sizes) // 3) * 4)
        return sink.array


def _inflate_blocks(
    sink: _Sink,
    sizes: list[int],
    block_size: int,
    last_size: int,
    fetch: Callable[[int, int], bytes],
) -> None:
    """Fill ``sink`` with zlib blocks of compressed ``sizes``: ``fetch(lo, hi)`` gives bytes
    ``[lo, hi)`` of the blocks stored back to back, called in order on this thread, which fetches
    the next :data:`_TASK_BLOCKS` blocks while torch's other threads inflate and copy the ones
    before (zlib and numpy release the GIL)."""
    blocks = len(sizes)
    ends = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).tolist()

    def inflate(k0: int, k1: int, data: bytes) -> None:
        view = memoryview(data)
        for k in range(k0, k1):
            part = view[ends[k] - ends[k0] : ends[k + 1] - ends[k0]]
            sink.write(k * block_size, _Reader._inflate(part, k, blocks, block_size, last_size))

    tasks = [(k0, min(k0 + _TASK_BLOCKS, blocks)) for k0 in range(0, blocks, _TASK_BLOCKS)]
    threads = torch.get_num_threads()
    if threads <= 1 or len(tasks) <= 1:
        for k0, k1 in tasks:
            inflate(k0, k1, fetch(ends[k0], ends[k1]))
        return
    with ThreadPoolExecutor(threads) as pool:
        pending: collections.deque = collections.deque()
        for k0, k1 in tasks:
            pending.append(pool.submit(inflate, k0, k1, fetch(ends[k0], ends[k1])))
            while len(pending) > 2 * threads:  # the fetched bytes waiting stay few
                pending.popleft().result()
        for task in pending:
            task.result()


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


class _Events:
    """The XML events of a ``.vtu`` file up to its AppendedData section, whose raw bytes are no
    XML; ``appended`` is then that section's encoding and the byte where its data begin. The
    character data of every DataArray is not given to the parser (expat would build a string of
    it, as long as the array's base64 text): its place in the file is appended to ``texts`` as a
    :class:`_Text`, one for every DataArray in the order of their start tags, before the parser
    sees the array's end tag."""

    def __init__(self, file):
        self.file = file
        self.appended: tuple[str, int] | None = None
        self.texts: collections.deque[_Text] = collections.deque()

    def __iter__(self) -> Iterator[tuple[str, ElementTree.Element]]:
        parser = ElementTree.XMLPullParser(events=("start", "end"))
        fd = self.file.fileno()
        buffer, base = b"", 0  # bytes not yet handled, from byte ``base`` of the file
        text_start = None  # inside a DataArray's character data: where it began
        while True:
            chunk = self.file.read(_FEED)
            buffer += chunk
            while buffer:
                if text_start is not None:  # the data ends at the next tag
                    at = buffer.find(b"<")
                    if at < 0:
                        base, buffer = base + len(buffer), b""
                        break
                    self.texts.append(_Text(fd, text_start, base + at))
                    text_start, base, buffer = None, base + at, buffer[at:]
                appended = buffer.find(_APPENDED)
                tag = _DATA_ARRAY.search(buffer, 0, appended if appended >= 0 else len(buffer))
                if tag is None and appended >= 0:
                    parser.feed(buffer[:appended])
                    yield from parser.read_events()
                    self._locate(base + appended)
                    return
                if tag is None:  # keep what may begin a tag cut off by the chunk's end
                    keep = buffer.rfind(b"<") if chunk else -1
                    keep = len(buffer) if keep < 0 else keep
                    parser.feed(buffer[:keep])
                    yield from parser.read_events()
                    base, buffer = base + keep, buffer[keep:]
                    break
                end = tag.end()
                if buffer[end - 2 : end - 1] == b"/":  # <DataArray ... />: no data
                    self.texts.append(_Text(fd, base + end, base + end))
                else:
                    text_start = base + end
                parser.feed(buffer[:end])
                yield from parser.read_events()
                base, buffer = base + end, buffer[end:]
            if not chunk:
                break
        if text_start is not None:
            raise ValueError("the file ends inside a DataArray")
        parser.close()
        yield from parser.read_events()

    def _locate(self, at: int) -> None:
        self.file.seek(at)
        match = _APPENDED_START.match(self.file.read(1 << 12))
        if match is None:
            raise _Unsupported("AppendedData without the underscore that starts its data")
        encoding = _ENCODING.search(match.group(1))
        self.appended = ("" if encoding is None else encoding.group(1).decode(), at + match.end())


def _read(path: str | os.PathLike, fields: Collection[str] | None = None) -> meshio.Mesh:
    reader = None
    stack: list[str] = []
    pending: list[tuple[str, np.ndarray | _Appended]] = []
    sections: dict[str, dict[str, np.ndarray | _Appended]] = {}
    piece: dict[str, str] | None = None
    with open(path, "rb") as file:
        events = _Events(file)
        for event, elem in events:
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
                text = events.texts.popleft()
                if fields is not None and parent in _FIELDS and name not in fields:
                    elem.clear()  # not asked for: not decoded
                    continue
                target = None
                if parent == "Cells" and name == "connectivity":
                    target = _connectivity_dtype(_little(elem.get("type", "")))
                pending.append((name, reader.data_array(elem, text, target)))
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
                raise _Unsupported(f"element {tag} in {parent}")  # FieldData, ...
            elem.clear()
        for section in sections.values():
            for name, values in section.items():
                if isinstance(values, _Appended):
                    if events.appended is None or events.appended[0] != "raw":
                        raise _Unsupported("appended data without a raw AppendedData section")
                    section[name] = reader.appended(file, events.appended[1], values)
    if piece is None or "Points" not in sections or "Cells" not in sections:
        raise _Unsupported("no Piece with Points and Cells")
    num_points, num_cells = int(piece["NumberOfPoints"]), int(piece["NumberOfCells"])
    points = sections["Points"]["Points"]
    if points.ndim != 2 or len(points) != num_points:
        raise _Unsupported("Points without NumberOfComponents or of another length")
    cells, cell_data = _cell_blocks(sections["Cells"], num_cells, sections.get("CellData", {}))
    return meshio.Mesh(points, cells, point_data=sections.get("PointData", {}), cell_data=cell_data)


def read_vtu(path: str | os.PathLike, fields: Collection[str] | None = None) -> meshio.Mesh | None:
    """The mesh of a ``.vtu`` file, equal to ``meshio.read``'s, or None for a layout this reader
    leaves to meshio (see the module's docstring). ``fields``: the point and cell data arrays to
    read (None: all); the others are skipped without being decoded (a simulation's file often
    holds many more fields than a model reads).

    Raises:
        OSError, xml.etree.ElementTree.ParseError, ValueError, zlib.error: the file is missing
            or corrupt (meshio's reading gives the message to show).
    """
    try:
        return _read(path, fields)
    except _Unsupported:
        return None


#: bytes converted at a time when an array is cast, padded or reordered before it is written
_BLOCK = 1 << 20
_VTK_NAMES = {np.dtype(t).newbyteorder("<"): name for name, t in _TYPES.items()}
#: meshio's cell types that a ``.vtu`` file stores as [M, nodes] blocks (a polyhedron needs faces)
_WRITABLE_CELLS = set(meshio_to_vtk_type) - {"polyhedron"}


def _stored(dtype: np.dtype) -> np.dtype:
    """The little-endian VTK type that holds values of ``dtype`` (bool as UInt8, half as
    Float32)."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return np.dtype("<u1")
    if dtype == np.float16:
        return np.dtype("<f4")
    stored = dtype.newbyteorder("<")
    if stored not in _VTK_NAMES:
        raise TypeError(f"write_vtu stores integers and floats, not {dtype}")
    return stored


def _rows(
    values: np.ndarray, dtype: np.dtype, width: int, order: Sequence[int] | None = None
) -> Iterator[np.ndarray]:
    """``values`` [n, k] as C-contiguous blocks of rows of ``dtype`` and ``width`` >= k columns
    (zeros after the k columns of ``values``, taken in ``order`` if given); the whole array at
    once where it already is so."""
    k = values.shape[1]
    if order is None and k == width and values.dtype == dtype and values.flags.c_contiguous:
        yield values
        return
    rows = max(1, _BLOCK // (width * dtype.itemsize))
    buffer = np.zeros((min(rows, len(values)), width), dtype=dtype)
    for lo in range(0, len(values), rows):
        part = values[lo : lo + rows]
        out = buffer[: len(part)]
        if order is None:
            out[:, :k] = part
        else:
            for column, source in enumerate(order):
                out[:, column] = part[:, source]
        yield out


def _ranges(start: int, stop: int, step: int, dtype: np.dtype) -> Iterator[np.ndarray]:
    """``start + step * (0, 1, ...)`` below ``stop``, in blocks."""
    rows = _BLOCK // dtype.itemsize
    for lo in range(start, stop, rows * step):
        yield np.arange(lo, min(lo + rows * step, stop), step, dtype=dtype)


class _Array(NamedTuple):
    """A DataArray to write: its section, name, stored type, components (None: a plain list),
    size in bytes and the blocks that make its data."""

    section: str
    name: str
    dtype: np.dtype
    components: int | None
    nbytes: int
    blocks: Iterator[np.ndarray]


def _cell_arrays(cells: list[tuple[str, np.ndarray | None]], n: int) -> list[_Array]:
    """Connectivity, offsets and types of cell blocks (``None``: one vertex per node)."""
    sizes = [(n, 1) if conn is None else conn.shape for _, conn in cells]
    corners = sum(count * nodes for count, nodes in sizes)
    num_cells = sum(count for count, _ in sizes)
    index = np.dtype("<i4") if n < 2**31 else np.dtype("<i8")
    offset = np.dtype("<i4") if corners < 2**31 else np.dtype("<i8")

    def connectivity():
        for kind, conn in cells:
            if conn is None:
                yield from _ranges(0, n, 1, index)
            else:
                yield from _rows(conn, index, conn.shape[1], meshio_to_vtk_order(kind))

    def offsets():
        end = 0
        for count, nodes in sizes:
            yield from _ranges(end + nodes, end + nodes * count + 1, nodes, offset)
            end += nodes * count

    def types():
        for (kind, _), (count, _) in zip(cells, sizes, strict=True):
            for lo in range(0, count, _BLOCK):
                yield np.full(min(_BLOCK, count - lo), meshio_to_vtk_type[kind], dtype=np.uint8)

    return [
        _Array("Cells", "connectivity", index, None, corners * index.itemsize, connectivity()),
        _Array("Cells", "offsets", offset, None, num_cells * offset.itemsize, offsets()),
        _Array("Cells", "types", np.dtype(np.uint8), None, num_cells, types()),
    ]


def write_vtu(
    path: str | os.PathLike,
    points: np.ndarray,
    cells: Sequence[tuple[str, np.ndarray]] = (),
    point_data: Mapping[str, np.ndarray] | None = None,
) -> None:
    """Write a mesh as a VTK XML ``UnstructuredGrid`` file (version 1.0, little-endian, UInt64
    headers) with every array uncompressed in one raw ``AppendedData`` section, streamed from
    numpy to the file: no base64, no compression, no joined copy of the arrays. ``meshio.read``
    and :func:`read_vtu` read it back.

    Args:
        path: the file to write (replaced if it exists).
        points: [N, dim] node coordinates, dim <= 3; written as 3 components (zeros after dim),
            in float32 if they are float32, else in float64.
        cells: meshio cell blocks ``[(type, [M, nodes per cell] node indices), ...]`` of any
            type in meshio's VTK table but polyhedra, in meshio's node order (VTK's, but for
            the wedge, whose nodes are reordered to VTK's as ``meshio.write`` does). The
            connectivity is int32 below 2^31 nodes, else int64. No blocks: one vertex cell per
            node.
        point_data: ``{name: [N] or [N, k] values}`` (integers or floats; [N, ...] is flattened
            to [N, k]), each kept in its own type; a [N] field is written as a plain list, a
            [N, k] one with k components, a 2D mesh's [N, 2] vectors padded to 3 as ParaView
            expects.

    Raises:
        FieldError: a field has not one row per node.
        ValueError: a cell type that VTK does not know or cells that are not [M, nodes].
        TypeError: a field of a type other than integers or floats.
    """
    points = np.asarray(points)
    if points.ndim != 2 or not 1 <= points.shape[1] <= 3:
        raise ValueError(f"points of shape {points.shape}; expected [N, dim] with dim <= 3")
    n, dim = points.shape
    real = np.dtype("<f4") if points.dtype == np.float32 else np.dtype("<f8")
    blocks: list[tuple[str, np.ndarray | None]] = []
    for kind, conn in cells:
        conn = np.asarray(conn)
        if kind not in _WRITABLE_CELLS or conn.ndim != 2:
            raise ValueError(
                f"cannot write {kind} cells of shape {conn.shape} to a .vtu file: write_vtu "
                f"takes [M, nodes per cell] blocks of the types {sorted(_WRITABLE_CELLS)}"
            )
        blocks.append((kind, conn))
    num_cells = sum(len(conn) for _, conn in blocks) if blocks else n
    arrays = [_Array("Points", "Points", real, 3, 3 * n * real.itemsize, _rows(points, real, 3))]
    arrays += _cell_arrays(blocks or [("vertex", None)], n)
    for name, values in (point_data or {}).items():
        values = np.asarray(values)
        if values.shape[:1] != (n,):
            raise FieldError(
                f"field '{name}' has shape {tuple(values.shape)}, expected one row per node ({n})"
            )
        dtype = _stored(values.dtype)
        columns = values.reshape(n, -1)
        width = 3 if dim == 2 and columns.shape[1] == 2 else columns.shape[1]
        components = None if values.ndim == 1 else width
        nbytes = n * width * dtype.itemsize
        arrays.append(
            _Array("PointData", name, dtype, components, nbytes, _rows(columns, dtype, width))
        )
    with open(path, "wb") as file:
        file.write(_header(n, num_cells, arrays).encode())
        for array in arrays:
            file.write(np.array(array.nbytes, dtype="<u8").tobytes())
            for block in array.blocks:
                file.write(memoryview(block).cast("B"))
        file.write(b"\n  </AppendedData>\n</VTKFile>\n")


def _header(n: int, num_cells: int, arrays: list[_Array]) -> str:
    """The XML of a ``.vtu`` file up to the underscore after which its appended data begin."""
    lines = [
        '<?xml version="1.0"?>',
        '<VTKFile type="UnstructuredGrid" version="1.0" byte_order="LittleEndian" '
        'header_type="UInt64">',
        "  <UnstructuredGrid>",
        f'    <Piece NumberOfPoints="{n}" NumberOfCells="{num_cells}">',
    ]
    offset = 0
    for section in ("Points", "Cells", "PointData"):
        lines.append(f"      <{section}>")
        for array in arrays:
            if array.section != section:
                continue
            components = array.components
            lines.append(
                f'        <DataArray type="{_VTK_NAMES[array.dtype]}" Name={quoteattr(array.name)}'
                + ("" if components is None else f' NumberOfComponents="{components}"')
                + f' format="appended" offset="{offset}"/>'
            )
            offset += 8 + array.nbytes  # its UInt64 byte count, then its data
        lines.append(f"      </{section}>")
    lines += ["    </Piece>", "  </UnstructuredGrid>", '  <AppendedData encoding="raw">', "   _"]
    return "\n".join(lines)

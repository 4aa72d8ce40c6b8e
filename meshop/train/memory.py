"""How much of a mesh a forward pass takes at once: the default chunk of chunked evaluation
(:mod:`meshop.nn.chunking`) from the mesh size and the free memory."""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable

from torch import Tensor, nn

from meshop._pyg import Data
from meshop.errors import ConfigError
from meshop.nn.chunking import Walk

#: nodes from which :func:`default_chunk_nodes` chunks a batch (below, the unchunked pass is
#: faster and small)
CHUNK_FROM = 2**17
#: the default chunk, when enough memory is free: smaller chunks stay in the caches (the CPU
#: presets' widths, 10^6 nodes, 2 threads: ONO's pass 6.3 s in chunks of 16,384 nodes, 10.2 s
#: in chunks of 65,536; the Transolver 4.2 and 7.7 s, PiT 16.0 and 19.7 s, the MLP 0.7 and 1.7 s,
#: the Galerkin Transformer on its latent mesh 2.0 and 1.8 s; every peak lower)
DEFAULT_CHUNK = 2**14
#: memory per node of a chunk that the default leaves room for (the widest intermediate tensors
#: of the CPU presets take a few kB per node)
BYTES_PER_CHUNK_NODE = 16 * 2**10


def total_nodes(data: Data) -> int:
    """The nodes a model evaluates: the input mesh plus the query points."""
    query = getattr(data, "query_pos", None)
    return len(data.pos) + (0 if query is None else len(query))


def available_memory() -> int | None:
    """Bytes of memory free for this process (Linux' ``MemAvailable``; None where unknown)."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def default_chunk_nodes(num_nodes: int, free_bytes: int | None = None) -> int | None:
    """The chunk size of :func:`~meshop.train.inference.predict_in_chunks` when none is given:
    None (no chunking) up to :data:`CHUNK_FROM` nodes; above, :data:`DEFAULT_CHUNK` nodes, fewer
    (down to 1024) when less than a quarter of the free memory (``free_bytes``, read when None)
    would hold a chunk's intermediate tensors at :data:`BYTES_PER_CHUNK_NODE` per node."""
    if num_nodes <= CHUNK_FROM:
        return None
    free = available_memory() if free_bytes is None else free_bytes
    if free is None:
        return DEFAULT_CHUNK
    return int(max(1024, min(DEFAULT_CHUNK, free // 4 // BYTES_PER_CHUNK_NODE)))


def chunked(model: nn.Module, walk: Walk) -> Callable[[Data], Tensor]:
    """The pass of a model (a meshop model or a :class:`~meshop.train.NormalizedModel`) walked
    by ``walk``, with a clear error for a model that cannot be walked in chunks."""
    compute = getattr(model, "compute", None)
    if compute is None:
        raise ConfigError(
            f"{type(model).__name__} has no chunked forward pass (it is not a meshop model); "
            f"predict unchunked (chunk_nodes=None), or use a meshop model"
        )
    return lambda data: compute(data, walk)


def release_freed_memory() -> None:
    """Give the memory that the C allocator holds free back to the system (glibc's
    ``malloc_trim``; nothing elsewhere). Freed blocks below the allocator's mmap threshold
    otherwise stay resident: the buffers of a huge mesh file's parser (about 100 bytes per node
    of a ``.vtu``) would add to the peak of the prediction after them."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


__all__ = [
    "BYTES_PER_CHUNK_NODE",
    "CHUNK_FROM",
    "DEFAULT_CHUNK",
    "available_memory",
    "chunked",
    "default_chunk_nodes",
    "release_freed_memory",
    "total_nodes",
]

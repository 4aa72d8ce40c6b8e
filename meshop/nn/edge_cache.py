"""Neighbour lists kept between calls of a local layer, per sample, least recently used first out.

A sample's mesh does not change between epochs: its edges are stored under the exact bytes of its
source and target coordinates and reused whenever the same coordinates come back (any change of
the positions is a new key), with the edges' distances and their order by source (the transpose
in CSR order that the backward of :class:`~meshop.nn.sparse.SparseAggregate` needs).
"""

from __future__ import annotations

from collections import OrderedDict
from contextlib import contextmanager
from contextvars import ContextVar

import torch
from torch import Tensor

from meshop.data.neighbors import sample_slices
from meshop.nn.sparse import source_order


class EdgeCache:
    """Edges of samples in local indices, with their distances and their order by source (sorted
    when a step with autograd first needs it), within a memory budget.

    Args:
        max_bytes (int): memory for the entries; 0 keeps nothing.
    """

    def __init__(self, max_bytes: int):
        self.max_bytes = int(max_bytes)
        #: memory of the entries kept now
        self.bytes = 0
        # key -> (local edges, their distances, their order by source or None until needed)
        self._entries: OrderedDict[bytes, tuple[Tensor, Tensor, Tensor | None]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    @staticmethod
    def samples(
        pos_src, pos_dst, batch_src, batch_dst
    ) -> tuple[list[tuple[slice, slice]], list[bytes]]:
        """The ``(source range, target range)`` of every sample of a batch and the sample's key:
        the exact bytes of its source and target coordinates."""
        if batch_src is None and batch_dst is None:
            slices = [(slice(0, len(pos_src)), slice(0, len(pos_dst)))]
        else:
            if batch_src is None:
                batch_src = torch.zeros(len(pos_src), dtype=torch.long, device=pos_src.device)
            if batch_dst is None:
                batch_dst = torch.zeros(len(pos_dst), dtype=torch.long, device=pos_dst.device)
            slices = sample_slices(batch_src, batch_dst)
        return slices, [_key(pos_src[src], pos_dst[dst]) for src, dst in slices]

    def lookup(self, slices, keys, like: Tensor) -> tuple[Tensor, Tensor, Tensor | None] | None:
        """The batch's edges from its samples' entries (``None`` unless every sample has one):
        index and order shifted by each sample's first source, target and edge; the distances as
        stored (same coordinates, same bytes). A sample stored without autograd gets its order
        when a step with autograd needs it."""
        if not all(key in self._entries for key in keys):
            return None
        index, dist, order, start = [], [], [], 0
        for (src, dst), key in zip(slices, keys):
            self._entries.move_to_end(key)
            local, local_dist, local_order = self._entries[key]
            if local_order is None and torch.is_grad_enabled():
                local_order = source_order(local)
                self._entries[key] = (local, local_dist, local_order)
            index.append(local.long() + local.new_tensor([[dst.start], [src.start]]).long())
            dist.append(local_dist.detach())
            order.append(None if local_order is None else local_order.long() + start)
            start += local.shape[1]
        if not index:
            empty = torch.zeros(0, dtype=torch.long, device=like.device)
            return empty.view(2, 0), like.new_zeros(0), empty
        order = None if any(o is None for o in order) else torch.cat(order)
        return torch.cat(index, dim=1), torch.cat(dist), order

    def store(self, index: Tensor, dist: Tensor, slices, keys) -> None:
        """Split the batch's edges (sorted by target) by sample and keep them, in local indices,
        with their distances and their order by source."""
        starts = index.new_tensor([dst.start for _, dst in slices] + [slices[-1][1].stop])
        bounds = torch.searchsorted(index[0].contiguous(), starts).tolist()
        for (src, dst), key, lo, hi in zip(slices, keys, bounds[:-1], bounds[1:]):
            if key in self._entries:
                self._entries.move_to_end(key)
                continue
            local = index[:, lo:hi] - index.new_tensor([[dst.start], [src.start]])
            local = local.to(torch.int32) if max(src.stop, dst.stop) < 2**31 else local
            size = _entry_bytes(key, local, dist)
            if size > self.max_bytes:
                continue
            # sorted when a step with autograd (whose backward needs it) asks
            order = source_order(local) if torch.is_grad_enabled() else None
            entry = (local, dist[lo:hi].detach().clone(), order)
            while self.bytes + size > self.max_bytes:
                old_key, (old, old_dist, _) = self._entries.popitem(last=False)
                self.bytes -= _entry_bytes(old_key, old, old_dist)
            self._entries[key] = entry
            self.bytes += size


def _key(pos_src: Tensor, pos_dst: Tensor) -> bytes:
    """The exact coordinates of one sample's sources and targets, as a dictionary key."""
    parts = []
    for pos in (pos_src, pos_dst):
        pos = pos.detach().contiguous()
        header = f"{pos.dtype}{tuple(pos.shape)}".encode()
        parts += [header, pos.view(-1).view(torch.uint8).numpy().tobytes()]
    return b"|".join(parts)


def _entry_bytes(key: bytes, local: Tensor, dist: Tensor) -> int:
    """The memory of one cache entry: its key, edges, distances and their order by source (counted
    whether sorted yet or not)."""
    return local.shape[1] * (3 * local.element_size() + dist.element_size()) + len(key)


_CACHING: ContextVar[bool] = ContextVar("meshop_edge_caching", default=True)


@contextmanager
def no_edge_cache():
    """Within this context no local layer reads or fills its neighbour cache: for steps whose
    meshes never come back (training on random subsets of the nodes, where every step's subset
    would be a new entry that no later step reuses)."""
    token = _CACHING.set(False)
    try:
        yield
    finally:
        _CACHING.reset(token)


def caching() -> bool:
    """Whether the neighbour caches are in use here (see :func:`no_edge_cache`)."""
    return _CACHING.get()


__all__ = ["EdgeCache", "caching", "no_edge_cache"]

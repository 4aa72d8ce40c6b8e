"""Batches of domains: loaders, batch vectors, node features and weights, grid shapes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from meshop._pyg import Data, DataLoader
from meshop.data.neighbors import knn_index
from meshop.data.weights import default_weight
from meshop.errors import ConfigError, MeshError

#: node sets besides ``pos`` that get their own batch vector in a DataLoader batch
FOLLOW_BATCH = ["latent_pos", "query_pos"]


def make_loader(dataset, batch_size: int = 8, shuffle: bool = False, **kwargs) -> DataLoader:
    """A PyG ``DataLoader`` that gives ``latent_pos`` and ``query_pos`` their batch vectors and
    checks that the samples of every batch carry the same fields (PyG would fail with a bare
    ``KeyError``, or silently drop e.g. the query points of later samples)."""
    loader = DataLoader(
        dataset, batch_size=batch_size, shuffle=shuffle, follow_batch=FOLLOW_BATCH, **kwargs
    )
    loader.collate_fn = _SameFields(loader.collate_fn)
    return loader


class _SameFields:
    """A collate function that refuses batches whose samples carry different fields."""

    def __init__(self, collate):
        self.collate = collate

    def __call__(self, samples):
        if isinstance(samples, list) and samples and isinstance(samples[0], Data):
            first = set(samples[0].keys())
            for i, data in enumerate(samples[1:], start=1):
                keys = set(data.keys())
                if keys != first:
                    only_first = sorted(first - keys)
                    only_this = sorted(keys - first)
                    what = ", ".join(
                        [f"{k} only in the first sample" for k in only_first]
                        + [f"{k} only in sample {i} of the batch" for k in only_this]
                    )
                    raise MeshError(
                        f"the samples of a batch must carry the same fields ({what}); give "
                        f"every sample the same fields, e.g. set_query_points / add_latent_mesh "
                        f"on all samples or on none"
                    )
        return self.collate(samples)


def _vector(data: Data, key: str, n: int, device) -> torch.Tensor:
    vec = getattr(data, key, None)
    return vec if vec is not None else torch.zeros(n, dtype=torch.long, device=device)


def node_batch(data: Data) -> torch.Tensor:
    """Batch vector of ``pos`` (zeros for a single domain)."""
    return _vector(data, "batch", data.pos.shape[0], data.pos.device)


def latent_nodes(data: Data) -> tuple[torch.Tensor, torch.Tensor]:
    """``(latent_pos, latent_batch)``; the input mesh itself when no latent mesh was set."""
    if getattr(data, "latent_pos", None) is None:
        return data.pos, node_batch(data)
    return data.latent_pos, _vector(data, "latent_pos_batch", len(data.latent_pos), data.pos.device)


def query_nodes(data: Data) -> tuple[torch.Tensor, torch.Tensor]:
    """``(query_pos, query_batch)``; the input mesh itself when no query points were set."""
    if getattr(data, "query_pos", None) is None:
        return data.pos, node_batch(data)
    return data.query_pos, _vector(data, "query_pos_batch", len(data.query_pos), data.pos.device)


def node_set_weights(
    data: Data,
) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """Quadrature weights of a batch's three node sets: ``(input mesh, latent mesh, query points)``.

    The input mesh has the domain's ``data.weight``. A latent mesh that is the input mesh has the
    same weights; any other latent mesh (farthest point sampling, a grid) gets, at each latent
    node, the summed weight of the input nodes nearest to it (the measure of its Voronoi cell in
    the domain, lumped), so latent nodes outside the domain weigh 0. Query points have the input
    mesh's weights when they are the input mesh, else equal weights (``None``). Everything is
    ``None`` when the data has no ``weight``. The latent weights are read from
    ``data.latent_weight`` when the data carries them (:class:`meshop.train.LatentMesh` stores
    them with the latent mesh, so a training run searches the nearest nodes once per sample, not
    once per step).
    """
    weight = getattr(data, "weight", None)
    if weight is None:
        return None, None, None
    pos, batch = data.pos, node_batch(data)
    latent_pos, latent_batch = latent_nodes(data)
    cached = getattr(data, "latent_weight", None)
    if latent_pos is pos:
        latent_weight = weight
    elif cached is not None and len(cached) == len(latent_pos):
        latent_weight = cached.to(weight.dtype)  # found once by the data preparation
    else:
        nearest = knn_index(latent_pos, pos, 1, latent_batch, batch)  # [2, N]: input, latent
        latent_weight = weight.new_zeros(len(latent_pos)).index_add_(
            0, nearest[1], weight[nearest[0]]
        )
    query_weight = weight if getattr(data, "query_pos", None) is None else None
    return weight, latent_weight, query_weight


def num_samples(data: Data) -> int:
    """Number of samples in a batch (1 for a single domain)."""
    return int(getattr(data, "num_graphs", 1) or 1)


def node_features(data: Data, use_pos: bool = True) -> torch.Tensor:
    """Model input at the nodes: ``[x, pos, params[batch]]`` (each part only if present)."""
    parts = []
    if getattr(data, "x", None) is not None:
        parts.append(data.x)
    if use_pos:
        parts.append(data.pos)
    if getattr(data, "params", None) is not None:
        parts.append(data.params[node_batch(data)])
    if not parts:
        raise MeshError("the domain has neither input fields x nor coordinates to use as input")
    return torch.cat(parts, dim=-1)


def query_features(data: Data) -> torch.Tensor:
    """Model input at the query points, laid out as :func:`node_features`: ``[x, query_pos,
    params]``, where ``x`` at a query point is taken from the nearest node of the same sample (the
    query points themselves when no query points were set)."""
    if getattr(data, "query_pos", None) is None:
        return node_features(data)
    query_pos, query_batch = query_nodes(data)
    parts = []
    if getattr(data, "x", None) is not None:
        nearest = knn_index(data.pos, query_pos, 1, node_batch(data), query_batch)
        parts.append(data.x[nearest[1]])
    parts.append(query_pos)
    if getattr(data, "params", None) is not None:
        parts.append(data.params[query_batch])
    return torch.cat(parts, dim=-1)


def grid_shape_of(data: Data) -> tuple[int, ...]:
    """The common ``grid_shape`` of a grid domain or of a batch of grid domains.

    Raises:
        MeshError: the domain is not a uniform grid, or the batch mixes grid shapes.
    """
    shape = getattr(data, "grid_shape", None)
    if shape is None:
        raise MeshError(
            "this operation needs a uniform-grid domain (with grid_shape, e.g. from "
            "meshop.data.uniform_grid); for other meshes use the mesh path (latent meshes and "
            "position-attention)"
        )
    if isinstance(shape, list):  # a batch: one tuple per sample
        shapes = {tuple(s) for s in shape}
        if len(shapes) != 1:
            raise MeshError(
                f"a batch mixes grid shapes {sorted(shapes)}; batch one resolution at a time"
            )
        shape = shapes.pop()
    return tuple(int(s) for s in shape)


#: the callbacks of :func:`reporting_chunks` blocks open now, innermost last
_chunk_reports: list[Callable[[int], None]] = []


@contextmanager
def reporting_chunks(report: Callable[[int], None]) -> Iterator[None]:
    """Within the block, every chunk of :func:`node_chunks` calls ``report(nodes)`` when the
    loop over the chunks moves past it (a progress bar of chunked inference: every layer's
    loops over the nodes go through :func:`node_chunks`)."""
    _chunk_reports.append(report)
    try:
        yield
    finally:
        _chunk_reports.remove(report)


class _ReportedChunks(list):
    """The chunks of :func:`node_chunks`, reporting each one's nodes once it is done."""

    def __iter__(self) -> Iterator[slice]:
        for nodes in super().__iter__():
            yield nodes
            for report in _chunk_reports:
                report(nodes.stop - nodes.start)


def node_chunks(n: int, size: int) -> list[slice]:
    """Consecutive ranges of at most ``size`` of ``n`` nodes (the chunks of chunked inference;
    a chunk may cut a sample, and samples stay whole only by chance). Inside
    :func:`reporting_chunks`, iterating them reports each chunk's nodes."""
    if size < 1:
        raise ConfigError(f"a chunk must hold at least one node, got {size}")
    chunks = [slice(start, min(start + size, n)) for start in range(0, n, size)]
    return _ReportedChunks(chunks) if _chunk_reports else chunks


def part(values: torch.Tensor | None, nodes: slice) -> torch.Tensor | None:
    """``values[nodes]``, or None for None (optional per-node tensors such as weights)."""
    return None if values is None else values[nodes]


def sample_ranges(batch: torch.Tensor, num_samples: int) -> list[tuple[int, slice]]:
    """``(sample, range)`` of every sample that has nodes in a sorted batch vector (a chunk of a
    batch: its first and last samples may be cut)."""
    ranges, start = [], 0
    for sample, count in enumerate(torch.bincount(batch, minlength=num_samples).tolist()):
        if count:
            ranges.append((sample, slice(start, start + count)))
        start += count
    return ranges


def nodes_with_queries(data: Data, features: torch.Tensor):
    """The nodes of a model that treats query points as extra nodes of their sample (ONO,
    Transolver): node features, coordinates, batch and quadrature weights of the mesh nodes
    followed, within each sample, by the query nodes with zero weight, and the mask of the query
    nodes (None when the data has no ``query_pos``). Missing weights are ``1 / n`` per sample.
    ``features`` are the mesh nodes' :func:`node_features`.
    """
    pos, batch = data.pos, node_batch(data)
    weight = getattr(data, "weight", None)
    if weight is None:
        weight = default_weight(len(pos), batch, pos)
    if getattr(data, "query_pos", None) is None:
        return features, pos, batch, weight, None
    query_pos, query_batch = query_nodes(data)
    order = torch.argsort(torch.cat([batch, query_batch]), stable=True)
    is_query = torch.cat([torch.zeros_like(batch), torch.ones_like(query_batch)]).bool()
    return (
        torch.cat([features, query_features(data)])[order],
        torch.cat([pos, query_pos])[order],
        torch.cat([batch, query_batch])[order],
        torch.cat([weight, weight.new_zeros(len(query_pos))])[order],
        is_query[order],
    )

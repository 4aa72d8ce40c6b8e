"""Neighbour search between node sets, per sample, over torch-cluster.

Every function returns an edge index [2, E]: row 0 indexes the target (``pos_dst``) nodes, row 1
the source (``pos_src``) nodes, and only pairs from the same sample (equal batch value) appear.
Edges are grouped by target. In a periodic box (:func:`periodic_neighbor_index`) distances are
minimum-image ones (:func:`minimum_image`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import torch

from meshop._pyg import to_dense_batch, torch_cluster
from meshop.errors import ConfigError


def _batches(pos_src, pos_dst, batch_src, batch_dst):
    if batch_src is None:
        batch_src = pos_src.new_zeros(len(pos_src), dtype=torch.long)
    if batch_dst is None:
        batch_dst = pos_dst.new_zeros(len(pos_dst), dtype=torch.long)
    for name, batch in (("batch_src", batch_src), ("batch_dst", batch_dst)):
        if len(batch) > 1 and bool((batch[1:] < batch[:-1]).any()):
            raise ConfigError(
                f"{name} must be sorted (each sample's nodes contiguous, as in a PyG batch); "
                "sort the nodes by sample first"
            )
    return batch_src, batch_dst


def sample_slices(batch_src: torch.Tensor, batch_dst: torch.Tensor) -> list[tuple[slice, slice]]:
    """``(source range, target range)`` of each sample, from sorted batch vectors (PyG batches
    are sorted; a missing batch vector means one sample)."""
    for name, batch in (("batch_src", batch_src), ("batch_dst", batch_dst)):
        if batch.numel() > 1 and bool((batch[1:] < batch[:-1]).any()):
            raise ConfigError(
                f"{name} is not sorted; position-attention expects the nodes of each sample to be "
                f"contiguous, as in a PyG DataLoader batch (sort the nodes by sample first)"
            )
    num_samples = _num_samples(batch_src, batch_dst)
    ranges = []
    for batch in (batch_src, batch_dst):
        bounds = _sample_bounds(batch, num_samples).tolist()
        ranges.append([slice(start, stop) for start, stop in itertools.pairwise(bounds)])
    return list(zip(*ranges))


def _num_samples(*batches: torch.Tensor) -> int:
    """The samples of sorted batch vectors: one more than the largest last value."""
    return max((int(b[-1]) + 1 for b in batches if b.numel()), default=0)


def _sample_bounds(batch: torch.Tensor, num_samples: int) -> torch.Tensor:
    """Where each sample's nodes start in a sorted batch vector, and where the last ends
    [num_samples + 1]: a binary search, not a pass over the nodes (a search of a few targets
    among a huge mesh's nodes is made many times)."""
    samples = torch.arange(num_samples + 1, device=batch.device, dtype=batch.dtype)
    return torch.searchsorted(batch, samples)


def equal_sizes(
    n_src: int, n_dst: int, batch_src: torch.Tensor | None, batch_dst: torch.Tensor | None
) -> tuple[int, int, int] | None:
    """``(B, N_src, N_dst)`` when every sample of a (sorted) batch has ``N_src`` sources and
    ``N_dst`` targets, else ``None`` (also when one batch vector is given without the other)."""
    if batch_src is None and batch_dst is None:
        return 1, n_src, n_dst
    if batch_src is None or batch_dst is None or n_src == 0 or n_dst == 0:
        return None
    b = int(batch_src[-1]) + 1
    if int(batch_dst[-1]) + 1 != b or n_src % b or n_dst % b:
        return None
    for batch, n in ((batch_src, n_src), (batch_dst, n_dst)):
        expected = torch.arange(b, device=batch.device).repeat_interleave(n // b)
        if not torch.equal(batch, expected):
            return None
    return b, n_src // b, n_dst // b


def squared_distance(pos_src, pos_dst, edge_index) -> torch.Tensor:
    """|pos_dst[i] - pos_src[j]|^2 for each edge (i, j), computed as a dense matrix would be."""
    return (pos_dst[edge_index[0]] - pos_src[edge_index[1]]).pow(2).sum(-1)


def group_by_target(index: torch.Tensor) -> torch.Tensor:
    """``index`` with its edges grouped by target (a stable sort, skipped when already grouped)."""
    row = index[0]
    if len(row) > 1 and bool((row[1:] < row[:-1]).any()):
        return index[:, torch.argsort(row, stable=True)]
    return index


def sort_edges(index: torch.Tensor, num_dst: int, num_src: int) -> torch.Tensor:
    """Edges sorted by target, then source (CSR order). Rows are sorted one by one in a padded
    [num_dst, widest row] block, much cheaper than one sort of all E edges when E is large; a
    very uneven edge list falls back to that global sort."""
    index = group_by_target(index)
    if index.shape[1] == 0:
        return index
    dst, src = index
    width = int(torch.bincount(dst, minlength=num_dst).max())
    if num_dst * width > 4 * len(dst) + 1024:
        return index[:, torch.argsort(dst * num_src + src)]
    padded, mask = to_dense_batch(
        src, dst, fill_value=num_src, max_num_nodes=width, batch_size=num_dst
    )
    return torch.stack([dst, padded.sort(dim=1).values[mask]])


#: targets from which a search on the CPU is split over torch's threads (torch-cluster's CPU
#: searches run on one thread; each part builds its own tree over the sources, so only target
#: sets at least as large as the sources are split)
THREADED_TARGETS = 2**16


def by_target_ranges(
    search: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    num_src: int,
    pos_dst: torch.Tensor,
    batch_dst: torch.Tensor,
) -> torch.Tensor:
    """``search(pos_dst, batch_dst)`` (an edge index [2, E] grouped by target, row 0 the
    target), on the CPU split into ranges of targets searched on torch's threads at once
    (torch-cluster releases the GIL): the same edges in the same order, each target's search
    being its own. A range holds at least :data:`THREADED_TARGETS` targets and at least the
    ``num_src`` sources; smaller target sets, and other devices, are searched in one call."""
    n = len(pos_dst)
    # each range holds at least THREADED_TARGETS targets and as many as the sources (whose tree
    # each range builds again)
    parts = min(torch.get_num_threads(), n // max(THREADED_TARGETS, num_src, 1))
    if pos_dst.device.type != "cpu" or parts < 2:
        return search(pos_dst, batch_dst)
    bounds = [n * i // parts for i in range(parts + 1)]

    def part(lo: int, hi: int) -> torch.Tensor:
        found = search(pos_dst[lo:hi], batch_dst[lo:hi])
        return found + torch.tensor([[lo], [0]], dtype=found.dtype)

    with ThreadPoolExecutor(parts) as pool:
        return torch.cat(list(pool.map(part, bounds[:-1], bounds[1:])), dim=1)


def knn_index(pos_src, pos_dst, k: int, batch_src=None, batch_dst=None) -> torch.Tensor:
    """The ``k`` nearest source nodes of every target node (fewer if the sample has fewer)."""
    if k < 1:
        raise ConfigError(f"k must be a positive number of neighbours, got {k}")
    batch_src, batch_dst = _batches(pos_src, pos_dst, batch_src, batch_dst)

    def search(pos, batch):
        return torch_cluster.knn(pos_src, pos, k, batch_src, batch)

    return group_by_target(by_target_ranges(search, len(pos_src), pos_dst, batch_dst))


def radius_index(
    pos_src, pos_dst, r: float, batch_src=None, batch_dst=None, max_num_neighbors: int = 1024
) -> torch.Tensor:
    """Source nodes within distance ``r`` of every target node (at most ``max_num_neighbors``)."""
    if not r > 0:
        raise ConfigError(f"radius must be positive, got {r}")
    batch_src, batch_dst = _batches(pos_src, pos_dst, batch_src, batch_dst)

    def search(pos, batch):
        return torch_cluster.radius(
            pos_src, pos, float(r), batch_src, batch, max_num_neighbors=max_num_neighbors
        )

    return group_by_target(by_target_ranges(search, len(pos_src), pos_dst, batch_dst))


def quantile_rank(
    num_src: torch.Tensor, q: float, dtype: torch.dtype = torch.float32
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank below and interpolation weight of ``torch.quantile(row, q)`` for rows of ``num_src``
    values of the given dtype (computed in that dtype, as ``torch.quantile`` does)."""
    rank = torch.as_tensor(q, dtype=dtype) * (num_src.to(dtype) - 1)
    below = rank.floor().to(torch.long)
    return below, rank - below.to(dtype)


#: number of nearest neighbours from which :func:`quantile_index` searches by radius instead of
#: kNN (torch-cluster's kNN keeps each target's ``k`` best in a sorted list: its cost grows
#: faster than ``k``, while a radius search costs about the neighbours it returns)
RADIUS_SEARCH_FROM = 2000
#: sources per sample from which the radius search estimates each target's quantile distance
ESTIMATE_SOURCES = 16384
QUANTILE_METHODS = ("auto", "knn", "radius")
#: squared search radius over the estimated quantile distance (the estimate from 16384 sources is
#: within about 6% of the true count; the few targets it misses are searched again)
SAFETY = 1.15
#: largest ratio of squared search radii in one radius search (one torch-cluster call, one tree)
BIN_RATIO = 1.3
#: sources one radius search keeps per target, as a multiple of the sources the target needs
CAP_FACTOR = 4
#: radius search rounds before the targets still open are left to the kNN search
MAX_RADIUS_ROUNDS = 6


def quantile_index(
    pos_src,
    pos_dst,
    q: float,
    batch_src=None,
    batch_dst=None,
    method: str = "auto",
    radius_search=None,
) -> torch.Tensor:
    """Quantile receptive field of PiT eq. (10): for each target ``i`` the sources ``j`` with
    ``|x_i - y_j|^2 <= r_i^2``, where ``r_i^2`` is the ``q``-quantile (linear interpolation, as
    ``torch.quantile``) of the squared distances from ``i`` to every source of its own sample.

    Ties at the threshold are all included, exactly as a dense ``D <= torch.quantile(D, q, dim=1)``
    mask would; that is about ``ceil(q N_src)`` neighbours, found by torch-cluster and never by an
    N_dst x N_src matrix. ``method="knn"`` grows a k-nearest-neighbour search until every
    target's threshold is inside it; ``method="radius"`` estimates each target's threshold from a
    subsample of the sources and collects the sources within a safely larger radius (enlarged
    where too few come back), which is much cheaper when the field holds thousands of sources
    (a 2% field of a 1e6-node mesh holds 20,000); ``"auto"`` picks ``radius`` from
    :data:`RADIUS_SEARCH_FROM` neighbours on. Both give the same edges.

    ``radius_search(pos_dst, r, batch_dst, max_num_neighbors) -> index``: the radius searches
    among the sources, made otherwise than by torch-cluster over ``pos_src`` (the split driver's,
    :func:`meshop.nn.splitting.split_fields`: each process searches its own part of the sources
    and the edges are gathered); it must return every source within ``r``, or at least
    ``max_num_neighbors`` of them for a target that has more. Implies ``method="radius"``.
    """
    if not 0.0 <= q <= 1.0:
        raise ConfigError(f"quantile must be in [0, 1], got {q}")
    if method not in QUANTILE_METHODS:
        raise ConfigError(f"unknown quantile search {method!r}; choose one of {QUANTILE_METHODS}")
    batch_src, batch_dst = _batches(pos_src, pos_dst, batch_src, batch_dst)
    if len(pos_src) == 0 or len(pos_dst) == 0:
        return torch.zeros(2, 0, dtype=torch.long, device=pos_src.device)
    num_batches = _num_samples(batch_src, batch_dst)
    count = _sample_bounds(batch_src, num_batches).diff()  # sources per sample
    below, frac = quantile_rank(count, q, pos_src.dtype)  # per sample
    k_needed = int((below + 2).clamp(max=count).max())
    by_radius = method == "radius" or (method == "auto" and k_needed >= RADIUS_SEARCH_FROM)
    if by_radius or radius_search is not None:
        return _quantile_by_radius(
            pos_src, pos_dst, batch_src, batch_dst, q, count, below, frac, radius_search
        )
    margin = 4
    while True:
        k = min(k_needed + margin, int(count.max()))
        index = knn_index(pos_src, pos_dst, k, batch_src, batch_dst)
        dist = squared_distance(pos_src, pos_dst, index)
        found = torch.bincount(index[0], minlength=len(pos_dst))
        b = batch_dst
        threshold = _row_quantile(dist, index[0], found, below[b], frac[b], count[b])
        # the k-th distance must lie beyond the threshold, or ties may reach past the k found
        farthest = dist.new_full((len(pos_dst),), -math.inf).scatter_reduce(
            0, index[0], dist, reduce="amax"
        )
        complete = (k >= count[b]) | (farthest > threshold * (1 + 1e-5) + 1e-30)
        if bool(complete.all()) or k >= int(count.max()):
            keep = dist <= threshold[index[0]]
            return index[:, keep]
        margin *= 4


def _estimated_radius2(pos_src, pos_dst, batch_src, batch_dst, q, count) -> torch.Tensor:
    """Each target's ``q``-quantile squared distance to a random subsample of at most
    :data:`ESTIMATE_SOURCES` sources of its sample (fewer, down to 2048, for many targets),
    rounded up to a sample value (an upper bound of the exact one when the sample is that
    small)."""
    estimate = pos_dst.new_zeros(len(pos_dst))
    generator = torch.Generator().manual_seed(0)  # fixed subsample, global RNG untouched
    for sources, targets in sample_slices(batch_src, batch_dst):
        n = sources.stop - sources.start
        if n == 0 or targets.stop == targets.start:
            continue
        # at most about 2^24 distances per sample: fewer sources when it has many targets
        size = max(2048, 2**24 // (targets.stop - targets.start))
        k = min(ESTIMATE_SOURCES, size)
        if n >= 16 * k:  # a huge sample: k draws, hardly ever the same twice, not a permutation
            pick = torch.randint(n, (k,), generator=generator)
        else:
            pick = torch.randperm(n, generator=generator)[:k]
        sub = pos_src[sources][pick.to(pos_src.device)]
        rank = min(len(sub), math.ceil(q * (len(sub) - 1)) + 1)  # the q-quantile, rounded up
        chunk = max(1, 2**22 // len(sub))
        for start in range(targets.start, targets.stop, chunk):
            stop = min(start + chunk, targets.stop)
            d = (pos_dst[start:stop, None, :] - sub[None]).pow(2).sum(-1)
            estimate[start:stop] = d.kthvalue(rank, dim=1).values
    return estimate


def _quantile_by_radius(
    pos_src, pos_dst, batch_src, batch_dst, q, count, below, frac, radius_search=None
):
    """:func:`quantile_index` by radius searches around estimated thresholds (``radius_search``:
    :func:`quantile_index`'s; None: torch-cluster's).

    A radius search returns every source closer than its radius, so when it returns at least
    ``below + 2`` sources for a target (its whole sample otherwise), their sorted distances are the
    start of the target's full sorted row and the interpolated quantile is exact. Targets are
    searched in groups of similar estimated radius (one torch-cluster call each); a target whose
    search came back short, or whose threshold lies at the edge of its search, is searched again
    with a radius twice as large. Each search keeps at most :data:`CAP_FACTOR` times the sources a
    target needs (torch-cluster's CUDA search allocates targets x cap); a target that reaches the
    cap is searched again without it. Targets still open after :data:`MAX_RADIUS_ROUNDS` rounds
    (zero or non-finite thresholds: duplicated nodes, NaN or overflowing coordinates) are left to
    the kNN search, which is exact too."""
    b = batch_dst
    needed = (below[b] + 2).clamp(max=count[b])  # sorted distances each target needs
    search2 = _estimated_radius2(pos_src, pos_dst, batch_src, batch_dst, q, count) * SAFETY
    search2 = search2.clamp(min=torch.finfo(pos_src.dtype).tiny)
    uncapped = torch.zeros(len(pos_dst), dtype=torch.bool, device=pos_dst.device)
    pending = torch.nonzero(count[b] > 0).view(-1)
    kept = []
    for _ in range(MAX_RADIUS_ROUNDS):
        finite = torch.isfinite(search2[pending])
        left, pending = pending[~finite], pending[finite]
        if not len(pending):
            pending = left
            break
        retry = [left]
        for targets in _radius_bins(pending, search2):
            targets = targets.sort().values  # torch-cluster needs sorted batch vectors
            r2 = float(search2[targets].max())
            sample = b[targets]
            most = int(count[sample].max())
            cap = most if bool(uncapped[targets].any()) else CAP_FACTOR * int(needed[targets].max())
            cap = min(most, cap + 64)
            if radius_search is None:
                index = radius_among(
                    pos_src, pos_dst[targets], r2, batch_src, batch_dst[targets], cap
                )
            else:
                index = radius_search(pos_dst[targets], math.sqrt(r2), batch_dst[targets], cap)
            index = group_by_target(index)
            dist = squared_distance(pos_src, pos_dst[targets], index)
            found = torch.bincount(index[0], minlength=len(targets))
            threshold = _row_quantile(
                dist, index[0], found, below[sample], frac[sample], count[sample]
            )
            everything = found >= count[sample]
            truncated = (found >= cap) & ~everything
            complete = (
                (found >= needed[targets])
                & ~truncated
                & (everything | (threshold * (1 + 1e-5) + 1e-30 < r2))
            )
            keep = complete[index[0]] & (dist <= threshold[index[0]])
            kept.append(torch.stack([targets[index[0][keep]], index[1][keep]]))
            retry.append(targets[~complete])
            uncapped[targets[truncated]] = True
            search2[targets[~complete & ~truncated]] = r2 * 2.0
        pending = torch.cat(retry)
    if len(pending):  # left to kNN
        pending = pending.sort().values
        index = quantile_index(
            pos_src, pos_dst[pending], q, batch_src, batch_dst[pending], method="knn"
        )
        kept.append(torch.stack([pending[index[0]], index[1]]))
    if not kept:
        return torch.zeros(2, 0, dtype=torch.long, device=pos_src.device)
    return group_by_target(torch.cat(kept, dim=1))


#: a radius search computes the distances from its targets to every source of their samples
#: directly, instead of building torch-cluster's tree over the sources, when that is at most
#: this many distances per source and ``log2`` of the sources: the tree costs about
#: ``log2(N)`` per source to build (0.1 us each on the 2-core CPU: 1.6 s for 1e6 sources, 25-30
#: s for 1e7) and is built again for every search, while a distance costs about 0.03 us. The
#: encoder of a huge mesh searches in many groups of few targets (a 10% field of a 1e7-node
#: mesh holds 1e6 sources, and a search holds
#: :data:`~meshop.nn.local_position_attention.SEARCH_EDGES` edges), each directly.
DENSE_PER_SOURCE_LOG2 = 2.0
#: distances computed at once by a direct radius search (one block of targets)
DENSE_BLOCK = 2**22


def radius_among(pos_src, pos_dst, r2: float, batch_src, batch_dst, cap: int) -> torch.Tensor:
    """The sources within ``sqrt(r2)`` of every target (of its own sample) as an edge index
    [2, E], by torch-cluster's radius search (at most ``cap`` per target) or, on the CPU where
    it costs less (:data:`DENSE_PER_SOURCE_LOG2`), by direct distances (all of them)."""
    num_src = len(pos_src)
    slices = sample_slices(batch_src, batch_dst)
    pairs = sum((s.stop - s.start) * (t.stop - t.start) for s, t in slices)
    dense = pos_src.device.type == "cpu" and num_src > 1
    if dense and pairs <= DENSE_PER_SOURCE_LOG2 * num_src * math.log2(num_src):
        return _dense_radius(pos_src, pos_dst, r2, slices)

    def search(pos, batch):
        return torch_cluster.radius(
            pos_src, pos, math.sqrt(r2), batch_src, batch, max_num_neighbors=cap
        )

    return by_target_ranges(search, num_src, pos_dst, batch_dst)


def _dense_radius(pos_src, pos_dst, r2: float, slices: list[tuple[slice, slice]]) -> torch.Tensor:
    """Every source within squared distance ``r2`` of every target of its sample (``slices``:
    :func:`sample_slices`), by direct distances in blocks of :data:`DENSE_BLOCK`, one
    coordinate at a time (no ``[T, N, dim]`` tensor, no copy of the sources); edges grouped by
    target, then sorted by source."""
    found = []
    for sources, targets in slices:
        n = sources.stop - sources.start
        if n == 0:
            continue
        block = max(1, DENSE_BLOCK // n)
        for start in range(targets.start, targets.stop, block):
            stop = min(start + block, targets.stop)
            d = (pos_dst[start:stop, :1] - pos_src[sources, 0]).square_()
            for axis in range(1, pos_src.shape[1]):
                d += (pos_dst[start:stop, axis : axis + 1] - pos_src[sources, axis]).square_()
            edges = torch.nonzero(d <= r2).T
            edges[0] += start
            edges[1] += sources.start
            found.append(edges)
    if not found:
        return torch.zeros(2, 0, dtype=torch.long, device=pos_src.device)
    return torch.cat(found, dim=1)


def _radius_bins(pending: torch.Tensor, search2: torch.Tensor) -> list[torch.Tensor]:
    """The pending targets in groups of similar squared search radius: within :data:`BIN_RATIO`
    of the group's smallest; a group with few targets joins the next (each group is a search)."""
    order = pending[torch.argsort(search2[pending])]
    ratio = torch.log(search2[order] / search2[order[0]]) / math.log(BIN_RATIO)
    sizes = torch.unique_consecutive(ratio.floor().to(torch.long), return_counts=True)[1].tolist()
    small = max(16, len(pending) // 20)
    merged = [0]
    for size in sizes:
        merged[-1] += size
        if merged[-1] >= small:
            merged.append(0)
    if merged[-1] == 0:
        merged.pop()
    return list(torch.split(order, merged))


def _row_quantile(dist, row, found, below, frac, count) -> torch.Tensor:
    """The interpolated quantile of every row from its ``found`` smallest distances: the values
    of rank ``below`` and ``below + 1`` (capped at ``count - 1``) lerped by ``frac``; +inf where
    a row has fewer distances than that. ``row`` is sorted."""
    width = max(int(found.max()), 1)
    padded, _ = to_dense_batch(
        dist, row, fill_value=math.inf, max_num_nodes=width, batch_size=len(found)
    )
    lo, hi = padded.new_full((2, len(found)), math.inf)
    upper = torch.minimum(below + 1, count - 1)
    for rank in torch.unique(below).tolist():
        rows = torch.nonzero(below == rank).view(-1)
        if 0 <= rank < width:  # rank -1: a sample without sources
            lo[rows] = padded[rows].kthvalue(rank + 1, dim=1).values
        for top in torch.unique(upper[rows]).tolist():
            sub = rows[upper[rows] == top]
            if 0 <= top < width:
                hi[sub] = padded[sub].kthvalue(top + 1, dim=1).values
    return torch.lerp(lo, hi, frac)


def _check_one_field(quantile, k, radius) -> None:
    given = [
        name for name, v in (("quantile", quantile), ("k", k), ("radius", radius)) if v is not None
    ]
    if len(given) != 1:
        raise ConfigError(
            f"give exactly one of quantile=, k=, radius= for a local receptive field (got {given})"
        )


def neighbor_index(
    pos_src,
    pos_dst,
    batch_src=None,
    batch_dst=None,
    *,
    quantile: float | None = None,
    k: int | None = None,
    radius: float | None = None,
    max_num_neighbors: int = 1024,
) -> torch.Tensor:
    """One entry point for the three receptive fields: give exactly one of quantile, k, radius."""
    _check_one_field(quantile, k, radius)
    if quantile is not None:
        return quantile_index(pos_src, pos_dst, quantile, batch_src, batch_dst)
    if k is not None:
        return knn_index(pos_src, pos_dst, k, batch_src, batch_dst)
    return radius_index(pos_src, pos_dst, radius, batch_src, batch_dst, max_num_neighbors)


# --- periodic boxes ----------------------------------------------------------------------------


def box_lengths(periodic, dim: int, like: torch.Tensor) -> torch.Tensor:
    """The period of every axis as a tensor [dim] (0 on open axes)."""
    if not isinstance(periodic, Sequence):
        return like.new_full((dim,), float(periodic))
    if len(periodic) != dim:
        raise ConfigError(
            f"periodic gives {len(periodic)} box lengths for {dim}D coordinates; give one per axis "
            f"(None for an open axis) or a single length"
        )
    return like.new_tensor([0.0 if length is None else length for length in periodic])


def minimum_image(delta: torch.Tensor, box: torch.Tensor) -> torch.Tensor:
    """Minimum-image displacement: each periodic component of ``delta`` [..., dim] is wrapped
    into ``[-L/2, L/2]`` by ``delta - L * round(delta / L)``; components with ``L == 0`` stay."""
    periodic = box > 0
    wrapped = delta - box * torch.round(delta / torch.where(periodic, box, torch.ones_like(box)))
    return torch.where(periodic, wrapped, delta)


def periodic_neighbor_index(
    pos_src,
    pos_dst,
    periodic,
    batch_src=None,
    batch_dst=None,
    *,
    quantile: float | None = None,
    k: int | None = None,
    radius: float | None = None,
    max_num_neighbors: int = 1024,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`neighbor_index` in a periodic box, with minimum-image distances.

    Coordinates are wrapped into the box, the sources are tiled into their :math:`3^p` images
    (``p`` periodic axes), neighbours are found among the images and mapped back to their source,
    keeping the nearest image of each. This equals the dense minimum-image receptive field
    whenever that field's radius is below half the shortest period (a wider field ranks the
    farther images of a source too). A quantile is rescaled so that its rank among the images
    equals that of ``quantile`` among the sources.

    Args:
        periodic: one box length for every axis, or one per axis (``None`` for an open axis).

    Returns:
        The edge index [2, E] (row 0 target, row 1 source) sorted by target, then source, and the
        squared minimum-image distance of every edge [E].
    """
    _check_one_field(quantile, k, radius)
    dim, n_src = pos_src.shape[1], len(pos_src)
    box = box_lengths(periodic, dim, pos_src)
    is_periodic = box > 0
    safe_box = torch.where(is_periodic, box, torch.ones_like(box))

    def wrap(pos):
        return torch.where(is_periodic, pos - safe_box * torch.floor(pos / safe_box), pos)

    pos_src, pos_dst = wrap(pos_src), wrap(pos_dst)
    shifts = [(-1.0, 0.0, 1.0) if p else (0.0,) for p in is_periodic.tolist()]
    offsets = pos_src.new_tensor(list(itertools.product(*shifts))) * box  # [3^p, D]
    copies = len(offsets)
    tiled = (pos_src[None] + offsets[:, None]).reshape(-1, dim)  # [3^p N_src, D]
    if batch_src is None:
        batch_src = torch.zeros(n_src, dtype=torch.long, device=pos_src.device)
    if batch_dst is None:
        batch_dst = torch.zeros(len(pos_dst), dtype=torch.long, device=pos_dst.device)
    tiled_batch = batch_src.repeat(copies)
    if quantile is not None:
        index = _tiled_quantile_index(tiled, pos_dst, tiled_batch, batch_dst, copies, quantile)
    else:
        # the neighbour search wants each sample's nodes contiguous: the copies of a batch
        # of several samples are not, so search them in sample order and map back
        order = torch.argsort(tiled_batch, stable=True)
        index = neighbor_index(
            tiled[order],
            pos_dst,
            tiled_batch[order],
            batch_dst,
            k=k,
            radius=radius,
            max_num_neighbors=max_num_neighbors,
        )
        index = torch.stack([index[0], order[index[1]]])
    dist = squared_distance(tiled, pos_dst, index)
    index = torch.stack([index[0], index[1] % n_src])
    return _nearest_image(index, dist, len(pos_dst), n_src)


def _tiled_quantile_index(tiled, pos_dst, tiled_batch, batch_dst, copies, q) -> torch.Tensor:
    """Quantile receptive fields over the images, one sample at a time, with the quantile
    rescaled so that its rank among ``copies * n`` images equals that of ``q`` among ``n``."""
    parts = []
    for b in torch.unique(batch_dst).tolist():
        src = (tiled_batch == b).nonzero().view(-1)
        dst = (batch_dst == b).nonzero().view(-1)
        if len(src) == 0:
            continue
        q_tiled = _rescaled_quantile(q, len(src) // copies, len(src))
        index = neighbor_index(tiled[src], pos_dst[dst], quantile=q_tiled)
        parts.append(torch.stack([dst[index[0]], src[index[1]]]))
    if not parts:
        return torch.zeros(2, 0, dtype=torch.long, device=tiled.device)
    return torch.cat(parts, dim=1)


def _nearest_image(
    index: torch.Tensor, dist: torch.Tensor, n_dst: int, n_src: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge edges that reach the same source through several images, keeping the nearest one;
    edges come back sorted by target, then source."""
    key = index[0] * n_src + index[1]
    unique, inverse = torch.unique(key, return_inverse=True)
    nearest = dist.new_full((len(unique),), float("inf")).scatter_reduce(
        0, inverse, dist, reduce="amin"
    )
    return torch.stack([unique // n_src, unique % n_src]), nearest


def _rescaled_quantile(q: float, n: int, n_tiled: int) -> float:
    """A quantile over ``n_tiled`` values whose float32 rank ``q' (n_tiled - 1)`` equals the
    float32 rank ``q (n - 1)`` that ``torch.quantile`` uses over ``n`` values."""
    target = torch.tensor(q, dtype=torch.float32) * (n - 1)
    q_tiled = target / max(n_tiled - 1, 1)
    for _ in range(64):
        rank = q_tiled * (n_tiled - 1)
        if rank == target:
            break
        q_tiled = torch.nextafter(q_tiled, q_tiled + (target - rank).sign())
    return float(q_tiled)

"""Local (cross) position-attention over neighbour lists (PiT eq. (10); multi-head App. C.2)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from meshop.data.neighbors import (
    neighbor_index,
    periodic_neighbor_index,
    sort_edges,
    squared_distance,
)
from meshop.errors import ConfigError
from meshop.nn.edge_cache import EdgeCache, caching
from meshop.nn.integral import SoftmaxSums, rows
from meshop.nn.interface import check_inputs
from meshop.nn.position_kernel import PositionKernel
from meshop.nn.quadrature import log_weight
from meshop.nn.sparse import SparseAggregate

#: edges one neighbour search of a driver's chunk finds at most: the search holds about 60 bytes
#: per edge at once (indices, distances, their sort), 60 MB for 2^20 edges, the same on every
#: mesh large enough to fill it, so that a prediction's memory hardly depends on the field's size
#: (a 10% quantile field of a 1e7-node mesh is 1e6 sources per latent node; 2^24 edges per
#: search took 1.1 GB). The few latent nodes such a search holds are searched by direct
#: distances (:data:`meshop.data.neighbors.DENSE_PER_SOURCE_LOG2`): many small searches cost
#: what one large one does.
SEARCH_EDGES = 2**20


class LocalPositionAttention(PositionKernel):
    r"""Local position-attention of PiT (eq. (10)): position-attention restricted to a receptive
    field around each target, from a source mesh onto a target mesh (itself when no target is
    given), with one bandwidth :math:`\lambda^h > 0` per head (App. C.2):

    .. math::
        \mathrm{head}^h_i = \sum_{k \in \mathcal{N}(i)}
            \frac{w_k \exp(-\lambda^h \|x_i - y_k\|^2)}{\sum_{j \in \mathcal{N}(i)}
            w_j \exp(-\lambda^h \|x_i - y_j\|^2)}\, (U W^h)_k,
        \qquad \mathrm{out}_i = \mathrm{Concat}(\mathrm{head}^1_i, \dots, \mathrm{head}^H_i),

    with :math:`w_k` the quadrature weights of the source nodes (all equal without ``weight``:
    the paper's formula; see :class:`~meshop.nn.PositionAttention`). They enter exactly, as
    :math:`\log w_k` added to the logits of the edges.

    The receptive field :math:`\mathcal{N}(i)` holds sources of the target's own sample, given by
    exactly one of

    - ``quantile=q``: :math:`\|x_i - y_k\|^2 \le r_i^2` with :math:`r_i^2` the ``q``-quantile of row
      :math:`i` of the sample's squared-distance matrix, ties included (the paper's choice; the
      radius adapts to the local point density);
    - ``k``: the ``k`` nearest sources;
    - ``radius``: the sources within that distance (a target with none gets zeros).

    Neighbour lists come from torch-cluster through :func:`meshop.data.neighbor_index`; the softmax
    over each target's neighbours is taken on the :math:`[E, H]` logits, shifted by the target's
    largest (:meth:`_edge_sums`), so memory is :math:`O(N_{dst} k)`, never
    :math:`N_{dst} \times N_{src}`. The weights
    depend on positions only, so the aggregation is a sparse-dense product per head (CSR, forward
    and backward, :class:`meshop.nn.sparse.SparseAggregate`) and no :math:`[E, C_{out}]` message
    tensor is ever built.

    With ``periodic`` the distance is the minimum-image one. Coordinates are wrapped into the box,
    the sources are tiled into their :math:`3^p` images (``p`` periodic axes), neighbours are found
    among the images and mapped back to their source, keeping the nearest image of each. This equals
    the dense minimum-image receptive field whenever that field's radius is below half the
    shortest period (a wider field ranks the farther images of a source too):
    :func:`meshop.data.neighbors.periodic_neighbor_index`.

    Args:
        in_channels (int): width :math:`C_{in}` of the source features.
        out_channels (int): width :math:`C_{out}` of the output; divisible by ``heads``.
        heads (int): number of heads (PiT default 2).
        quantile (float, optional): receptive field as a quantile in ``[0, 1]`` (PiT: 0.005-0.08).
        k (int, optional): receptive field as a number of nearest neighbours.
        radius (float, optional): receptive field as a distance.
        lambda_param (str): ``"tan"`` (paper), ``"softplus"`` or ``"square"``; see
            :func:`meshop.nn.position_kernel.positive_lambda`.
        periodic (float or sequence, optional): box length of a periodic domain, one for all axes or
            one per axis (``None`` for an open axis).
        max_num_neighbors (int): cap of the radius search per target.
        cache_mb (float): memory for neighbour lists kept between calls (CPU tensors, open
            domains). A sample's mesh does not change between epochs: its edges are stored under
            the exact bytes of its source and target coordinates and reused whenever the same
            coordinates come back (any change of the positions is a new key, so the lists are
            recomputed), least recently used dropped first, with the edges' distances and their
            order by source (positions that require gradients get their distances recomputed,
            so that the gradient reaches them; :class:`meshop.nn.edge_cache.EdgeCache`). 0 turns
            the cache off.

    Shapes:
        - input: the common signature of :mod:`meshop.nn.interface`: ``x`` :math:`(N_{src},
          C_{in})`, ``pos`` :math:`(N_{src}, D)`, sorted ``batch`` :math:`(N_{src})`, ``weight``
          :math:`(N_{src})` (``None``: equal weights); keywords ``pos_dst`` :math:`(N_{dst}, D)`
          (``None``: self-attention) and sorted ``batch_dst`` :math:`(N_{dst})`
        - output: :math:`(N_{dst}, C_{out})`
    """

    searches = True

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        heads: int = 2,
        *,
        quantile: float | None = None,
        k: int | None = None,
        radius: float | None = None,
        lambda_param: str = "tan",
        periodic: float | Sequence[float | None] | None = None,
        max_num_neighbors: int = 1024,
        cache_mb: float = 256.0,
    ):
        field = {"quantile": quantile, "k": k, "radius": radius}
        given = {name: value for name, value in field.items() if value is not None}
        if len(given) != 1:
            raise ConfigError(
                f"give exactly one receptive field, quantile=, k= or radius= (got {given or None})"
            )
        if quantile is not None and not 0.0 <= quantile <= 1.0:
            raise ConfigError(f"quantile must be in [0, 1] (0.01 is 1%), got {quantile}")
        if k is not None and k < 1:
            raise ConfigError(f"k must be a positive number of neighbours, got {k}")
        if radius is not None and not radius > 0:
            raise ConfigError(f"radius must be positive, got {radius}")
        self.field = given
        self.max_num_neighbors = max_num_neighbors
        self.edge_cache = EdgeCache(int(cache_mb * 2**20))
        super().__init__(in_channels, out_channels, heads, lambda_param, periodic)

    def neighbors(
        self,
        pos_src: Tensor,
        pos_dst: Tensor,
        batch_src: Tensor | None = None,
        batch_dst: Tensor | None = None,
        use_cache: bool = True,
    ) -> tuple[Tensor, Tensor]:
        """Receptive fields as an edge index [2, E] (row 0 target, row 1 source) sorted by target,
        then source (CSR order), and the squared (minimum-image when periodic) distance of every
        edge [E]. ``use_cache=False`` neither reads nor fills the neighbour cache (chunks of a
        huge mesh, which would only evict the training meshes)."""
        index, dist, _ = self._edges(pos_src, pos_dst, batch_src, batch_dst, use_cache)
        return index, dist

    def _edges(
        self,
        pos_src: Tensor,
        pos_dst: Tensor,
        batch_src: Tensor | None,
        batch_dst: Tensor | None,
        use_cache: bool = True,
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """:meth:`neighbors` and, for cached samples, the edges' order by source (the transpose
        in CSR order that the backward needs), else ``None``."""
        if self.periodic is not None:
            index, dist = periodic_neighbor_index(
                pos_src,
                pos_dst,
                self.periodic,
                batch_src,
                batch_dst,
                max_num_neighbors=self.max_num_neighbors,
                **self.field,
            )
            return index, dist, None
        cache = use_cache and self.edge_cache.max_bytes > 0 and pos_src.device.type == "cpu"
        cache = cache and caching()
        if cache:
            slices, keys = EdgeCache.samples(pos_src, pos_dst, batch_src, batch_dst)
            hit = self.edge_cache.lookup(slices, keys, pos_src)
            if hit is not None:
                index, dist, order = hit
                if pos_src.requires_grad or pos_dst.requires_grad:  # keep the positions' graph
                    dist = squared_distance(pos_src, pos_dst, index)
                return index, dist, order
        index = neighbor_index(
            pos_src,
            pos_dst,
            batch_src,
            batch_dst,
            max_num_neighbors=self.max_num_neighbors,
            **self.field,
        )
        index = sort_edges(index, len(pos_dst), len(pos_src))
        dist = squared_distance(pos_src, pos_dst, index)
        if cache:
            self.edge_cache.store(index, dist, slices, keys)
        return index, dist, None

    def forward(
        self,
        x: Tensor,
        pos: Tensor,
        batch: Tensor | None = None,
        weight: Tensor | None = None,
        *,
        pos_dst: Tensor | None = None,
        batch_dst: Tensor | None = None,
    ) -> Tensor:
        check_inputs(type(self).__name__, x, pos, batch, weight, pos_dst, batch_dst)
        if pos_dst is None:
            pos_dst, batch_dst = pos, batch
        index, dist, order = self._edges(pos, pos_dst, batch, batch_dst)
        return self.finish(self._edge_sums(x, weight, index, dist, len(pos_dst), order))

    def target_chunk(self, chunk_nodes: int, batch: Tensor) -> int:
        """Targets per :meth:`partial` of a driver: ``chunk_nodes``, or fewer when they would
        hold more than :data:`SEARCH_EDGES` edges (a search of a few targets among many sources
        computes their distances directly instead of building a tree over the sources, so small
        searches cost what a large one does)."""
        ((kind, value),) = self.field.items()
        most = int(torch.bincount(batch).max()) if len(batch) else 1
        field = {"quantile": value * most + 2, "k": value, "radius": self.max_num_neighbors}[kind]
        return max(1, min(chunk_nodes, SEARCH_EDGES // max(int(field), 1)))

    def partial(
        self,
        x,
        pos,
        batch,
        weight,
        num_samples,
        state=None,
        *,
        pos_dst,
        batch_dst,
        edges=None,
        chunk_nodes=None,
        **extra,
    ) -> SoftmaxSums:
        """The softmax sums (:class:`~meshop.nn.integral.SoftmaxSums` ``[N_dst, H, C_h]``) of
        the targets ``pos_dst`` over the sources of their receptive fields, whose features ``x``
        may be a function of their rows: only the sources that some field holds are read. The
        fields are searched once for all these targets (without the neighbour cache); the edges
        are then attended in blocks of about ``4 * chunk_nodes`` edges, each checkpointed under
        autograd. ``edges``: the fields already searched, ``[2, E]`` (row 0 a target, row 1 a
        source), sorted by target, then source (the split driver's: the whole mesh's fields to
        this process's sources, :func:`~meshop.nn.splitting.split_fields`)."""
        with torch.no_grad():  # the fields: found once, outside the recomputed part
            if edges is None:
                index, dist = self.neighbors(pos, pos_dst, batch, batch_dst, use_cache=False)
            else:
                index, dist = edges, squared_distance(pos, pos_dst, edges)
        num_dst = len(pos_dst)
        field = max(1, len(dist) // max(num_dst, 1))
        block = num_dst if chunk_nodes is None else max(1, 4 * chunk_nodes // field)
        bounds = torch.searchsorted(
            index[0].contiguous(), torch.arange(num_dst + 1, device=index.device)
        ).tolist()
        parts = []
        for start in range(0, num_dst, block):
            stop = min(start + block, num_dst)
            lo, hi = bounds[start], bounds[stop]
            edges = index[:, lo:hi] - index.new_tensor([[start], [0]])
            parts.append(self._block_sums(x, pos, weight, pos_dst[start:stop], edges, dist[lo:hi]))
        if not parts:
            empty = pos_dst.new_zeros(0, self.heads)
            return SoftmaxSums(pos_dst.new_zeros(0, self.heads, self.head_channels), empty, empty)
        return SoftmaxSums.cat(parts)

    def _block_sums(self, x, pos, weight, pos_dst, index, dist) -> SoftmaxSums:
        """The sums of a block of targets over their edges ``index`` (row 0 a target of the
        block, row 1 a source), reading only the sources they hold; checkpointed under autograd
        (positions that require gradients get their distances recomputed, so that the gradient
        reaches them)."""
        with torch.no_grad():
            sources, local = torch.unique(index[1], return_inverse=True)
            edges = torch.stack([index[0], local])  # still sorted by target, then source
        if torch.is_grad_enabled() and (pos.requires_grad or pos_dst.requires_grad):
            dist = squared_distance(pos, pos_dst, torch.stack([edges[0], index[1]]))

        def block_sums(dist):
            w = None if weight is None else weight[sources]
            return tuple(self._edge_sums(rows(x, sources), w, edges, dist, len(pos_dst)))

        if torch.is_grad_enabled():
            return SoftmaxSums(*checkpoint(block_sums, dist, use_reentrant=False))
        return SoftmaxSums(*block_sums(dist))

    def _edge_sums(
        self,
        x: Tensor,
        weight: Tensor | None,
        index: Tensor,
        dist: Tensor,
        num_dst: int,
        order: Tensor | None = None,
    ) -> SoftmaxSums:
        r"""The softmax sums of eq. (10) over the edges ``index`` [2, E] (row 0 target, row 1 a
        row of ``x``) sorted by target, then source, with the squared distances ``dist`` [E] of
        :meth:`neighbors`; ``x`` [N_src, C_in] and ``weight`` [N_src] may be any subset of the
        sources that holds every source of the edges; ``order`` sorts the edges by source for
        the backward (None: sorted there). Shifted by each target's largest logit :math:`m_i`
        per head: :math:`\sum_k w_k e^{s_{ik} - m_i} (U W^h)_k` ``[num_dst, H, C_h]``,
        :math:`\sum_k w_k e^{s_{ik} - m_i}` and :math:`m_i` ``[num_dst, H]`` (-inf for a
        target without edges)."""
        v = self.lin_v(x).view(-1, self.heads, self.head_channels)  # [N_src, H, C_h]
        logits = -dist[:, None] * self.lam[None, :]  # [E, H]
        log_w = log_weight(weight, x)
        if log_w is not None:  # w_k e^{s_k} / sum_j w_j e^{s_j} over each field, exactly
            logits = logits + log_w[index[1], None].to(logits.dtype)
        target = index[0, :, None].expand_as(logits)
        top = logits.new_full((num_dst, self.heads), -torch.inf)
        top = top.scatter_reduce(0, target, logits.detach(), reduce="amax")
        p = torch.exp(logits - top[index[0]])  # [E, H]
        dtype = torch.promote_types(p.dtype, v.dtype)
        num = SparseAggregate.apply(p.to(dtype), v.to(dtype), index, num_dst, order)
        mass = p.new_zeros(num_dst, self.heads).index_add(0, index[0], p)
        return SoftmaxSums(num, mass, top)

    def __repr__(self) -> str:
        field = ", ".join(f"{name}={value}" for name, value in self.field.items())
        periodic = "" if self.periodic is None else f", periodic={self.periodic}"
        return (
            f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, "
            f"heads={self.heads}, {field}, lambda_param={self.lambda_param!r}{periodic})"
        )


__all__ = ["LocalPositionAttention"]

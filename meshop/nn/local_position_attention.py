"""Local (cross) position-attention over neighbour lists (PiT eq. (10); multi-head App. C.2)."""

from __future__ import annotations

import itertools
import warnings
from collections import OrderedDict
from collections.abc import Sequence

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from meshop._pyg import softmax
from meshop.data.neighbors import neighbor_index, sample_slices, sort_edges, squared_distance
from meshop.errors import ConfigError
from meshop.nn.interface import check_inputs
from meshop.nn.position_attention import PositionKernel, box_lengths, log_weight


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
    over each target's neighbours is :func:`torch_geometric.utils.softmax` on the :math:`[E, H]`
    logits, so memory is :math:`O(N_{dst} k)`, never :math:`N_{dst} \times N_{src}`. The weights
    depend on positions only, so the aggregation is a sparse-dense product per head (CSR, forward
    and backward) and no :math:`[E, C_{out}]` message tensor is ever built.

    With ``periodic`` the distance is the minimum-image one. Coordinates are wrapped into the box,
    the sources are tiled into their :math:`3^p` images (``p`` periodic axes), neighbours are found
    among the images and mapped back to their source, keeping the nearest image of each. This equals
    the dense minimum-image receptive field whenever that field's radius is below half the
    shortest period (a wider field ranks the farther images of a source too).

    Args:
        in_channels (int): width :math:`C_{in}` of the source features.
        out_channels (int): width :math:`C_{out}` of the output; divisible by ``heads``.
        heads (int): number of heads (PiT default 2).
        quantile (float, optional): receptive field as a quantile in ``[0, 1]`` (PiT: 0.005-0.08).
        k (int, optional): receptive field as a number of nearest neighbours.
        radius (float, optional): receptive field as a distance.
        lambda_param (str): ``"tan"`` (paper), ``"softplus"`` or ``"square"``; see
            :func:`meshop.nn.position_attention.positive_lambda`.
        periodic (float or sequence, optional): box length of a periodic domain, one for all axes or
            one per axis (``None`` for an open axis).
        max_num_neighbors (int): cap of the radius search per target.
        cache_mb (float): memory for neighbour lists kept between calls (CPU tensors, open
            domains). A sample's mesh does not change between epochs: its edges are stored under
            the exact bytes of its source and target coordinates and reused whenever the same
            coordinates come back (any change of the positions is a new key, so the lists are
            recomputed), least recently used dropped first, with the edges' distances and their
            order by source (positions that require gradients get their distances recomputed,
            so that the gradient reaches them). 0 turns the cache off.

    Shapes:
        - input: the common signature of :mod:`meshop.nn.interface`: ``x`` :math:`(N_{src},
          C_{in})`, ``pos`` :math:`(N_{src}, D)`, sorted ``batch`` :math:`(N_{src})`, ``weight``
          :math:`(N_{src})` (``None``: equal weights); keywords ``pos_dst`` :math:`(N_{dst}, D)`
          (``None``: self-attention) and sorted ``batch_dst`` :math:`(N_{dst})`
        - output: :math:`(N_{dst}, C_{out})`
    """

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
        self.cache_bytes = int(cache_mb * 2**20)
        # key -> (local edges, their distances, their order by source or None until needed)
        self._cache: OrderedDict[bytes, tuple[Tensor, Tensor, Tensor | None]] = OrderedDict()
        self._cached_bytes = 0
        super().__init__(in_channels, out_channels, heads, lambda_param, periodic)

    def neighbors(
        self,
        pos_src: Tensor,
        pos_dst: Tensor,
        batch_src: Tensor | None = None,
        batch_dst: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """Receptive fields as an edge index [2, E] (row 0 target, row 1 source) sorted by target,
        then source (CSR order), and the squared (minimum-image when periodic) distance of every
        edge [E]."""
        index, dist, _ = self._edges(pos_src, pos_dst, batch_src, batch_dst)
        return index, dist

    def _edges(
        self, pos_src: Tensor, pos_dst: Tensor, batch_src: Tensor | None, batch_dst: Tensor | None
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """:meth:`neighbors` and, for cached samples, the edges' order by source (the transpose
        in CSR order that the backward needs), else ``None``."""
        if self.periodic is not None:
            return *self._periodic_neighbors(pos_src, pos_dst, batch_src, batch_dst), None
        cache = self.cache_bytes > 0 and pos_src.device.type == "cpu"
        if cache:
            slices = self._slices(pos_src, pos_dst, batch_src, batch_dst)
            keys = [_key(pos_src[src], pos_dst[dst]) for src, dst in slices]
            if all(key in self._cache for key in keys):
                index, dist, order = self._cached_edges(slices, keys, pos_src)
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
            self._store(index, dist, slices, keys)
        return index, dist, None

    @staticmethod
    def _slices(pos_src, pos_dst, batch_src, batch_dst) -> list[tuple[slice, slice]]:
        if batch_src is None and batch_dst is None:
            return [(slice(0, len(pos_src)), slice(0, len(pos_dst)))]
        if batch_src is None:
            batch_src = torch.zeros(len(pos_src), dtype=torch.long, device=pos_src.device)
        if batch_dst is None:
            batch_dst = torch.zeros(len(pos_dst), dtype=torch.long, device=pos_dst.device)
        return sample_slices(batch_src, batch_dst)

    def _cached_edges(self, slices, keys, like: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
        """The batch's edges from its samples' entries: index and order shifted by each sample's
        first source, target and edge; the distances as stored (same coordinates, same bytes).
        A sample stored without autograd gets its order when a step with autograd needs it."""
        index, dist, order, start = [], [], [], 0
        for (src, dst), key in zip(slices, keys):
            self._cache.move_to_end(key)
            local, local_dist, local_order = self._cache[key]
            if local_order is None and torch.is_grad_enabled():
                local_order = _source_order(local)
                self._cache[key] = (local, local_dist, local_order)
            index.append(local.long() + local.new_tensor([[dst.start], [src.start]]).long())
            dist.append(local_dist.detach())
            order.append(None if local_order is None else local_order.long() + start)
            start += local.shape[1]
        if not index:
            empty = torch.zeros(0, dtype=torch.long, device=like.device)
            return empty.view(2, 0), like.new_zeros(0), empty
        order = None if any(o is None for o in order) else torch.cat(order)
        return torch.cat(index, dim=1), torch.cat(dist), order

    def _store(self, index: Tensor, dist: Tensor, slices, keys) -> None:
        """Split the batch's edges (sorted by target) by sample and keep them, in local indices,
        with their distances and their order by source."""
        starts = index.new_tensor([dst.start for _, dst in slices] + [slices[-1][1].stop])
        bounds = torch.searchsorted(index[0].contiguous(), starts).tolist()
        for (src, dst), key, lo, hi in zip(slices, keys, bounds[:-1], bounds[1:]):
            if key in self._cache:
                self._cache.move_to_end(key)
                continue
            local = index[:, lo:hi] - index.new_tensor([[dst.start], [src.start]])
            local = local.to(torch.int32) if max(src.stop, dst.stop) < 2**31 else local
            size = _entry_bytes(key, local, dist)
            if size > self.cache_bytes:
                continue
            # sorted when a step with autograd (whose backward needs it) asks
            order = _source_order(local) if torch.is_grad_enabled() else None
            entry = (local, dist[lo:hi].detach().clone(), order)
            while self._cached_bytes + size > self.cache_bytes:
                old_key, (old, old_dist, _) = self._cache.popitem(last=False)
                self._cached_bytes -= _entry_bytes(old_key, old, old_dist)
            self._cache[key] = entry
            self._cached_bytes += size

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
        v = self.lin_v(x).view(-1, self.heads, self.head_channels)  # [N_src, H, C_h]
        logits = -dist[:, None] * self.lam[None, :]  # [E, H]
        log_w = log_weight(weight, pos)
        if log_w is not None:  # w_k e^{s_k} / sum_j w_j e^{s_j} over each field, exactly
            logits = logits + log_w[index[1], None].to(logits.dtype)
        alpha = softmax(logits, index=index[0], num_nodes=len(pos_dst))  # over each target's field
        dtype = torch.promote_types(alpha.dtype, v.dtype)
        out = _Aggregate.apply(alpha.to(dtype), v.to(dtype), index, len(pos_dst), order)
        return out.view(len(pos_dst), self.out_channels)

    def _periodic_neighbors(self, pos_src, pos_dst, batch_src, batch_dst) -> tuple[Tensor, Tensor]:
        dim, n_src = pos_src.shape[1], len(pos_src)
        box = box_lengths(self.periodic, dim, pos_src)
        periodic = box > 0
        safe_box = torch.where(periodic, box, torch.ones_like(box))

        def wrap(pos):
            return torch.where(periodic, pos - safe_box * torch.floor(pos / safe_box), pos)

        pos_src, pos_dst = wrap(pos_src), wrap(pos_dst)
        shifts = [(-1.0, 0.0, 1.0) if p else (0.0,) for p in periodic.tolist()]
        offsets = pos_src.new_tensor(list(itertools.product(*shifts))) * box  # [3^p, D]
        copies = len(offsets)
        tiled = (pos_src[None] + offsets[:, None]).reshape(-1, dim)  # [3^p N_src, D]
        if batch_src is None:
            batch_src = torch.zeros(n_src, dtype=torch.long, device=pos_src.device)
        if batch_dst is None:
            batch_dst = torch.zeros(len(pos_dst), dtype=torch.long, device=pos_dst.device)
        tiled_batch = batch_src.repeat(copies)
        if "quantile" in self.field:
            index = self._tiled_quantile_index(tiled, pos_dst, tiled_batch, batch_dst, copies)
        else:
            # the neighbour search wants each sample's nodes contiguous: the copies of a batch
            # of several samples are not, so search them in sample order and map back
            order = torch.argsort(tiled_batch, stable=True)
            index = neighbor_index(
                tiled[order],
                pos_dst,
                tiled_batch[order],
                batch_dst,
                max_num_neighbors=self.max_num_neighbors,
                **self.field,
            )
            index = torch.stack([index[0], order[index[1]]])
        dist = squared_distance(tiled, pos_dst, index)
        index = torch.stack([index[0], index[1] % n_src])
        return _nearest_image(index, dist, len(pos_dst), n_src)

    def _tiled_quantile_index(self, tiled, pos_dst, tiled_batch, batch_dst, copies) -> Tensor:
        """Quantile receptive fields over the images, one sample at a time, with the quantile
        rescaled so that its rank among ``copies * n`` images equals that of ``q`` among ``n``."""
        q = self.field["quantile"]
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

    def __repr__(self) -> str:
        field = ", ".join(f"{name}={value}" for name, value in self.field.items())
        periodic = "" if self.periodic is None else f", periodic={self.periodic}"
        return (
            f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, "
            f"heads={self.heads}, {field}, lambda_param={self.lambda_param!r}{periodic})"
        )


def _key(pos_src: Tensor, pos_dst: Tensor) -> bytes:
    """The exact coordinates of one sample's sources and targets, as a dictionary key."""
    parts = []
    for pos in (pos_src, pos_dst):
        pos = pos.detach().contiguous()
        header = f"{pos.dtype}{tuple(pos.shape)}".encode()
        parts += [header, pos.view(-1).view(torch.uint8).numpy().tobytes()]
    return b"|".join(parts)


def _source_order(local: Tensor) -> Tensor:
    """The order of a sample's edges (sorted by target, then source) by source, then target: the
    transpose in CSR order, in the edges' own index dtype."""
    return torch.argsort(local[1], stable=True).to(local.dtype)


def _entry_bytes(key: bytes, local: Tensor, dist: Tensor) -> int:
    """The memory of one cache entry: its key, edges, distances and their order by source (counted
    whether sorted yet or not)."""
    return local.shape[1] * (3 * local.element_size() + dist.element_size()) + len(key)


def _sparse(crow: Tensor, col: Tensor, values: Tensor, size: tuple[int, int]) -> Tensor:
    """A CSR matrix from indices already in CSR order (torch's beta notice silenced)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Ss]parse CSR tensor support is in beta.*")
        return torch.sparse_csr_tensor(crow, col, values, size=size, check_invariants=False)


def _row_pointers(row: Tensor, num_rows: int) -> Tensor:
    """CSR row pointers [num_rows + 1] of sorted row indices."""
    counts = torch.bincount(row, minlength=num_rows)
    return torch.cat([counts.new_zeros(1), counts.cumsum(0)])


class _Aggregate(torch.autograd.Function):
    r"""``out[i, h] = sum_{e: dst_e = i} alpha[e, h] v[src_e, h]`` without the ``[E, H, C]``
    messages: per head, the forward is the CSR product :math:`A^h V^h` with
    :math:`A^h_{ij} = \alpha_{e,h}` on the edges, and the backward is
    :math:`\partial V^h = (A^h)^\top \partial\mathrm{out}^h` (CSR product with the transpose)
    and :math:`\partial\alpha_{e,h} = \langle \partial\mathrm{out}_{dst_e, h},
    V_{src_e, h}\rangle` (``torch.sparse.sampled_addmm`` on the edge pattern). Autocast is off:
    the products run in the inputs' dtype.

    ``alpha`` [E, H] and ``v`` [N_src, H, C] share a dtype; ``index`` [2, E] (row 0 target,
    row 1 source) is sorted by target, then source, without repeated edges; ``order`` [E], when
    given, sorts the edges by source, then target (else the backward sorts them).
    """

    @staticmethod
    def forward(
        ctx, alpha: Tensor, v: Tensor, index: Tensor, num_dst: int, order: Tensor | None = None
    ) -> Tensor:
        dst, src = index
        crow = _row_pointers(dst, num_dst)
        v_heads = v.transpose(0, 1).contiguous()  # [H, N_src, C]
        size = (num_dst, len(v))
        with torch.autocast(v.device.type, enabled=False):
            out = [
                _sparse(crow, src, a, size) @ v_h for a, v_h in zip(alpha.t().contiguous(), v_heads)
            ]
        ctx.save_for_backward(alpha, v_heads, index, crow, order)
        return torch.stack(out, dim=1)  # [N_dst, H, C]

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor):
        alpha, v_heads, (dst, src), crow, order = ctx.saved_tensors
        size = (len(crow) - 1, v_heads.shape[1])  # [N_dst, N_src]
        grad_heads = grad_out.to(v_heads.dtype).transpose(0, 1).contiguous()  # [H, N_dst, C]
        grad_alpha = grad_v = None
        with torch.autocast(v_heads.device.type, enabled=False):
            if ctx.needs_input_grad[0]:
                grad_alpha = torch.stack(
                    [
                        torch.sparse.sampled_addmm(
                            _sparse(crow, src, a, size), g, v_h.t(), beta=0.0
                        ).values()
                        for a, g, v_h in zip(alpha.t().contiguous(), grad_heads, v_heads)
                    ],
                    dim=1,
                )
            if ctx.needs_input_grad[1]:
                if order is None:  # the transpose in CSR order
                    order = torch.argsort(src, stable=True)
                crow_t, col_t = _row_pointers(src, size[1]), dst[order]
                grad_v = torch.stack(
                    [
                        _sparse(crow_t, col_t, a, size[::-1]) @ g
                        for a, g in zip(alpha[order].t().contiguous(), grad_heads)
                    ],
                    dim=1,
                )
        return grad_alpha, grad_v, None, None, None


def _nearest_image(index: Tensor, dist: Tensor, n_dst: int, n_src: int) -> tuple[Tensor, Tensor]:
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


__all__ = ["LocalPositionAttention"]

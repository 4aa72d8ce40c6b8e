r"""Chunked evaluation: a model's forward pass that never holds more than a chunk of nodes'
intermediate tensors, for inference and for training.

Every attention of meshop integrates over the mesh, and integrals are sums that can be
accumulated chunk by chunk exactly: the Galerkin-family kernels
(:meth:`~meshop.nn.HeadAttention.integrate`), ONO's moments and inner products
(:meth:`~meshop.nn.OrthogonalAttention.moments`, :meth:`~meshop.nn.OrthogonalAttention.project`),
Transolver's slice tokens (:meth:`~meshop.nn.PhysicsAttention.integrate`) and the softmax sums of
position attention, with a running maximum (:meth:`~meshop.nn.PositionAttention.attend_streamed`)
or over receptive fields found for a chunk of targets at a time (:func:`cross_attention`). The
per-node parts (MLPs, layer norms, queries, decoders) then run chunk by chunk. Each model's
``forward_chunked(data, chunk_nodes)`` puts these together; :func:`predict_in_chunks` is the entry
point, with a default chunk size chosen from the mesh size and the free memory
(:func:`default_chunk_nodes`).

The chunked pass equals the unchunked one up to the order of floating-point sums (tests compare
them for every model on mixed batches whose chunks cut samples). What remains of size N is what
the model's own state needs between layers: the input and output for PiT and the Galerkin
Transformer on a latent mesh, one ``[N, width]`` feature tensor per stream for the Transolver and
ONO.

Without autograd (inference) the chunks overwrite that state in place. With autograd (training
on samples of millions of nodes) every chunk's computation is checkpointed
(:func:`torch.utils.checkpoint.checkpoint`): its intermediate tensors are freed after the
forward pass and recomputed, one chunk at a time, in the backward pass, so the gradients are
exact and the memory is the layers' ``[N, width]`` outputs plus one chunk's intermediates
(:func:`sum_over_chunks`, :func:`map_over_chunks`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import contextmanager
from contextvars import ContextVar

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from meshop._pyg import Data
from meshop.data.batching import node_chunks
from meshop.data.latent import farthest_point_sampling
from meshop.data.neighbors import squared_distance
from meshop.errors import ConfigError
from meshop.nn.local_position_attention import LocalPositionAttention
from meshop.nn.position_attention import PositionAttention, softmax_quotient

#: nodes from which :func:`default_chunk_nodes` chunks a batch (below, the unchunked pass is
#: faster and small)
CHUNK_FROM = 2**17
#: the default chunk, when enough memory is free
DEFAULT_CHUNK = 2**16
#: edges one neighbour search of chunked local attention finds at most (a group of targets:
#: 2^24 edges hold 400 MB of indices and distances)
SEARCH_EDGES = 2**24
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
    """The chunk size of :func:`predict_in_chunks` when none is given: None (no chunking) up to
    :data:`CHUNK_FROM` nodes; above, :data:`DEFAULT_CHUNK` nodes, fewer (down to 1024) when less
    than a quarter of the free memory (``free_bytes``, read when None) would hold a chunk's
    intermediate tensors at :data:`BYTES_PER_CHUNK_NODE` per node."""
    if num_nodes <= CHUNK_FROM:
        return None
    free = available_memory() if free_bytes is None else free_bytes
    if free is None:
        return DEFAULT_CHUNK
    return int(max(1024, min(DEFAULT_CHUNK, free // 4 // BYTES_PER_CHUNK_NODE)))


def check_chunk_nodes(chunk_nodes: int) -> int:
    if isinstance(chunk_nodes, bool) or not isinstance(chunk_nodes, int) or chunk_nodes < 1:
        raise ConfigError(
            f"chunk_nodes must be a positive number of nodes (e.g. 65536), got {chunk_nodes!r}"
        )
    return chunk_nodes


def chunked_forward(model: nn.Module) -> Callable[[Data, int], Tensor]:
    """The ``forward_chunked`` of a model (through a :class:`~meshop.train.NormalizedModel`'s
    own), with a clear error for a model that has none."""
    method = getattr(model, "forward_chunked", None)
    if method is None:
        raise ConfigError(
            f"{type(model).__name__} has no chunked forward pass (forward_chunked); predict "
            f"unchunked (chunk_nodes=None), or use a meshop model"
        )
    return method


@torch.no_grad()
def predict_in_chunks(model: nn.Module, data: Data, chunk_nodes: int | None = None) -> Tensor:
    """``model(data)``, chunk by chunk: the model's ``forward_chunked`` with ``chunk_nodes``
    nodes per chunk (:func:`default_chunk_nodes` when None, which leaves small meshes unchunked;
    0 never chunks), in evaluation mode (the model is left in the mode it was given in), without
    autograd."""
    if chunk_nodes is None:
        chunk_nodes = default_chunk_nodes(total_nodes(data))
    elif chunk_nodes == 0:
        chunk_nodes = None
    was_training = model.training
    model.eval()
    try:
        if chunk_nodes is None:
            return model(data)
        return chunked_forward(model)(data, check_chunk_nodes(chunk_nodes))
    finally:
        model.train(was_training)


def add_integrals(a, b):
    """Two chunks' shares of additive integrals (tensors, or tuples or dicts of them)."""
    if isinstance(a, dict):
        return {key: a[key] + b[key] for key in a}
    if isinstance(a, tuple):
        return tuple(x + y for x, y in zip(a, b))
    return a + b


def run_chunk(fn: Callable[[slice], object], nodes: slice):
    """``fn(nodes)``, checkpointed when autograd records it (its intermediates are recomputed in
    the backward pass instead of kept, under the :func:`split_mesh` group of the forward pass,
    wherever the backward is called)."""
    if not torch.is_grad_enabled():
        return fn(nodes)
    group = mesh_group()

    def replay(nodes):
        token = _MESH_GROUP.set(group)
        try:
            return fn(nodes)
        finally:
            _MESH_GROUP.reset(token)

    return checkpoint(replay, nodes, use_reentrant=False)


def sum_over_chunks(fn: Callable[[slice], object], n: int, chunk_nodes: int, layer=None):
    """The integrals of ``n`` nodes from each chunk's share ``fn(nodes)``, merged by the
    ``layer``'s ``merge_integrals`` where it has one (a running maximum), else summed; inside
    :func:`split_mesh`, then reduced over the processes that hold the other parts of the mesh
    (the layer's ``reduce_integrals``, else a sum)."""
    merge = getattr(layer, "merge_integrals", add_integrals)
    total = None
    for nodes in node_chunks(n, chunk_nodes) or [slice(0, 0)]:
        part = run_chunk(fn, nodes)
        total = part if total is None else merge(total, part)
    group = mesh_group()
    if group is not None:
        total = getattr(layer, "reduce_integrals", all_reduce_integrals)(total, group)
    return total


_MESH_GROUP: ContextVar[object | None] = ContextVar("meshop_mesh_group", default=None)


@contextmanager
def split_mesh(group=None):
    """Within this context every process of ``group`` (torch.distributed's default group when
    None) holds a part of the nodes of the same samples, and every layer's integrals are summed
    over the processes (:class:`AllReduceSum`, so that gradients flow back through the sums):
    ``forward_chunked`` on each process's nodes gives the outputs of the whole mesh at those
    nodes, and the sum over the processes of each process's parameter gradients is the gradient
    of the whole mesh's loss. The quadrature weights must be the mesh's (equal weights are 1 per
    node, not ``1/n`` of a part).

    The Transolver, ONO and the MLP baseline split every layer. PiT and the Galerkin and Fourier
    Transformers on meshes split their cross attention from the input mesh to a latent mesh
    that every process holds whole (``latent_pos``, the same on every process:
    :func:`split_latent_mesh` samples one from the whole mesh): each process sums its own
    sources' share of every latent node's softmax (:func:`cross_attention`), the shares are
    merged over the processes (:func:`reduce_softmax_sums`), and the layers on the latent mesh
    and the decoder to each process's query points run on every process (:func:`replicated`).
    Without a latent mesh they refuse (the latent mesh would be the split input mesh itself)."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        raise ConfigError(
            "split_mesh needs torch.distributed: launch with torchrun and call "
            "meshop.train.distributed.setup() (or torch.distributed.init_process_group) first"
        )
    token = _MESH_GROUP.set(group if group is not None else torch.distributed.group.WORLD)
    try:
        yield
    finally:
        _MESH_GROUP.reset(token)


def mesh_group():
    """The process group of :func:`split_mesh` in force, or None."""
    return _MESH_GROUP.get()


def check_not_split(model: str) -> None:
    """Raise :class:`ConfigError` inside :func:`split_mesh`: the whole forward pass of a
    ``model`` that splits only in ``forward_chunked`` would see this process's nodes alone."""
    if mesh_group() is not None:
        raise ConfigError(
            f"{model}.forward sees only this process's nodes under split_mesh; call "
            f"model.forward_chunked(data, chunk_nodes) there"
        )


@contextmanager
def replicated():
    """Within :func:`split_mesh`, a block whose layers run on node sets that every process holds
    whole (PiT's latent mesh and its decoder to the process's own query points): nothing in it
    is reduced over the processes. Outside :func:`split_mesh` it changes nothing."""
    token = _MESH_GROUP.set(None)
    try:
        yield
    finally:
        _MESH_GROUP.reset(token)


def mesh_weight(data: Data, weight: Tensor) -> Tensor:
    """The nodes' quadrature weights for a chunked pass: ``weight`` as the model's node set has
    them, except that under :func:`split_mesh` a mesh without weights gets 1 per node (its
    default ``1/n`` would count the nodes of one process's part only)."""
    if mesh_group() is None or getattr(data, "weight", None) is not None:
        return weight
    return (weight > 0).to(weight.dtype)


def all_reduce_integrals(total, group):
    """Additive integrals (a tensor, or tuples or dicts of them) summed over ``group``, with
    gradients."""
    if isinstance(total, dict):
        return {key: all_reduce_integrals(value, group) for key, value in total.items()}
    if isinstance(total, tuple):
        return tuple(all_reduce_integrals(value, group) for value in total)
    return AllReduceSum.apply(total, group)


def reduce_softmax_sums(sums: dict[str, Tensor], group) -> dict[str, Tensor]:
    """Softmax sums over disjoint parts of the sources, one part per process of ``group``, merged
    exactly: each process's sums (any entries besides ``"max"``, whose leading dimensions are
    those of ``"max"``) shifted by its own maximum logit ``"max"`` (detached; -inf where the
    process has no source) are rescaled to the largest maximum of all processes, then summed over
    them with gradients (:class:`AllReduceSum`)."""
    top = sums["max"].detach().clone()
    torch.distributed.all_reduce(top, op=torch.distributed.ReduceOp.MAX, group=group)
    scale = torch.exp(sums["max"].detach() - top).nan_to_num(0.0)  # no source anywhere: 0
    out = {"max": top}
    for key, value in sums.items():
        if key != "max":
            factor = scale.view(*scale.shape, *(1,) * (value.dim() - scale.dim()))
            out[key] = AllReduceSum.apply(value * factor.to(value.dtype), group)
    return out


def gather_nodes(pos: Tensor, batch: Tensor, group) -> tuple[Tensor, Tensor, Tensor]:
    """The coordinates of every process's nodes, identical on every process of ``group``:
    ``(pos [N, D], batch [N], mine [n])``, the nodes of all processes sorted by sample (then by
    process, then in each process's order), and where this process's ``n`` nodes are among
    them. Coordinates only, without autograd: what a receptive field over the whole mesh or a
    latent mesh sampled from it needs."""
    dist = torch.distributed
    size, rank = dist.get_world_size(group), dist.get_rank(group)
    pos, batch = pos.detach(), batch.detach()
    count = torch.tensor([len(pos)], device=pos.device)
    counts = [torch.zeros_like(count) for _ in range(size)]
    dist.all_gather(counts, count, group=group)
    counts = [int(c) for c in counts]
    most = max(counts)
    padded_pos = pos.new_zeros(most, pos.shape[1])
    padded_pos[: len(pos)] = pos
    padded_batch = batch.new_zeros(most)
    padded_batch[: len(batch)] = batch
    every_pos = [torch.empty_like(padded_pos) for _ in range(size)]
    every_batch = [torch.empty_like(padded_batch) for _ in range(size)]
    dist.all_gather(every_pos, padded_pos, group=group)
    dist.all_gather(every_batch, padded_batch, group=group)
    all_pos = torch.cat([p[:c] for p, c in zip(every_pos, counts)])
    all_batch = torch.cat([b[:c] for b, c in zip(every_batch, counts)])
    order = torch.argsort(all_batch, stable=True)
    where = torch.empty_like(order)
    where[order] = torch.arange(len(order), device=order.device)
    first = sum(counts[:rank])
    return all_pos[order], all_batch[order], where[first : first + len(pos)]


def check_shared(pos: Tensor, batch: Tensor, group, what: str) -> None:
    """Raise :class:`ConfigError` unless every process of ``group`` holds the same nodes
    ``pos`` (sorted ``batch``): compared by their number and sums, in float64."""
    pos = pos.detach().to(torch.float64)
    mark = torch.stack(
        [
            pos.new_tensor(float(len(pos))),
            pos.sum(),
            pos.square().sum(),
            batch.detach().to(torch.float64).sum(),
        ]
    )
    both = torch.cat([mark, -mark])
    torch.distributed.all_reduce(both, op=torch.distributed.ReduceOp.MAX, group=group)
    if not torch.equal(both[:4], -both[4:]):
        raise ConfigError(
            f"{what} differ between the processes of split_mesh; give every process the same "
            f"latent mesh (latent_pos, e.g. from meshop.nn.chunked.split_latent_mesh)"
        )


def split_latent_mesh(data: Data, num_points: int, seed: int | None = 0, group=None) -> Data:
    """:func:`meshop.data.add_latent_mesh` for a part of a mesh split over processes (each
    process calls it with its own part of the same sample, inside torch.distributed): farthest
    point sampling of ``num_points`` nodes from the coordinates of the whole mesh, gathered from
    every process (:func:`gather_nodes`), so that every process gets the same ``latent_pos``.
    Returns ``data`` (modified in place)."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        raise ConfigError(
            "split_latent_mesh needs torch.distributed: launch with torchrun and call "
            "torch.distributed.init_process_group first"
        )
    group = group if group is not None else torch.distributed.group.WORLD
    batch = torch.zeros(len(data.pos), dtype=torch.long, device=data.pos.device)
    pos, _, _ = gather_nodes(data.pos, batch, group)
    data.latent_pos = pos[farthest_point_sampling(pos, num_points, seed=seed)].clone()
    return data


class AllReduceSum(torch.autograd.Function):
    """A sum over a process group whose backward is the same sum of the gradients: every
    process's integral feeds every process's outputs, so each gets the gradient of all of them."""

    @staticmethod
    def forward(ctx, tensor: Tensor, group) -> Tensor:
        ctx.group = group
        out = tensor.clone()
        torch.distributed.all_reduce(out, group=group)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        grad = grad.clone()
        torch.distributed.all_reduce(grad, group=ctx.group)
        return grad, None


def map_over_chunks(
    fn: Callable[[slice], Tensor], n: int, chunk_nodes: int, out: Tensor | None = None
) -> Tensor:
    """``fn(nodes)`` ``[n_chunk, C]`` of every chunk as one ``[n, C]`` tensor. Without autograd
    the chunks are written into ``out`` (new when None; it may be the chunks' own input, which
    each chunk reads only at its own rows); with autograd each chunk is checkpointed and the
    results concatenated."""
    chunks = node_chunks(n, chunk_nodes) or [slice(0, 0)]
    if torch.is_grad_enabled():
        return torch.cat([run_chunk(fn, nodes) for nodes in chunks])
    for nodes in chunks:
        value = fn(nodes)
        if out is None or out.shape[1:] != value.shape[1:]:
            out = value.new_empty(n, *value.shape[1:])
        out[nodes] = value
    return out


def cross_attention(
    layer: nn.Module,
    source: Callable[[Tensor | slice], Tensor],
    pos: Tensor,
    batch: Tensor,
    weight: Tensor | None,
    pos_dst: Tensor,
    batch_dst: Tensor,
    chunk_nodes: int,
) -> Tensor:
    """A (local or global) position attention from the source nodes to the targets, for chunks
    of targets, with the source features computed on demand: ``source(index)`` gives the
    features ``[n, C_in]`` of the source rows ``index`` (a slice or an index tensor), so the
    ``[N_src, C_in]`` features need never exist (PiT's encoder lifts the input fields only for
    the sources a chunk of latent nodes reads).

    A local layer finds each chunk's receptive fields among all the sources of the targets'
    samples (exactly the fields of the whole target set) and attends over the sources they
    hold (:meth:`~meshop.nn.LocalPositionAttention.attend_edges`); the chunks hold about
    ``4 * chunk_nodes`` edges. A global layer streams the sources
    (:meth:`~meshop.nn.PositionAttention.attend_streamed`). Returns ``[N_dst, C_out]``.

    Inside :func:`split_mesh` the sources are this process's part of the mesh and the targets
    must be the same on every process (a latent mesh; :class:`ConfigError` else). A local
    layer's receptive fields are those of the whole mesh, searched among the coordinates of every
    process's sources (:func:`gather_nodes`), of which each process attends over its own; each
    process's softmax sums (:meth:`~meshop.nn.LocalPositionAttention.edge_sums`,
    :meth:`~meshop.nn.PositionAttention.streamed_sums`) are merged over the processes
    (:func:`reduce_softmax_sums`), so every process gets the whole mesh's attention at every
    target."""
    if not isinstance(layer, (LocalPositionAttention, PositionAttention)):
        raise ConfigError(f"no chunked cross attention for {type(layer).__name__}")
    group = mesh_group()
    if group is not None:
        check_shared(pos_dst, batch_dst, group, f"the target nodes of {type(layer).__name__}")
    local = isinstance(layer, LocalPositionAttention)
    if local:
        parts = _local_cross_attention(
            layer, source, pos, batch, weight, pos_dst, batch_dst, chunk_nodes, group
        )
    else:

        def attend(nodes):
            return getattr(layer, "attend_streamed" if group is None else "streamed_sums")(
                source, pos, batch, weight, pos_dst[nodes], batch_dst[nodes]
            )

        if group is None:
            return map_over_chunks(attend, len(pos_dst), chunk_nodes)
        parts = [run_chunk(attend, nodes) for nodes in node_chunks(len(pos_dst), chunk_nodes)]
    if group is None:
        return torch.cat(parts) if parts else pos_dst.new_zeros(0, layer.out_channels)
    if not parts:  # no target
        empty = pos_dst.new_zeros(0, layer.heads)
        num = pos_dst.new_zeros(0, layer.heads, layer.head_channels)
        parts = [{"num": num, "mass": empty, "max": empty}]
    sums = {key: torch.cat([part[key] for part in parts]) for key in parts[0]}
    sums = reduce_softmax_sums(sums, group)
    return softmax_quotient(sums).reshape(len(pos_dst), layer.out_channels)


def _local_cross_attention(
    layer, source, pos, batch, weight, pos_dst, batch_dst, chunk_nodes, group=None
):
    """Receptive fields searched for groups of targets of about :data:`SEARCH_EDGES` edges (each
    torch-cluster search builds a tree over all the sources: few large searches, not many small
    ones), attended in chunks of about ``4 * chunk_nodes`` edges: the chunks' outputs, or
    inside :func:`split_mesh` (``group``) their softmax sums over this process's sources, the
    fields searched among every process's (:func:`gather_nodes`)."""
    if group is None:
        search_pos, search_batch, local = pos, batch, None
    else:
        search_pos, search_batch, mine = gather_nodes(pos, batch, group)
        local = torch.full((len(search_pos),), -1, dtype=torch.long, device=pos.device)
        local[mine] = torch.arange(len(mine), device=pos.device)
    ((kind, value),) = layer.field.items()
    most = int(torch.bincount(search_batch).max()) if len(search_batch) else 1
    field = {"quantile": value * most + 2, "k": value, "radius": layer.max_num_neighbors}[kind]
    field = max(int(field), 1)
    group_size = max(1, SEARCH_EDGES // field)
    targets = max(1, 4 * chunk_nodes // field)
    parts = []
    for searched in node_chunks(len(pos_dst), group_size):
        with torch.no_grad():  # the fields: found once, outside the recomputed part
            index, dist = layer.neighbors(
                search_pos, pos_dst[searched], search_batch, batch_dst[searched], use_cache=False
            )
            if local is not None:  # this process's sources, in its own rows (order kept)
                source_row = local[index[1]]
                own = source_row >= 0
                index, dist = torch.stack([index[0][own], source_row[own]]), dist[own]
        count = searched.stop - searched.start
        starts = torch.arange(count + 1, device=index.device)
        bounds = torch.searchsorted(index[0].contiguous(), starts).tolist()
        for nodes in node_chunks(count, targets):
            lo, hi = bounds[nodes.start], bounds[nodes.stop]
            edges = index[:, lo:hi] - index.new_tensor([[nodes.start], [0]])
            part = _attend_field(
                layer,
                source,
                pos,
                weight,
                pos_dst[searched][nodes],
                edges,
                dist[lo:hi],
                sums=group is not None,
            )
            parts.append(part)
    return parts


def _attend_field(layer, source, pos, weight, pos_dst, index, dist, sums=False):
    """Local attention of a chunk of targets (``pos_dst``) over their edges ``index`` (row 0 a
    target of the chunk, row 1 a source), lifting only the sources they hold; its softmax sums
    (:meth:`~meshop.nn.LocalPositionAttention.edge_sums`) when ``sums``; checkpointed under
    autograd."""
    with torch.no_grad():
        sources, local = torch.unique(index[1], return_inverse=True)
        edges = torch.stack([index[0], local])  # still sorted by target, then source
    if torch.is_grad_enabled() and (pos.requires_grad or pos_dst.requires_grad):
        dist = squared_distance(pos, pos_dst, torch.stack([edges[0], index[1]]))

    def attend(_):
        w = None if weight is None else weight[sources]
        method = layer.edge_sums if sums else layer.attend_edges
        return method(source(sources), w, edges, dist, len(pos_dst))

    return run_chunk(attend, slice(0, len(pos_dst)))


__all__ = [
    "CHUNK_FROM",
    "DEFAULT_CHUNK",
    "AllReduceSum",
    "add_integrals",
    "available_memory",
    "check_not_split",
    "check_shared",
    "cross_attention",
    "default_chunk_nodes",
    "gather_nodes",
    "map_over_chunks",
    "mesh_group",
    "mesh_weight",
    "predict_in_chunks",
    "reduce_softmax_sums",
    "replicated",
    "run_chunk",
    "split_latent_mesh",
    "split_mesh",
    "sum_over_chunks",
    "total_nodes",
]

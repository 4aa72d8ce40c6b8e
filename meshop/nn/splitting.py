r"""The split driver: one mesh over several processes, every integral's sums all-reduced.

Within :func:`split_mesh` every process of a torch.distributed group holds a part of the nodes of
the same samples. The chunk driver (:mod:`meshop.nn.chunking`) then reduces every layer's merged
sums over the processes (:func:`reduce_sums`: additive sums summed, softmax sums rescaled to the
largest maximum of all and summed, both with gradients through :class:`AllReduceSum`), so a
model's ``forward_chunked`` on each process's nodes gives the whole mesh's outputs at those
nodes, and the sum over the processes of each process's parameter gradients is the gradient of
the whole mesh's loss. The quadrature weights must be the mesh's (equal weights are 1 per node,
not ``1/n`` of a part: :func:`mesh_weight`).

Node sets that every process holds whole (a latent mesh, sampled from the whole mesh by
:func:`split_latent_mesh`, checked by :func:`check_shared`) are not reduced: the layers on them
run on every process. No layer imports this module; the protocol's
:func:`~meshop.nn.integral.split_group` tells a layer that also reduces over data-parallel
processes (ONO's batch moment) that the sums it gets are already whole.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import Tensor

from meshop._pyg import Data
from meshop.data.latent import farthest_point_sampling
from meshop.data.neighbors import quantile_index, radius_among, radius_index, sort_edges
from meshop.errors import ConfigError
from meshop.nn.integral import SPLIT_GROUP, SoftmaxSums, split_group


def _check_distributed(what: str) -> None:
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        raise ConfigError(
            f"{what} needs torch.distributed: launch with torchrun and call "
            "meshop.train.distributed.setup() (or torch.distributed.init_process_group) first"
        )


@contextmanager
def split_mesh(group=None):
    """Within this context every process of ``group`` (torch.distributed's default group when
    None) holds a part of the nodes of the same samples, and ``model.forward_chunked`` reduces
    every layer's sums over the processes (module docstring).

    The Transolver, ONO and the MLP baseline split every layer. PiT and the Galerkin and Fourier
    Transformers on meshes split their cross attention from the input mesh to a latent mesh that
    every process holds whole (``latent_pos``, the same on every process:
    :func:`split_latent_mesh` samples one from the whole mesh); the layers on the latent mesh and
    the decoder to each process's query points run on every process. Without a latent mesh they
    refuse (the latent mesh would be the split input mesh itself)."""
    _check_distributed("split_mesh")
    token = SPLIT_GROUP.set(group if group is not None else torch.distributed.group.WORLD)
    try:
        yield
    finally:
        SPLIT_GROUP.reset(token)


def mesh_weight(data: Data, weight: Tensor | None) -> Tensor | None:
    """The nodes' quadrature weights for a chunked pass: ``weight`` as the model's node set has
    them, except that under :func:`split_mesh` a mesh without weights gets 1 per node (its
    default ``1/n`` would count the nodes of one process's part only)."""
    if weight is None or split_group() is None or getattr(data, "weight", None) is not None:
        return weight
    return (weight > 0).to(weight.dtype)


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


def reduce_sums(sums, group):
    """A layer's merged sums over disjoint parts of the sources, one part per process of
    ``group``, reduced exactly, with gradients: :class:`~meshop.nn.integral.SoftmaxSums`
    rescaled to the largest maximum of all processes (detached) and summed; tensors (and tuples
    or dicts of them) summed."""
    if isinstance(sums, SoftmaxSums):
        top = sums.max.detach().clone()
        torch.distributed.all_reduce(top, op=torch.distributed.ReduceOp.MAX, group=group)
        shifted = sums.rescaled(top)
        return SoftmaxSums(
            AllReduceSum.apply(shifted.num, group), AllReduceSum.apply(shifted.mass, group), top
        )
    if isinstance(sums, dict):
        return {key: reduce_sums(value, group) for key, value in sums.items()}
    if isinstance(sums, tuple):
        return tuple(reduce_sums(value, group) for value in sums)
    return AllReduceSum.apply(sums, group)


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


def gather_edges(index: Tensor, group) -> Tensor:
    """Every process's edges ``[2, E_p]`` of ``group`` concatenated in the order of the
    processes: the same ``[2, sum E_p]`` on every process."""
    dist = torch.distributed
    size = dist.get_world_size(group)
    count = torch.tensor([index.shape[1]], device=index.device)
    counts = [torch.zeros_like(count) for _ in range(size)]
    dist.all_gather(counts, count, group=group)
    counts = [int(c) for c in counts]
    padded = index.new_zeros(2, max(counts))
    padded[:, : index.shape[1]] = index
    every = [torch.empty_like(padded) for _ in range(size)]
    dist.all_gather(every, padded, group=group)
    return torch.cat([edges[:, :c] for edges, c in zip(every, counts)], dim=1)


def split_fields(
    layer, pos: Tensor, batch: Tensor, among, pos_dst: Tensor, batch_dst: Tensor, group
):
    """The receptive fields of ``layer`` (a layer that ``searches``:
    :class:`~meshop.nn.LocalPositionAttention`) from targets that every process of ``group``
    holds (``pos_dst``, sorted ``batch_dst``: a latent mesh) to the sources of every process:
    the edges ``[2, E]`` (row 0 a target, row 1 a row of this process's ``pos``) of the whole
    mesh's fields (:meth:`neighbors` among every process's coordinates, ``among`` of
    :func:`gather_nodes`) that reach this process's nodes, sorted by target, then source: the
    edges the layer attends over. Each process searches where that is exact:

    - quantile fields (open domains): the radius searches of
      :func:`~meshop.data.neighbors.quantile_index` run on each process's own nodes and their
      edges are gathered, so that every target's quantile radius is the whole mesh's while each
      process searches its own nodes only (:func:`~meshop.data.neighbors.radius_among`: by
      direct distances where that costs less than a search tree);
    - radius fields (open domains): each process its own nodes, unless some target holds
      ``max_num_neighbors`` sources of all the processes (which of them a search keeps is its
      own: then as below);
    - k nearest, periodic boxes: each process searches the fields of every ``size``-th target
      among the gathered coordinates, and the edges are gathered.
    """
    dist = torch.distributed
    size, rank = dist.get_world_size(group), dist.get_rank(group)
    all_pos, all_batch, mine = among
    field = layer.field
    open_domain = layer.periodic is None
    index = None
    if open_domain and "quantile" in field:

        def radius_search(dst, r, dst_batch, cap):
            # by direct distances where that costs less than a search tree over the part, as
            # on one process (the encoder of a large mesh searches in many small groups)
            local = radius_among(pos, dst, r * r, batch, dst_batch, cap)
            return gather_edges(torch.stack([local[0], mine[local[1]]]), group)

        index = quantile_index(
            all_pos, pos_dst, field["quantile"], all_batch, batch_dst, radius_search=radius_search
        )
    elif open_domain and "radius" in field:
        local = radius_index(
            pos, pos_dst, field["radius"], batch, batch_dst, layer.max_num_neighbors
        )
        found = torch.bincount(local[0], minlength=len(pos_dst))
        dist.all_reduce(found, group=group)
        if not bool((found >= layer.max_num_neighbors).any()):
            return sort_edges(local, len(pos_dst), len(pos))
    if index is None:  # every size-th target's whole field, gathered
        share = torch.arange(rank, len(pos_dst), size, device=pos_dst.device)
        found, _ = layer.neighbors(
            all_pos, pos_dst[share], all_batch, batch_dst[share], use_cache=False
        )
        index = gather_edges(torch.stack([share[found[0]], found[1]]), group)
    own = torch.full((len(all_pos),), -1, dtype=torch.long, device=pos.device)
    own[mine] = torch.arange(len(mine), device=pos.device)
    source = own[index[1]]
    keep = source >= 0
    return sort_edges(torch.stack([index[0][keep], source[keep]]), len(pos_dst), len(pos))


def check_shared(pos: Tensor, batch: Tensor, group, what: str) -> None:
    """Raise :class:`ConfigError` unless every process of ``group`` holds exactly the same nodes
    ``pos`` with the same ``batch``, in the same order: the same shape, then the elementwise
    maximum and minimum over the processes equal (the same latent nodes in another order differ
    there)."""
    values = torch.cat([pos.detach().to(torch.float64).flatten(), batch.to(torch.float64)])
    shape = torch.tensor([float(len(pos)), float(pos.shape[1]), float(len(values))])
    top, low = shape.clone(), shape.clone()
    torch.distributed.all_reduce(top, op=torch.distributed.ReduceOp.MAX, group=group)
    torch.distributed.all_reduce(low, op=torch.distributed.ReduceOp.MIN, group=group)
    same = torch.equal(top, low)
    if same:
        high, least = values.clone(), values.clone()
        torch.distributed.all_reduce(high, op=torch.distributed.ReduceOp.MAX, group=group)
        torch.distributed.all_reduce(least, op=torch.distributed.ReduceOp.MIN, group=group)
        same = torch.equal(high, least)
    if not same:
        raise ConfigError(
            f"{what} differ between the processes of split_mesh (in number, values or order); "
            f"give every process the same latent mesh (latent_pos, e.g. from "
            f"meshop.nn.splitting.split_latent_mesh)"
        )


def split_latent_mesh(data: Data, num_points: int, seed: int | None = 0, group=None) -> Data:
    """:func:`meshop.data.add_latent_mesh` for a part of a mesh split over processes (each
    process calls it with its own part of the same sample, inside torch.distributed): farthest
    point sampling of ``num_points`` nodes from the coordinates of the whole mesh, gathered from
    every process (:func:`gather_nodes`), so that every process gets the same ``latent_pos``.
    Returns ``data`` (modified in place)."""
    _check_distributed("split_latent_mesh")
    group = group if group is not None else torch.distributed.group.WORLD
    batch = torch.zeros(len(data.pos), dtype=torch.long, device=data.pos.device)
    pos, _, _ = gather_nodes(data.pos, batch, group)
    data.latent_pos = pos[farthest_point_sampling(pos, num_points, seed=seed)].clone()
    return data


__all__ = [
    "AllReduceSum",
    "check_shared",
    "gather_edges",
    "gather_nodes",
    "mesh_weight",
    "reduce_sums",
    "split_fields",
    "split_latent_mesh",
    "split_mesh",
]

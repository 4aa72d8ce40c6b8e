"""One mesh over the processes of torchrun in training (``TrainConfig.split_mesh``,
``meshop train --split-mesh``).

Every process reads the same batches, in the same order, and keeps its own part of each sample's
nodes (:class:`MeshParts`: the nodes ``rank::size``, with their fields, targets and quadrature
weights); a latent mesh is sampled beforehand from the whole sample (the data preparation), so
every process holds the same one. The model's chunked pass runs inside
:func:`~meshop.nn.splitting.split_mesh` (:func:`split_forward`), which reduces every layer's sums
over the processes; the relative error's sums are reduced too before the division
(:func:`meshop.train.losses.relative_lp` with ``group``), so every process gets the whole meshes'
loss. The sum over the processes of their parameter gradients is then the whole loss's gradient:
:func:`sum_gradients` gives it to every process (summed, not averaged as data parallel training
would), so that every process takes the same step and the parameters stay the same everywhere.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence

import torch
from torch import Tensor, nn

from meshop._pyg import Data
from meshop.errors import ConfigError
from meshop.nn.chunking import Walk
from meshop.nn.splitting import split_mesh
from meshop.train.distributed import DistContext
from meshop.train.memory import total_nodes

#: the per-node attributes of a sample that each process keeps its part of
NODE_KEYS = ("pos", "x", "y", "weight")
#: what ``meshop train`` gives a model that needs a latent mesh to split
LATENT_HINT = (
    "meshop train: --latent-points 256 (latent_points = 256 in [train]) samples every sample's "
    "latent mesh from the whole sample before its nodes are split"
)


def check_launch(ctx: DistContext) -> None:
    """Raise :class:`ConfigError` unless this process is one of several started by torchrun."""
    if not ctx.distributed:
        raise ConfigError(
            "split_mesh spreads each sample's nodes over the processes of torchrun, and this "
            "run has one process: launch it with torchrun --nproc_per_node N (N >= 2), e.g. "
            "torchrun --nproc_per_node 2 -m meshop.cli train --split-mesh ..., or train "
            "without split_mesh"
        )


def check_model(model: nn.Module, sample: Data) -> None:
    """Raise :class:`ConfigError`, saying why and what to do, when ``model`` cannot train on
    ``sample`` (a whole training sample, with its latent mesh) split over the processes: a model
    without a chunked pass (not a meshop model), query points (:func:`part_of`), and what the
    model refuses itself (:meth:`~meshop.models.Operator.check_split`: PiT and the Galerkin and
    Fourier Transformers without a latent mesh, PiT with ``decoder_layers``, the grid path)."""
    name = type(model).__name__
    if not hasattr(model, "compute"):
        raise ConfigError(
            f"split_mesh cannot train {name}: it has no chunked pass (it is not a meshop "
            f"model, meshop.models.Operator); train it without split_mesh"
        )
    check_nodes(sample)
    try:
        model.check_split(sample)
    except ConfigError as exc:
        latent = getattr(sample, "latent_pos", None) is not None
        raise ConfigError(
            f"split_mesh cannot train {name}: {exc}" + ("" if latent else f" ({LATENT_HINT})")
        ) from exc


def check_nodes(data: Data) -> None:
    """Raise :class:`ConfigError` for a sample with query points: their targets are at the query
    points and their input features come from their nearest input node, which may be another
    process's."""
    if getattr(data, "query_pos", None) is not None:
        raise ConfigError(
            "split_mesh trains on the targets at the mesh nodes, and the samples have query "
            "points (query_pos), whose inputs come from their nearest node, which may be another "
            "process's: train them without split_mesh"
        )


def part_of(data: Data, rank: int, size: int) -> Data:
    """Process ``rank``'s part of a sample split over ``size`` processes: the nodes
    ``rank::size`` (:data:`NODE_KEYS` sliced alike), everything else (parameters, the latent
    mesh and its weights, ``grid_shape``) as the whole sample has it, without the cells
    (``face``, which index the whole mesh's nodes). A shallow copy; ``data`` is left alone.

    Raises:
        ConfigError: the sample has query points (:func:`check_nodes`).
    """
    check_nodes(data)
    piece = copy.copy(data)
    for key in NODE_KEYS:
        if getattr(data, key, None) is not None:
            piece[key] = data[key][rank::size]
    if "face" in piece:
        del piece.face
    return piece


class MeshParts(Sequence):
    """A dataset seen through :func:`part_of`: ``view[i]`` is process ``rank``'s part of
    ``dataset[i]``, made when asked for. Picklable (DataLoader workers get a copy) if the dataset
    is."""

    def __init__(self, dataset: Sequence[Data], rank: int, size: int):
        self.dataset, self.rank, self.size = dataset, rank, size

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Data:
        return part_of(self.dataset[index], self.rank, self.size)


def split_forward(model: nn.Module, batch: Data, group=None) -> Tensor:
    """The outputs of the whole samples at this process's nodes: the chunked pass
    (:meth:`~meshop.train.NormalizedModel.compute`) of a :class:`~meshop.train.NormalizedModel`
    inside :func:`~meshop.nn.splitting.split_mesh`, in its chunks (:meth:`chunk_for`; one chunk
    of the whole part where it would not chunk)."""
    chunk = model.chunk_for(batch) or max(1, total_nodes(batch))
    with split_mesh(group):
        return model.compute(batch, Walk(chunk))


def sum_gradients(parameters: Iterable[nn.Parameter], group=None) -> None:
    """Every parameter's gradient summed over the processes of ``group`` (torch.distributed's
    default group when None), in place: under :func:`~meshop.nn.splitting.split_mesh` the whole
    loss's gradient, the same on every process. A parameter that has a gradient on some process
    gets one (zeros first) on all; one without a gradient anywhere keeps none (the optimiser
    skips it, as on one process). One all-reduce per dtype."""
    dist = torch.distributed
    params = [p for p in parameters if p.requires_grad]
    if not params:
        return
    device = params[0].device
    held = torch.tensor([float(p.grad is not None) for p in params], device=device)
    dist.all_reduce(held, op=dist.ReduceOp.MAX, group=group)
    grads = []
    for param, has in zip(params, held.tolist()):
        if has and param.grad is None:
            param.grad = torch.zeros_like(param)
        if has:
            grads.append(param.grad)
    for dtype in sorted({g.dtype for g in grads}, key=str):
        same = [g for g in grads if g.dtype == dtype]
        flat = torch.cat([g.reshape(-1) for g in same])
        dist.all_reduce(flat, group=group)
        for grad, value in zip(same, flat.split([g.numel() for g in same])):
            grad.copy_(value.view_as(grad))


def broadcast_state(module: nn.Module, group=None) -> None:
    """The parameters and buffers of process 0 on every process of ``group``, in place (as data
    parallel training starts): the processes of a split then start from the same model even if
    it was built with other random numbers."""
    for tensor in module.state_dict().values():
        if isinstance(tensor, Tensor):
            torch.distributed.broadcast(tensor, 0, group=group)


__all__ = [
    "MeshParts",
    "broadcast_state",
    "check_launch",
    "check_model",
    "check_nodes",
    "part_of",
    "split_forward",
    "sum_gradients",
]

"""Distributed data parallel through ``torchrun``: process group, device, reductions.

Launch any training script or ``meshop train`` with ``torchrun``
(``python -m torch.distributed.run``): the environment variables it sets (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``MASTER_ADDR``, ...) make :func:`setup` join the process group: gloo on CPU, nccl
on CUDA. Without them everything runs in one process and the helpers below are no-ops.
"""

from __future__ import annotations

import atexit
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from meshop.errors import ConfigError

CPU = torch.device("cpu")


@dataclass(frozen=True)
class DistContext:
    """Where this process stands: its rank, the number of processes, and its device."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = CPU

    @property
    def is_main(self) -> bool:
        """True on the process that logs and writes checkpoints (rank 0)."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def resolve_device(device: str, local_rank: int = 0) -> torch.device:
    """``"auto"`` is the process's CUDA device if there is one, else the CPU."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(
                "device 'cuda' was asked for but PyTorch sees no CUDA device; use --device cpu"
            )
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    return torch.device(device)


def setup(device: str = "auto") -> DistContext:
    """Join the process group when launched by torchrun (idempotent); pick the process's device."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    dev = resolve_device(device, local_rank)
    if world_size > 1 and not dist.is_initialized():
        backend = "nccl" if dev.type == "cuda" else "gloo"
        if dev.type == "cuda":
            torch.cuda.set_device(dev)
        dist.init_process_group(backend=backend)
        # A gloo group still alive when the interpreter finalises can abort the process
        # ("terminate called without an active exception", SIGABRT) after a run that succeeded;
        # scripts that call the Trainer under torchrun rarely call teardown themselves.
        atexit.register(teardown)
    return DistContext(rank=rank, world_size=world_size, local_rank=local_rank, device=dev)


def teardown() -> None:
    """Leave the process group (if this process joined one)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def all_reduce_sum(values: list[float], ctx: DistContext) -> list[float]:
    """Element-wise sum of ``values`` over all processes."""
    if not ctx.distributed:
        return list(values)
    t = torch.tensor(values, dtype=torch.float64, device=ctx.device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.tolist()


def all_gather_objects(obj: Any, ctx: DistContext) -> list[Any]:
    """``[obj of rank 0, obj of rank 1, ...]`` on every process."""
    if not ctx.distributed:
        return [obj]
    out: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(out, obj)
    return out


def barrier(ctx: DistContext) -> None:
    if ctx.distributed:
        dist.barrier()


def broadcast_object(obj: Any, ctx: DistContext) -> Any:
    """Rank 0's ``obj`` on every process."""
    if not ctx.distributed:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]

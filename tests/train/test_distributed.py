"""meshop.train.distributed: one process without torchrun's variables, and two gloo processes
whose reductions give known answers and which leave the group at exit."""

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from meshop.errors import ConfigError
from meshop.train import distributed as D
from tests.helpers import free_port


def test_one_process_without_torchrun(monkeypatch):
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    ctx = D.setup("cpu")
    assert ctx == D.DistContext(0, 1, 0, torch.device("cpu"))
    assert D.setup() == D.DistContext(0, 1, 0, D.resolve_device("auto"))  # "auto" by default
    assert ctx.is_main and not ctx.distributed and not dist.is_initialized()
    values = [1.5, 2.0]
    summed = D.all_reduce_sum(values, ctx)
    assert summed == values and summed is not values
    assert D.all_gather_objects({"a": 1}, ctx) == [{"a": 1}]
    assert D.broadcast_object("mine", ctx) == "mine"
    D.barrier(ctx)
    D.teardown()  # nothing joined: nothing to leave


def test_rank_and_world_size_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "3")
    ctx = D.setup("cpu")
    assert (ctx.rank, ctx.world_size, ctx.local_rank) == (0, 1, 3)
    assert D.DistContext(rank=1, world_size=2).distributed
    assert not D.DistContext(rank=1, world_size=2).is_main


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only answers")
def test_devices_without_cuda():
    assert D.resolve_device("auto") == torch.device("cpu")
    assert D.resolve_device("cpu", local_rank=1) == torch.device("cpu")
    with pytest.raises(ConfigError, match="^device 'cuda' was asked for but PyTorch sees no CUDA"):
        D.resolve_device("cuda")


def _worker(rank: int, port: int, results):
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        WORLD_SIZE="2",
        RANK=str(rank),
        LOCAL_RANK=str(rank),
    )
    at_exit = []  # what setup leaves to run when the interpreter exits
    D.atexit.register = at_exit.append
    ctx = D.setup("cpu")
    again = D.setup("cpu")  # joining twice is harmless
    out = {
        "ctx": (ctx.rank, ctx.world_size, ctx.local_rank, ctx.distributed, ctx.is_main),
        "again": again == ctx,
        "sum": D.all_reduce_sum([float(rank), 1.0, 0.25], ctx),
        # summed in float64: 1e8 + 1 has no float32 (whose spacing there is 8)
        "sum64": D.all_reduce_sum([1e8 + 1.0 if rank == 0 else 1e8, 0.1], ctx),
        "gather": D.all_gather_objects({"rank": rank}, ctx),
        "broadcast": D.broadcast_object(f"from {rank}", ctx),
    }
    D.barrier(ctx)
    out["at_exit"] = at_exit == [D.teardown]  # registered once, by the setup that joined
    for leave in at_exit:  # a script that never calls teardown leaves the group at exit
        leave()
    out["left"] = not dist.is_initialized()
    D.teardown()  # leaving twice is harmless
    results[rank] = out


def test_two_gloo_processes_reduce_gather_and_broadcast():
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(_worker, args=(free_port(), results), nprocs=2, join=True)
        results = dict(results)
    for rank in (0, 1):
        r = results[rank]
        assert r["ctx"] == (rank, 2, rank, True, rank == 0)
        assert r["again"] and r["left"] and r["at_exit"]
        assert r["sum"] == [1.0, 2.0, 0.5]
        assert r["sum64"] == [200_000_001.0, 0.2]
        assert r["gather"] == [{"rank": 0}, {"rank": 1}]
        assert r["broadcast"] == "from 0"

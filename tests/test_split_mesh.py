"""One mesh split across processes (meshop.nn.chunked.split_mesh): two gloo processes, each with
half of the nodes of the same samples, give the outputs and the summed gradients of one process
with the whole mesh."""

import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from meshop.data import from_points, make_loader
from meshop.errors import ConfigError
from meshop.models import ONO, MLPBaseline, PiT, Transolver
from meshop.nn.chunked import split_mesh

MODELS = {
    "transolver": lambda: Transolver(3, 2, 2, width=16, layers=2, heads=2, slices=8),
    "ono": lambda: ONO(3, 2, 2, width=16, layers=2, k=4, heads=2),
    "ono-linear": lambda: ONO(
        3, 2, 2, width=16, layers=2, k=4, heads=2, feature_attention="linear"
    ),
    "ono-batch": lambda: ONO(3, 2, 2, width=16, layers=2, k=4, heads=2, orthonormalize="batch"),
    "mlp": lambda: MLPBaseline(3, 2, 2),
}
# without weights: each process's default 1/n would count its own nodes only (mesh_weight)
CASES = [(name, True) for name in sorted(MODELS)] + [("transolver", False), ("ono-linear", False)]
SIZES = (200, 130)


def samples(weighted):
    """Two samples of 200 and 130 nodes, with quadrature weights or without."""
    out = []
    for seed, n in enumerate(SIZES):
        g = torch.Generator().manual_seed(seed)
        pos = torch.rand(n, 2, generator=g, dtype=torch.float64)
        data = from_points(pos, x=torch.sin(5 * pos[:, :1]), y=pos.cos())
        data.pos, data.x, data.y = pos, data.x.double(), data.y.double()
        if weighted:
            data.weight = (0.5 + torch.rand(n, generator=g, dtype=torch.float64)) / n
        out.append(data)
    return out


def part(data, rank):
    """The nodes ``rank::2`` of a sample: what process ``rank`` holds."""
    piece = data.clone()
    for key in ("pos", "x", "y", "weight"):
        if getattr(data, key, None) is not None:
            piece[key] = data[key][rank::2]
    return piece


def step(name, batch, forward=None):
    """Outputs and parameter gradients of the loss summed over the batch's nodes."""
    torch.manual_seed(0)
    model = MODELS[name]().double().train()
    out = model(batch) if forward is None else model.forward_chunked(batch, 37)
    (out - batch.y).square().sum().backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return out.detach(), grads


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, port: int, results):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        out = {}
        for name, weighted in CASES:
            pieces = [part(d, rank) for d in samples(weighted)]
            batch = next(iter(make_loader(pieces, batch_size=2)))
            with split_mesh():
                values, grads = step(name, batch, forward="chunked")
            dist.all_reduce(grads)  # the gradient of the whole mesh's loss
            out[name, weighted] = (values, grads)
        pit = PiT(3, 2, 2, width=8, blocks=1).double()
        with split_mesh():
            try:
                pit.forward_chunked(batch, 37)
            except ConfigError as exc:
                out["pit"] = str(exc)
        results[rank] = out
    finally:
        dist.destroy_process_group()


def test_two_processes_on_halves_of_a_mesh_give_one_process_outputs_and_gradients():
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(_worker, args=(_free_port(), results), nprocs=2, join=True)
        results = dict(results)
    for name, weighted in CASES:
        batch = next(iter(make_loader(samples(weighted), batch_size=2)))
        out, grads = step(name, batch)
        scale = float(grads.abs().max())
        for rank in (0, 1):
            rows = torch.cat(
                [torch.arange(SIZES[0])[rank::2], SIZES[0] + torch.arange(SIZES[1])[rank::2]]
            )
            values, split_grads = results[rank][name, weighted]
            assert torch.allclose(values, out[rows], rtol=1e-7, atol=1e-9), (name, weighted)
            # against the largest gradient (ONO whitens nearly collinear features at initialisation)
            assert float((split_grads - grads).abs().max()) < 1e-7 * scale, (name, weighted)
    for rank in (0, 1):
        assert "split_mesh spreads over processes" in results[rank]["pit"]


def test_split_meshes_need_torch_distributed():
    with pytest.raises(ConfigError, match="split_mesh needs torch.distributed"):
        with split_mesh():
            pass

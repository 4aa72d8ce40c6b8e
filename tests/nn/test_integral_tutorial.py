"""The architecture page's tutorial layer (docs/architecture.md), run exactly as the page writes
it: a layer written to the integral protocol gets chunked inference, checkpointed chunked
training and the split of one mesh over processes with no code anywhere else."""

import os
import re
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from meshop.data import from_points, make_loader
from meshop.nn.splitting import split_mesh
from tests.helpers import free_port

PAGE = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
SIZES = (230, 140)


def tutorial() -> dict:
    """The names the page's tutorial block defines (MeanField, MeanFieldNet)."""
    (block,) = [
        b for b in re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S) if "MeanField" in b
    ]
    names: dict = {"__name__": "tutorial"}
    exec(compile(block, str(PAGE), "exec"), names)
    return names


def samples(weighted: bool) -> list:
    out = []
    for seed, n in enumerate(SIZES):
        g = torch.Generator().manual_seed(seed)
        pos = torch.rand(n, 2, generator=g, dtype=torch.float64)
        data = from_points(pos, x=torch.sin(4 * pos[:, :1]), y=pos.cos())
        data.pos, data.x, data.y = pos, data.x.double(), data.y.double()
        if weighted:
            data.weight = (0.5 + torch.rand(n, generator=g, dtype=torch.float64)) / n
        out.append(data)
    return out


def step(batch, chunk_nodes=None):
    """Outputs and parameter gradients of the summed squared error, whole or in chunks."""
    torch.manual_seed(0)
    model = tutorial()["MeanFieldNet"](3, 2, 2).double().train()
    out = model(batch) if chunk_nodes is None else model.forward_chunked(batch, chunk_nodes)
    (out - batch.y).square().sum().backward()
    return out.detach(), torch.cat([p.grad.flatten() for p in model.parameters()])


def test_the_tutorial_layer_is_an_integral_over_each_sample():
    names = tutorial()
    layer = names["MeanField"](4).double()
    x = torch.randn(10, 4, dtype=torch.float64)
    batch = torch.tensor([0] * 6 + [1] * 4)
    weight = torch.rand(10, dtype=torch.float64)
    out = layer(x, None, batch, weight)
    for sample in (0, 1):
        nodes = batch == sample
        w = weight[nodes, None]
        mean = (layer.lin_v(x[nodes]) * w).sum(0) / w.sum()
        torch.testing.assert_close(out[nodes], x[nodes] + layer.lin_o(mean))


def test_the_tutorial_model_in_chunks_equals_its_forward_with_the_same_gradients():
    for weighted in (True, False):
        batch = next(iter(make_loader(samples(weighted), batch_size=2)))
        out, grads = step(batch)
        for chunk_nodes in (1, 37, 1000):  # one node / chunks that cut both samples / one chunk
            chunked, chunked_grads = step(batch, chunk_nodes)
            torch.testing.assert_close(chunked, out, rtol=1e-10, atol=1e-12)
            torch.testing.assert_close(chunked_grads, grads, rtol=1e-10, atol=1e-12)
        with torch.no_grad():
            model = tutorial()["MeanFieldNet"](3, 2, 2).double().eval()
            torch.testing.assert_close(model.forward_chunked(batch, 50), model(batch))


def _worker(rank: int, port: int, results):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        out = {}
        for weighted in (True, False):
            pieces = []
            for data in samples(weighted):
                piece = data.clone()
                for key in ("pos", "x", "y", "weight"):
                    if getattr(data, key, None) is not None:
                        piece[key] = data[key][rank::2]
                pieces.append(piece)
            with split_mesh():
                values, grads = step(next(iter(make_loader(pieces, batch_size=2))), 29)
            dist.all_reduce(grads)
            out[weighted] = (values, grads)
        results[rank] = out
    finally:
        dist.destroy_process_group()


def test_the_tutorial_model_split_over_two_processes_gives_the_whole_mesh():
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(_worker, args=(free_port(), results), nprocs=2, join=True)
        results = dict(results)
    for weighted in (True, False):
        out, grads = step(next(iter(make_loader(samples(weighted), batch_size=2))))
        for rank in (0, 1):
            rows = torch.cat(
                [torch.arange(SIZES[0])[rank::2], SIZES[0] + torch.arange(SIZES[1])[rank::2]]
            )
            values, split_grads = results[rank][weighted]
            torch.testing.assert_close(values, out[rows], rtol=1e-9, atol=1e-11)
            torch.testing.assert_close(split_grads, grads, rtol=1e-9, atol=1e-11)

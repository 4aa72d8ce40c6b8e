"""One mesh split across processes (meshop.nn.splitting.split_mesh): two gloo processes, each with
a part of the nodes of the same samples, give the outputs and the summed gradients of one process
with the whole mesh."""

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from meshop.data import from_points, make_loader
from meshop.errors import ConfigError
from meshop.models import ONO, GalerkinTransformer, MLPBaseline, PiT, Transolver
from meshop.nn.splitting import gather_nodes, split_fields, split_latent_mesh, split_mesh
from meshop.train.data import with_latent_weight
from tests.helpers import free_port

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
        results[rank] = out
    finally:
        dist.destroy_process_group()


def test_two_processes_on_halves_of_a_mesh_give_one_process_outputs_and_gradients():
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(_worker, args=(free_port(), results), nprocs=2, join=True)
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


def test_split_meshes_need_torch_distributed():
    with pytest.raises(ConfigError, match="split_mesh needs torch.distributed"):
        with split_mesh():
            pass
    with pytest.raises(ConfigError, match="split_latent_mesh needs torch.distributed"):
        split_latent_mesh(samples(True)[0], LATENT_POINTS)


# PiT and the Galerkin and Fourier Transformers split their cross attention to a latent mesh that
# every process holds whole (sampled from the whole mesh's coordinates by split_latent_mesh)
LATENT_MODELS = {
    "pit-quantile": lambda: PiT(
        3, 2, 2, width=8, layers=1, encoder_quantile=0.1, decoder_quantile=0.1
    ),
    "pit-knn": lambda: PiT(3, 2, 2, width=8, layers=1, encoder_k=12, decoder_k=5),
    "pit-radius": lambda: PiT(3, 2, 2, width=8, layers=1, encoder_radius=0.2, decoder_k=5),
    "pit-pointwise": lambda: PiT(
        3, 2, 2, width=8, layers=1, encoder_k=12, decoder_k=5, pointwise=True
    ),
    "galerkin": lambda: GalerkinTransformer(3, 2, 2, width=8, layers=1, heads=2, path="mesh"),
    "galerkin-local": lambda: GalerkinTransformer(
        3, 2, 2, width=8, layers=1, heads=2, path="mesh", quantile=0.1
    ),
    "fourier": lambda: GalerkinTransformer(
        3, 2, 2, attention="fourier", width=8, layers=1, heads=2, path="mesh"
    ),
    "galerkin-weighted": lambda: GalerkinTransformer(
        3, 2, 2, width=8, layers=1, heads=2, path="mesh", quantile=0.1, weighted=True
    ),
}
# (model, quadrature weights, query points)
LATENT_CASES = [
    ("pit-quantile", True, False),
    ("pit-quantile", False, True),
    ("pit-knn", True, True),
    ("pit-radius", True, False),
    ("pit-pointwise", True, False),
    ("galerkin", True, True),
    ("galerkin-local", False, False),
    ("fourier", True, False),
    ("galerkin-weighted", True, True),
]
LATENT_POINTS = 30
#: models split with no latent weights stored: each process lumps its own nodes' (as in
#: docs/large_meshes.md), the sum over the processes is the whole mesh's
OWN_LATENT_WEIGHTS = ("pit-quantile", "pit-knn", "galerkin-weighted")
QUERIES = (50, 40)


def held_nodes(rank):
    """The nodes of each sample that process ``rank`` holds: an arbitrary half of the first
    sample's, and all of the second's on process 0 (process 1 holds none of it)."""
    mask = torch.rand(SIZES[0], generator=torch.Generator().manual_seed(7)) < 0.5
    first = torch.nonzero(mask if rank == 0 else ~mask).view(-1)
    second = torch.arange(SIZES[1]) if rank == 0 else torch.arange(0)
    return first, second


def with_queries(data, seed, count):
    """``data`` with ``count`` query points and targets there."""
    data = data.clone()
    g = torch.Generator().manual_seed(100 + seed)
    data.query_pos = torch.rand(count, 2, generator=g, dtype=torch.float64)
    data.y = data.query_pos.sin()
    return data


def latent_samples(weighted, queries, latent):
    """The two samples with their latent meshes (and query points), and the latent nodes'
    weights stored with them as meshop's data preparation does (the whole mesh's, on every
    process's part)."""
    out = []
    for seed, data in enumerate(samples(weighted)):
        if queries:
            data = with_queries(data, seed, QUERIES[seed])
        data.latent_pos = latent[seed]
        out.append(with_latent_weight(data))
    return out


def latent_part(data, nodes, queries, rank):
    """What a process holds of a sample: its ``nodes``, and every other query point."""
    piece = data.clone()
    for key in ("pos", "x", "weight"):
        if getattr(data, key, None) is not None:
            piece[key] = data[key][nodes]
    targets = torch.arange(rank, len(data.y), 2) if queries else nodes
    piece.y = data.y[targets]
    if queries:
        piece.query_pos = data.query_pos[targets]
    return piece


def latent_step(name, batch, chunk_nodes=None):
    """Outputs and gradients (zeros for a parameter without one) of the summed squared error."""
    torch.manual_seed(0)
    model = LATENT_MODELS[name]().double().train()
    out = model(batch) if chunk_nodes is None else model.forward_chunked(batch, chunk_nodes)
    (out - batch.y).square().sum().backward()
    grads = [torch.zeros_like(p) if p.grad is None else p.grad for p in model.parameters()]
    return out.detach(), torch.cat([g.flatten() for g in grads])


def _refusal(fn):
    try:
        fn()
    except ConfigError as exc:
        return str(exc)
    return None


def _latent_worker(rank: int, port: int, results):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        held = held_nodes(rank)
        # every process samples the same latent mesh from the whole mesh's coordinates
        latent = [split_latent_mesh(part(d, rank), LATENT_POINTS).latent_pos for d in samples(True)]
        out = {"latent": latent}
        for name, weighted, queries in LATENT_CASES:
            whole = latent_samples(weighted, queries, latent)
            pieces = [latent_part(d, held[i], queries, rank) for i, d in enumerate(whole)]
            batch = next(iter(make_loader(pieces, batch_size=2)))
            with split_mesh():
                values, grads = latent_step(name, batch, chunk_nodes=37)
            dist.all_reduce(grads)  # the gradient of the whole mesh's loss
            out[name, weighted, queries] = (values, grads)
        for name in OWN_LATENT_WEIGHTS:  # each process's latent weights from its own part
            pieces = [
                latent_part(d, held[i], False, rank)
                for i, d in enumerate(latent_samples(True, False, latent))
            ]
            for piece in pieces:
                del piece.latent_weight
            with split_mesh():
                values, grads = latent_step(name, next(iter(make_loader(pieces, batch_size=2))), 37)
            dist.all_reduce(grads)
            out[name, "own latent weights"] = (values, grads)
        pieces = [
            latent_part(d, held[i], True, rank)
            for i, d in enumerate(latent_samples(True, True, latent))
        ]
        queried = next(iter(make_loader(pieces, batch_size=2)))
        for piece in pieces:
            del piece.latent_pos, piece.latent_weight
        no_latent = next(iter(make_loader(pieces, batch_size=2)))
        other = latent_samples(True, False, [lat + 0.01 * rank for lat in latent])[0]
        shifted = next(iter(make_loader([latent_part(other, held[0], False, rank)])))
        mine = latent_samples(True, False, latent)[0]
        if rank:  # the same latent nodes in another order (reversed on the second process)
            mine.latent_pos = mine.latent_pos.flip(0)
        reordered = next(iter(make_loader([latent_part(mine, held[0], False, rank)])))
        pit = PiT(3, 2, 2, width=8, layers=1).double()
        refusals = {
            "pit-no-latent": lambda: pit.forward_chunked(no_latent, 37),
            "galerkin-no-latent": lambda: (
                LATENT_MODELS["galerkin"]().double().forward_chunked(no_latent, 37)
            ),
            "decoder-blocks": lambda: (
                PiT(3, 2, 2, width=8, layers=1, decoder_layers=1)
                .double()
                .forward_chunked(queried, 37)
            ),
            "pointwise-queries": lambda: (
                LATENT_MODELS["pit-pointwise"]().double().forward_chunked(queried, 37)
            ),
            "different-latent": lambda: pit.forward_chunked(shifted, 37),
            "reordered-latent": lambda: pit.forward_chunked(reordered, 37),
            "pit-forward": lambda: pit(queried),
            "galerkin-forward": lambda: LATENT_MODELS["galerkin"]().double()(queried),
        }
        with split_mesh():
            out["refusals"] = {key: _refusal(fn) for key, fn in refusals.items()}
        results[rank] = out
    finally:
        dist.destroy_process_group()


def test_pit_and_galerkin_split_at_their_latent_mesh_give_one_process_outputs_and_gradients():
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(_latent_worker, args=(free_port(), results), nprocs=2, join=True)
        results = dict(results)
    latent = results[0]["latent"]
    for mine, theirs, data in zip(latent, results[1]["latent"], samples(True)):
        assert torch.equal(mine, theirs)  # the same latent mesh on every process
        assert len(mine) == LATENT_POINTS
        assert ((mine[:, None] - data.pos[None]).abs().sum(-1).amin(1) == 0).all()  # its nodes
    cases = [*LATENT_CASES, *((name, True, False) for name in OWN_LATENT_WEIGHTS)]
    for case_index, (name, weighted, queries) in enumerate(cases):
        own = case_index >= len(LATENT_CASES)
        batch = next(iter(make_loader(latent_samples(weighted, queries, latent), batch_size=2)))
        out, grads = latent_step(name, batch)
        scale = float(grads.abs().max())
        for rank in (0, 1):
            if queries:
                rows = torch.cat(
                    [
                        torch.arange(rank, QUERIES[0], 2),
                        QUERIES[0] + torch.arange(rank, QUERIES[1], 2),
                    ]
                )
            else:
                first, second = held_nodes(rank)
                rows = torch.cat([first, SIZES[0] + second])
            key = (name, "own latent weights") if own else (name, weighted, queries)
            values, split_grads = results[rank][key]
            case = (name, weighted, queries, rank)
            assert values.shape == out[rows].shape, case
            assert torch.allclose(values, out[rows], rtol=1e-7, atol=1e-9), case
            assert float((split_grads - grads).abs().max()) < 1e-7 * scale, case
    expected = {
        "pit-no-latent": "PiT under split_mesh needs a latent mesh that every process holds whole",
        "galerkin-no-latent": "the Galerkin Transformer under split_mesh needs a latent mesh",
        "decoder-blocks": "PiT with decoder_layers=1 attends among all the query points",
        "pointwise-queries": "PiT(pointwise=True) reads the input fields of each query point",
        "different-latent": "differ between the processes of split_mesh",
        "reordered-latent": "split_mesh (in number, values or order)",
        "pit-forward": "PiT.forward sees only this process's nodes under split_mesh",
        "galerkin-forward": "GalerkinTransformer.forward sees only this process's nodes",
    }
    for rank in (0, 1):
        for key, message in expected.items():
            assert message in (results[rank]["refusals"][key] or ""), (rank, key)


# the receptive fields of a split cross attention (split_fields): the whole mesh's, to each
# process's own nodes; quantile fields searched by radius over each process's own nodes
FIELDS = {
    "quantile": dict(quantile=0.1),
    "small-quantile": dict(quantile=0.02),
    "k": dict(k=7),
    "radius": dict(radius=0.15),
    "radius-capped": dict(radius=0.3, max_num_neighbors=8),  # about 56 nodes within 0.3
    "periodic-quantile": dict(quantile=0.1, periodic=1.0),
}


def _fields_worker(rank: int, port: int, results):
    import meshop.nn.splitting as splitting
    from meshop.data import farthest_point_sampling
    from meshop.data.neighbors import radius_among
    from meshop.nn import LocalPositionAttention

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    searched = []  # the sources of every radius search split_fields makes itself

    def radius(x, *args, **kwargs):
        searched.append(len(x))
        return radius_among(x, *args, **kwargs)

    splitting.radius_among = radius
    try:
        whole = samples(True)
        held = held_nodes(rank)
        pos = torch.cat([d.pos[held[i]] for i, d in enumerate(whole)])
        batch = torch.cat([torch.full((len(h),), i) for i, h in enumerate(held)])
        latent = [d.pos[farthest_point_sampling(d.pos, LATENT_POINTS, seed=0)] for d in whole]
        pos_dst = torch.cat(latent)
        batch_dst = torch.arange(2).repeat_interleave(LATENT_POINTS)
        among = gather_nodes(pos, batch, dist.group.WORLD)
        own = torch.full((len(among[0]),), -1, dtype=torch.long)
        own[among[2]] = torch.arange(len(pos))
        out = {}
        for name, field in FIELDS.items():
            layer = LocalPositionAttention(4, 4, 1, **field)
            searched.clear()
            edges = split_fields(layer, pos, batch, among, pos_dst, batch_dst, dist.group.WORLD)
            # the whole mesh's fields (every process's coordinates), restricted to this one's
            index, _ = layer.neighbors(among[0], pos_dst, among[1], batch_dst, use_cache=False)
            keep = own[index[1]] >= 0
            expected = torch.stack([index[0][keep], own[index[1][keep]]])
            widest = int(torch.bincount(index[0]).max())
            out[name] = (torch.equal(edges, expected), edges.shape[1], widest, list(searched))
        results[rank] = (out, len(pos))
    finally:
        dist.destroy_process_group()


def test_split_receptive_fields_are_the_whole_mesh_s_and_quantiles_search_own_nodes():
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(_fields_worker, args=(free_port(), results), nprocs=2, join=True)
        results = dict(results)
    for rank in (0, 1):
        out, nodes = results[rank]
        for name, (same, edges, _widest, searched) in out.items():
            assert same and edges > 0, (rank, name)
            if name.endswith("quantile") and name != "periodic-quantile":
                # every radius search of the quantile's radii over this process's own nodes
                assert searched and set(searched) == {nodes}, (rank, name, searched)
            else:
                assert not searched, (rank, name)
        assert out["radius-capped"][2] == 8  # the whole search kept max_num_neighbors

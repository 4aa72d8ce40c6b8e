"""Chunked evaluation (meshop.nn.chunking): every model's forward_chunked equals its forward, on
mixed batches whose chunks cut samples, and holds no more than a chunk of nodes at a time."""

from __future__ import annotations

import pytest
import torch

from meshop import ConfigError
from meshop.data import add_latent_mesh, from_points, make_loader, set_query_points, uniform_grid
from meshop.data.batching import node_chunks, sample_ranges
from meshop.models import ONO, GalerkinTransformer, MLPBaseline, PiT, Transolver
from meshop.nn import LocalPositionAttention, PositionAttention
from meshop.train import NormalizedModel, prepare_data
from meshop.train.inference import predict_in_chunks
from meshop.train.memory import CHUNK_FROM, DEFAULT_CHUNK, default_chunk_nodes, total_nodes
from meshop.train.normalized import fit_normalizers

MODELS = {
    "pit": lambda: PiT(3, 2, 2, width=16, layers=2),
    "pit-knn-decoder-block": lambda: PiT(
        3, 2, 2, width=16, layers=1, encoder_k=12, decoder_k=6, decoder_layers=1
    ),
    "pit-radius-unweighted": lambda: PiT(
        3, 2, 2, width=16, layers=1, encoder_radius=0.2, decoder_radius=0.4, weighted=False
    ),
    "pit-periodic": lambda: PiT(3, 2, 2, width=16, layers=1, periodic=1.0),
    "pit-pointwise": lambda: PiT(3, 2, 2, width=16, layers=1, pointwise=True),
    "transolver": lambda: Transolver(3, 2, 2, width=16, layers=2, heads=2, slices=8),
    "ono-galerkin": lambda: ONO(3, 2, 2, width=16, layers=2, k=4, heads=2),
    "ono-linear-sum": lambda: ONO(
        3, 2, 2, width=16, layers=2, k=4, heads=2, feature_attention="linear", inner_product="sum"
    ),
    "ono-fourier-batch": lambda: ONO(
        3,
        2,
        2,
        width=16,
        layers=2,
        k=4,
        heads=2,
        feature_attention="fourier",
        orthonormalize="batch",
    ),
    "galerkin-global-cross": lambda: GalerkinTransformer(
        3, 2, 2, width=16, layers=2, heads=2, path="mesh"
    ),
    "galerkin-local-cross": lambda: GalerkinTransformer(
        3, 2, 2, width=16, layers=2, heads=2, path="mesh", quantile=0.05
    ),
    "galerkin-weighted": lambda: GalerkinTransformer(
        3, 2, 2, width=16, layers=2, heads=2, path="mesh", quantile=0.05, weighted=True
    ),
    "fourier-regular-norm": lambda: GalerkinTransformer(
        3, 2, 2, attention="fourier", norm="regular", width=16, layers=1, heads=2, path="mesh"
    ),
    "linear-encoder": lambda: GalerkinTransformer(
        3, 2, 2, attention="linear", width=16, layers=1, heads=2, path="mesh", k=8
    ),
    "mlp": lambda: MLPBaseline(3, 2, 2),
}


def sample(n, seed, queries=0, latent=True, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    pos = torch.rand(n, 2, generator=g, dtype=dtype)
    data = from_points(pos, x=torch.rand(n, 1, generator=g, dtype=dtype), y=pos[:, :2])
    data.weight = (0.5 + torch.rand(n, generator=g, dtype=dtype)) / n
    if queries:
        set_query_points(data, torch.rand(queries, 2, generator=g, dtype=dtype))
    if latent:
        data = add_latent_mesh(data, num_points=24, seed=seed)
    for key in ("pos", "x", "y", "weight", "latent_pos", "query_pos"):
        if getattr(data, key, None) is not None:
            data[key] = data[key].to(dtype)
    return data


def mixed_batch(queries=0, latent=True, dtype=torch.float64):
    samples = [sample(n, i, queries, latent, dtype) for i, n in enumerate((310, 520, 130))]
    return next(iter(make_loader(samples, batch_size=3)))


def built(name, dtype=torch.float64):
    torch.manual_seed(0)
    return MODELS[name]().to(dtype).eval()


# float64; ONO at initialisation whitens nearly collinear features (condition numbers ~1e8), so
# the order of its sums shows at 1e-8: a wrong integral shows at 1e-2
def relative_error(out, ref):
    scale = ref.abs().max().detach().clamp_min(1e-300)
    return float((out - ref).abs().max().detach() / scale)


@pytest.mark.parametrize("queries", [0, 17], ids=["mesh", "queries"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_model_in_chunks_equals_its_forward_on_a_mixed_batch(name, queries):
    batch = mixed_batch(queries)
    model = built(name)
    if name == "ono-fourier-batch":  # a running moment of its own, as after training
        model.train()
        model(batch)
        model.eval()
    with torch.no_grad():
        reference = model(batch)
    for chunk_nodes in (97, 400, 5000):  # cuts every sample / cuts some / one chunk
        out = model.forward_chunked(batch, chunk_nodes)
        assert out.shape == reference.shape
        assert relative_error(out, reference) < 1e-6, chunk_nodes


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_model_trains_in_chunks_with_the_gradients_of_its_forward(name):
    """Checkpointed chunks recompute their intermediates in the backward pass: the gradients of
    every parameter equal the unchunked step's (and the running moment of batch whitening is
    updated alike)."""
    batch = mixed_batch(queries=11)
    target = torch.randn(len(batch.query_pos), 2, dtype=torch.float64)
    grads, moments = [], []
    for chunked in (False, True):
        model = built(name).train()
        out = model.forward_chunked(batch, 97) if chunked else model(batch)
        ((out - target) ** 2).mean().backward()
        grads.append({k: p.grad for k, p in model.named_parameters() if p.grad is not None})
        moments.append([b.clone() for k, b in model.named_buffers() if "running" in k])
    assert grads[0].keys() == grads[1].keys() and grads[0]
    # measured against the largest gradient: a gradient that is zero in exact arithmetic (the
    # bias of linear attention's keys, which the node softmax cancels) is rounding noise in both
    scale = max(float(grad.abs().max()) for grad in grads[0].values())
    for key, grad in grads[0].items():
        assert float((grads[1][key] - grad).abs().max()) < 1e-7 * scale, key
    for before, after in zip(*moments):
        assert torch.allclose(before, after, rtol=1e-9)


def test_targets_without_neighbours_inside_and_at_the_start_of_chunks():
    """Radius fields leave far targets without sources (zeros): the chunks' edges must still be
    read at their own targets."""
    data = sample(300, 4, queries=0)
    far = torch.full((20, 2), 5.0, dtype=torch.float64)
    set_query_points(data, torch.cat([far[:7], data.pos[:30], far[7:], data.pos[30:60]]))
    data.query_pos = data.query_pos.double()
    model = PiT(3, 2, 2, width=16, layers=1, encoder_k=8, decoder_radius=0.3).double().eval()
    with torch.no_grad():
        reference = model(data)
        # a radius field is budgeted at max_num_neighbors (1024) edges a target: 4 to 8 targets
        # a chunk here, the first ones far
        for chunk_nodes in (1024, 2048):
            assert relative_error(model.forward_chunked(data, chunk_nodes), reference) < 1e-9


@pytest.mark.parametrize("name", ["pit", "transolver", "ono-galerkin", "galerkin-local-cross"])
def test_chunks_of_one_node_and_a_single_domain(name):
    data = sample(60, 7, queries=5)
    model = built(name)
    with torch.no_grad():
        reference = model(data)
    assert relative_error(model.forward_chunked(data, 1), reference) < 1e-6


@pytest.mark.parametrize("name", ["pit", "transolver", "ono-galerkin", "galerkin-global-cross"])
def test_float32_in_chunks_at_twenty_thousand_nodes(name):
    data = sample(20_000, 3, latent=True, dtype=torch.float32)
    model = built(name, torch.float32)
    with torch.no_grad():
        reference = model(data)
    out = predict_in_chunks(model, data, chunk_nodes=4096)
    assert relative_error(out, reference) < 2e-4


def test_chunks_bound_the_rows_every_node_layer_sees():
    data = sample(3000, 5, queries=400)
    rows = {}

    def record(name):
        def hook(module, inputs, output):
            rows[name] = max(rows.get(name, 0), len(inputs[0]))

        return hook

    transolver = built("transolver")
    transolver.blocks[0].norm_attn.register_forward_hook(record("slices"))
    transolver.blocks[-1].mlp.register_forward_hook(record("mlp"))
    transolver.preprocess.register_forward_hook(record("preprocess"))
    transolver.forward_chunked(data, 256)
    assert rows["slices"] <= 256 and rows["mlp"] <= 256 and rows["preprocess"] <= 256

    pit = built("pit-knn-decoder-block")
    pit.lift.register_forward_hook(record("lift"))
    pit.head.register_forward_hook(record("head"))
    pit.decoder_processor[0].attn.register_forward_hook(record("query block"))
    pit.forward_chunked(data, 64)
    # the encoder lifts only the sources of a chunk of latent nodes' fields (4 x 64 edges)
    assert rows["lift"] <= 4 * 64 < len(data.pos)
    assert rows["head"] <= 64
    # the block on the 400 query points attends for chunks of targets, never all at once
    assert "query block" not in rows


@pytest.mark.parametrize("periodic", [None, 1.0])
def test_streamed_position_attention_merges_its_blocks_exactly(periodic):
    torch.manual_seed(0)
    layer = PositionAttention(8, 8, heads=2, periodic=periodic, chunk_elements=16).double()
    pos, x = torch.rand(90, 2, dtype=torch.float64), torch.randn(90, 8, dtype=torch.float64)
    x.requires_grad_(True)
    batch = torch.repeat_interleave(torch.arange(2), torch.tensor([60, 30]))
    weight = torch.rand(90, dtype=torch.float64)
    targets, target_batch = torch.rand(20, 2, dtype=torch.float64), torch.tensor([0] * 12 + [1] * 8)
    reference = layer(x, pos, batch, weight, pos_dst=targets, batch_dst=target_batch)
    # 4 x 16 distances per block: one source at a time, the running maximum rescaled often
    sums = layer.partial(
        lambda nodes: x[nodes], pos, batch, weight, 2, pos_dst=targets, batch_dst=target_batch
    )
    out = layer.finish(sums)
    assert relative_error(out, reference) < 1e-12
    # the checkpointed blocks give the gradients of the whole layer
    probe = torch.randn_like(out)
    grads = [torch.autograd.grad((o * probe).sum(), (x, layer.theta)) for o in (out, reference)]
    for streamed, whole in zip(*grads):
        assert relative_error(streamed, whole) < 1e-10


def test_streamed_attention_keeps_one_block_for_the_backward():
    torch.manual_seed(0)
    layer = PositionAttention(8, 8, heads=2, chunk_elements=1000).double()
    pos, x = torch.rand(4000, 2, dtype=torch.float64), torch.randn(4000, 8, dtype=torch.float64)
    batch = torch.zeros(4000, dtype=torch.long)
    targets = torch.rand(50, 2, dtype=torch.float64)
    x.requires_grad_(True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(
        lambda t: saved.append(t.numel()) or t, lambda t: t
    ):
        layer.partial(
            lambda nodes: x[nodes], pos, batch, None, 1, pos_dst=targets, batch_dst=batch[:50]
        )
    # every block's [2, 50, 40] logits kept would be 2 x 50 x 4000 = 400,000 numbers, several times
    assert sum(saved) < 400_000 / 2


def test_a_sample_without_query_points_in_a_batch_of_chunks():
    samples = [sample(200, 1, queries=9), sample(150, 2, queries=9)]
    samples[1].query_pos = samples[1].query_pos[:0]
    batch = next(iter(make_loader(samples, batch_size=2)))
    for name in ("pit", "transolver", "ono-galerkin", "mlp"):
        model = built(name)
        with torch.no_grad():
            reference = model(batch)
        assert reference.shape[0] == 9
        assert relative_error(model.forward_chunked(batch, 50), reference) < 1e-6


def test_the_grid_path_runs_whole():
    data = uniform_grid((12, 12))
    data.x = torch.rand(144, 1, dtype=data.pos.dtype)
    model = GalerkinTransformer(3, 1, 2, width=16, layers=1, heads=2, path="grid").eval()
    with torch.no_grad():
        assert torch.equal(model.forward_chunked(data, 10), model(data))


def test_normalized_models_predict_in_chunks():
    train = [sample(200 + 10 * i, i, dtype=torch.float32) for i in range(3)]
    model = NormalizedModel(built("pit", torch.float32), fit_normalizers(train, ("x", "y"))).eval()
    data = sample(300, 9, queries=40, dtype=torch.float32)
    with torch.no_grad():
        reference = model(data)
    assert relative_error(predict_in_chunks(model, data, 64), reference) < 1e-5


def test_predict_in_chunks_evaluates_and_restores_the_mode():
    model = built("transolver").train()
    data = sample(100, 1)
    out = predict_in_chunks(model, data, 30)
    assert model.training
    model.eval()
    with torch.no_grad():
        assert relative_error(out, model(data)) < 1e-6


def test_predict_in_chunks_leaves_small_meshes_and_chunk_zero_unchunked(monkeypatch):
    model = built("transolver")
    compute = type(model).compute

    def whole_only(self, data, walk):
        assert walk.chunk_nodes is None, "chunked a small mesh"
        return compute(self, data, walk)

    monkeypatch.setattr(type(model), "compute", whole_only)
    data = sample(100, 1)
    with torch.no_grad():
        assert torch.equal(predict_in_chunks(model, data), model(data))
        assert torch.equal(predict_in_chunks(model, data, chunk_nodes=0), model(data))


def test_default_chunk_nodes_from_the_mesh_size_and_the_free_memory():
    assert default_chunk_nodes(CHUNK_FROM, free_bytes=2**40) is None
    assert default_chunk_nodes(CHUNK_FROM + 1, free_bytes=2**40) == DEFAULT_CHUNK
    assert default_chunk_nodes(10**7, free_bytes=2**30) == 2**14  # a quarter of 1 GiB / 16 kB
    assert default_chunk_nodes(10**7, free_bytes=0) == 1024
    data = sample(50, 1, queries=7)
    assert total_nodes(data) == 57


def test_chunked_inference_errors_say_what_to_do():
    data = sample(50, 1)
    with pytest.raises(ConfigError, match="positive number of nodes"):
        predict_in_chunks(built("pit"), data, chunk_nodes=-1)
    fourier = GalerkinTransformer(3, 2, 2, attention="fourier", dropout=0.1, path="mesh")
    with pytest.raises(ConfigError, match="dropout acts on the n x n kernel"):
        fourier.double().train().forward_chunked(data, 10)
    with pytest.raises(ConfigError, match="no chunked forward pass"):
        predict_in_chunks(torch.nn.Identity(), data, chunk_nodes=10)
    softmax = ONO(3, 2, 2, width=16, layers=1, k=4, heads=2, feature_attention="softmax").eval()
    with pytest.raises(ConfigError, match="softmax attention .* unchunked"):
        softmax.double().forward_chunked(data, 10)


def test_chunk_helpers():
    assert node_chunks(0, 5) == []
    assert node_chunks(7, 3) == [slice(0, 3), slice(3, 6), slice(6, 7)]
    with pytest.raises(ConfigError):
        node_chunks(7, 0)
    batch = torch.tensor([1, 1, 3, 3, 3])
    assert sample_ranges(batch, 5) == [(1, slice(0, 2)), (3, slice(2, 5))]


def test_chunked_neighbour_searches_leave_the_cache_alone():
    layer = LocalPositionAttention(4, 4, 2, k=3)
    pos = torch.rand(40, 2)
    layer.neighbors(pos, pos[:5], use_cache=False)
    assert len(layer.edge_cache) == 0
    layer.neighbors(pos, pos[:5])
    assert len(layer.edge_cache) == 1


def test_checkpointed_chunks_keep_a_fraction_of_the_activations_for_the_backward():
    """Autograd keeps, outside the checkpointed chunks, little more than each layer's output:
    the chunks' intermediates are recomputed in the backward pass instead."""
    data = sample(3000, 5)
    saved = {}

    def count(name):
        def pack(tensor):
            saved[name] = saved.get(name, 0) + tensor.numel() * tensor.element_size()
            return tensor

        return pack

    for chunked in (False, True):
        model = built("transolver").train()
        name = "chunks" if chunked else "whole"
        with torch.autograd.graph.saved_tensors_hooks(count(name), lambda tensor: tensor):
            out = model.forward_chunked(data, 256) if chunked else model(data)
        out.square().mean().backward()
    assert saved["chunks"] < saved["whole"] / 4


def test_normalized_models_chunk_the_batches_their_setting_asks_for(monkeypatch):
    import meshop.train.memory as memory

    model = NormalizedModel(built("transolver"))
    small, large = sample(40, 1), sample(400, 2)
    assert model.chunk_for(large) is None  # the default: only above CHUNK_FROM nodes
    monkeypatch.setattr(memory, "CHUNK_FROM", 100)
    assert model.chunk_for(small) is None and model.chunk_for(large) == DEFAULT_CHUNK
    model.chunk_nodes = 0
    assert model.chunk_for(large) is None
    model.chunk_nodes = 64
    assert model.chunk_for(small) is None and model.chunk_for(large) == 64
    assert NormalizedModel(torch.nn.Identity()).chunk_for(large) is None  # no chunked pass
    model.eval()
    calls = []
    compute = model.model.compute

    def spy(data, walk):
        if walk.chunk_nodes is not None:
            calls.append(walk.chunk_nodes)
        return compute(data, walk)

    model.model.compute = spy
    with torch.no_grad():
        chunked_out = model(large)
        assert calls == [64]
        model.chunk_nodes = 0
        assert relative_error(chunked_out, model(large)) < 1e-9
        assert calls == [64]


def test_a_trainer_with_chunks_takes_the_steps_of_one_without():
    from meshop.train import TrainConfig, Trainer

    train = [sample(150 + 20 * i, i, dtype=torch.float32) for i in range(4)]
    weights = []
    for chunk_nodes in (0, 45):
        torch.manual_seed(0)
        model = Transolver(3, 2, 2, width=16, layers=2, heads=2, slices=8)
        config = TrainConfig(
            epochs=2, batch_size=2, lr=1e-2, progress=False, chunk_nodes=chunk_nodes
        )
        trainer = Trainer(model, prepare_data(train, train[:2], config))
        assert trainer.model.chunk_nodes == chunk_nodes
        trainer.fit()
        weights.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    assert torch.allclose(weights[0], weights[1], rtol=1e-4, atol=1e-6)
    with pytest.raises(ConfigError, match="chunk_nodes must be a number of nodes >= 0"):
        TrainConfig(chunk_nodes=-5)

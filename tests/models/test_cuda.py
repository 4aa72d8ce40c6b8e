"""Every model on a CUDA GPU computes what it computes on the CPU: the same outputs (whole and in
chunks) and the same gradients in float64, with torch-cluster's CUDA kernels behind the latent
mesh (farthest point sampling) and the receptive fields (kNN, radius, quantile); a training run
on the GPU learns, and its checkpoint predicts on the CPU what the GPU model predicted.

These tests run only where PyTorch sees a GPU; the CPU machines that run the suite have none.
benchmarks/results/cuda_tests.md says where and when they last ran.
"""

from __future__ import annotations

import pytest
import torch

from meshop.data import add_latent_mesh, from_points, make_loader, set_query_points
from meshop.data.neighbors import knn_index, quantile_index, radius_index
from meshop.models import ONO, GalerkinTransformer, MLPBaseline, PiT, Transolver
from meshop.train import Trainer, load_model, prepare_data
from tests.helpers import quiet

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

GPU = torch.device("cuda")

MODELS = {
    "pit": lambda: PiT(3, 2, 2, width=16, layers=2),
    "pit-knn-radius": lambda: PiT(
        3, 2, 2, width=16, layers=1, encoder_k=12, decoder_radius=0.3, decoder_layers=1
    ),
    "pit-periodic": lambda: PiT(3, 2, 2, width=16, layers=1, periodic=1.0),
    "transolver": lambda: Transolver(3, 2, 2, width=16, layers=2, heads=2, slices=8),
    "ono": lambda: ONO(3, 2, 2, width=16, layers=2, k=4, heads=2),
    "galerkin-latent": lambda: GalerkinTransformer(3, 2, 2, width=16, layers=2, heads=2),
    "galerkin-local-cross": lambda: GalerkinTransformer(
        3, 2, 2, width=16, layers=2, heads=2, path="mesh", quantile=0.05
    ),
    "fourier": lambda: GalerkinTransformer(
        3, 2, 2, attention="fourier", width=16, layers=1, heads=2, path="mesh"
    ),
    "mlp": lambda: MLPBaseline(3, 2, 2),
}


def sample(n: int, seed: int, queries: int = 0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    pos = torch.rand(n, 2, generator=g, dtype=torch.float64)
    data = from_points(pos, x=torch.rand(n, 1, generator=g, dtype=torch.float64), y=pos)
    data.weight = (0.5 + torch.rand(n, generator=g, dtype=torch.float64)) / n
    if queries:
        set_query_points(data, torch.rand(queries, 2, generator=g, dtype=torch.float64))
    data = add_latent_mesh(data, num_points=24, seed=seed)
    for key in ("pos", "x", "y", "weight", "latent_pos", "query_pos"):
        if getattr(data, key, None) is not None:
            data[key] = data[key].to(dtype)
    return data


def mixed_batch(queries: int = 0):
    samples = [sample(n, i, queries) for i, n in enumerate((310, 520, 130))]
    return next(iter(make_loader(samples, batch_size=3)))


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.detach().cpu(), ref.detach().cpu()
    return float((out - ref).abs().max() / ref.abs().max().clamp_min(1e-300))


def built(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return MODELS[name]().double()


@pytest.mark.parametrize("queries", [0, 17], ids=["mesh", "queries"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_model_on_the_gpu_gives_its_cpu_outputs(name, queries):
    batch = mixed_batch(queries)
    cpu = built(name).eval()
    gpu = built(name).to(GPU).eval()
    with torch.no_grad():
        reference = cpu(batch)
        out = gpu(batch.to(GPU))
        chunked = gpu.forward_chunked(batch.to(GPU), 97)
    assert out.device.type == "cuda" and out.dtype == torch.float64
    assert relative_error(out, reference) < 1e-9
    assert relative_error(chunked, reference) < 1e-9


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_model_on_the_gpu_has_its_cpu_gradients(name):
    batch = mixed_batch(queries=11)
    target = torch.randn(len(batch.query_pos), 2, dtype=torch.float64)
    grads = []
    for device in ("cpu", GPU):
        model = built(name).to(device).train()
        out = model.forward_chunked(batch.to(device), 97)
        ((out - target.to(device)) ** 2).mean().backward()
        grads.append({k: p.grad.cpu() for k, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and grads[0]
    scale = max(float(g.abs().max()) for g in grads[0].values())
    for key, grad in grads[0].items():
        assert float((grads[1][key] - grad).abs().max()) < 1e-8 * scale, key


def test_torch_clusters_cuda_searches_give_the_cpu_neighbours():
    g = torch.Generator().manual_seed(3)
    pos_src = torch.rand(3000, 2, generator=g, dtype=torch.float64)
    pos_dst = torch.rand(700, 2, generator=g, dtype=torch.float64)
    batch_src = torch.arange(3000) * 3 // 3000
    batch_dst = torch.arange(700) * 3 // 700
    searches = {
        "knn": lambda *a: knn_index(*a[:2], 9, *a[2:]),
        "radius": lambda *a: radius_index(*a[:2], 0.05, *a[2:]),
        "quantile-knn": lambda *a: quantile_index(*a[:2], 0.02, *a[2:], method="knn"),
        "quantile-radius": lambda *a: quantile_index(*a[:2], 0.02, *a[2:], method="radius"),
    }
    for name, search in searches.items():
        on_cpu = search(pos_src, pos_dst, batch_src, batch_dst)
        on_gpu = search(pos_src.to(GPU), pos_dst.to(GPU), batch_src.to(GPU), batch_dst.to(GPU))
        assert on_gpu.device.type == "cuda", name
        edges = [set(map(tuple, index.cpu().t().tolist())) for index in (on_cpu, on_gpu)]
        assert edges[0] == edges[1] and edges[0], name


def test_farthest_point_sampling_on_the_gpu_picks_the_cpu_latent_nodes():
    data = sample(2000, 5)
    on_cpu = add_latent_mesh(data, num_points=64, seed=1)
    on_gpu = add_latent_mesh(data.clone().to(GPU), num_points=64, seed=1)  # Data.to moves in place
    assert on_gpu.latent_pos.device.type == "cuda"
    assert torch.equal(on_gpu.latent_pos.cpu(), on_cpu.latent_pos)


def test_training_on_the_gpu_learns_and_its_checkpoint_predicts_on_the_cpu(tmp_path):
    samples = [sample(200 + 20 * i, 10 + i, dtype=torch.float32) for i in range(6)]
    for data in samples:
        data.y = torch.sin(3 * data.pos[:, :1]) + data.pos[:, 1:] ** 2
    config = quiet(epochs=40, batch_size=2, lr=1e-2, device="cuda")
    prepared = prepare_data(samples[:4], samples[4:], config)
    torch.manual_seed(0)
    model = PiT(prepared.info["in_channels"], 1, 2, width=16, layers=1, encoder_k=8, decoder_k=8)
    trainer = Trainer(model, prepared, config, tmp_path)
    trainer.fit()
    assert next(trainer.model.parameters()).device.type == "cuda"
    first, last = trainer.history[0]["train_loss"], trainer.history[-1]["train_loss"]
    assert last < 0.5 * first, (first, last)
    test = samples[4]
    trained = trainer.model.eval()
    with torch.no_grad():
        on_gpu = trained(test.to(GPU)).cpu()
    reloaded, _ = load_model(tmp_path / "checkpoint.pt")
    assert next(reloaded.parameters()).device.type == "cpu"
    with torch.no_grad():
        assert relative_error(reloaded(test.cpu()), on_gpu) < 1e-4

"""A model whose cost grows with the square of the mesh is refused by predict on large meshes,
before the prediction, with its estimated time and what avoids it."""

import pytest
import torch

import meshop.train.inference as inference
from meshop.data import add_latent_mesh, from_points, set_query_points, uniform_grid
from meshop.errors import ConfigError
from meshop.models import ONO, GalerkinTransformer, MLPBaseline, PiT, Transolver
from meshop.train.inference import check_quadratic


def mesh(n=600, latent=False, queries=0):
    data = from_points(torch.rand(n, 2, generator=torch.Generator().manual_seed(0)))
    data.x = torch.rand(n, 1)
    if queries:
        set_query_points(data, torch.rand(queries, 2))
    return add_latent_mesh(data, num_points=32) if latent else data


def galerkin(**kwargs):
    return GalerkinTransformer(3, 1, 2, width=8, layers=1, heads=2, path="mesh", **kwargs)


@pytest.mark.parametrize(
    "model, latent, reason",
    [
        (galerkin(), False, "its latent mesh is the input mesh"),
        (galerkin(quantile=0.05), False, "a quantile field that grows with the mesh"),
        (galerkin(k=8), False, None),
        (galerkin(k=8, attention="softmax"), False, "softmax attention weighs every pair"),
        (galerkin(), True, None),
        (PiT(3, 1, 2, width=8, layers=1), False, "attends among all the nodes"),
        (PiT(3, 1, 2, width=8, layers=1), True, None),
        (PiT(3, 1, 2, width=8, layers=1, decoder_layers=1), True, "decoder_layers=1"),
        (ONO(3, 1, 2, width=8, layers=1, k=4, heads=2, feature_attention="softmax"), 0, "softmax"),
        (ONO(3, 1, 2, width=8, layers=1, k=4, heads=2), False, None),
        (Transolver(3, 1, 2, width=8, layers=1, heads=2, slices=4), False, None),
        (MLPBaseline(3, 1, 2), False, None),
    ],
)
def test_every_model_says_when_its_cost_is_quadratic_in_the_nodes(model, latent, reason):
    found = model.quadratic(mesh(latent=bool(latent)))
    if reason is None:
        assert found is None
    else:
        assert reason in found


def test_the_grid_path_is_not_quadratic():
    data = uniform_grid((8, 8))
    data.x = torch.rand(64, 1)
    assert GalerkinTransformer(3, 1, 2, width=8, layers=1, heads=2).quadratic(data) is None


def test_a_quadratic_model_is_refused_above_the_size_with_its_estimated_time(monkeypatch):
    monkeypatch.setattr(inference, "QUADRATIC_FROM", 500)
    monkeypatch.setattr(inference, "QUADRATIC_PROBE", 100)
    model = galerkin().eval()
    check_quadratic(model, mesh(n=450, queries=40))  # 490 nodes: below the size
    with pytest.raises(ConfigError) as error:
        check_quadratic(model, mesh(n=450, queries=60))
    message = str(error.value)
    assert "510 nodes" in message and "minutes estimated from a 100-node subset" in message
    assert "--latent-points 256" in message and "quadratic_ok=True" in message
    check_quadratic(galerkin(k=8).eval(), mesh(n=2000))  # linear: never refused


def test_predict_refuses_before_predicting_and_runs_when_told_to(monkeypatch):
    monkeypatch.setattr(inference, "QUADRATIC_FROM", 500)
    monkeypatch.setattr(inference, "QUADRATIC_PROBE", 100)
    monkeypatch.setattr(inference, "check_compatible", lambda *args: None)
    ckpt = {"data": {}, "train_config": {}}
    model = galerkin().eval()
    data = mesh(n=800)
    calls = []
    original = inference.predict_in_chunks
    monkeypatch.setattr(
        inference,
        "predict_in_chunks",
        lambda m, d, c: calls.append(len(d.pos)) or original(m, d, c),
    )
    with pytest.raises(ConfigError, match="grows with the square"):
        inference.predict(model, ckpt, data)
    assert calls == [100]  # the probe alone, never the whole mesh
    out = inference.predict(model, ckpt, data, quadratic_ok=True)
    assert out.shape == (800, 1) and calls == [100, 800]


def test_meshop_predict_passes_quadratic_ok_on(monkeypatch, tmp_path):
    from meshop.cli import main

    seen = []

    def fake_predict_file(*args, **kwargs):
        seen.append(kwargs["quadratic_ok"])
        return tmp_path / "out.vtu", torch.zeros(3, 1)

    monkeypatch.setattr(inference, "predict_file", fake_predict_file)
    argv = ["predict", "--checkpoint", "run", "--mesh", "m.vtu", "--out", "o.vtu"]
    assert main(argv) == 0 and main([*argv, "--quadratic-ok"]) == 0
    assert seen == [False, True]

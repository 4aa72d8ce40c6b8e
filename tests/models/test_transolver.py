"""Specification of meshop.models.Transolver (Transolver Sec. 3.2, eq. (5)): mixed-size batches,
query points, training, checkpoints, the command line and torchrun."""

import json
import math

import numpy as np
import pytest
import torch

from meshop._pyg import Batch
from meshop.cli import main
from meshop.data import from_points, make_loader, node_features
from meshop.errors import ConfigError
from meshop.models import Transolver
from meshop.models.registry import build_model, name_of
from meshop.nn import PhysicsAttention
from meshop.train import checkpoint, load_model
from meshop.train.losses import relative_l2
from tests.helpers import run_ok, torchrun

SIZES = [30, 45, 38]


def domain(n, seed, query=None):
    gen = torch.Generator().manual_seed(seed)
    pos = torch.rand(n, 2, generator=gen)
    wave = torch.randn(2, generator=gen)
    u = torch.sin(math.pi * (pos @ wave))[:, None]
    y = u**2 if query is None else torch.sin(math.pi * (query @ wave))[:, None] ** 2
    weight = torch.rand(n, generator=gen) + 0.5  # a non-uniform mesh
    return from_points(pos, u, y, weight=weight / weight.sum(), query_pos=query)


def samples(query=False):
    out = []
    for i, n in enumerate(SIZES):
        gen = torch.Generator().manual_seed(100 + i)
        out.append(domain(n, i, torch.rand(5 + i, 2, generator=gen) if query else None))
    return out


def tiny(**kwargs):
    torch.manual_seed(0)
    model = Transolver(3, 1, 2, **{"width": 16, "layers": 2, "heads": 2, "slices": 6, **kwargs})
    with torch.no_grad():  # sharper slices than at initialization, so that they matter
        for module in model.modules():
            if isinstance(module, PhysicsAttention):
                module.lin_slice.weight.normal_(0, 1.0)
    return model.eval()


def test_predicts_at_the_query_nodes_of_a_domain_and_of_a_batch():
    model = tiny()
    assert model(samples()[0]).shape == (SIZES[0], 1)
    batch = next(iter(make_loader(samples(query=True), batch_size=3)))
    assert model(batch).shape == (len(batch.query_pos), 1)
    assert node_features(batch).shape[1] == model.config["in_channels"]


def test_permutation_equivariance():
    data = samples()[1]
    perm = torch.randperm(data.num_nodes, generator=torch.Generator().manual_seed(0))
    permuted = data.clone()
    for key in ("pos", "x", "y", "weight"):
        permuted[key] = data[key][perm]
    model = tiny()
    torch.testing.assert_close(model(permuted), model(data)[perm], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("query", [False, True])
def test_predictions_do_not_depend_on_the_other_samples_of_a_batch(query):
    model = tiny()
    data = samples(query=query)
    out = model(next(iter(make_loader(data, batch_size=3))))
    alone = torch.cat([model(d) for d in data])
    torch.testing.assert_close(out, alone, rtol=1e-4, atol=1e-5)


def test_a_query_point_on_a_mesh_node_gets_that_nodes_prediction():
    data = samples()[0]
    nodes = torch.tensor([3, 17, 0, 29])
    queried = data.clone()
    queried.query_pos = data.pos[nodes]
    model = tiny()
    torch.testing.assert_close(model(queried), model(data)[nodes], rtol=1e-4, atol=1e-5)


def test_query_points_affect_neither_the_mesh_nor_each_other():
    model = tiny()
    data = samples()[1]
    query = torch.rand(12, 2, generator=torch.Generator().manual_seed(7))
    both, first = data.clone(), data.clone()
    both.query_pos, first.query_pos = query, query[:5]
    torch.testing.assert_close(model(both)[:5], model(first), rtol=1e-4, atol=1e-5)


def test_data_without_weights_is_integrated_with_one_over_n():
    model = tiny()
    weighted = samples()
    unweighted = [d.clone() for d in weighted]
    for d in unweighted:
        del d.weight
    for d in weighted:
        d.weight = torch.full((d.num_nodes,), 1.0 / d.num_nodes)
    for batch_size in (1, 3):
        torch.testing.assert_close(
            model(next(iter(make_loader(unweighted, batch_size=batch_size)))),
            model(next(iter(make_loader(weighted, batch_size=batch_size)))),
        )


def test_checkpoint_round_trip_rebuilds_the_same_model():
    model = tiny()
    rebuilt = build_model(name_of(type(model)), **model.config)
    assert name_of(type(model)) == "transolver"
    rebuilt.load_state_dict(model.state_dict(), strict=True)
    data = samples()[2]
    torch.testing.assert_close(rebuilt.eval()(data), model(data))


def test_paper_defaults_and_initialization():
    model = Transolver(3, 1, 2)
    assert model.config["width"] == 128 and model.config["layers"] == 8
    attn = model.blocks[0].attn
    assert (attn.heads, attn.slices, attn.head_channels) == (8, 64, 16)
    torch.testing.assert_close(attn.temperature, torch.full((8,), 0.5))
    assert float(attn.lin_q.weight.detach().std()) == pytest.approx(0.02, rel=0.2)
    assert float(model.head[1].weight.detach().std()) == pytest.approx(0.02, rel=0.3)
    assert not model.preprocess.lins[0].bias.any() and not model.head[1].bias.any()


def test_invalid_configuration_and_data_raise_config_errors():
    with pytest.raises(ConfigError, match="divide width"):
        tiny(heads=3)
    with pytest.raises(ConfigError, match="must be positive"):
        tiny(slices=0)
    data = samples()[0]
    data.x = torch.cat([data.x, data.x], dim=1)
    with pytest.raises(ConfigError, match="in_channels=4"):
        tiny()(data)
    data = samples()[0]
    data.pos = torch.cat([data.pos, data.pos[:, :1]], dim=1)
    with pytest.raises(ConfigError, match="2D coordinates"):
        tiny()(data)


def test_fits_an_operator_that_needs_a_global_integral():
    """u -> u - <u>: subtracting the (quadrature) mean needs communication between all nodes."""
    train = []
    for i in range(8):
        d = domain(40 + 4 * i, seed=200 + i)
        d.y = d.x - (d.weight[:, None] * d.x).sum(0)
        train.append(d)
    batch = Batch.from_data_list(train)
    torch.manual_seed(0)
    model = Transolver(3, 1, 2, width=16, layers=2, heads=2, slices=8)
    steps = 200
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-5)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=3e-3, total_steps=steps)
    with torch.no_grad():
        before = relative_l2(model(batch), batch.y, batch.batch).item()
    model.train()
    for _ in range(steps):
        optimizer.zero_grad()
        relative_l2(model(batch), batch.y, batch.batch).backward()
        optimizer.step()
        schedule.step()
    model.eval()
    with torch.no_grad():
        after = relative_l2(model(batch), batch.y, batch.batch).item()
    assert after < 0.1 < before


MODEL_ARGS = ["width=8", "layers=1", "heads=2", "slices=4"]


def train_argv(mesh_folder, run):
    argv = ["train", "--dataset", "folder", "--data-dir", mesh_folder, "--model", "transolver"]
    argv += ["--dataset-arg", 'inputs=["a"]', "--dataset-arg", 'targets=["u"]', "--epochs", 2]
    argv += ["--batch-size", 4, "--out", run, "--no-progress", "--no-figures"]
    for arg in MODEL_ARGS:
        argv += ["--model-arg", arg]
    return argv


def test_cli_train_evaluate_predict_at_query_points(mesh_folder, tmp_path, capsys):
    run = tmp_path / "run"
    metrics = json.loads(run_ok(train_argv(mesh_folder, run), capsys).strip().splitlines()[-1])
    assert metrics["epoch"] == 2 and metrics["test_rel_l2"] > 0
    evaluated = json.loads(run_ok(["evaluate", "--checkpoint", run], capsys))
    assert evaluated["test_rel_l2"] == pytest.approx(metrics["test_rel_l2"], rel=1e-5)

    model, ckpt = load_model(run)
    assert ckpt["model_name"] == "transolver" and isinstance(model.model, Transolver)
    mesh = next(mesh_folder.iterdir())
    points = np.array([[0.1, 0.2], [0.5, 0.5], [1.5, -0.3]])
    np.savetxt(tmp_path / "points.csv", points, delimiter=",", header="x,y", comments="")
    argv = ["predict", "--checkpoint", run, "--mesh", mesh, "--query", tmp_path / "points.csv"]
    run_ok([*argv, "--out", tmp_path / "pred.csv"], capsys)
    table = np.loadtxt(tmp_path / "pred.csv", delimiter=",", skiprows=1)
    assert table.shape == (3, 3) and np.isfinite(table).all()


def test_meshop_train_transolver_under_torchrun_matches_one_process(mesh_folder, tmp_path):
    ddp, single = tmp_path / "ddp", tmp_path / "single"
    result = torchrun("-m", "meshop.cli", *train_argv(mesh_folder, ddp))
    assert result.returncode == 0, result.stderr[-3000:]
    assert main([str(a) for a in train_argv(mesh_folder, single)]) == 0
    state_ddp = checkpoint.load(ddp)["state_dict"]
    for key, value in checkpoint.load(single)["state_dict"].items():
        assert torch.allclose(state_ddp[key], value, atol=1e-5), key


def test_block_defaults_and_its_two_residual_updates():
    from meshop.nn import TransolverBlock

    block = TransolverBlock(16)
    assert (block.attn.heads, block.attn.slices, block.attn.dropout) == (8, 64, 0.0)
    assert [lin.out_features for lin in block.mlp.lins] == [16, 16]
    torch.manual_seed(0)
    block = TransolverBlock(6, heads=2, slices=3, mlp_ratio=2).eval()
    g = torch.Generator().manual_seed(0)
    x, weight = torch.randn(9, 6, generator=g), torch.rand(9, generator=g)
    batch = torch.zeros(9, dtype=torch.long)
    mid = x + block.attn(block.norm_attn(x), None, batch, weight)
    torch.testing.assert_close(block(x, None, batch, weight), mid + block.mlp(block.norm_mlp(mid)))


def test_wrong_input_channels_name_the_model():
    model = Transolver(in_channels=5, out_channels=1, pos_dim=2, width=8, heads=2, slices=3)
    with pytest.raises(ConfigError, match=r"; build Transolver with in_channels=3$"):
        model(domain(10, 0))


def test_repr_names_the_configuration():
    model = Transolver(
        in_channels=3, out_channels=1, pos_dim=2, width=8, layers=2, heads=2, slices=3
    )
    assert repr(model).startswith(
        "Transolver(\n  in_channels=3, out_channels=1, pos_dim=2, width=8, layers=2, heads=2, "
        "slices=3\n"
    )


SIZE_NAMES = ("in_channels", "out_channels", "pos_dim", "width", "layers", "slices", "mlp_ratio")


@pytest.mark.parametrize("zero", SIZE_NAMES)
def test_every_size_must_be_positive_and_one_head_is_enough(zero):
    sizes = dict(in_channels=3, out_channels=1, pos_dim=2, width=8, layers=1, slices=4, mlp_ratio=1)
    Transolver(**sizes, heads=1)  # the smallest valid model
    with pytest.raises(ConfigError) as error:
        Transolver(**{**sizes, zero: 0}, heads=1)
    got = ", ".join(str(0 if name == zero else sizes[name]) for name in SIZE_NAMES)
    assert str(error.value) == (
        "in_channels, out_channels, pos_dim, width, layers, slices and mlp_ratio must be "
        f"positive; got {got}"
    )
    assert Transolver(3, 1, 2).config["mlp_ratio"] == 1  # the paper's default


def test_the_options_reach_every_block_and_the_config():
    from meshop.nn import TransolverBlock

    block = TransolverBlock(6, heads=2, slices=3, dropout=0.25)
    assert (block.attn.heads, block.attn.slices, block.attn.dropout) == (2, 3, 0.25)
    every = dict(
        in_channels=3,
        out_channels=2,
        pos_dim=2,
        width=8,
        layers=2,
        heads=2,
        slices=3,
        mlp_ratio=2,
        dropout=0.25,
    )
    model = Transolver(**every)
    assert model.config == every
    assert [(b.attn.slices, b.attn.dropout) for b in model.blocks] == [(3, 0.25)] * 2
    # the preprocess MLP lifts to 2 d, then to d (the authors' code)
    assert [tuple(lin.weight.shape) for lin in model.preprocess.lins] == [(16, 3), (8, 16)]

"""Specification of meshop.models.ONO (ONO Sec. 3.2, Fig. 1; query points: App. A's cross form)."""

import copy
import math

import pytest
import torch

from meshop._pyg import Batch
from meshop.data import from_points, make_loader, node_features
from meshop.errors import ConfigError
from meshop.models import ONO
from meshop.nn.blocks.ono_blocks import FEATURE_ATTENTIONS
from meshop.train import TrainConfig, load_model, prepare_data, train
from meshop.train.checkpoint import CHECKPOINT_NAME
from meshop.train.losses import relative_l2

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
        q = (
            torch.rand(5 + i, 2, generator=torch.Generator().manual_seed(100 + i))
            if query
            else None
        )
        out.append(domain(n, i, q))
    return out


def tiny(**kwargs):
    torch.manual_seed(0)
    kwargs = {"width": 16, "layers": 2, "k": 4, "heads": 2, **kwargs}
    return ONO(in_channels=3, out_channels=1, pos_dim=2, **kwargs)


def trained(model):
    """One training-mode pass, so that the running moments hold batch statistics."""
    model.train()
    model(Batch.from_data_list(samples()))
    return model.eval()


def test_predicts_at_the_query_nodes_of_a_domain_and_of_a_batch():
    model = tiny()
    data = samples()[0]
    assert model(data).shape == (SIZES[0], 1)
    batch = next(iter(make_loader(samples(query=True), batch_size=3)))
    assert model(batch).shape == (len(batch.query_pos), 1)
    assert node_features(batch).shape[1] == model.config["in_channels"]


def test_permutation_equivariance():
    data = samples()[1]
    perm = torch.randperm(data.num_nodes, generator=torch.Generator().manual_seed(0))
    permuted = data.clone()
    for key in ("pos", "x", "y", "weight"):
        permuted[key] = data[key][perm]
    for mode in ("train", "eval"):
        model = tiny().train(mode == "train")
        torch.testing.assert_close(model(permuted), model(data)[perm], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("orthonormalize", ["sample", "batch"])
def test_predictions_do_not_depend_on_the_batch_in_eval_mode(orthonormalize):
    model = trained(tiny(orthonormalize=orthonormalize))
    data = samples(query=True)
    out = model(next(iter(make_loader(data, batch_size=3))))
    alone = torch.cat([model(d) for d in data])
    torch.testing.assert_close(out, alone, rtol=1e-4, atol=1e-5)


def test_per_sample_orthonormalisation_computes_the_same_function_in_training_mode():
    model = tiny().train()
    data = samples(query=True)
    out = model(next(iter(make_loader(data, batch_size=3))))
    torch.testing.assert_close(torch.cat([model(d) for d in data]), out, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(model.eval()(next(iter(make_loader(data, 3)))), out)


def centred_domain(n, seed):
    """u -> u - <u> on a non-uniform point cloud, u a plane wave of random amplitude."""
    gen = torch.Generator().manual_seed(seed)
    pos = torch.rand(n, 2, generator=gen)
    wave = torch.randn(2, generator=gen) * 1.5
    u = (torch.rand(1, generator=gen) * 2 + 0.2) * torch.sin(math.pi * (pos @ wave))[:, None]
    weight = torch.rand(n, generator=gen) + 0.5
    weight = weight / weight.sum()
    return from_points(pos, u, u - (weight[:, None] * u).sum(0), weight=weight)


def test_eval_mode_predicts_as_well_as_training_mode_on_meshes_of_different_sizes():
    """Trained in batches of 4 meshes of 20-114 nodes, the model predicts in evaluation mode as
    well as in training mode (under no_grad, the same batches of 4): nothing it was trained
    with is replaced by a running estimate. (The authors' batch whitening: 1.5-1.8 times worse.)"""
    data = [centred_domain(20 + 100 * i // 16, 500 + i) for i in range(16)]
    torch.manual_seed(0)
    model = ONO(3, 1, 2, width=16, layers=2, k=8, heads=2)
    steps = 150
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=3e-3, total_steps=steps)
    shuffle = torch.Generator().manual_seed(0)
    for step in range(steps):
        if step % 4 == 0:
            batches = iter(make_loader(data, batch_size=4, shuffle=True, generator=shuffle))
        batch = next(batches)
        optimizer.zero_grad()
        relative_l2(model(batch), batch.y, batch.batch, batch.num_graphs).backward()
        optimizer.step()
        schedule.step()

    def error(mode):
        net = copy.deepcopy(model).train(mode)
        with torch.no_grad():
            return sum(
                relative_l2(net(b), b.y, b.batch, b.num_graphs) * b.num_graphs
                for b in make_loader(data, batch_size=4)
            ) / len(data)

    eval_error, train_error = error(False), error(True)
    assert eval_error < 0.8  # it learned something
    assert eval_error <= 1.2 * train_error


@pytest.mark.parametrize("orthonormalize", ["sample", "batch"])
def test_fresh_model_evaluates_and_loads_a_checkpoint_strictly(orthonormalize):
    data = samples()[2]
    fresh = tiny(orthonormalize=orthonormalize).eval()
    assert torch.isfinite(fresh(data)).all()  # evaluation before any training batch
    model = trained(tiny(value_projection=False, orthonormalize=orthonormalize))
    state = model.state_dict()
    has_running = any(key.endswith("attn.initialized") for key in state)
    assert has_running == (orthonormalize == "batch")
    rebuilt = ONO(**model.config)
    rebuilt.load_state_dict(state, strict=True)
    rebuilt.eval()
    torch.testing.assert_close(rebuilt(data), model(data))


@pytest.mark.parametrize("orthonormalize", ["sample", "batch"])
def test_save_load_predict_gives_the_trained_models_eval_output(tmp_path, orthonormalize):
    data = [domain(30 + 7 * i, seed=300 + i) for i in range(6)]
    config = TrainConfig(epochs=2, batch_size=3, progress=False, device="cpu")
    model, _ = train(
        tiny(orthonormalize=orthonormalize),
        prepare_data(data[:4], data[4:], config),
        out_dir=tmp_path,
    )
    loaded, _ = load_model(tmp_path)
    assert not model.training and not loaded.training
    batch = next(iter(make_loader(data, batch_size=6)))
    with torch.no_grad():
        torch.testing.assert_close(loaded(batch), model(batch), rtol=0, atol=0)


def test_a_checkpoint_saved_before_orthonormalize_existed_loads_as_batch(tmp_path):
    """Checkpoints written before the option have no ``orthonormalize`` in their config; they
    were trained with batch whitening and must load as such, predicting as before."""
    data = [domain(30 + 7 * i, seed=300 + i) for i in range(6)]
    config = TrainConfig(epochs=2, batch_size=3, progress=False, device="cpu")
    model, _ = train(
        tiny(orthonormalize="batch"), prepare_data(data[:4], data[4:], config), out_dir=tmp_path
    )
    path = tmp_path / CHECKPOINT_NAME
    ckpt = torch.load(path, weights_only=False)
    del ckpt["model_config"]["orthonormalize"]
    torch.save(ckpt, path)
    loaded, _ = load_model(tmp_path)
    batch = next(iter(make_loader(data, batch_size=6)))
    with torch.no_grad():
        torch.testing.assert_close(loaded(batch), model(batch), rtol=0, atol=0)


def test_a_query_point_on_a_mesh_node_gets_that_nodes_prediction():
    data = samples()[0]
    nodes = torch.tensor([3, 17, 0, 29])
    queried = data.clone()
    queried.query_pos = data.pos[nodes]
    for mode in ("train", "eval"):
        model = tiny().train(mode == "train")
        torch.testing.assert_close(model(queried), model(data)[nodes], rtol=1e-4, atol=1e-5)


def test_data_without_weights_is_integrated_with_one_over_n():
    model = tiny()
    weighted = samples()
    unweighted = [d.clone() for d in weighted]
    for d in unweighted:
        del d.weight
    for d in weighted:
        d.weight = torch.full((d.num_nodes,), 1.0 / d.num_nodes)
    for mode in ("train", "eval"):
        model.train(mode == "train")
        for loader_batch in (1, 3):
            torch.testing.assert_close(
                model(next(iter(make_loader(unweighted, batch_size=loader_batch)))),
                model(next(iter(make_loader(weighted, batch_size=loader_batch)))),
            )


@pytest.mark.parametrize("attention", sorted(FEATURE_ATTENTIONS))
def test_query_points_affect_neither_the_mesh_nor_each_other(attention):
    model = trained(tiny(feature_attention=attention))
    data = samples()[1]
    query = torch.rand(12, 2, generator=torch.Generator().manual_seed(7))
    both, first = data.clone(), data.clone()
    both.query_pos, first.query_pos = query, query[:5]
    torch.testing.assert_close(model(both)[:5], model(first), rtol=1e-4, atol=1e-5)


def test_invalid_configuration_and_data_raise_config_errors():
    with pytest.raises(ConfigError, match="feature_attention"):
        tiny(feature_attention="nystrom")
    model = tiny()
    data = samples()[0]
    data.x = torch.cat([data.x, data.x], dim=1)
    with pytest.raises(ConfigError, match="in_channels=4"):
        model(data)


def test_fits_an_operator_that_needs_a_global_integral():
    """u -> u - <u>: subtracting the (quadrature) mean needs communication between all nodes."""
    train = []
    for i in range(8):
        d = domain(40 + 4 * i, seed=200 + i)
        d.y = d.x - (d.weight[:, None] * d.x).sum(0)
        train.append(d)
    batch = Batch.from_data_list(train)
    torch.manual_seed(0)
    model = ONO(3, 1, 2, width=16, layers=2, k=8, heads=4)
    steps = 200
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-5)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=3e-3, total_steps=steps)
    model.eval()
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


def _stream(n=9, width=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    h, pos = torch.randn(n, width, generator=g), torch.rand(n, 2, generator=g)
    weight = torch.rand(n, generator=g) + 0.1
    return h, pos, torch.zeros(n, dtype=torch.long), weight / weight.sum()


def test_feature_block_defaults_and_its_two_residual_updates_of_eq3():
    from meshop.nn import FeatureBlock

    block = FeatureBlock(16, 2)
    assert type(block.attn) is FEATURE_ATTENTIONS["galerkin"]
    assert (block.attn.heads, block.attn.dropout) == (8, 0.0)
    assert [lin.out_features for lin in block.ffn.lins] == [16, 16]
    torch.manual_seed(0)
    block = FeatureBlock(6, 2, heads=2, attention="softmax", mlp_ratio=2).eval()
    assert block.attn.heads == 2 and [lin.out_features for lin in block.ffn.lins] == [12, 6]
    g, pos, batch, weight = _stream()
    mid = g + block.attn(block.norm_attn(g), pos, batch, weight)
    torch.testing.assert_close(block(g, pos, batch, weight), mid + block.ffn(block.norm_ffn(mid)))


def test_solution_block_is_eq6_with_the_quadrature_weights():
    from meshop.nn import SolutionBlock

    torch.manual_seed(0)
    block = SolutionBlock(6, 3, k=4).eval()
    h, _, batch, weight = _stream()
    g = _stream(seed=1)[0]
    attn = block.attn(h, None, batch, weight, g=g)
    expected = block.ffn(block.norm(attn + h))
    torch.testing.assert_close(block(h, None, batch, weight, g=g), expected)
    uniform = torch.full_like(weight, 1 / len(weight))
    assert (block(h, None, batch, uniform, g=g) - expected).abs().max() > 1e-4


def test_repr_names_the_configuration():
    text = repr(tiny(feature_attention="linear"))
    assert text.startswith(
        "ONO(\n  in_channels=3, out_channels=1, pos_dim=2, width=16, layers=2, k=4, heads=2, "
        "feature_attention='linear'\n"
    )


def test_solution_block_and_ono_defaults_and_options_reach_the_attention():
    from meshop.nn import FeatureBlock, SolutionBlock

    def options(block):
        a = block.attn
        return (a.k, a.lin_v is not None, a.orthonormalize, a.momentum, a.inner_product)

    block = SolutionBlock(6, 3)
    assert options(block) == (8, True, "sample", 0.1, "mean")
    assert [lin.out_features for lin in block.ffn.lins] == [6, 3]
    block = SolutionBlock(6, 3, 4, False, "batch", 0.3, "sum", mlp_ratio=2)
    assert options(block) == (4, False, "batch", 0.3, "sum")
    assert [lin.out_features for lin in block.ffn.lins] == [12, 3]
    assert FeatureBlock(6, 2, heads=2, dropout=0.25).attn.dropout == 0.25
    config = ONO(3, 1, 2).config
    assert (config["width"], config["layers"], config["k"], config["heads"]) == (128, 8, 8, 8)


ONO_SIZES = ("in_channels", "out_channels", "pos_dim", "width", "layers", "mlp_ratio")


@pytest.mark.parametrize("zero", ONO_SIZES)
def test_every_size_must_be_positive_and_one_layer_is_enough(zero):
    sizes = dict(in_channels=3, out_channels=1, pos_dim=2, width=8, layers=1, mlp_ratio=1)
    ONO(**sizes, heads=1, k=4)  # the smallest valid model
    with pytest.raises(ConfigError) as error:
        ONO(**{**sizes, zero: 0}, heads=1, k=4)
    got = ", ".join(str(0 if name == zero else sizes[name]) for name in ONO_SIZES)
    assert str(error.value) == (
        "in_channels, out_channels, pos_dim, width, layers and mlp_ratio must be positive; "
        f"got {got}"
    )


def test_the_feature_attentions_layer_norms_are_on_by_default_and_can_be_switched_off():
    from meshop.nn import FeatureBlock

    assert FeatureBlock(16, 2).attn.layer_norm is True
    assert len(FeatureBlock(16, 2).attn.norms) > 0
    raw = FeatureBlock(16, 2, layer_norm=False).attn
    assert raw.layer_norm is False and len(raw.norms) == 0


def test_a_solution_block_without_hidden_layer_is_one_linear_map():
    from meshop.nn import SolutionBlock

    assert [lin.out_features for lin in SolutionBlock(6, 3, hidden=False).ffn.lins] == [3]


def _layout(model):
    """What the ONO2 options change: per-head layer norms and coordinates of the feature
    attention, and the hidden widths of each stage's FFN."""
    return (
        [(b.attn.layer_norm, len(b.attn.norms) > 0, b.attn.pos_dim) for b in model.feature_blocks],
        [[lin.out_features for lin in b.ffn.lins] for b in model.solution_blocks],
    )


def test_the_defaults_and_the_authors_ono2_options_build_their_layers():
    defaults = tiny(mlp_ratio=2)
    assert _layout(defaults) == ([(True, True, 2)] * 2, [[32, 16], [32, 1]])
    # the encoder lifts to 2 d and splits into the two streams
    assert [tuple(lin.weight.shape) for lin in defaults.encoder.lins] == [(32, 3), (32, 32)]
    ono2 = tiny(
        mlp_ratio=2, feature_layer_norm=False, feature_coordinates=False, linear_decoder=True
    )
    assert _layout(ono2) == ([(False, False, 0)] * 2, [[32, 16], [1]])
    three = tiny(layers=3, linear_decoder=True)
    assert _layout(three)[1] == [[16, 16], [16, 16], [1]]


def test_the_config_records_every_option_so_a_checkpoint_rebuilds_the_same_model():
    every = dict(
        in_channels=3,
        out_channels=1,
        pos_dim=2,
        width=16,
        layers=2,
        k=4,
        heads=2,
        feature_attention="linear",
        value_projection=False,
        orthonormalize="batch",
        momentum=0.3,
        inner_product="sum",
        mlp_ratio=2,
        dropout=0.1,
        feature_layer_norm=False,
        feature_coordinates=False,
        linear_decoder=True,
        linear_encoder=True,
        authors_init=True,
        feature_qkv_bias=False,
        feature_query_scale=True,
    )
    model = ONO(**every)
    assert model.config == every
    assert _layout(ONO(**model.config)) == _layout(model)


def test_forward_runs_both_streams_with_the_samples_quadrature_weights():
    """Eq. (2)-(6) composed by hand from the blocks: the non-uniform weights of the mesh reach the
    feature and the solution stream alike."""
    model = tiny().eval()
    data = samples()[0]
    batch = torch.zeros(len(data.pos), dtype=torch.long)
    g, h = model.encoder(node_features(data)).chunk(2, dim=-1)
    for feature_block, solution_block in zip(model.feature_blocks, model.solution_blocks):
        g = feature_block(g, data.pos, batch, data.weight)
        h = solution_block(h, None, batch, data.weight, g=g)
    # the outputs of the std-0.02 initialisation are about 1e-3: compare relative to them
    torch.testing.assert_close(model(data), h, rtol=1e-5, atol=1e-9)


def test_the_input_channel_error_names_the_model_to_rebuild():
    data = samples()[0]
    data.x = torch.cat([data.x, data.x], dim=1)
    with pytest.raises(ConfigError, match="build ONO with in_channels=4"):
        tiny()(data)


def test_the_linear_weights_are_truncated_normal_with_std_002_and_zero_biases():
    model = ONO(3, 1, 2, width=64, layers=1, k=4, heads=2)
    lins = [*model.encoder.lins, *model.feature_blocks[0].ffn.lins]
    lins += list(model.solution_blocks[0].ffn.lins)
    weights = torch.cat([lin.weight.flatten() for lin in lins])
    assert abs(weights.std().item() - 0.02) < 0.002
    assert all((lin.bias == 0).all() for lin in lins)


def _authors_linear_attention(attn, x, sizes):
    """The linear attention of ``linear-attention-transformer`` (ONO2's feature attention), per
    sample: bias-free Q, K, V, the queries' softmax over the features times d_head^-1/2, the
    keys' softmax over the nodes, then the output projection."""
    heads, e = attn.heads, attn.head_channels
    out = []
    for part in x.split(sizes):
        q, k, v = (
            (part @ lin.weight.T).view(len(part), heads, e).transpose(0, 1)
            for lin in (attn.lin_q, attn.lin_k, attn.lin_v)
        )
        z = q.softmax(-1) * e**-0.5 @ (k.softmax(-2).transpose(-2, -1) @ v)  # [heads, n, e]
        out.append(attn.lin_out(z.transpose(0, 1).reshape(len(part), -1)))
    return torch.cat(out)


@pytest.mark.parametrize("sizes", [[30, 30, 30], SIZES])  # equal sizes; padded batch
def test_the_authors_feature_attention_is_onos_linear_attention_parameter_for_parameter(sizes):
    """feature_qkv_bias=False, feature_query_scale=True: the feature attention is ONO2's, with
    the same parameters; without the two options the same function needs W_O scaled by
    d_head^-1/2, and AdamW moves the two parameterisations differently (the authors' 1D Burgers
    comparison: eval-mode test error 0.74 against ONO2's 0.57, mean of 4 seeds at 20 epochs)."""
    model = tiny(
        feature_attention="linear",
        feature_layer_norm=False,
        feature_coordinates=False,
        feature_qkv_bias=False,
        feature_query_scale=True,
    )
    attn = model.feature_blocks[0].attn
    assert all(lin.bias is None for lin in (attn.lin_q, attn.lin_k, attn.lin_v))
    assert attn.lin_out.bias is not None
    with torch.no_grad():
        for p in attn.parameters():
            p.copy_(torch.randn_like(p))
    x = torch.randn(sum(sizes), 16)
    pos = torch.rand(len(x), 2)
    batch = torch.arange(len(sizes)).repeat_interleave(torch.tensor(sizes))
    expected = _authors_linear_attention(attn, x, sizes)
    torch.testing.assert_close(attn(x, pos, batch), expected, rtol=1e-4, atol=1e-5)
    kernel = attn.finish(attn.partial(x, pos, batch, None, len(sizes)))
    chunked = attn.apply(kernel, x, pos, batch)
    torch.testing.assert_close(chunked, expected, rtol=1e-4, atol=1e-5)
    # meshop's parameterisation: the same function with W_O d_head^-1/2, another gradient
    plain = tiny(feature_attention="linear", feature_layer_norm=False, feature_coordinates=False)
    other = plain.feature_blocks[0].attn
    assert other.lin_q.bias is not None and not other.query_scale
    with torch.no_grad():
        for mine, theirs in ((other.lin_q, attn.lin_q), (other.lin_k, attn.lin_k)):
            mine.weight.copy_(theirs.weight), mine.bias.zero_()
        other.lin_v.weight.copy_(attn.lin_v.weight), other.lin_v.bias.zero_()
        other.lin_out.weight.copy_(attn.lin_out.weight * attn.head_channels**-0.5)
        other.lin_out.bias.copy_(attn.lin_out.bias)
    out, out_other = attn(x, pos, batch), other(x, pos, batch)
    torch.testing.assert_close(out_other, out, rtol=1e-4, atol=1e-5)
    out.square().sum().backward(), out_other.square().sum().backward()
    grad, grad_other = attn.lin_out.weight.grad, other.lin_out.weight.grad
    scale = attn.head_channels**0.5
    torch.testing.assert_close(grad_other, grad * scale, rtol=1e-4, atol=1e-5 * grad.abs().max())


def test_the_query_scale_is_an_option_of_the_linear_feature_attention_only():
    with pytest.raises(ConfigError, match="query_scale"):
        tiny(feature_attention="galerkin", feature_query_scale=True)
    galerkin = tiny(feature_attention="galerkin", feature_qkv_bias=False)
    assert galerkin.feature_blocks[0].attn.lin_q.bias is None
    data = samples()[0]
    assert torch.isfinite(galerkin(data)).all()  # the folded equal-size path without a Q bias
    assert "query_scale=True" in repr(tiny(feature_attention="linear", feature_query_scale=True))

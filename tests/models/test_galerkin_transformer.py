"""GalerkinTransformer (and Fourier Transformer): paper configurations, grid and mesh paths."""

import copy
import math

import pytest
import torch

from meshop.data import (
    add_latent_mesh,
    from_points,
    grid_points,
    make_loader,
    node_features,
    set_query_points,
    uniform_grid,
)
from meshop.data.batching import node_set_weights
from meshop.errors import ConfigError, MeshError
from meshop.models import GalerkinTransformer
from meshop.train.losses import relative_l2


def num_params(model):
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("attention", ["galerkin", "fourier"])
def test_paper_configurations_match_table5_parameter_counts(attention):
    assert abs(num_params(GalerkinTransformer.burgers(attention=attention)) / 530e3 - 1) < 0.02
    assert abs(num_params(GalerkinTransformer.darcy(attention=attention)) / 2.22e6 - 1) < 0.02
    assert abs(num_params(GalerkinTransformer.inverse(attention=attention)) / 2.38e6 - 1) < 0.02


def test_defaults_follow_table5_by_dimension():
    one, two = GalerkinTransformer(2, 1, 1).config, GalerkinTransformer(3, 1, 2).config
    assert (one["width"], one["heads"], one["layers"], one["spectral_width"], one["modes"]) == (
        96,
        1,
        4,
        48,
        16,
    )
    assert (two["width"], two["heads"], two["layers"], two["spectral_width"], two["modes"]) == (
        128,
        4,
        6,
        32,
        12,
    )


def tiny(in_channels, pos_dim, **kwargs):
    torch.manual_seed(0)
    sizes = dict(width=8, heads=2, layers=2, spectral_width=6, modes=4, mlp_ratio=2)
    return GalerkinTransformer(in_channels, 1, pos_dim, **{**sizes, **kwargs}).eval()


def grids(shape, count=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    n = math.prod(shape)
    return [uniform_grid(shape, x=torch.randn(n, generator=g)) for _ in range(count)]


@pytest.mark.parametrize(
    ("shape", "kwargs"),
    [
        ((16,), {}),
        ((12, 10), dict(coarse_shape=5)),
        ((12, 10), dict(decoder="ffn", coarse_shape=5)),
    ],
)
def test_grid_path_predicts_each_sample_independently_of_its_batch(shape, kwargs):
    model = tiny(1 + len(shape), len(shape), **kwargs)
    data = grids(shape)
    batch = next(iter(make_loader(data, batch_size=3)))
    assert model.uses_grid_path(batch)
    out = model(batch)
    n = math.prod(shape)
    assert out.shape == (3 * n, 1)
    for i, d in enumerate(data):
        torch.testing.assert_close(out[i * n : (i + 1) * n], model(d), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("attention", ["galerkin", "fourier", "softmax", "linear"])
@pytest.mark.parametrize("norm", ["new", "regular"])
def test_every_attention_and_norm_scheme_runs_the_1d_pipeline(attention, norm):
    model = tiny(2, 1, attention=attention, norm=norm)
    assert model(grids((16,), count=1)[0]).shape == (16, 1)


def test_inverse_problem_predicts_on_the_coarse_grid_given_as_query_points():
    model = tiny(3, 2, decoder="ffn", coarse_shape=(5, 4), path="grid")
    data = grids((12, 10), count=2)
    for d in data:
        set_query_points(d, grid_points((5, 4)), y=torch.zeros(20))
    batch = next(iter(make_loader(data, batch_size=2)))
    out = model(batch)
    assert out.shape == (40, 1)
    torch.testing.assert_close(out[20:], model(data[1]), rtol=1e-4, atol=1e-5)


def test_grid_queries_anywhere_interpolate_the_fine_prediction():
    model = tiny(2, 1)
    data = grids((16,), count=1)[0]
    fine = model(data)
    set_query_points(data, data.pos[[3, 7]])
    torch.testing.assert_close(model(data), fine[[3, 7]], rtol=1e-4, atol=1e-6)


def test_grid_only_model_refuses_other_meshes_and_names_the_mesh_path():
    model = tiny(3, 2, coarse_shape=5, path="grid")
    cloud = from_points(torch.rand(30, 2), x=torch.randn(30, 1))
    with pytest.raises(MeshError, match="mesh path"):
        model(cloud)
    with pytest.raises(ConfigError, match="mesh"):
        GalerkinTransformer(4, 1, 3, path="grid")


def test_grid_and_the_same_points_as_a_cloud_give_the_same_mesh_path_prediction():
    model = tiny(3, 2, path="mesh", quantile=0.2)
    grid = grids((6, 5), count=1)[0]
    cloud = from_points(grid.pos, x=grid.x)
    assert not model.uses_grid_path(grid)
    torch.testing.assert_close(model(grid), model(cloud))
    auto = tiny(3, 2, coarse_shape=3)
    assert auto.uses_grid_path(grid) and not auto.uses_grid_path(cloud)
    assert auto(cloud).shape == auto(grid).shape == (30, 1)


@pytest.mark.parametrize("fields", [dict(k=4), dict(quantile=0.3, decoder_k=3)])
def test_mesh_path_on_a_batch_of_clouds_with_latent_and_query_meshes(fields):
    model = tiny(3, 2, **fields)
    g = torch.Generator().manual_seed(3)
    data = []
    for n in (25, 40):
        d = from_points(torch.rand(n, 2, generator=g), x=torch.randn(n, 1, generator=g))
        add_latent_mesh(d, 10)
        set_query_points(d, torch.rand(n // 5, 2, generator=g))
        data.append(d)
    batch = next(iter(make_loader(data, batch_size=2)))
    out = model(batch)
    assert out.shape == (5 + 8, 1)
    torch.testing.assert_close(out[5:], model(data[1]), rtol=1e-4, atol=1e-5)


def test_config_rebuilds_the_model():
    model = tiny(3, 2, coarse_shape=5, attention="fourier")
    clone = GalerkinTransformer(**model.config)
    clone.load_state_dict(model.state_dict())
    data = grids((8, 8), count=1)[0]
    torch.testing.assert_close(clone.eval()(data), model(data))


def test_bad_arguments_raise_config_errors():
    with pytest.raises(ConfigError, match="decoder"):
        GalerkinTransformer(2, 1, 1, decoder="cnn")
    with pytest.raises(ConfigError, match="attention"):
        GalerkinTransformer(2, 1, 1, attention="performer")
    model = tiny(2, 1)
    with pytest.raises(ConfigError, match="in_channels=3"):
        model(uniform_grid((8,), x=torch.randn(8, 2)))


def fit(model, data, steps, lr):
    batch = next(iter(make_loader(data, batch_size=len(data))))
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    first = None
    for _ in range(steps):
        opt.zero_grad()
        loss = relative_l2(model(batch), batch.y, batch.batch, len(data))
        loss.backward()
        opt.step()
        first = first if first is not None else loss.item()
    model.eval()
    with torch.no_grad():
        return first, relative_l2(model(batch), batch.y, batch.batch, len(data)).item()


def smoothing_pairs(shape, count, seed):
    """Input a random field, target its smoothed (local average) version plus the mean."""
    g = torch.Generator().manual_seed(seed)
    data = []
    for _ in range(count):
        u = torch.randn(shape, generator=g)
        v = u
        for axis in range(len(shape)):
            v = (v + v.roll(1, axis) + v.roll(-1, axis)) / 3
        data.append(uniform_grid(shape, x=u.reshape(-1), y=(v + u.mean()).reshape(-1)))
    return data


@pytest.mark.parametrize(
    ("shape", "kwargs"),
    [
        ((24,), dict(path="grid")),
        ((10, 10), dict(path="grid", coarse_shape=5)),
        ((10, 10), dict(path="mesh", quantile=0.05)),
    ],
)
def test_tiny_end_to_end_fit_reduces_the_relative_error(shape, kwargs):
    data = smoothing_pairs(shape, count=4, seed=1)
    model = tiny(node_features(data[0]).shape[1], len(shape), **kwargs)
    first, last = fit(model, data, steps=60, lr=1e-2)
    assert last < 0.5 * first


def test_reset_parameters_restores_the_diagonal_initialization():
    model = tiny(3, 2, coarse_shape=5)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    model.reset_parameters()
    d = model.config["width"]
    bound = 1e-2 * math.sqrt(6 / (2 * d))
    for layer in model.encoder:
        for lin in (layer.attn.lin_q, layer.attn.lin_k, layer.attn.lin_v):
            assert (lin.weight - 1e-2 * torch.eye(d)).abs().max() <= bound
            assert torch.all(lin.bias == 0)
    assert torch.all(model.encoder[0].attn.norms["k"].weight == 1)


def smooth_grid(n):
    t = torch.linspace(0, 1, n)
    x, y = torch.meshgrid(t, t, indexing="ij")
    return uniform_grid((n, n), x=(torch.sin(3 * x + 2 * y) + x * y**2).flatten())


@pytest.mark.parametrize("attention", ["galerkin", "fourier"])
def test_grid_path_predicts_the_same_field_alike_on_finer_grids(attention):
    """Zero-shot super-resolution: the grid of the first training batch is recorded, and on a 2x or
    4x finer grid of the same field the prediction agrees with the training grid's at its nodes
    (the CiNNs keep their stencils, coarse and middle grids; the spectral layers their modes)."""
    model = tiny(3, 2, attention=attention)
    own_grid = {n: model(smooth_grid(n)).detach().view(n, n) for n in (22, 43, 85)}
    assert model.grid_shape is None
    config = copy.deepcopy(model.config)
    model.train()
    model(smooth_grid(22))
    model.eval()
    assert model.grid_shape == (22, 22) and model.config == config  # recorded beside the config
    rebuilt = GalerkinTransformer(**model.config).eval()  # as from a checkpoint
    assert rebuilt.grid_shape is None
    rebuilt.load_state_dict(model.state_dict())  # the training grid is in the state dict
    assert rebuilt.grid_shape == (22, 22)
    with torch.no_grad():
        coarse = model(smooth_grid(22)).view(22, 22)
        for n in (43, 85):
            stride = (n - 1) // 21
            fine = rebuilt(smooth_grid(n)).view(n, n)[::stride, ::stride]
            assert torch.linalg.norm(fine - coarse) < 2e-3 * torch.linalg.norm(coarse)
            # each grid taken as its own training grid: other coarse grids, stencils and modes
            own = own_grid[n][::stride, ::stride]
            assert torch.linalg.norm(own - own_grid[22]) > 1e-2 * torch.linalg.norm(own_grid[22])


def test_spectral_weights_the_training_grid_never_reached_do_not_act_on_finer_grids():
    # 12 modes per axis, a 22-node training grid: its first axis has modes -11..10, so the weights
    # of mode +11 are never trained; on a 43-node grid that mode exists
    model = tiny(3, 2, modes=12, grid_shape=22)
    with torch.no_grad():
        before = model(smooth_grid(43))
        for conv in model.regressor.convs:
            conv.weight[0, :, :, 11] += 1.0
        torch.testing.assert_close(model(smooth_grid(43)), before, atol=0, rtol=0)


def test_grid_shape_is_checked():
    assert tiny(3, 2, grid_shape=22).grid_shape == (22, 22)
    for bad in ((22,), (22, 1), (22.5, 22)):
        with pytest.raises(ConfigError, match="grid_shape"):
            tiny(3, 2, grid_shape=bad)


def test_periodic_1d_grids_keep_the_regressor_on_the_input_grid():
    # Burgers grids are periodic without the end node (bounds (0, 1 - 1/n)): each resolution has its
    # own box and the transform's period is the box, so nothing is interpolated to the training grid
    model = tiny(2, 1, grid_shape=32)
    unrecorded = tiny(2, 1)
    g = torch.Generator().manual_seed(0)
    data = uniform_grid((64,), x=torch.randn(64, generator=g), bounds=[(0.0, 1.0 - 1.0 / 64)])
    with torch.no_grad():
        torch.testing.assert_close(model(data), unrecorded(data), atol=0, rtol=0)


def _mesh_reference(model, data, weight):
    """The mesh path written out: lift, cross attention onto the latent nodes, the encoder
    layers integrating with ``weight``, cross attention onto the query nodes, the head."""
    x, pos = node_features(data), data.pos
    latent = getattr(data, "latent_pos", None)
    latent = pos if latent is None else latent
    zeros = [torch.zeros(len(p), dtype=torch.long) for p in (pos, latent)]
    h = model.cross_down(model.lift(x), pos, zeros[0], pos_dst=latent, batch_dst=zeros[1])
    for layer in model.encoder:
        h = layer(h, latent, zeros[1], weight)
    h = model.cross_up(h, latent, zeros[1], pos_dst=pos, batch_dst=zeros[0])
    return model.head(torch.cat([h, pos], dim=-1))


@pytest.mark.parametrize("attention", ["galerkin", "fourier"])
def test_mesh_path_integrates_with_the_mesh_weights_on_the_input_nodes_only(attention):
    model = tiny(3, 2, k=4, path="mesh", attention=attention)
    g = torch.Generator().manual_seed(5)
    pos, x = torch.rand(30, 2, generator=g), torch.randn(30, 1, generator=g)
    weight = torch.rand(30, generator=g) + 0.05
    weighted = from_points(pos, x=x, weight=weight / weight.sum())
    uniform = from_points(pos, x=x)  # weights 1/N
    out = model(weighted)
    torch.testing.assert_close(out, _mesh_reference(model, weighted, weighted.weight))
    assert (out - model(uniform)).abs().max() > 1e-4  # the weights act
    # sampled latent nodes carry no cell measure: the mesh's weights do not reach the encoder
    add_latent_mesh(weighted, 12)
    uniform.latent_pos = weighted.latent_pos
    out = model(weighted)
    torch.testing.assert_close(out, _mesh_reference(model, weighted, None))
    torch.testing.assert_close(out, model(uniform))


def _weighted_reference(model, data):
    """The weighted mesh path written out: every attention weighs its source nodes by their
    quadrature weights, the latent nodes' lumped from their Voronoi cells."""
    x, pos, latent = node_features(data), data.pos, data.latent_pos
    weight, latent_weight, _ = node_set_weights(data)
    zeros = [torch.zeros(len(p), dtype=torch.long) for p in (pos, latent)]
    h = model.cross_down(model.lift(x), pos, zeros[0], weight, pos_dst=latent, batch_dst=zeros[1])
    for layer in model.encoder:
        h = layer(h, latent, zeros[1], latent_weight)
    h = model.cross_up(h, latent, zeros[1], latent_weight, pos_dst=pos, batch_dst=zeros[0])
    return model.head(torch.cat([h, pos], dim=-1))


@pytest.mark.parametrize("quantile", [None, 0.3], ids=["global", "quantile"])
def test_weighted_mesh_path_integrates_every_attention_with_the_quadrature_weights(quantile):
    torch.manual_seed(0)
    model = tiny(3, 2, path="mesh", quantile=quantile, weighted=True).double()
    g = torch.Generator().manual_seed(3)
    pos, x = torch.rand(40, 2, generator=g), torch.randn(40, 1, generator=g)
    weight = (torch.rand(40, generator=g) + 0.05).double()
    data = add_latent_mesh(from_points(pos, x=x, weight=weight / weight.sum()), 10)
    for key in ("pos", "x", "latent_pos"):
        data[key] = data[key].double()
    out = model(data)
    torch.testing.assert_close(out, _weighted_reference(model, data))
    plain = GalerkinTransformer(**{**model.config, "weighted": False}).double()
    plain.load_state_dict(model.state_dict())
    assert (out - plain(data)).abs().max() > 1e-4  # the weights act


def test_weighted_cross_attention_sees_a_node_split_in_two_halves_as_the_node():
    """A node given twice, each copy with half its weight (a finer mesh's two nodes in one
    cell): the weighted model's integrals, hence its prediction at the other nodes, are the
    same; the unweighted model counts the node twice."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(4)
    pos = torch.rand(30, 2, generator=g, dtype=torch.float64)
    x = torch.randn(30, 1, generator=g, dtype=torch.float64)
    weight = (torch.rand(30, generator=g, dtype=torch.float64) + 0.05) / 30
    latent = pos[:8] + 0.01
    query = torch.rand(12, 2, generator=g, dtype=torch.float64)
    doubled = torch.cat([torch.arange(30), torch.tensor([5])])
    split_weight = weight.clone()
    split_weight[5] /= 2
    domains = []
    for index, w in ((torch.arange(30), weight), (doubled, split_weight[doubled])):
        data = from_points(pos[index], x=x[index], weight=w)
        data.latent_pos = latent
        set_query_points(data, query)
        for key in ("pos", "x", "weight", "query_pos"):
            data[key] = data[key].double()
        domains.append(data)
    for weighted in (True, False):
        model = tiny(3, 2, path="mesh", weighted=weighted).double().eval()
        with torch.no_grad():
            difference = float((model(domains[0]) - model(domains[1])).abs().max())
        assert (difference < 1e-12) == weighted, (weighted, difference)


def _dropouts(module):
    return [m.p for m in module.modules() if isinstance(m, torch.nn.Dropout)]


def test_every_option_reaches_its_layer_and_is_recorded_in_the_config():
    assert GalerkinTransformer(3, 1, 2).config["ffn_dropout"] == 0.0
    options = dict(
        in_channels=3,
        out_channels=2,
        pos_dim=2,
        attention="fourier",
        width=8,
        heads=2,
        layers=2,
        norm="regular",
        mlp_ratio=1.5,
        dropout=0.1,
        ffn_dropout=0.2,
        eta=0.5,
        delta=0.25,
        decoder="spectral",
        spectral_width=6,
        modes=4,
        spectral_layers=3,
        project=False,
        coarse_shape=(5, 4),
        grid_shape=(12, 10),
        grid_dropout=0.3,
        decoder_dropout=0.4,
        act="relu",
        path="auto",
        cross_heads=4,
        quantile=None,
        k=3,
        decoder_k=None,
        weighted=True,
    )
    model = GalerkinTransformer(**options)
    assert model.config == options
    assert model.coarse_shape == (5, 4) and model.grid_shape == (12, 10)
    for layer in model.encoder:
        assert layer.hidden_channels == 12 and layer.norm == "regular"
        assert (layer.attn.dropout, layer.attn.eta, layer.attn.delta) == (0.1, 0.5, 0.25)
        assert _dropouts(layer.ffn) == [0.2]
    assert _dropouts(model.down) == [0.3] * len(_dropouts(model.down))
    assert _dropouts(model.up) == [0.3]
    regressor = model.regressor
    assert (len(regressor.convs), regressor.project, regressor.dropout.p) == (3, False, 0.4)
    assert regressor.activation == "relu" and model.down.activation == model.up.activation
    assert model.down.activation == "relu" and model.head.act_name == "relu"
    # the mesh path's cross attentions: k neighbours, a quantile, or every node
    assert all(a.heads == 4 and a.field == {"k": 3} for a in (model.cross_down, model.cross_up))
    by_quantile = GalerkinTransformer(3, 1, 2, width=8, quantile=0.25)
    assert by_quantile.cross_down.field == {"quantile": 0.25}
    assert (by_quantile.config["quantile"], by_quantile.config["k"]) == (0.25, None)
    assert by_quantile.cross_up.field == {"quantile": 0.25}
    # the decoder's own k nearest latent nodes, the encoder's field kept (global or local)
    split = GalerkinTransformer(3, 1, 2, width=8, quantile=0.25, decoder_k=5)
    assert (split.cross_down.field, split.cross_up.field) == ({"quantile": 0.25}, {"k": 5})
    assert GalerkinTransformer(**split.config).cross_up.field == {"k": 5}
    dense_down = GalerkinTransformer(3, 1, 2, width=8, decoder_k=5)
    assert type(dense_down.cross_down).__name__ == "PositionAttention"
    assert dense_down.cross_up.field == {"k": 5}
    dense = GalerkinTransformer(3, 1, 2, width=8, cross_heads=4)
    assert type(dense.cross_down).__name__ == "PositionAttention" and dense.cross_up.heads == 4


def test_the_2d_paper_sizes_serve_3d_meshes_which_take_the_mesh_path():
    model = GalerkinTransformer(4, 1, 3)
    assert (model.config["width"], model.config["layers"]) == (128, 6)
    assert not model.grid and model.regressor is None and model.down is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(path="graph"), "unknown path 'graph'; choose one of ['auto', 'grid', 'mesh']"),
        (dict(decoder="cnn"), "unknown decoder 'cnn'; choose one of ['spectral', 'ffn']"),
        (dict(norm="pre"), "unknown norm 'pre'; choose one of ['new', 'regular']"),
        (
            dict(act="elu"),
            "unknown act 'elu'; choose one of ['gelu', 'relu', 'silu', 'tanh', 'identity']",
        ),
        (dict(pos_dim=0), "pos_dim must be >= 1, got 0"),
        (
            dict(quantile=0.1, k=4),
            "give the cross attention one receptive field: quantile or k",
        ),
        (
            dict(grid_shape=(1, 22)),
            "grid_shape must give 2 node count(s) of at least 2 (the training grid, "
            "e.g. (22, 22)); got (1, 22)",
        ),
    ],
)
def test_configuration_errors_are_whole_sentences(kwargs, message):
    with pytest.raises(ConfigError) as error:
        GalerkinTransformer(**{"in_channels": 3, "out_channels": 1, "pos_dim": 2, **kwargs})
    assert str(error.value).startswith(message)


def test_the_smallest_training_grid_has_two_nodes_per_axis():
    assert tiny(3, 2, grid_shape=2).grid_shape == (2, 2)


def test_data_of_another_dimension_is_named():
    with pytest.raises(ConfigError) as error:
        tiny(3, 2)(grids((8,), count=1)[0])
    assert str(error.value) == (
        "GalerkinTransformer was built for 2D coordinates but the data's pos has shape [8, 1]; "
        "build it with pos_dim=1"
    )


def test_project_given_overrides_the_paper_default():
    assert tiny(3, 2, project=False).regressor.project is False
    assert tiny(3, 2).regressor.project is True


def test_the_1d_grid_path_integrates_with_the_nodes_weights():
    plain, weighted = grids((16,), count=1)[0], grids((16,), count=1)[0]
    w = torch.linspace(0.5, 1.5, 16)
    weighted.weight = w / w.sum()
    model = tiny(2, 1)
    bare = grids((16,), count=1)[0]
    del bare.weight  # no weights: 1 / n, as uniform_grid gives
    with torch.no_grad():
        torch.testing.assert_close(model(bare), model(plain))
        plain, weighted = model(plain), model(weighted)
    assert (plain - weighted).abs().max() > 1e-3 * plain.abs().max()


def test_the_2d_grid_path_integrates_uniformly_on_the_coarse_grid():
    """The CiNN spreads each sample's measure evenly on the coarse grid and the attention
    normalises the weights per sample, so the nodes' weights change nothing there."""
    model = tiny(3, 2, coarse_shape=5)
    plain, weighted = grids((12, 10), count=2), grids((12, 10), count=2)
    weighted[0].weight = torch.linspace(0.5, 1.5, 120)
    weighted[1].weight = torch.full((120,), 4 / 120)
    with torch.no_grad():
        torch.testing.assert_close(model(make_batch(weighted)), model(make_batch(plain)))


def make_batch(data_list):
    return next(iter(make_loader(data_list, batch_size=len(data_list))))


def test_without_a_coarse_shape_the_grid_is_divided_by_three():
    model = tiny(3, 2)
    seen = []
    model.encoder[0].register_forward_hook(lambda module, args, out: seen.append(len(args[0])))
    with torch.no_grad():
        model(grids((12, 9), count=1)[0])
    assert seen == [4 * 3]


def test_the_ffn_decoders_up_sampling_stays_on_the_coarse_grid():
    """The FFN decoder predicts on the coarse grid: its CiNN up block maps the coarse grid to
    itself (middle grid = coarse grid), whatever grid the model was trained on."""
    model = tiny(3, 2, decoder="ffn", coarse_shape=5, grid_shape=22)
    seen = []
    model.up.register_forward_hook(lambda module, args, out: seen.append((args[0], out)))
    with torch.no_grad():
        model(grids((12, 12), count=1)[0])
        ((h, out),) = seen
        assert h.shape[2:] == (5, 5)
        torch.testing.assert_close(out, model.up.conv(h) + h)


def test_the_mesh_path_takes_data_without_weights():
    g = torch.Generator().manual_seed(0)
    pos, x = torch.rand(20, 2, generator=g), torch.randn(20, 1, generator=g)
    from meshop._pyg import Data

    model = tiny(3, 2, path="mesh", k=4)
    with torch.no_grad():
        torch.testing.assert_close(model(Data(pos=pos, x=x)), model(from_points(pos, x=x)))


def test_repr_names_the_configuration():
    assert repr(tiny(3, 2, attention="fourier", decoder="ffn", path="grid")).startswith(
        "GalerkinTransformer(\n  in_channels=3, out_channels=1, pos_dim=2, attention='fourier', "
        "width=8, heads=2, layers=2, decoder='ffn', spectral_width=6, modes=4, project=True, "
        "path='grid'\n"
    )

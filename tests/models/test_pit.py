"""The PiT model: architecture of Sec. 2.3 / Table 9, batching, query points, training."""

import math

import pytest
import torch

from meshop.data import add_latent_mesh, from_points, make_loader, node_features, uniform_grid
from meshop.errors import ConfigError
from meshop.models import PiT
from meshop.train.losses import relative_l2


def field(pos, coef):
    """a(x) = sum_j c_j0 sin(pi (c_j1 x + c_j2 y) + c_j3): a smooth random input function."""
    phase = math.pi * (pos @ coef[:, 1:3].T) + coef[:, 3]
    return (coef[:, 0] * torch.sin(phase)).sum(1, keepdim=True)


def sample(n, generator, num_query=60, latent=40, params=None):
    """One irregular domain: a on n random points, G(a) = a^2 + a/2 at other random points."""
    coef = torch.rand(3, 4, generator=generator) * torch.tensor([1.0, 2.0, 2.0, 2 * math.pi])
    pos = torch.rand(n, 2, generator=generator)
    query = torch.rand(num_query, 2, generator=generator)
    a, a_query = field(pos, coef), field(query, coef)
    data = from_points(pos, x=a, y=a_query**2 + 0.5 * a_query, query_pos=query, params=params)
    return add_latent_mesh(data, latent)


def small_pit(in_channels=3, **kwargs):
    torch.manual_seed(0)
    defaults = dict(width=16, heads=2, layers=2, encoder_quantile=0.1, decoder_quantile=0.1)
    return PiT(in_channels, 1, 2, **{**defaults, **kwargs})


def num_parameters(model):
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(
    ("benchmark", "kwargs", "count"),
    [
        ("Darcy2D", dict(in_channels=3, pos_dim=2, width=128, heads=2), 313_613),
        ("Vorticity", dict(in_channels=12, pos_dim=2, width=256, heads=1), 1_252_103),
        ("InviscidBurgers", dict(in_channels=2, pos_dim=1, decoder_layers=1), 95_503),
        ("ShockTube", dict(in_channels=4, pos_dim=1, decoder_layers=1), 95_631),
    ],
)
def test_parameter_counts_match_table_9(benchmark, kwargs, count):
    assert num_parameters(PiT(out_channels=1, **kwargs)) == count, benchmark


def test_defaults_are_the_papers_recommendations():
    model = PiT(3, 1, 2)
    config = model.config
    assert (config["width"], config["heads"], config["layers"]) == (64, 2, 4)
    assert config["encoder_quantile"] == config["decoder_quantile"] == 0.01
    assert config["lambda_param"] == "tan"
    assert model.encoder.field == {"quantile": 0.01} and model.decoder.field == {"quantile": 0.01}


def test_predicts_at_query_points_not_in_the_input_mesh():
    data = sample(100, torch.Generator().manual_seed(0), num_query=37)
    out = small_pit()(data)
    assert out.shape == (37, 1) and torch.isfinite(out).all()


def test_predicts_at_the_input_mesh_without_query_points_or_latent_mesh():
    generator = torch.Generator().manual_seed(0)
    pos = torch.rand(90, 2, generator=generator)
    data = from_points(pos, x=torch.sin(pos[:, :1]), y=pos[:, 1:])
    assert small_pit()(data).shape == (90, 1)


def test_batch_predictions_do_not_depend_on_the_other_samples():
    generator = torch.Generator().manual_seed(0)
    samples = [
        sample(n, generator, num_query=q, latent=m)
        for n, q, m in [(90, 30, 40), (140, 55, 25), (70, 12, 40)]
    ]
    model = small_pit().eval()
    batch = next(iter(make_loader(samples, batch_size=3)))
    with torch.no_grad():
        together = model(batch)
        alone = torch.cat([model(s) for s in samples])
        reordered = model(next(iter(make_loader(samples[::-1], batch_size=3))))
    torch.testing.assert_close(together, alone, rtol=1e-5, atol=1e-6)
    sizes = [len(s.query_pos) for s in samples]
    torch.testing.assert_close(
        torch.cat(reordered.split(sizes[::-1])[::-1]), alone, rtol=1e-5, atol=1e-6
    )


def test_runs_on_a_uniform_grid_with_a_coarse_latent_grid():
    grid = uniform_grid((12, 12), x=torch.rand(144), y=torch.rand(144))
    add_latent_mesh(grid, grid_shape=(4, 4))
    model = small_pit(encoder_quantile=0.02, decoder_quantile=0.2)
    assert model(grid).shape == (144, 1)


def test_constant_parameters_enter_as_node_features():
    generator = torch.Generator().manual_seed(0)
    data = sample(80, generator, params=torch.tensor([0.3, -1.0]))
    assert node_features(data).shape[1] == 5
    model = small_pit(in_channels=5).eval()
    with torch.no_grad():
        out = model(data)
        data.params = torch.tensor([[0.9, 2.0]])
        assert not torch.allclose(model(data), out)


@pytest.mark.parametrize(
    ("kwargs", "encoder_field"),
    [
        (dict(encoder_k=8, decoder_k=4), {"k": 8}),
        (dict(encoder_radius=0.3, decoder_radius=0.5), {"radius": 0.3}),
        (dict(lambda_param="softplus", periodic=1.0), {"quantile": 0.1}),
    ],
)
def test_other_receptive_fields_and_periodic_boxes(kwargs, encoder_field):
    model = small_pit(**kwargs)
    assert model.encoder.field == encoder_field
    data = sample(80, torch.Generator().manual_seed(0), num_query=20)
    out = model(data)
    assert out.shape == (20, 1) and torch.isfinite(out).all()


def test_config_rebuilds_the_same_model():
    model = small_pit(decoder_layers=1, periodic=(1.0, None)).eval()
    rebuilt = PiT(**model.config).eval()
    rebuilt.load_state_dict(model.state_dict())
    data = sample(60, torch.Generator().manual_seed(0), num_query=10)
    with torch.no_grad():
        torch.testing.assert_close(rebuilt(data), model(data))


def test_wrong_input_width_or_dimension_says_what_to_build():
    data = sample(60, torch.Generator().manual_seed(0))
    with pytest.raises(ConfigError, match="in_channels=3"):
        small_pit(in_channels=4)(data)
    with pytest.raises(ConfigError, match="3D coordinates"):
        PiT(3, 1, 3)(data)
    with pytest.raises(ConfigError, match="encoder"):
        PiT(3, 1, 2, encoder_k=3, encoder_radius=0.1)
    with pytest.raises(ConfigError, match="one per axis"):
        PiT(3, 1, 2, periodic=(1.0, 1.0, 1.0))


def test_fits_a_simple_operator_on_irregular_point_clouds():
    """G(a) = a^2 + a/2 from a on random clouds of 80-140 points to 60 other points per sample."""
    generator = torch.Generator().manual_seed(0)
    sizes = torch.randint(80, 140, (16,), generator=generator).tolist()
    loader = make_loader([sample(n, generator) for n in sizes], batch_size=8, shuffle=True)
    model = small_pit(width=32)
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    epoch_losses = []
    for _ in range(60):
        total = 0.0
        for batch in loader:
            optimizer.zero_grad()
            loss = relative_l2(model(batch), batch.y, batch.query_pos_batch, batch.num_graphs)
            loss.backward()
            optimizer.step()
            total += loss.item() / len(loader)
        epoch_losses.append(total)
    assert epoch_losses[-1] < epoch_losses[0] / 3, epoch_losses


def test_pit_block_defaults_and_lambda_param_reach_every_attention():
    """PiTBlock's defaults (2 heads, the paper's tan parameterisation); PiT's lambda_param and
    weighting reach the encoder, decoder and every block."""
    from meshop.nn import PiTBlock

    block = PiTBlock(8)
    assert (block.attn.heads, block.attn.lambda_param) == (2, "tan")
    model = PiT(3, 1, 2, width=8, layers=2, decoder_layers=1, lambda_param="softplus")
    layers = [model.encoder, model.decoder]
    layers += [b.attn for b in [*model.processor, *model.decoder_processor]]
    assert [layer.lambda_param for layer in layers] == ["softplus"] * 5
    assert PiT(3, 1, 2).weighted is True  # quadrature weights by default


def test_a_field_given_twice_names_the_stage():
    with pytest.raises(ConfigError) as error:
        PiT(3, 1, 2, encoder_k=3, encoder_radius=0.1)
    assert str(error.value) == (
        "give the encoder one receptive field: encoder_quantile, encoder_k or encoder_radius "
        "(got {'k': 3, 'radius': 0.1})"
    )


def test_the_decoder_blocks_weight_the_query_nodes_of_the_mesh():
    """Without query points the decoder's blocks attend over the mesh with its weights."""
    torch.manual_seed(0)
    model = PiT(3, 1, 2, width=8, layers=1, decoder_layers=2)
    data = from_points(torch.rand(30, 2), x=torch.rand(30), y=torch.rand(30))
    data.weight = torch.rand(30) + 0.5
    seen = []
    for block in model.decoder_processor:
        block.register_forward_pre_hook(lambda module, args: seen.append(args[3]))
    model(next(iter(make_loader([data], 1))))
    assert len(seen) == 2 and all(torch.equal(w, data.weight) for w in seen)


def test_repr_names_the_configuration():
    model = PiT(3, 1, 2, width=8, heads=4, layers=1)
    assert (
        model.extra_repr() == "in_channels=3, out_channels=1, pos_dim=2, width=8, heads=4, layers=1"
    )
    assert repr(model).startswith("PiT(\n  in_channels=3, out_channels=1")

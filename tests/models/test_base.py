"""The model base: every registered model records its arguments as ``config``, checks its input
once, shows its configuration, and carries the metadata the registry used to hold."""

import inspect

import pytest
import torch

from meshop.data import from_points, node_features
from meshop.errors import ConfigError, MeshError
from meshop.models import FourierTransformer, GalerkinTransformer, Operator, PiT
from meshop.models.registry import MODELS, build_model, model_class

#: small sizes of every registered model
SIZES = {
    "pit": dict(width=8, heads=1, layers=1, encoder_k=4, decoder_k=4),
    "galerkin": dict(width=8, heads=2, layers=1, path="mesh", k=4),
    "fourier": dict(width=8, heads=2, layers=1, path="mesh", k=4),
    "ono": dict(width=8, layers=1, heads=2, k=2),
    "transolver": dict(width=8, layers=1, heads=2, slices=4),
    "mlp": dict(width=8, layers=2),
}


def cloud(n=20, channels=1, dim=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return from_points(torch.rand(n, dim, generator=g), x=torch.randn(n, channels, generator=g))


def built(name, **kwargs):
    torch.manual_seed(0)
    return build_model(name, in_channels=3, out_channels=2, pos_dim=2, **{**SIZES[name], **kwargs})


def test_the_sizes_cover_every_registered_model():
    assert set(SIZES) == set(MODELS)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_registered_model_subclasses_the_base(name):
    assert issubclass(model_class(name), Operator)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_config_holds_every_argument_with_its_default_and_rebuilds_the_model(name):
    model = built(name).eval()
    cls = type(model)
    assert list(model.config) == list(inspect.signature(cls).parameters)
    assert model.config["width"] == 8 and model.config["in_channels"] == 3
    rebuilt = cls(**model.config).eval()
    assert rebuilt.config == model.config
    rebuilt.load_state_dict(model.state_dict())
    data = cloud()
    with torch.no_grad():
        torch.testing.assert_close(rebuilt(data), model(data))


def test_config_records_defaults_the_caller_left_out():
    assert PiT(3, 1, 2).config == {
        "in_channels": 3,
        "out_channels": 1,
        "pos_dim": 2,
        **{name: p.default for name, p in list(inspect.signature(PiT).parameters.items())[3:]},
    }


def test_a_subclass_with_its_own_init_records_the_arguments_of_the_model_it_builds():
    class Wide(PiT):
        def __init__(self, in_channels, out_channels, pos_dim, **kwargs):
            super().__init__(in_channels, out_channels, pos_dim, width=12, **kwargs)

    model = Wide(3, 1, 2, heads=3)
    assert (model.config["width"], model.config["heads"], model.config["layers"]) == (12, 3, 4)
    assert FourierTransformer(3, 1, 2).config["attention"] == "fourier"
    assert GalerkinTransformer(3, 1, 2).config["attention"] == "galerkin"


def test_the_base_gives_the_three_sizes_from_the_config():
    model = built("transolver")
    assert (model.in_channels, model.out_channels, model.pos_dim) == (3, 2, 2)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_model_refuses_data_it_was_not_built_for(name):
    model = built(name).eval()
    title = type(model).__name__
    with pytest.raises(ConfigError) as error:
        model(cloud(channels=2))  # 4 input channels
    assert str(error.value) == (
        f"{title} expects 3 input channels (node_features: x, pos, params) but the data has 4; "
        f"build {title} with in_channels=4"
    )
    with pytest.raises(ConfigError) as error:
        model(cloud(dim=3))
    assert str(error.value).startswith(f"{title} was built for 2D coordinates but the data's pos")
    assert "build it with pos_dim=3" in str(error.value)
    data = cloud()
    del data.pos
    with pytest.raises(MeshError, match=f"{title} needs node coordinates: the data has no pos"):
        model(data)


def test_the_check_counts_the_parameters_as_node_features_do():
    data = cloud(channels=2)
    data.params = torch.randn(1, 3)
    model = build_model("mlp", in_channels=node_features(data).shape[1], out_channels=1, pos_dim=2)
    model.check(data)  # 2 + 2 + 3
    assert model.features(data).shape == (20, 7)


def test_repr_shows_the_sizes_and_the_arguments_off_their_defaults():
    assert repr(PiT(3, 1, 2, width=8, pointwise=True)).startswith(
        "PiT(\n  in_channels=3, out_channels=1, pos_dim=2, width=8, pointwise=True\n"
    )
    assert repr(built("mlp")).startswith(
        "MLPBaseline(\n  in_channels=3, out_channels=2, pos_dim=2, width=8, layers=2\n"
    )


def test_the_models_carry_their_titles_and_whether_they_use_a_latent_mesh():
    titles = {name: model_class(name).title for name in MODELS}
    assert titles == {
        "pit": "PiT",
        "galerkin": "Galerkin Transformer",
        "fourier": "Fourier Transformer",
        "ono": "ONO",
        "transolver": "Transolver",
        "mlp": "MLP baseline",
    }
    latent = {name for name in MODELS if model_class(name).uses_latent_mesh}
    assert latent == {"pit"}

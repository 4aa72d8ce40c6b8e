"""Model and dataset registries and the presets of `meshop train`: every name and every preset
resolves to real classes and valid arguments."""

import inspect

import pytest
import torch

from meshop.data import from_points, write_mesh
from meshop.datasets.registry import DATASETS, build_dataset, dataset_class
from meshop.errors import ConfigError, MeshReadError
from meshop.models import GalerkinTransformer, MLPBaseline
from meshop.models.registry import MODELS, build_model, model_class, name_of
from meshop.train.config import from_dict
from meshop.train.presets import preset

PAIRS = [(d, m) for d, entry in DATASETS.items() for m in entry.models]


@pytest.mark.parametrize(("dataset", "model"), PAIRS, ids=lambda v: v)
def test_every_suggested_pair_has_a_valid_preset(dataset, model):
    values = preset(dataset, model)
    from_dict(values["train"])  # raises on an unknown key or a bad value
    model_params = inspect.signature(model_class(model)).parameters
    assert set(values["model"]) <= set(model_params), values["model"]
    dataset_params = inspect.signature(dataset_class(dataset)).parameters
    assert set(values["dataset"]) <= set(dataset_params), values["dataset"]


def test_names_round_trip_through_checkpoints():
    for name in MODELS:
        assert name_of(model_class(name)) == name
    assert name_of(MLPBaseline) == "mlp"
    assert name_of(torch.nn.Linear) == "torch.nn.modules.linear:Linear"
    assert isinstance(
        build_model("torch.nn.modules.linear:Linear", in_features=2, out_features=1),
        torch.nn.Linear,
    )


def test_the_fourier_transformer_is_the_galerkin_transformer_with_fourier_attention():
    sizes = dict(in_channels=2, out_channels=1, pos_dim=1, width=8, layers=1, modes=2)
    model = build_model("fourier", **sizes, spectral_width=4)
    assert isinstance(model, GalerkinTransformer) and name_of(type(model)) == "fourier"
    assert model.config["attention"] == "fourier"
    assert build_model("galerkin", **sizes).config["attention"] == "galerkin"
    rebuilt = build_model(name_of(type(model)), **model.config)
    assert rebuilt.config == model.config


def test_unknown_names_and_options_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="did you mean 'pit'"):
        build_model("pti")
    with pytest.raises(ConfigError, match="cannot build model 'mlp'"):
        build_model("mlp", in_channels=2, out_channels=1, pos_dim=1, depth=3)
    with pytest.raises(ConfigError, match="has no option 'resolutoin'.*num_train"):
        build_dataset("darcy", "train", str(tmp_path), resolutoin=8)
    with pytest.raises(
        ConfigError, match="^dataset class 'nowhere.module:Thing' cannot be imported: No module"
    ):
        dataset_class("nowhere.module:Thing")


def test_build_dataset_passes_the_data_dir_to_the_right_argument(tmp_path):
    folder = tmp_path / "meshes"
    folder.mkdir()
    for i in range(3):
        write_mesh(folder / f"m{i}.vtu", from_points(torch.rand(5, 2)), {"u": torch.rand(5)})
    dataset = build_dataset("folder", "all", str(folder), targets=["u"], progress=False)
    assert len(dataset) == 3
    with pytest.raises(MeshReadError, match="needs the published files"):
        build_dataset("darcy-files", "train", str(tmp_path / "empty"))


TINY_DATA = {
    "elasticity": {"num_train": 2, "num_test": 1, "max_area": 0.02},
    "airfoil": {"num_train": 2, "num_test": 1, "num_panels": 32, "num_layers": 8},
    "darcy": {"num_train": 2, "num_test": 1, "resolution": 9, "fine_resolution": 17},
    "burgers": {"num_train": 2, "num_test": 1, "resolution": 32, "fine_resolution": 64},
    "darcy-mesh": {"num_train": 2, "num_test": 1, "max_area": 0.01},
}
TINY_MODELS = {
    "pit": {"width": 8, "layers": 1},
    "galerkin": {"width": 8, "heads": 1, "layers": 1, "spectral_width": 4, "modes": 2},
    "fourier": {"width": 8, "heads": 1, "layers": 1, "spectral_width": 4, "modes": 2},
    "ono": {"width": 8, "layers": 1, "k": 2, "heads": 1},
    "transolver": {"width": 8, "layers": 1, "heads": 2, "slices": 4},
    "mlp": {"width": 8},
}
GENERATED_PAIRS = [(d, m) for d, m in PAIRS if d in TINY_DATA]


@pytest.mark.parametrize(("dataset", "model"), GENERATED_PAIRS, ids=lambda v: v)
def test_every_suggested_pair_trains_and_evaluates_on_tiny_data(
    dataset, model, tmp_path, monkeypatch
):
    from meshop.train.config import RunConfig
    from meshop.train.run import evaluate_run, train_run

    monkeypatch.setenv("MESHOP_DATA", str(tmp_path / "data"))
    run = RunConfig(
        dataset=dataset,
        model=model,
        out=str(tmp_path / "run"),
        train={"epochs": 1, "batch_size": 2, "progress": False, "latent_points": None},
        model_args=TINY_MODELS[model],
        dataset_args={**TINY_DATA[dataset], "progress": False},
    )
    metrics = train_run(run, figures=False, log=lambda *_: None)
    assert metrics["test_rel_l2"] > 0
    evaluated = evaluate_run(tmp_path / "run")
    assert evaluated["test_rel_l2"] == pytest.approx(metrics["test_rel_l2"], rel=1e-4)

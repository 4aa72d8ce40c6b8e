"""TrainConfig's validation at its boundaries and TOML run configs, each error a whole sentence."""

import pytest

from meshop.errors import ConfigError
from meshop.train.config import RunConfig, TrainConfig, from_dict, load_config


def test_validation_accepts_the_boundaries_and_rejects_just_past_them():
    TrainConfig(epochs=1, batch_size=1, eval_every=1, lr=1e-12, pct_start=0.01, latent_points=1)
    TrainConfig(pct_start=0.99, device="cuda:1")
    TrainConfig(device="cpu")
    for changes, message in [
        (dict(epochs=0), "epochs must be a positive integer, got 0"),
        (dict(batch_size=0), "batch_size must be a positive integer, got 0"),
        (dict(eval_every=0), "eval_every must be a positive integer, got 0"),
        (dict(lr=0.0), "lr must be positive, got 0.0"),
        (dict(pct_start=0.0), "pct_start must be in (0, 1), got 0.0"),
        (dict(pct_start=1.0), "pct_start must be in (0, 1), got 1.0"),
        (dict(latent_points=0), "latent_points must be positive, got 0"),
        (dict(device="gpu"), "device must be 'auto', 'cpu' or 'cuda[:i]', got 'gpu'"),
        (
            dict(latent_sampling="any"),
            "latent_sampling must be one of ['fps', 'random'], got 'any'",
        ),
        (
            dict(latent_points=4, latent_grid=(2, 2)),
            "give latent_points (farthest point sampling) or latent_grid, not both",
        ),
    ]:
        with pytest.raises(ConfigError) as caught:
            TrainConfig(**changes)
        assert str(caught.value) == message


def test_latent_grid_is_a_tuple_in_the_config_and_a_list_in_its_dict():
    config = TrainConfig(latent_grid=[3, 4])
    assert config.latent_grid == (3, 4)
    assert config.to_dict()["latent_grid"] == [3, 4]
    assert from_dict(config.to_dict()) == config
    assert config.replace(lr=0.5).lr == 0.5 and config.replace(lr=0.5).latent_grid == (3, 4)


def test_unknown_keys_and_bad_values_name_where_they_are(tmp_path):
    with pytest.raises(ConfigError) as caught:
        from_dict({"epoch": 3})
    assert str(caught.value).startswith(
        "unknown key 'epoch' in the training configuration; did you mean 'epochs'? (valid keys: "
        "epochs, batch_size, lr,"
    )
    with pytest.raises(ConfigError, match=r"^unknown key 'zzz' in here \(valid keys: epochs,"):
        from_dict({"zzz": 3}, "here")
    with pytest.raises(ConfigError, match="^invalid value in here: "):
        from_dict({"epochs": "x"}, "here")
    path = tmp_path / "run.toml"
    path.write_text('[run]\nmodel = "pit"\n[train]\nepochs = 2\n[model]\nwidth = 8\n')
    run = load_config(path)
    assert run == RunConfig(model="pit", train={"epochs": 2}, model_args={"width": 8})
    assert run.train_config({"epochs": 5, "lr": 0.1}) == TrainConfig(epochs=2, lr=0.1)
    path.write_text("train = 3\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value) == f"'{path}': 'train' must be a table ([train]), got 3"
    path.write_text("[train]\nepochs = 0\n")
    with pytest.raises(ConfigError, match="epochs must be a positive integer"):
        load_config(path)
    with pytest.raises(ConfigError, match=r"^config file '.*none.toml' does not exist$"):
        load_config(tmp_path / "none.toml")
    path.write_text("[train\n")
    with pytest.raises(ConfigError, match=r"^config file '.*run.toml' is not valid TOML: "):
        load_config(path)


def test_a_run_config_may_omit_sections_and_unknown_ones_name_the_file(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('[run]\nmodel = "pit"\n')
    assert load_config(path) == RunConfig(model="pit")
    path.write_text("[runs]\n")
    with pytest.raises(
        ConfigError, match=f"^unknown key 'runs' in '{path}' \\(top-level sections\\);"
    ):
        load_config(path)
    path.write_text('[run]\nmodels = "pit"\n')
    with pytest.raises(ConfigError, match=f"^unknown key 'models' in '{path}' \\[run\\];"):
        load_config(path)

"""The shared registry helper: ``"module:Class"`` targets are imported only when asked for, and an
unknown name gets the closest known one, where it was given, and every valid name."""

import dataclasses
import sys

import pytest

from meshop._registry import import_class, unknown_name
from meshop.errors import ConfigError


def test_a_target_is_imported_when_asked_for_and_not_before(tmp_path, monkeypatch):
    (tmp_path / "lazy_target.py").write_text("class Thing:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "lazy_target", raising=False)
    target = "lazy_target:Thing"  # as a registry holds it
    assert "lazy_target" not in sys.modules
    cls = import_class(target, "model class")
    assert cls.__name__ == "Thing" and cls.__module__ == "lazy_target"
    assert "lazy_target" in sys.modules


def test_a_target_that_does_not_import_or_names_no_class_says_which_and_why():
    with pytest.raises(ConfigError, match=r"^dataset class 'meshop.nowhere:X' cannot be imported"):
        import_class("meshop.nowhere:X", "dataset class")
    with pytest.raises(ConfigError, match=r"^module 'meshop.errors' has no class 'Nope'$"):
        import_class("meshop.errors:Nope", "model class")
    assert import_class("meshop.errors:ConfigError", "error class") is ConfigError


def test_an_unknown_name_gets_the_closest_known_one_where_it_was_given_and_the_list():
    assert str(unknown_name("model", "pitt", ["galerkin", "pit"])) == (
        "unknown model 'pitt'; did you mean 'pit'? (known: galerkin, pit)"
    )
    error = unknown_name("key", "epoch", ["epochs", "lr"], "'run.toml' [train]", "valid keys")
    assert isinstance(error, ConfigError)
    assert str(error) == (
        "unknown key 'epoch' in 'run.toml' [train]; did you mean 'epochs'? (valid keys: epochs, lr)"
    )
    assert str(unknown_name("loss", "zzz", ["rel_l1"])) == "unknown loss 'zzz' (known: rel_l1)"


def test_the_registries_and_the_configuration_use_the_shared_helper():
    import meshop.datasets.registry as datasets
    import meshop.models.registry as models
    import meshop.train.config as config

    assert models.unknown_name is datasets.unknown_name is config.unknown_name is unknown_name
    assert models.import_class is datasets.import_class is import_class


def test_a_registered_name_whose_class_does_not_import_names_what_the_user_typed(monkeypatch):
    from meshop.datasets import registry as datasets
    from meshop.models import registry as models

    broken = dataclasses.replace(datasets.DATASETS["darcy"], target="meshop.nowhere:Darcy")
    monkeypatch.setitem(datasets.DATASETS, "darcy", broken)
    with pytest.raises(ConfigError, match=r"^dataset 'darcy': its class 'meshop.nowhere:Darcy'"):
        datasets.dataset_class("darcy")
    entry = dataclasses.replace(models.MODELS["pit"], target="meshop.nowhere:PiT")
    monkeypatch.setitem(models.MODELS, "pit", entry)
    with pytest.raises(ConfigError, match=r"^model 'pit': its class 'meshop.nowhere:PiT' cannot"):
        models.model_class("pit")

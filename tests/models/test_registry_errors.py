"""The model registry's errors: unknown names with the closest known one (or none) and the full
list, and ``module:Class`` paths that cannot be imported or name no class."""

import pytest

from meshop.errors import ConfigError
from meshop.models.registry import MODELS, build_model, model_class, unknown_name


def test_an_unknown_name_gets_the_closest_known_one_and_the_list():
    known = ", ".join(sorted(MODELS))
    with pytest.raises(ConfigError) as error:
        build_model("pitt")
    assert str(error.value) == f"unknown model 'pitt'; did you mean 'pit'? (known: {known})"
    assert str(unknown_name("loss", "zzz", ["rel_l1", "rel_l2"])) == (
        "unknown loss 'zzz' (known: rel_l1, rel_l2)"
    )


def test_module_class_paths_that_do_not_import_or_name_no_class_say_which():
    with pytest.raises(ConfigError, match=r"model class 'meshop.no_such:X' cannot be imported: No"):
        model_class("meshop.no_such:X")
    with pytest.raises(ConfigError, match=r"^module 'meshop.models' has no class 'Nope'$"):
        model_class("meshop.models:Nope")
    with pytest.raises(ConfigError, match=r"^module 'meshop.models' has no class 'PiT:x'$"):
        model_class("meshop.models:PiT:x")  # the module is what comes before the first colon

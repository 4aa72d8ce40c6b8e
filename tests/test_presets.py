"""The optimisation presets and defaults that the docs state: the presets table of docs/training.md
is generated from meshop.train.presets, TrainConfig() is the Galerkin Transformer's setting, and
Burgers' default viscosity is 0.1 / (2 pi)."""

import importlib.util
import inspect
import math
from pathlib import Path

import pytest
import torch

from meshop.datasets.burgers import Burgers
from meshop.train import TrainConfig, build_optimizer, build_scheduler
from meshop.train.presets import preset

ROOT = Path(__file__).resolve().parents[1]


def presets_table():
    spec = importlib.util.spec_from_file_location(
        "presets_table", ROOT / "scripts/presets_table.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_docs_presets_table_is_the_generated_one():
    module = presets_table()
    page = (ROOT / "docs" / "training.md").read_text()
    assert module.page_block(page) == module.block(), (
        "docs/training.md's presets table differs from meshop.train.presets: run "
        "`python scripts/presets_table.py --write`"
    )


def test_the_presets_table_states_the_papers_settings():
    rows = {line.split(" | ")[0][2:]: line for line in presets_table().table().splitlines()[2:]}
    assert rows["PiT"] == "| PiT | Adam, lr 1e-3 | cosine annealing from `lr` to 0 | none |"
    assert rows["Galerkin Transformer"] == (
        "| Galerkin Transformer | Adam, lr 1e-3 | one-cycle: starts at `lr / 1e4`, peaks after "
        "30 % of the steps, ends at `lr / 1e4` | gradient norm 1 |"
    )
    assert rows["Fourier Transformer"].startswith("| Fourier Transformer | Adam, lr 5e-4 |")
    assert rows["ONO"] == (
        "| ONO | AdamW, lr 1e-3, weight decay 1e-5 | one-cycle: starts at `lr / 25`, peaks after "
        "30 % of the steps, ends at `lr / 2.5e5` | gradient norm 0.1 |"
    )


def test_the_ono_preset_builds_adamw_with_its_weight_decay_and_one_cycle_factors():
    config = TrainConfig(**preset("elasticity", "ono")["train"])
    model = torch.nn.Linear(2, 2)
    optimizer = build_optimizer(model, config)
    assert isinstance(optimizer, torch.optim.AdamW)
    assert optimizer.param_groups[0]["weight_decay"] == 1e-5
    build_scheduler(optimizer, config, total_steps=10)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(1e-3 / 25)
    assert config.clip == 0.1


def test_train_config_defaults_to_the_galerkin_transformers_settings():
    galerkin = TrainConfig(**preset("darcy", "galerkin")["train"])
    for key in ("optimizer", "lr", "schedule", "pct_start", "div_factor", "final_div_factor"):
        assert getattr(TrainConfig(), key) == getattr(galerkin, key), key
    assert TrainConfig().clip == galerkin.clip == 1.0


def test_burgers_default_viscosity_is_the_galerkin_papers_value():
    default = inspect.signature(Burgers).parameters["viscosity"].default
    assert default == pytest.approx(0.1 / (2 * math.pi), rel=1e-12)


def test_preset_merges_model_dataset_and_pair_defaults_in_that_order():
    from meshop.train.presets import DATASET_PRESETS, MODEL_TRAINING, PAIR_PRESETS, preset

    merged = preset("elasticity", "pit")
    train = {
        **MODEL_TRAINING["pit"],
        **DATASET_PRESETS["elasticity"]["train"],
        **PAIR_PRESETS[("elasticity", "pit")]["train"],
    }
    assert merged["train"] == train and merged["train"]["batch_size"] == 2  # the pair's
    assert merged["dataset"] == DATASET_PRESETS["elasticity"]["dataset"]
    assert merged["model"] == PAIR_PRESETS[("elasticity", "pit")]["model"]
    assert preset("elasticity", "my_pkg:Model") == {
        "train": DATASET_PRESETS["elasticity"]["train"],
        "model": {},
        "dataset": DATASET_PRESETS["elasticity"]["dataset"],
    }

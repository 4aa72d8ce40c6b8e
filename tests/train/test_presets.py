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

ROOT = Path(__file__).resolve().parents[2]


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


def test_the_pairs_table_states_the_settings_that_differ_from_the_papers():
    """The second table of docs/training.md: each dataset's batch, and the pairs' own learning
    rates, clipping, losses and latent meshes, as the presets give them."""
    rows = presets_table().pairs_table().splitlines()[2:]
    assert (
        "| `elasticity` | PiT | 100 | 2 | lr 5e-3, clipping 1 | 256 farthest-point nodes |" in rows
    )
    assert "| `airfoil` | PiT | 100 | 2 | lr 5e-3, clipping 1 | 512 random nodes |" in rows
    assert (
        "| `darcy-mesh` | PiT | 100 | 2 | lr 5e-3, clipping 1 | 256 farthest-point nodes |" in rows
    )
    assert (
        "| `folder` | PiT | scaled to the data | 2 | lr 5e-3, clipping 1 | scaled to the data |"
        in rows
    )
    assert "| `burgers` | PiT | 100 | 8 | lr 2e-3, relative L1 loss | none |" in rows
    assert "| `burgers` | ONO | 100 | 8 | lr 2e-3 | none |" in rows
    assert "| `airfoil` | Transolver | 100 | 2 | lr 3e-3 | none |" in rows
    assert (
        "| `elasticity` | Galerkin Transformer, Fourier Transformer | 100 | 2 | lr 3e-3 "
        "| 256 farthest-point nodes |"
    ) in rows
    assert (
        "| `darcy-mesh` | Galerkin Transformer, Fourier Transformer | 100 | 2 | none "
        "| 256 farthest-point nodes |"
    ) in rows
    assert "| `darcy` | PiT | 100 | 4 | none | 16 x 16 grid |" in rows
    assert "| `darcy` | every other model | 100 | 4 | none | none |" in rows


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


def test_folder_defaults_scale_with_the_size_and_number_of_the_meshes():
    from meshop.train.presets import DataSummary, folder_rules

    # an Elasticity-like folder (the generated training meshes have 995 nodes on average): the
    # mesh datasets' measured settings come back, as the folder rules' table of
    # docs/training.md states them
    elasticity = DataSummary(nodes=995, dim=2, samples=1000)
    pit = folder_rules("pit", elasticity)
    assert pit["train"] == {
        "latent_points": 248,  # a quarter of the nodes (Elasticity's preset: 256)
        "batch_size": 2,
        "lr": 5e-3,
        "clip": 1.0,
        "epochs": 100,  # 500 steps an epoch: the 100 epochs of the mesh datasets
    }
    assert pit["model"] == {"width": 64, "encoder_quantile": 0.02, "decoder_quantile": 0.048}
    page = (ROOT / "docs" / "training.md").read_text()
    assert "| on Elasticity's meshes (995 nodes on average) |" in page
    assert "| a quarter of the nodes, between 64 and 512 | 248 (preset: 256) |" in page
    assert "input nodes | 0.02 (paper: 0.02) |" in page
    assert "| a quantile holding 12 latent nodes | 0.048 |" in page
    assert (
        "| when the samples share one mesh (a grid): a new one of every sample each epoch" in page
    )
    transolver = folder_rules("transolver", elasticity)
    assert transolver["model"] == {"width": 64, "layers": 4, "heads": 4, "slices": 32}
    assert transolver["train"] == {"batch_size": 8, "epochs": 100}
    assert folder_rules("ono", elasticity)["model"]["k"] == 16
    # the Galerkin and Fourier Transformers get PiT's latent mesh: linear in the mesh size
    assert folder_rules("galerkin", elasticity)["train"]["latent_points"] == 248
    assert (
        folder_rules("fourier", DataSummary(nodes=100, dim=2, samples=10))["train"]["latent_points"]
        == 64
    )
    # meshes of a million nodes: batches of one sample, bounded latent meshes and fields that
    # hold twice the input nodes per latent node
    large = DataSummary(nodes=1_000_000, dim=3, samples=40)
    pit = folder_rules("pit", large)
    assert pit["train"]["latent_points"] == 512
    assert pit["model"]["encoder_quantile"] == 0.0039  # 2 / 512
    assert pit["model"]["decoder_quantile"] == 0.023  # 12 / 512
    assert folder_rules("transolver", large)["train"]["batch_size"] == 1
    assert folder_rules("galerkin", large)["train"]["latent_points"] == 2048
    assert folder_rules("fourier", large)["model"]["path"] == "mesh"
    assert folder_rules("transolver", large)["train"]["epochs"] == 125  # 5000 steps of 40
    # a few small meshes: every node latent, the fields cover what there is, more epochs
    small = DataSummary(nodes=30, dim=2, samples=12)
    pit = folder_rules("pit", small)
    assert pit["train"]["latent_points"] == 30 and pit["train"]["epochs"] == 834
    assert folder_rules("galerkin", small)["train"]["latent_points"] == 30
    assert pit["model"]["encoder_quantile"] == 0.67 and pit["model"]["decoder_quantile"] == 0.4
    assert folder_rules("mlp", DataSummary(nodes=30, dim=2, samples=1))["train"]["epochs"] == 1000


def test_folder_defaults_sit_under_the_explicit_settings_and_only_for_folders():
    from meshop.data import from_points
    from meshop.train import RunConfig
    from meshop.train.presets import DataSummary, preset, summarize_data

    data = DataSummary(nodes=972, dim=2, samples=1000)
    assert preset("elasticity", "pit", data) == preset("elasticity", "pit")  # not a folder
    chosen = preset("folder", "pit", data)
    assert chosen["train"]["latent_points"] == 243 and chosen["train"]["optimizer"] == "adam"
    assert preset("folder", "pit")["train"]["latent_points"] == 256  # no summary: the static one
    run = RunConfig(dataset="folder", model="pit", train={"batch_size": 6, "latent_points": 99})
    config = run.train_config(chosen["train"])
    assert (config.batch_size, config.latent_points, config.lr) == (6, 99, 5e-3)

    samples = [from_points(torch.rand(n, 3)) for n in (50, 10, 40, 20, 30, 1000)]
    summary = summarize_data(samples)  # the median of the first five, all of them counted
    assert summary == DataSummary(nodes=30, dim=3, samples=6)
    assert str(summary) == "6 training samples of about 30 nodes in 3D"


def test_pit_resamples_its_latent_mesh_on_a_folder_of_one_shared_mesh():
    """Samples on one mesh (a grid) would give PiT one latent mesh to learn: it gets a new one each
    epoch there; samples on meshes of their own keep theirs (resampling costs accuracy)."""
    from meshop.data import from_points
    from meshop.train.presets import DataSummary, folder_rules, summarize_data

    grid = torch.rand(40, 2)
    shared = [from_points(grid.clone(), torch.rand(40, 1)) for _ in range(4)]
    assert summarize_data(shared).shared_mesh
    assert (
        str(summarize_data(shared)) == "4 training samples of about 40 nodes in 2D, all on one mesh"
    )
    own = [from_points(torch.rand(40, 2)) for _ in range(4)]
    assert not summarize_data(own).shared_mesh
    moved = [*shared[:3], from_points(grid + 1e-3)]  # one sample's nodes elsewhere
    assert not summarize_data(moved).shared_mesh
    assert not summarize_data(shared[:1]).shared_mesh  # one sample: nothing to tell
    rules = folder_rules("pit", DataSummary(nodes=484, dim=2, samples=160, shared_mesh=True))
    assert rules["train"]["latent_resample"] is True
    rules = folder_rules("pit", DataSummary(nodes=995, dim=2, samples=160))
    assert "latent_resample" not in rules["train"]
    # the Galerkin and Fourier Transformers' latent meshes too; the models without none
    grid = DataSummary(nodes=484, dim=2, samples=160, shared_mesh=True)
    for model in ("galerkin", "fourier"):
        assert folder_rules(model, grid)["train"]["latent_resample"] is True
        assert "latent_resample" not in folder_rules(model, DataSummary(484, 2, 160))["train"]
    for model in ("ono", "transolver", "mlp"):
        assert "latent_resample" not in folder_rules(model, grid)["train"]


@pytest.mark.parametrize("model", ["pit", "ono", "transolver"])
def test_burgers_presets_give_an_input_that_tells_left_from_right(model, tmp_path):
    """PiT's distance kernels are mirror-symmetric and ONO's kernels and the Transolver's slices
    come from the node features: on Burgers all three read u0's derivative, which changes sign
    under mirroring (ONO and the Transolver also the coordinate's Fourier modes);
    benchmarks/results/burgers_features.md and tuning.md have the measurements."""
    options = preset("burgers", model)["dataset"]
    small = dict(resolution=64, fine_resolution=256, num_train=1, num_test=1, progress=False)
    sample = Burgers(root=tmp_path, **{**options, **small})[0]
    assert sample.x.shape[1] == 2 + 2 * options.get("coordinate_modes", 0)
    u0, u0_x = sample.x[:, :1], sample.x[:, 1:2]

    def mirror(values):
        return torch.roll(values.flip(0), 1, 0)

    from meshop.datasets.burgers import periodic_derivative

    assert torch.allclose(periodic_derivative(mirror(u0)), -mirror(u0_x), atol=1e-4)
    assert u0_x.abs().max() > 1


def test_ono_on_burgers_trains_on_random_periodic_shifts_and_the_transolver_does_not():
    """ONO is not translation-equivariant: on Burgers its preset reads every training sample
    through a new random periodic shift each epoch, with lr 2e-3 (the accuracy table's 121
    epochs: 0.0991 -> 0.0478). With the shifts the Transolver's slices stay uniform for the
    table's whole budget, so its preset trains without them (benchmarks/results/tuning.md)."""
    ono = TrainConfig(**preset("burgers", "ono")["train"])
    assert ono.periodic_shift is True and ono.lr == 2e-3
    transolver = TrainConfig(**preset("burgers", "transolver")["train"])
    assert transolver.periodic_shift is False


@pytest.mark.parametrize("dataset", ["elasticity", "airfoil", "darcy-mesh", "folder"])
@pytest.mark.parametrize("model", ["pit", "galerkin", "fourier", "ono", "transolver", "mlp"])
def test_no_preset_on_meshes_is_quadratic_in_the_mesh_size(dataset, model):
    """Every model as the presets of the mesh datasets and of a folder build it predicts on a
    mesh in time linear in its nodes: meshop predict refuses none of them on large meshes."""
    from meshop._pyg import Data
    from meshop.models.registry import build_model
    from meshop.train.data import LatentMesh
    from meshop.train.presets import DataSummary

    summary = DataSummary(nodes=2000, dim=2, samples=100) if dataset == "folder" else None
    chosen = preset(dataset, model, summary)
    net = build_model(model, in_channels=3, out_channels=1, pos_dim=2, **chosen["model"])
    train = chosen["train"]
    latent = LatentMesh(train.get("latent_points"), train.get("latent_grid"))
    if train.get("latent_sampling"):
        latent = LatentMesh(train["latent_points"], sampling=train["latent_sampling"])
    pos = torch.rand(3000, 2, generator=torch.Generator().manual_seed(0))
    data = latent(Data(pos=pos, x=torch.rand(3000, 1)))
    assert net.quadratic(data) is None


def test_ono_and_the_transolver_on_darcy_weight_each_node_by_its_cells():
    """Their quadratures (slice means, moments) stay the same on finer grids with the cells'
    weights; the Galerkin Transformer's grid path keeps the equal 1/n weights."""
    assert preset("darcy", "ono")["dataset"]["grid_weights"] == "cells"
    assert preset("darcy", "transolver")["dataset"]["grid_weights"] == "cells"
    assert preset("darcy", "transolver")["model"] == preset("darcy-mesh", "transolver")["model"]
    for model in ("pit", "galerkin", "fourier", "mlp"):
        assert "grid_weights" not in preset("darcy", model)["dataset"]


def test_on_elasticity_the_galerkin_and_fourier_encoders_gather_a_quantile_of_the_input_nodes():
    """Elasticity's presets: the encoder's cross attention a 1.6 % quantile field (the same area on
    a finer mesh), the decoder's the 16 nearest latent nodes, every attention weighted by the
    quadrature weights; Airfoil keeps k = 16 both ways, unweighted."""
    from meshop.models.registry import build_model

    for model in ("galerkin", "fourier"):
        chosen = preset("elasticity", model)["model"]
        net = build_model(model, in_channels=2, out_channels=1, pos_dim=2, **chosen)
        assert net.cross_down.field == {"quantile": 0.016}
        assert net.cross_up.field == {"k": 16}
        assert net.weighted
        airfoil = build_model(
            model, in_channels=4, out_channels=1, pos_dim=2, **preset("airfoil", model)["model"]
        )
        assert airfoil.cross_down.field == airfoil.cross_up.field == {"k": 16}
        assert not airfoil.weighted


def test_on_elasticity_pits_encoder_reads_a_quantile_of_the_input_nodes():
    """PiT's Elasticity preset: the encoder's field the paper's 2 % quantile (the same area on a
    2x finer mesh, about 4x the nodes; k nearest nodes would cover a quarter of it); the
    decoder's the 8 nearest of the latent mesh, whose size does not change with the mesh."""
    from meshop.models.registry import build_model

    chosen = preset("elasticity", "pit")["model"]
    net = build_model("pit", in_channels=2, out_channels=1, pos_dim=2, **chosen)
    assert net.encoder.field == {"quantile": 0.02}
    assert net.decoder.field == {"k": 8}

"""Checkpoint files: written beside their destination through a hidden temporary file, read only
as tensors and plain values, mapped to a device on loading, and rebuilt into the model they were
saved from (options added since, normalisers, a clear error when the weights do not fit)."""

import os
from pathlib import Path

import pytest
import torch

from meshop.data import add_latent_mesh, from_points
from meshop.errors import ConfigError, MeshReadError
from meshop.models.registry import build_model
from meshop.train import checkpoint
from meshop.train.normalized import NormalizedModel, PositionNormalizer


def test_save_atomic_writes_a_hidden_temporary_file_beside_the_target(tmp_path, monkeypatch):
    path = tmp_path / "runs" / "a" / "checkpoint.pt"  # neither folder exists yet
    renames = []
    replace = os.replace

    def recording_replace(source, target):
        renames.append((Path(source), Path(target)))
        replace(source, target)

    monkeypatch.setattr(os, "replace", recording_replace)
    checkpoint.save_atomic({"format": checkpoint.FORMAT, "epoch": 1}, path)
    [(source, target)] = renames
    assert target == path and source.parent == path.parent  # a rename within one folder
    assert source.name.startswith(".checkpoint.pt.")
    assert checkpoint.load(path)["epoch"] == 1


class Payload:
    """An arbitrary Python object: a pickle of it could run code when loaded."""


def test_load_reads_tensors_and_plain_values_only_and_maps_them(tmp_path):
    path = tmp_path / "checkpoint.pt"
    torch.save({"format": checkpoint.FORMAT, "version": 1, "extra": Payload()}, path)
    with pytest.raises(
        MeshReadError, match=r"cannot read checkpoint '.*checkpoint.pt': UnpicklingError: "
    ):
        checkpoint.load(path)
    checkpoint.save_atomic({"format": checkpoint.FORMAT, "w": torch.ones(2)}, path)
    assert checkpoint.load(tmp_path, map_location="meta")["w"].device.type == "meta"


def model_checkpoint(name: str, model, normalizers=None) -> dict:
    return {
        "model_name": name,
        "model_config": dict(model.config),
        "normalizers": {k: n.mean.numel() for k, n in (normalizers or {}).items()},
        "state_dict": NormalizedModel(model, normalizers).state_dict(),
        "path": "runs/x/checkpoint.pt",
    }


def test_a_checkpoint_saved_before_an_option_existed_is_rebuilt_as_it_was_trained():
    ono = dict(in_channels=1, out_channels=1, pos_dim=2, width=8, layers=1, heads=2)
    saved = model_checkpoint("ono", build_model("ono", **ono, orthonormalize="batch"))
    del saved["model_config"]["orthonormalize"]  # written before the option existed
    assert checkpoint.build_from_checkpoint(saved).model.config["orthonormalize"] == "batch"
    pit = dict(in_channels=1, out_channels=1, pos_dim=2, width=8, layers=1)
    saved = model_checkpoint("pit", build_model("pit", **pit))
    assert saved["model_config"]["weighted"] is True  # the default now
    del saved["model_config"]["weighted"]  # PiT weighted its attentions only later
    assert checkpoint.build_from_checkpoint(saved).model.config["weighted"] is False


def test_rebuilt_models_get_their_normaliser_kinds_and_misfits_are_named():
    mlp = dict(in_channels=2, out_channels=1, pos_dim=2, width=8, layers=2)
    normalizers = {"pos": PositionNormalizer(2), "y": PositionNormalizer(1)}
    saved = model_checkpoint("mlp", build_model("mlp", **mlp), normalizers)
    rebuilt = checkpoint.build_from_checkpoint(saved).normalizers
    assert type(rebuilt["pos"]) is PositionNormalizer and type(rebuilt["y"]) is not type(
        rebuilt["pos"]
    )
    saved["model_config"]["width"] = 4
    with pytest.raises(
        ConfigError,
        match=r"checkpoint 'runs/x/checkpoint.pt' does not fit model 'mlp' of this meshop "
        r"version: Error\(s\) in loading state_dict",
    ):
        checkpoint.build_from_checkpoint(saved)


def test_a_checkpoint_from_a_newer_format_asks_for_an_update(tmp_path):
    path = tmp_path / "checkpoint.pt"
    torch.save({"format": checkpoint.FORMAT, "version": checkpoint.VERSION + 1}, path)
    with pytest.raises(MeshReadError, match=r"has format version 3; this meshop reads up to 2"):
        checkpoint.load(path)


def test_load_records_the_file_it_read(tmp_path):
    checkpoint.save_atomic({"format": checkpoint.FORMAT, "w": torch.ones(2)}, tmp_path / "c.pt")
    assert checkpoint.load(tmp_path / "c.pt")["path"] == str(tmp_path / "c.pt")
    checkpoint.save_atomic({"format": checkpoint.FORMAT}, tmp_path / checkpoint.CHECKPOINT_NAME)
    loaded = checkpoint.load(tmp_path)  # a run directory: its checkpoint.pt
    assert loaded["path"] == str(tmp_path / checkpoint.CHECKPOINT_NAME)


class FakeCuda:
    """``torch.cuda``'s generator calls on a machine with ``available`` GPUs (none here)."""

    def __init__(self, available: bool):
        self.available, self.restored = available, []

    def is_available(self):
        return self.available

    def get_rng_state_all(self):
        if not self.available:
            raise AssertionError("CUDA generators read on a machine without CUDA")
        return [torch.arange(4, dtype=torch.uint8), torch.arange(4, 8, dtype=torch.uint8)]

    def set_rng_state_all(self, states):
        self.restored.append([bytes(s.tolist()) for s in states])


def test_the_cuda_generators_are_saved_and_restored_where_cuda_exists(monkeypatch):
    gpu = FakeCuda(available=True)
    monkeypatch.setattr(checkpoint.torch, "cuda", gpu)
    state = checkpoint.rng_state()
    assert state["cuda"] == [bytes([0, 1, 2, 3]), bytes([4, 5, 6, 7])]
    checkpoint.set_rng_state(state)
    assert gpu.restored == [[bytes([0, 1, 2, 3]), bytes([4, 5, 6, 7])]]
    checkpoint.set_rng_state({**state, "cuda": []})  # saved on a machine without CUDA
    assert len(gpu.restored) == 1
    cpu = FakeCuda(available=False)
    monkeypatch.setattr(checkpoint.torch, "cuda", cpu)
    assert checkpoint.rng_state()["cuda"] == []
    checkpoint.set_rng_state(state)  # saved with CUDA, restored without: the CPU states only
    assert cpu.restored == []


#: each model's arguments under the names of format version 1, and under today's names
FORMER_NAMES = {
    "pit": (
        dict(width=8, heads=1, blocks=2, decoder_blocks=1, encoder_k=4, decoder_k=4),
        dict(width=8, heads=1, layers=2, decoder_layers=1, encoder_k=4, decoder_k=4),
    ),
    "galerkin": (
        dict(
            channels=8, heads=2, layers=1, hidden_channels=12, width=6, modes=4, activation="relu"
        ),
        dict(width=8, heads=2, layers=1, mlp_ratio=1.5, spectral_width=6, modes=4, act="relu"),
    ),
    "mlp": (dict(hidden_channels=8, num_layers=3), dict(width=8, layers=3)),
}


@pytest.mark.parametrize("name", sorted(FORMER_NAMES))
def test_a_checkpoint_written_with_the_former_hyper_parameter_names_loads(tmp_path, name):
    former, current = FORMER_NAMES[name]
    sizes = dict(in_channels=3, out_channels=1, pos_dim=2)
    torch.manual_seed(0)
    model = build_model(name, **sizes, **current).eval()
    saved = model_checkpoint(name, model)
    config = {k: v for k, v in model.config.items() if k not in current}
    saved.update(format=checkpoint.FORMAT, version=1, model_config={**config, **former})
    checkpoint.save_atomic(saved, tmp_path / checkpoint.CHECKPOINT_NAME)
    loaded, ckpt = checkpoint.load_model(tmp_path)
    assert ckpt["version"] == checkpoint.VERSION and ckpt["model_config"] == model.config
    assert loaded.model.config == model.config
    data = from_points(torch.rand(30, 2), x=torch.randn(30, 1))
    add_latent_mesh(data, 10)
    with torch.no_grad():
        torch.testing.assert_close(loaded.model(data), model(data))


def test_a_fourier_transformer_saved_as_the_galerkin_model_loads_under_its_own_name(tmp_path):
    former, current = FORMER_NAMES["galerkin"]
    model = build_model("fourier", in_channels=3, out_channels=1, pos_dim=2, **current)
    saved = model_checkpoint("galerkin", model)  # the name version 1 gave it
    config = {k: v for k, v in model.config.items() if k not in current}
    saved.update(format=checkpoint.FORMAT, version=1, model_config={**config, **former})
    checkpoint.save_atomic(saved, tmp_path / checkpoint.CHECKPOINT_NAME)
    loaded, ckpt = checkpoint.load_model(tmp_path)
    assert ckpt["model_name"] == "fourier" and type(loaded.model) is type(model)


def test_a_training_grid_recorded_in_the_config_of_an_older_checkpoint_is_kept(tmp_path):
    """Before the training grid was saved in the state dict, the Galerkin Transformer wrote it
    into its config (``grid_shape``), from which the rebuilt model takes it."""
    sizes = dict(in_channels=3, out_channels=1, pos_dim=2, width=8, heads=2, layers=1, modes=4)
    model = build_model("galerkin", **sizes, grid_shape=(12, 10))
    saved = model_checkpoint("galerkin", model)
    saved["state_dict"] = {
        k: v for k, v in saved["state_dict"].items() if not k.endswith("_extra_state")
    }
    assert checkpoint.build_from_checkpoint(saved).model.grid_shape == (12, 10)
    model.grid_shape = (22, 22)  # recorded in training
    saved = model_checkpoint("galerkin", model)
    saved["model_config"]["grid_shape"] = None  # as recorded: only the state dict has it
    assert checkpoint.build_from_checkpoint(saved).model.grid_shape == (22, 22)

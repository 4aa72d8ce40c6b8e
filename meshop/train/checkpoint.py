"""Checkpoints: written atomically, loaded safely, enough to resume a run or rebuild its model."""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from meshop.errors import ConfigError, MeshReadError
from meshop.train.normalized import NormalizedModel, make_normalizer

FORMAT = "meshop-checkpoint"
#: 2: one name per hyper-parameter across the models (:data:`RENAMED`)
VERSION = 2
CHECKPOINT_NAME = "checkpoint.pt"
#: options added to a model after checkpoints of it were written: the value that reproduces what
#: those checkpoints were trained with, used when a saved config lacks the option
#: (ONO's eigenfunctions were whitened over the batch before ``orthonormalize`` existed; PiT
#: attended without quadrature weights before ``weighted``)
SAVED_BEFORE_OPTION = {
    "meshop.models.ono:ONO": {"orthonormalize": "batch"},
    "meshop.models.pit:PiT": {"weighted": False},
}
#: hyper-parameters renamed in format version 2, by model class: former name -> name. The Galerkin
#: Transformer's FFN width ``hidden_channels`` became ``mlp_ratio``, in units of ``width``
#: (:func:`upgrade`).
RENAMED = {
    "meshop.models.pit:PiT": {"blocks": "layers", "decoder_blocks": "decoder_layers"},
    "meshop.models.galerkin_transformer:GalerkinTransformer": {
        "channels": "width",
        "width": "spectral_width",
        "activation": "act",
    },
    "meshop.models.mlp_baseline:MLPBaseline": {"hidden_channels": "width", "num_layers": "layers"},
}


def save_atomic(obj: Any, path: str | os.PathLike) -> Path:
    """``torch.save`` to a temporary file beside ``path``, then rename it: a crash or a kill during
    the write leaves the previous checkpoint intact, never a truncated one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def rng_state() -> dict[str, Any]:
    """The state of every random generator the loop uses (torch CPU/CUDA, numpy, random), as plain
    Python values (bytes, ints), so that processes can exchange them and checkpoints load safely."""
    np_state = np.random.get_state()  # noqa: NPY002 (saved so that a resumed run continues it)
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []
    return {
        "torch": torch.get_rng_state().numpy().tobytes(),
        "cuda": [s.numpy().tobytes() for s in cuda],
        "numpy": (np_state[0], np_state[1].tolist(), *(np_state[2:])),
        "random": random.getstate(),
    }


def _byte_tensor(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore generators saved by :func:`rng_state`."""
    torch.set_rng_state(_byte_tensor(state["torch"]))
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([_byte_tensor(s) for s in state["cuda"]])
    name, keys, *rest = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), *rest))  # noqa: NPY002
    random.setstate(state["random"])


def load(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint (tensors and plain Python values only: ``weights_only`` loading).

    Raises:
        MeshReadError: the file is missing or is not a meshop checkpoint.
    """
    path = Path(path)
    if path.is_dir():
        path = path / CHECKPOINT_NAME
    if not path.is_file():
        raise MeshReadError(
            f"checkpoint '{path}' does not exist; give the checkpoint.pt of a run (runs/NAME/"
            f"{CHECKPOINT_NAME}) or the run directory"
        )
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # pickle, zip and torch errors of many types
        raise MeshReadError(
            f"cannot read checkpoint '{path}': {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise MeshReadError(f"'{path}' is not a meshop checkpoint (written by meshop train)")
    if ckpt.get("version", 0) > VERSION:
        raise MeshReadError(
            f"checkpoint '{path}' has format version {ckpt['version']}; this meshop reads up to "
            f"{VERSION}: update meshop"
        )
    ckpt["path"] = str(path)
    return upgrade(ckpt)


def upgrade(ckpt: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint of an earlier format version in the current one: the model's hyper-parameters
    under their names of version 2 (:data:`RENAMED`), a Fourier Transformer under its own name
    (it was the ``"galerkin"`` model with ``attention="fourier"``)."""
    if ckpt.get("version", 0) >= 2 or "model_name" not in ckpt:
        return ckpt
    from meshop.models.registry import model_class

    name, config = ckpt["model_name"], dict(ckpt["model_config"])
    for cls in model_class(name).__mro__:
        renamed = RENAMED.get(f"{cls.__module__}:{cls.__qualname__}", {})
        config = {renamed.get(key, key): value for key, value in config.items()}
    hidden = config.pop("hidden_channels", None)  # the Galerkin Transformer's FFN width
    if hidden is not None:
        ratio = hidden / config["width"]
        config["mlp_ratio"] = int(ratio) if ratio.is_integer() else ratio
    if name == "galerkin" and config.get("attention") == "fourier":
        name = "fourier"
    return {**ckpt, "version": VERSION, "model_name": name, "model_config": config}


def build_from_checkpoint(ckpt: dict[str, Any]) -> NormalizedModel:
    """The trained model of a checkpoint, in eval mode, on the CPU."""
    from meshop.models.registry import build_model, model_class

    cls = model_class(ckpt["model_name"])
    older = SAVED_BEFORE_OPTION.get(f"{cls.__module__}:{cls.__qualname__}", {})
    model = build_model(ckpt["model_name"], **{**older, **ckpt["model_config"]})
    normalizers = {key: make_normalizer(key, n) for key, n in ckpt["normalizers"].items()}
    wrapped = NormalizedModel(model, normalizers)
    try:
        wrapped.load_state_dict(ckpt["state_dict"])
    except RuntimeError as exc:
        raise ConfigError(
            f"checkpoint '{ckpt.get('path')}' does not fit model '{ckpt['model_name']}' of this "
            f"meshop version: {str(exc).splitlines()[0]}"
        ) from exc
    return wrapped.eval()


def load_model(path: str | os.PathLike) -> tuple[NormalizedModel, dict[str, Any]]:
    """``(model, checkpoint)``: the trained model of a run, ready for ``model(data)``."""
    ckpt = load(path)
    return build_from_checkpoint(ckpt), ckpt

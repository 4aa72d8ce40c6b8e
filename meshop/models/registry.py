"""Model names used by the ``meshop`` command and by checkpoints, imported lazily.

A registered name maps to ``"module:Class"`` and a description. Modules are imported only when a
model is built, so one missing or broken model does not affect the others (and ``meshop --help``
imports none). Any other model class can be named by its import path ``"package.module:Class"``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from meshop._registry import import_class, unknown_name
from meshop.errors import ConfigError

if TYPE_CHECKING:
    from meshop.models.base import Operator


@dataclass(frozen=True)
class ModelEntry:
    """A registered model: where its class lives (``"module:Class"``) and what it is, for
    ``meshop models``. The class itself carries the rest (:class:`meshop.models.Operator`'s
    ``title`` and ``uses_latent_mesh``)."""

    target: str
    description: str


MODELS: dict[str, ModelEntry] = {
    "pit": ModelEntry(
        "meshop.models.pit:PiT",
        "Position-induced Transformer (position-attention, latent mesh)",
    ),
    "galerkin": ModelEntry(
        "meshop.models.galerkin_transformer:GalerkinTransformer",
        "Galerkin Transformer (softmax-free linear attention)",
    ),
    "fourier": ModelEntry(
        "meshop.models.galerkin_transformer:FourierTransformer",
        "Fourier Transformer (softmax-free Fourier-type attention)",
    ),
    "ono": ModelEntry(
        "meshop.models.ono:ONO",
        "Orthogonal Neural Operator (orthogonal attention, two streams)",
    ),
    "transolver": ModelEntry(
        "meshop.models.transolver:Transolver",
        "Transolver (physics-attention among learned slices of the mesh)",
    ),
    "mlp": ModelEntry(
        "meshop.models.mlp_baseline:MLPBaseline",
        "pointwise MLP on node features (baseline)",
    ),
}


def model_entry(name: str) -> ModelEntry:
    """The registry entry of ``name`` (ConfigError with suggestions when unknown)."""
    if name not in MODELS:
        raise unknown_name("model", name, sorted(MODELS))
    return MODELS[name]


def model_class(name: str) -> type[Operator]:
    """The class behind a registered name or a ``"module:Class"`` path."""
    if ":" in name:
        return import_class(name, "model class")
    return import_class(model_entry(name).target, f"model '{name}': its class")


def build_model(name: str, **kwargs: Any) -> Operator:
    """Build a model by name: ``build_model("pit", in_channels=11, out_channels=1, pos_dim=2)``.

    Bad keyword arguments raise :class:`ConfigError` naming the model.
    """
    cls = model_class(name)
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"cannot build model '{name}': {exc}") from exc


def name_of(cls: type) -> str:
    """The registered name of a model class, else its import path ``"module:Class"``."""
    target = f"{cls.__module__}:{cls.__qualname__}"
    return next((name for name, entry in MODELS.items() if entry.target == target), target)

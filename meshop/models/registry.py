"""Model names used by the ``meshop`` command and by checkpoints, imported lazily.

A registered name maps to ``"module:Class"`` plus keyword defaults that select a variant (the
Fourier Transformer is the Galerkin Transformer's class with Fourier attention). Modules are
imported only when a model is built, so one missing or broken model does not affect the others.
Any other model class can be named by its import path ``"package.module:Class"``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torch import nn

from meshop._registry import import_class, unknown_name
from meshop.errors import ConfigError


@dataclass(frozen=True)
class ModelEntry:
    """A registered model: where its class lives and what it is."""

    target: str
    description: str
    defaults: dict[str, Any] = field(default_factory=dict)
    #: the model attends through a latent mesh (``data.latent_pos``)
    uses_latent_mesh: bool = False
    #: the model's name in tables and figures
    title: str = ""


MODELS: dict[str, ModelEntry] = {
    "pit": ModelEntry(
        "meshop.models.pit:PiT",
        "Position-induced Transformer (position-attention, latent mesh)",
        uses_latent_mesh=True,
        title="PiT",
    ),
    "galerkin": ModelEntry(
        "meshop.models.galerkin_transformer:GalerkinTransformer",
        "Galerkin Transformer (softmax-free linear attention)",
        title="Galerkin Transformer",
    ),
    "fourier": ModelEntry(
        "meshop.models.galerkin_transformer:GalerkinTransformer",
        "Fourier Transformer (softmax-free Fourier-type attention)",
        defaults={"attention": "fourier"},
        title="Fourier Transformer",
    ),
    "ono": ModelEntry(
        "meshop.models.ono:ONO",
        "Orthogonal Neural Operator (orthogonal attention, two streams)",
        title="ONO",
    ),
    "transolver": ModelEntry(
        "meshop.models.transolver:Transolver",
        "Transolver (physics-attention among learned slices of the mesh)",
        title="Transolver",
    ),
    "mlp": ModelEntry(
        "meshop.models.mlp_baseline:MLPBaseline",
        "pointwise MLP on node features (baseline)",
        title="MLP baseline",
    ),
}


def model_entry(name: str) -> ModelEntry:
    """The registry entry of ``name`` (ConfigError with suggestions when unknown)."""
    if name not in MODELS:
        raise unknown_name("model", name, sorted(MODELS))
    return MODELS[name]


def model_class(name: str) -> type[nn.Module]:
    """The class behind a registered name or a ``"module:Class"`` path."""
    if ":" in name:
        return import_class(name, "model class")
    return import_class(model_entry(name).target, f"model '{name}': its class")


def build_model(name: str, **kwargs: Any) -> nn.Module:
    """Build a model by name: ``build_model("pit", in_channels=11, out_channels=1, pos_dim=2)``.

    The entry's variant defaults come first and ``kwargs`` override them. Bad keyword arguments
    raise :class:`ConfigError` naming the model.
    """
    cls = model_class(name)
    defaults = {} if ":" in name else model_entry(name).defaults
    try:
        return cls(**{**defaults, **kwargs})
    except TypeError as exc:
        raise ConfigError(f"cannot build model '{name}': {exc}") from exc


def name_of(cls: type) -> str:
    """The registered name of a model class (the first entry without variant defaults), else its
    import path ``"module:Class"``."""
    target = f"{cls.__module__}:{cls.__qualname__}"
    for name, entry in MODELS.items():
        if entry.target == target and not entry.defaults:
            return name
    return target

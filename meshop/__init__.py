"""meshop: neural operators on arbitrary meshes and point clouds.

PiT position-attention, Galerkin/Fourier Transformers and ONO orthogonal attention in one
mesh-agnostic frame built on PyTorch Geometric.

Importing ``meshop`` (and ``meshop.cli``) imports neither torch nor PyG, so that ``meshop --help``
is instant: the names below that need them (``read_mesh``, ``GaussianNormalizer``, ...) are
imported from :mod:`meshop.data` the first time they are used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from meshop.errors import ConfigError, FieldError, MeshError, MeshopError, MeshReadError

if TYPE_CHECKING:
    from meshop.data import (
        GaussianNormalizer,
        add_latent_mesh,
        from_meshio,
        from_points,
        make_loader,
        read_mesh,
        set_query_points,
        uniform_grid,
        write_mesh,
    )

__version__ = "0.1.0"

#: the names of :mod:`meshop.data` that ``meshop`` gives, imported when first used
_FROM_DATA = (
    "GaussianNormalizer",
    "add_latent_mesh",
    "from_meshio",
    "from_points",
    "make_loader",
    "read_mesh",
    "set_query_points",
    "uniform_grid",
    "write_mesh",
)


def __getattr__(name: str) -> object:
    import importlib

    if name in _FROM_DATA:  # meshop.data imports PyG through meshop._pyg, its warnings filtered
        value = getattr(importlib.import_module("meshop.data"), name)
        globals()[name] = value
        return value
    if name in ("data", "_pyg"):  # submodules, as attributes without their own import
        return importlib.import_module(f"meshop.{name}")
    raise AttributeError(f"module 'meshop' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted({*globals(), *_FROM_DATA})


__all__ = [
    "ConfigError",
    "FieldError",
    "GaussianNormalizer",
    "MeshError",
    "MeshReadError",
    "MeshopError",
    "__version__",
    "add_latent_mesh",
    "from_meshio",
    "from_points",
    "make_loader",
    "read_mesh",
    "set_query_points",
    "uniform_grid",
    "write_mesh",
]

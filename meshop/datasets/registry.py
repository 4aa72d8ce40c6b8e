"""Dataset names used by the ``meshop`` command and by checkpoints, imported lazily.

Every dataset class is built the same way: ``cls(split="train" | "test", **kwargs)`` with the
command's ``--data-dir`` passed as the entry's ``data_dir_arg``: ``root`` (the data root of
generated datasets, the folder of a :class:`MeshFolder`) or ``raw_dir`` (the folder holding the
published files of the ``*-files`` datasets). Modules are imported only when a dataset is built,
so one missing or broken dataset does not affect the others.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

from meshop._registry import import_class, unknown_name
from meshop.arguments import check_arguments
from meshop.errors import ConfigError


@dataclass(frozen=True)
class DatasetEntry:
    """A registered dataset: where its class lives, what it is, and the models that suit it."""

    target: str
    description: str
    models: tuple[str, ...] = ()
    #: the keyword argument that receives ``--data-dir``
    data_dir_arg: str = "root"


DATASETS: dict[str, DatasetEntry] = {
    "elasticity": DatasetEntry(
        "meshop.datasets.elasticity:Elasticity",
        "von Mises stress in an elastic cell with a random cavity (FEM, ~1000-node meshes; "
        "refinement=1, 2: finer)",
        ("pit", "ono", "galerkin", "fourier", "transolver", "mlp"),
    ),
    "airfoil": DatasetEntry(
        "meshop.datasets.airfoil:Airfoil",
        "pressure coefficient and Mach number around random NACA airfoils (O-meshes)",
        ("pit", "ono", "galerkin", "fourier", "transolver", "mlp"),
    ),
    "darcy-mesh": DatasetEntry(
        "meshop.datasets.darcy_mesh:DarcyMesh",
        "Darcy flow on random domains with holes (FEM, Triangle meshes; refinement=1, 2: finer)",
        ("pit", "ono", "galerkin", "fourier", "transolver", "mlp"),
    ),
    "darcy": DatasetEntry(
        "meshop.datasets.darcy:Darcy",
        "2D Darcy flow on a uniform grid: permeability -> pressure",
        ("galerkin", "fourier", "pit", "ono", "transolver", "mlp"),
    ),
    "burgers": DatasetEntry(
        "meshop.datasets.burgers:Burgers",
        "1D viscous Burgers on a periodic grid: u(., 0) -> u(., 1)",
        ("galerkin", "fourier", "pit", "ono", "transolver", "mlp"),
    ),
    "elasticity-files": DatasetEntry(
        "meshop.datasets.standard:GeoFNOElasticity",
        "the Geo-FNO Elasticity files (Random_UnitCell_*.npy in --data-dir)",
        ("pit", "ono", "galerkin", "fourier", "transolver", "mlp"),
        "raw_dir",
    ),
    "airfoil-files": DatasetEntry(
        "meshop.datasets.standard:GeoFNOAirfoil",
        "the Geo-FNO NACA airfoil files (NACA_Cylinder_*.npy in --data-dir)",
        ("pit", "ono", "galerkin", "fourier", "transolver", "mlp"),
        "raw_dir",
    ),
    "darcy-files": DatasetEntry(
        "meshop.datasets.standard:FNODarcy",
        "the FNO Darcy files (piececonst_r421_N1024_smooth*.mat in --data-dir)",
        ("galerkin", "fourier", "pit", "ono", "transolver", "mlp"),
        "raw_dir",
    ),
    "burgers-files": DatasetEntry(
        "meshop.datasets.standard:FNOBurgers",
        "the FNO Burgers file (burgers_data_R10.mat in --data-dir)",
        ("galerkin", "fourier", "pit", "ono", "transolver", "mlp"),
        "raw_dir",
    ),
    "folder": DatasetEntry(
        "meshop.datasets.mesh_folder:MeshFolder",
        "your own meshes: every file of a folder (--data-dir) is a sample; its fields by "
        "--dataset-arg 'inputs=[...]' and 'targets=[...]'",
        ("pit", "ono", "galerkin", "fourier", "transolver", "mlp"),
    ),
}


def dataset_entry(name: str) -> DatasetEntry:
    """The registry entry of ``name`` (ConfigError with suggestions when unknown)."""
    if name not in DATASETS:
        raise unknown_name("dataset", name, sorted(DATASETS))
    return DATASETS[name]


def dataset_class(name: str) -> type:
    """The dataset class behind a registered name or a ``"module:Class"`` path."""
    if ":" in name:
        return import_class(name, "dataset class")
    return import_class(dataset_entry(name).target, f"dataset '{name}': its class")


def resolve_dataset(
    name: str, data_dir: str | None = None, options: dict | None = None, fixed: dict | None = None
) -> tuple[type, dict[str, Any]]:
    """The class of dataset ``name`` and its keyword arguments: ``options`` checked against its
    signature (:func:`meshop.arguments.check_arguments`; ``fixed``: other parameters the caller
    sets, each with what to do instead), ``data_dir`` as the entry's ``data_dir_arg``. Raises
    :class:`ConfigError` for an unknown name, a bad option, or a folder needed and not given."""
    cls = dataset_class(name)
    dir_arg = "root" if ":" in name else dataset_entry(name).data_dir_arg
    fixed = {**(fixed or {}), dir_arg: "give the folder with --data-dir"}
    check_arguments(cls, options or {}, f"dataset '{name}'", fixed)
    folder = inspect.signature(cls).parameters.get(dir_arg)
    if data_dir is None and folder is not None and folder.default is folder.empty:
        raise ConfigError(f"dataset '{name}' needs a folder: give --data-dir")
    return cls, {**(options or {}), **({dir_arg: data_dir} if data_dir is not None else {})}


def build_dataset(name: str, split: str, data_dir: str | None = None, /, **kwargs: Any):
    """``cls(split=split, **kwargs)`` with the class and arguments of :func:`resolve_dataset`
    (``data_dir`` as the entry's ``data_dir_arg``). A ``split`` among ``kwargs`` (a dataset
    option, such as ``meshop evaluate --dataset-arg split='"all"'``) replaces ``split``."""
    cls, kwargs = resolve_dataset(name, data_dir, kwargs)
    split = kwargs.pop("split", split)
    return cls(split=split, **kwargs)

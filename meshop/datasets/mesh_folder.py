"""MeshFolder: a folder of mesh files, one sample per file (bring your own FEM/CFD results)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from meshop._pyg import Data
from meshop.data import field_layout, from_meshio, read_meshio
from meshop.errors import ConfigError, FieldError, MeshError, MeshReadError

try:
    from torch_geometric.data import InMemoryDataset
except ImportError:  # pragma: no cover
    raise

SPLITS = ("train", "test", "all")

#: the sample meshes of a checkout of the repository (``datasets/meshes``; see its README)
SAMPLE_MESHES = Path(__file__).resolve().parents[2] / "datasets" / "meshes"

#: bumped whenever the cached files change, so that old caches are rebuilt
CACHE_FORMAT = 2


class MeshFolder(InMemoryDataset):
    """Every mesh file in a folder (any format meshio reads) as one sample ``Data``.

    Each file becomes a domain through :func:`meshop.data.read_mesh`: ``pos``, quadrature ``weight``
    from its cells, connectivity, ``x`` = the ``inputs`` point fields and ``y`` = the ``targets``
    point fields (stacked in the order given), ``source`` = the file path; ``input_fields`` and
    ``target_fields`` record each field's name and components (``[("normals", 3), ...]``), which
    checkpoints keep so that ``meshop predict`` reads and writes the same fields. Files are read once and
    cached under ``<root>/processed/<hash>/``; the cache is rebuilt when a file is added, removed or
    modified, or when the fields asked for change.

    The split is a seeded random permutation of the sorted file names: the test split holds
    ``round(test_fraction * n)`` files, the train split the rest, ``"all"`` every file.

    Args:
        root: the folder holding the mesh files.
        inputs: point field name(s) for ``x`` (none: a coordinates-only operator).
        targets: point field name(s) for ``y``.
        pattern: glob pattern of the files in ``root`` (``"**/*.vtu"`` also searches subfolders).
        split: ``"train"``, ``"test"`` or ``"all"``.
        test_fraction: fraction of the files in the test split.
        seed: seed of the train/test permutation.
        cell_data_to_nodes: also accept cell fields, averaged to the nodes by cell measure.
        groups: ``"features"``: the files' named groups (gmsh physical groups, cell sets) as 0/1
            input columns ``group:<name>``; ``"masks"``: as ``group_<name>`` node masks (see
            :func:`meshop.data.from_meshio`).
        transform: PyG transform applied on access.
        progress: show a tqdm progress bar while reading.

    Raises:
        MeshReadError: no such folder, no file matches ``pattern``, or a file is unreadable.
        FieldError: a file lacks a field (the message names the file and the fields it has) or a
            field has a different number of components in different files.
        MeshError: files of different spatial dimensions.

    Example:
        >>> train = MeshFolder("my_runs", inputs=["load"], targets=["sigma_vm"])  # doctest: +SKIP
    """

    def __init__(
        self,
        root: str | os.PathLike,
        inputs: str | Sequence[str] | None = None,
        targets: str | Sequence[str] | None = None,
        pattern: str = "*.vtu",
        split: str = "train",
        test_fraction: float = 0.2,
        seed: int = 0,
        cell_data_to_nodes: bool = False,
        groups: str | None = None,
        transform=None,
        progress: bool = True,
    ):
        if split not in SPLITS:
            raise ConfigError(f"split must be one of {SPLITS}, got '{split}'")
        if not 0.0 <= test_fraction <= 1.0:
            raise ConfigError(f"test_fraction must be in [0, 1], got {test_fraction}")
        folder = Path(root)
        if not folder.is_dir():
            raise MeshReadError(
                f"mesh folder '{folder}' does not exist (working directory: {Path.cwd()})"
            )
        self.files = sorted(p for p in folder.glob(pattern) if p.is_file())
        if not self.files:
            found = sorted(p.name for p in folder.iterdir() if p.is_file())[:10]
            raise MeshReadError(
                f"no file in '{folder}' matches pattern '{pattern}'; the folder holds "
                f"{found or 'no files'} (pass pattern='*.msh', '**/*.vtk', ... to pick other files)"
            )
        self.input_names = [inputs] if isinstance(inputs, str) else list(inputs or [])
        self.target_names = [targets] if isinstance(targets, str) else list(targets or [])
        self.cell_data_to_nodes = bool(cell_data_to_nodes)
        self.groups = groups
        self.split, self.test_fraction, self.seed = split, float(test_fraction), int(seed)
        self.progress = progress
        key = {
            "files": [
                [str(p.relative_to(folder)), p.stat().st_size, p.stat().st_mtime_ns]
                for p in self.files
            ],
            "inputs": self.input_names,
            "targets": self.target_names,
            "cell_data_to_nodes": self.cell_data_to_nodes,
            "groups": self.groups,
            "format": CACHE_FORMAT,
        }
        self.cache_key = hashlib.sha1(json.dumps(key).encode()).hexdigest()[:12]
        super().__init__(str(folder), transform=transform, log=False)
        self.load(self.processed_paths[0])
        layout = json.loads(Path(self.processed_paths[1]).read_text())
        #: ``[(name, components), ...]`` of the input and target fields (``x`` and ``y`` columns)
        self.input_fields = [tuple(f) for f in layout["inputs"]]
        self.target_fields = [tuple(f) for f in layout["targets"]]
        self._indices = self.split_indices(len(self.files), split, self.test_fraction, self.seed)

    @staticmethod
    def split_indices(n: int, split: str, test_fraction: float, seed: int) -> list[int]:
        """Sample indices of ``split`` among ``n`` files (sorted by name)."""
        order = np.random.default_rng(seed).permutation(n)
        num_test = round(test_fraction * n)
        chosen = {"train": order[num_test:], "test": order[:num_test], "all": np.arange(n)}[split]
        return sorted(int(i) for i in chosen)

    @property
    def raw_file_names(self) -> list[str]:
        return []

    @property
    def processed_dir(self) -> str:
        return os.path.join(self.root, "processed", self.cache_key)

    @property
    def processed_file_names(self) -> list[str]:
        return ["samples.pt", "fields.json"]

    def process(self) -> None:
        samples, layout = [], None
        for path in tqdm(
            self.files, desc=f"reading {self.root}", disable=not self.progress or None
        ):
            mesh = read_meshio(path)
            options = {"cell_data_to_nodes": self.cell_data_to_nodes, "source": str(path)}
            samples.append(
                from_meshio(
                    mesh, self.input_names, self.target_names, groups=self.groups, **options
                )
            )
            if layout is None:
                layout = {
                    "inputs": field_layout(mesh, self.input_names, groups=self.groups, **options),
                    "targets": field_layout(mesh, self.target_names, **options),
                }
            _check_consistent(samples, self.files, mesh, layout, options)
        for i, data in enumerate(samples):
            data.sample_id = torch.tensor([i])
        self.save(samples, self.processed_paths[0])
        Path(self.processed_paths[1]).write_text(json.dumps(layout))

    def __repr__(self) -> str:
        return f"MeshFolder({self.split}, {len(self)} samples, root='{self.root}')"


def _check_consistent(
    samples: list[Data], files: list[Path], mesh, layout: dict, options: dict
) -> None:
    """The last sample has the spatial dimension of the first and its fields have the same
    number of components (``mesh`` is the last sample's file)."""
    first, data, path = files[0].name, samples[-1], files[len(samples) - 1]
    if data.pos.shape[1] != samples[0].pos.shape[1]:
        raise MeshError(
            f"mixed dimensions: '{path.name}' is {data.pos.shape[1]}D but '{first}' is "
            f"{samples[0].pos.shape[1]}D; keep one dimension per folder (or narrow `pattern`)"
        )
    for key, role in (("x", "inputs"), ("y", "targets")):
        if key in data and data[key].shape[1] != samples[0][key].shape[1]:
            names = [n for n, _ in layout[role]]
            here = dict(field_layout(mesh, names, **options))
            name, k = next((n, k) for n, k in layout[role] if here[n] != k)
            raise FieldError(
                f"field '{name}' has {here[name]} components in '{path.name}' but {k} in "
                f"'{first}'; a field needs the same number of components in every file"
            )

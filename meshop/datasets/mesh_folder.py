"""MeshFolder: a folder of mesh files, one sample per file (bring your own FEM/CFD results)."""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from meshop._pyg import Data
from meshop.data import field_layout, from_meshio, read_meshio
from meshop.errors import ConfigError, FieldError, MeshError, MeshReadError

try:
    from torch_geometric.data import Dataset
except ImportError:  # pragma: no cover
    raise

SPLITS = ("train", "test", "all")

#: the sample meshes of a checkout of the repository (``datasets/meshes``; see its README)
SAMPLE_MESHES = Path(__file__).resolve().parents[2] / "datasets" / "meshes"


class MeshFolder(Dataset):
    """Every mesh file in a folder (any format meshio reads) as one sample ``Data``, read lazily.

    Sample ``i`` is its file, read when it is accessed (``dataset[i]``, a DataLoader, a DataLoader
    worker) through :func:`meshop.data.read_mesh`: ``pos``, quadrature ``weight`` from its cells,
    connectivity, ``x`` = the ``inputs`` point fields and ``y`` = the ``targets`` point fields
    (stacked in the order given), ``source`` = the file path, ``sample_id`` = its index in the
    sorted file list. Nothing but the file names and the first file is read when the dataset is
    built, and nothing is kept after an access unless ``cache_size`` says so, so a folder may be far
    larger than memory: training holds the samples of the batches in flight, not the folder.
    ``input_fields`` and ``target_fields`` record each field's name and components
    (``[("normals", 3), ...]``, from the first file), which checkpoints keep so that
    ``meshop predict`` reads and writes the same fields. Files are read afresh on every access, so
    a modified file is seen at once.

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
        cache_size: how many read samples to keep in memory (least recently used first out;
            0: none, every access reads its file). Each DataLoader worker keeps its own cache.
        transform: PyG transform applied on access.
        progress: accepted for the signature the other datasets share; nothing is read up front,
            so there is no progress bar to show.

    Raises:
        MeshReadError: no such folder, no file matches ``pattern``, or a file is unreadable (when
            it is accessed).
        FieldError: a file lacks a field (the message names the file and the fields it has) or a
            field has a different number of components than in the first file (when the file is
            accessed; the first file is checked when the dataset is built).
        MeshError: a file of another spatial dimension than the first file (when accessed).

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
        cache_size: int = 0,
        transform=None,
        progress: bool = True,
    ):
        if split not in SPLITS:
            raise ConfigError(f"split must be one of {SPLITS}, got '{split}'")
        if not 0.0 <= test_fraction <= 1.0:
            raise ConfigError(f"test_fraction must be in [0, 1], got {test_fraction}")
        if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 0:
            raise ConfigError(
                f"cache_size must be a whole number of samples >= 0, got {cache_size!r}"
            )
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
        self.cache_size = cache_size
        self.progress = progress
        self._cache: OrderedDict[int, Data] = OrderedDict()
        super().__init__(str(folder), transform=transform, log=False)
        # the first file fixes the fields' components and the spatial dimension of every sample
        first = read_meshio(self.files[0])
        options = self._options(self.files[0])
        #: ``[(name, components), ...]`` of the input and target fields (``x`` and ``y`` columns)
        self.input_fields = [
            tuple(f) for f in field_layout(first, self.input_names, groups=groups, **options)
        ]
        self.target_fields = [tuple(f) for f in field_layout(first, self.target_names, **options)]
        #: the spatial dimension of every sample (that of the first file)
        self.pos_dim = int(self._convert(first, 0).pos.shape[1])
        self._indices = self.split_indices(len(self.files), split, self.test_fraction, self.seed)

    @staticmethod
    def split_indices(n: int, split: str, test_fraction: float, seed: int) -> list[int]:
        """Sample indices of ``split`` among ``n`` files (sorted by name)."""
        order = np.random.default_rng(seed).permutation(n)
        num_test = round(test_fraction * n)
        chosen = {"train": order[num_test:], "test": order[:num_test], "all": np.arange(n)}[split]
        return sorted(int(i) for i in chosen)

    def _options(self, path: Path) -> dict:
        return {"cell_data_to_nodes": self.cell_data_to_nodes, "source": str(path)}

    def _convert(self, mesh, index: int) -> Data:
        path = self.files[index]
        data = from_meshio(
            mesh,
            self.input_names,
            self.target_names,
            groups=self.groups,
            **self._options(path),
        )
        data.sample_id = torch.tensor([index])
        return data

    def len(self) -> int:
        return len(self.files)

    def get(self, idx: int) -> Data:
        """Sample ``idx`` of the sorted file list (its file read now unless cached)."""
        if idx in self._cache:
            self._cache.move_to_end(idx)
            return self._cache[idx]
        path = self.files[idx]
        mesh = read_meshio(path)
        data = self._convert(mesh, idx)
        _check_consistent(data, path, self.files[0], mesh, self, self._options(path))
        if self.cache_size:
            self._cache[idx] = data
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return data

    def __repr__(self) -> str:
        return f"MeshFolder({self.split}, {len(self)} samples, root='{self.root}')"


def _check_consistent(
    data: Data, path: Path, first: Path, mesh, folder: MeshFolder, options: dict
) -> None:
    """``data`` (read from ``mesh``, the file ``path``) has the spatial dimension of the first
    file and its fields have the same components."""
    if data.pos.shape[1] != folder.pos_dim:
        raise MeshError(
            f"mixed dimensions: '{path.name}' is {data.pos.shape[1]}D but '{first.name}' is "
            f"{folder.pos_dim}D; keep one dimension per folder (or narrow `pattern`)"
        )
    for key, role, names, groups in (
        ("x", "input", folder.input_names, folder.groups),
        ("y", "target", folder.target_names, None),
    ):
        expected = getattr(folder, f"{role}_fields")
        width = int(data[key].shape[1]) if key in data else 0
        if width == sum(k for _, k in expected):
            continue
        here = [tuple(f) for f in field_layout(mesh, names, groups=groups, **options)]
        wanted = dict(expected)
        for name, k in here:
            if name in wanted and wanted[name] != k:
                raise FieldError(
                    f"field '{name}' has {k} components in '{path.name}' but {wanted[name]} in "
                    f"'{first.name}'; a field needs the same number of components in every file"
                )
        raise FieldError(
            f"the {role} columns of '{path.name}' are {here} but those of '{first.name}' are "
            f"{expected}; every file needs the same fields and groups"
        )

"""Loaders of the standard benchmark files, in their published layouts.

- :class:`GeoFNOElasticity` (Geo-FNO, Li et al. 2022, folder ``elasticity/Meshes``):
  ``Random_UnitCell_XY_10.npy`` [N, 2, S], ``Random_UnitCell_sigma_10.npy`` [N, S],
  ``Random_UnitCell_rr_10.npy`` [42, S];
- :class:`GeoFNOAirfoil` (Geo-FNO, folder ``naca``): ``NACA_Cylinder_X.npy`` and
  ``NACA_Cylinder_Y.npy`` [S, 221, 51], ``NACA_Cylinder_Q.npy`` [S, 5, 221, 51];
- :class:`FNODarcy` (FNO, Li et al. 2021): ``piececonst_r421_N1024_smooth1.mat`` (train) and
  ``piececonst_r421_N1024_smooth2.mat`` (test) with ``coeff`` and ``sol`` [1024, 421, 421];
- :class:`FNOBurgers` (FNO): ``burgers_data_R10.mat`` with ``a`` and ``u`` [2048, 8192].

The shapes are read from the files: files with fewer samples or nodes in the same layout load too.
Every sample becomes a ``Data`` of the same form as the generated datasets (``pos``, ``y``,
``weight``, and ``x``/``params``/cells/``grid_shape`` where the data has them); the converted
samples are cached under ``<data root>/<name>/processed/<hash>/`` (see :class:`StandardFiles`).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import h5py
import numpy as np
import scipy.io
import torch

from meshop._pyg import Data
from meshop.data import cell_measures, from_points, lumped_mass_weights, uniform_grid
from meshop.datasets.base import data_root
from meshop.errors import ConfigError, FieldError, MeshReadError

try:
    from torch_geometric.data import InMemoryDataset
except ImportError:  # pragma: no cover
    raise

SPLITS = ("train", "test")
GEO_FNO_URL = "https://drive.google.com/drive/folders/1YBuaOTdOSr_qzaow-G-iwvbUI7fiUzu8"
FNO_URL = "https://drive.google.com/drive/folders/1UnbQh2WWc6knEHbLn-ZaXrKUZhp7pjt-"


class StandardFiles(InMemoryDataset):
    """Base class: a published file set, converted once to ``Data`` samples and cached.

    The files are read from ``raw_dir``, default ``<root>/<name>/raw``, where ``root`` is the data
    root (``$MESHOP_DATA`` or the repository's ``datasets/``); ``raw_dir`` may be read-only, since
    the converted samples are cached in ``<root>/<name>/processed/<hash>/``. The hash covers the
    options, the folder and the files' sizes and modification times. Subclasses set ``name``,
    ``files`` (the published file names) and ``origin`` (where to get them), and implement
    :meth:`read`, which returns the train and test samples.

    Args:
        root: data root (default ``$MESHOP_DATA`` or the repository's ``datasets/``).
        split: ``"train"`` or ``"test"``.
        raw_dir: the folder holding the published files (default ``<root>/<name>/raw``).
        transform: PyG transform applied on access.
        **config: the subclass's options (``num_train``, ``num_test``, ``subsample``).
    """

    name: str = "standard"
    files: tuple[str, ...] = ()
    origin: str = ""

    def __init__(
        self,
        root: str | os.PathLike | None = None,
        split: str = "train",
        raw_dir: str | os.PathLike | None = None,
        transform=None,
        **config,
    ):
        if split not in SPLITS:
            raise ConfigError(f"split must be one of {SPLITS}, got '{split}'")
        if min(v for k, v in config.items() if k.startswith("num_")) < 1:
            raise ConfigError(f"num_train and num_test must be at least 1, got {config}")
        self.split, self.config = split, dict(config)
        folder = data_root(root) / self.name
        self.files_dir = Path(raw_dir) if raw_dir is not None else folder / "raw"
        stats = [
            [f, p.stat().st_size, p.stat().st_mtime_ns] if p.is_file() else None
            for f, p in ((f, self.files_dir / f) for f in self.files)
        ]
        key = json.dumps([self.config, str(self.files_dir.resolve()), stats], sort_keys=True)
        self.config_hash = hashlib.sha1(key.encode()).hexdigest()[:12]
        super().__init__(str(folder), transform=transform, log=False)
        self.load(self.processed_paths[SPLITS.index(split)])

    @property
    def raw_dir(self) -> str:
        return str(self.files_dir)

    @property
    def raw_file_names(self) -> list[str]:
        return list(self.files)

    @property
    def processed_dir(self) -> str:
        return os.path.join(self.root, "processed", self.config_hash)

    @property
    def processed_file_names(self) -> list[str]:
        return [f"{s}.pt" for s in SPLITS]

    def download(self) -> None:
        missing = [f for f in self.files if not (self.files_dir / f).is_file()]
        raise MeshReadError(
            f"{type(self).__name__} needs the published files {missing} in '{self.files_dir}' "
            f"(missing there). Download them from {self.origin} and put them in that folder, or "
            "pass raw_dir='<folder that holds them>'."
        )

    def read(self) -> tuple[list[Data], list[Data]]:
        """The train and test samples from the files in ``raw_dir``."""
        raise NotImplementedError

    def process(self) -> None:
        for samples, path in zip(self.read(), self.processed_paths):
            self.save(samples, path)

    def raw(self, name: str) -> Path:
        return self.files_dir / name

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.split}, {len(self)} samples, raw_dir='{self.files_dir}')"
        )


def _load_npy(path: Path, ndim: int, layout: str) -> np.ndarray:
    array = np.load(path)
    if array.ndim != ndim:
        raise FieldError(f"'{path}' has shape {array.shape}; the published layout is {layout}")
    return array


def _split_counts(total: int, num_train: int, num_test: int, source: str) -> None:
    if num_train + num_test > total:
        raise ConfigError(
            f"{source} holds {total} samples, fewer than num_train + num_test = "
            f"{num_train + num_test}"
        )


def read_mat(path: Path, keys: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Arrays ``keys`` of a MATLAB file: v5 (scipy) or v7.3 (HDF5, axes reversed to MATLAB's)."""
    if h5py.is_hdf5(path):
        with h5py.File(path, "r") as f:
            missing = [k for k in keys if k not in f]
            arrays = {k: np.asarray(f[k]).transpose() for k in keys if k in f}
            present = list(f.keys())
    else:
        content = scipy.io.loadmat(path)
        missing = [k for k in keys if k not in content]
        arrays = {k: content[k] for k in keys if k in content}
        present = [k for k in content if not k.startswith("__")]
    if missing:
        raise FieldError(f"'{path}' has no variable(s) {missing}; it has {present}")
    return arrays


class GeoFNOElasticity(StandardFiles):
    """Geo-FNO's Elasticity files: stress on 972-point clouds around random cavities.

    ``Random_UnitCell_XY_10.npy`` [N, 2, S] node coordinates, ``Random_UnitCell_sigma_10.npy``
    [N, S] stress, ``Random_UnitCell_rr_10.npy`` [42, S] cavity radii (N = 972, S = 2000). As in the
    Geo-FNO and PiT scripts, train = the first ``num_train`` samples, test = the last ``num_test``.

    Samples: ``pos`` [N, 2], ``y`` [N, 1] stress, ``weight`` 1/N (a point cloud: no cells). As in
    the Geo-FNO, PiT and ONO experiments the cavity reaches the model only through the point
    cloud; ``shape_params=True`` adds the 42 radii as ``params`` [1, 42].
    """

    name = "geofno_elasticity"
    files = (
        "Random_UnitCell_XY_10.npy",
        "Random_UnitCell_sigma_10.npy",
        "Random_UnitCell_rr_10.npy",
    )
    origin = f"{GEO_FNO_URL} (folder elasticity/Meshes)"
    target_names = ("stress",)

    def __init__(
        self,
        root=None,
        split="train",
        raw_dir=None,
        num_train=1000,
        num_test=200,
        shape_params=False,
        transform=None,
    ):
        super().__init__(
            root,
            split,
            raw_dir,
            transform,
            num_train=int(num_train),
            num_test=int(num_test),
            shape_params=bool(shape_params),
        )

    def read(self):
        xy = _load_npy(self.raw(self.files[0]), 3, "[N, 2, S]")
        sigma = _load_npy(self.raw(self.files[1]), 2, "[N, S]")
        rr = _load_npy(self.raw(self.files[2]), 2, "[42, S]")
        total = xy.shape[2]
        if xy.shape[1] != 2 or sigma.shape != (xy.shape[0], total) or rr.shape[1] != total:
            raise FieldError(
                f"inconsistent Geo-FNO elasticity files: XY {xy.shape}, sigma {sigma.shape}, rr "
                f"{rr.shape}; expected [N, 2, S], [N, S] and [42, S]"
            )
        n_train, n_test = self.config["num_train"], self.config["num_test"]
        _split_counts(total, n_train, n_test, self.files_dir)

        def sample(i):
            radii = rr[:, i] if self.config["shape_params"] else None
            return from_points(xy[:, :, i], y=sigma[:, i], params=radii)

        return [sample(i) for i in range(n_train)], [
            sample(i) for i in range(total - n_test, total)
        ]


def structured_quads(shape: tuple[int, int]) -> np.ndarray:
    """Quads [(H-1)(W-1), 4] of a structured H x W grid whose nodes are in C order."""
    h, w = shape
    node = np.arange(h * w).reshape(h, w)
    corners = [node[:-1, :-1], node[1:, :-1], node[1:, 1:], node[:-1, 1:]]
    return np.stack(corners, axis=-1).reshape(-1, 4)


class GeoFNOAirfoil(StandardFiles):
    """Geo-FNO's NACA airfoil files: Mach number of transonic Euler flow on a C-grid.

    ``NACA_Cylinder_X.npy`` and ``NACA_Cylinder_Y.npy`` [S, 221, 51] node coordinates,
    ``NACA_Cylinder_Q.npy`` [S, 5, 221, 51] flow fields (density, x and y velocity, pressure, Mach);
    the target is channel 4, Mach. As in the Geo-FNO script, train = samples ``0 .. num_train - 1``,
    test = the next ``num_test``; ``subsample`` keeps every r-th grid line (Geo-FNO's ``r1 = r2``).

    Samples: ``pos`` [H W, 2] (grid index ``(i, j)`` is node ``i W + j``), ``y`` [H W, 1] Mach,
    ``cell_index_quad`` [4, M]: the grid cells (cells of zero area, if any, are left out),
    ``weight``: their lumped mass, as in the generated :class:`~meshop.datasets.Airfoil`. The
    C-grid is curved, so no ``grid_shape`` (which promises a uniform grid).
    """

    name = "geofno_airfoil"
    files = ("NACA_Cylinder_X.npy", "NACA_Cylinder_Y.npy", "NACA_Cylinder_Q.npy")
    origin = f"{GEO_FNO_URL} (folder naca)"
    target_names = ("Mach",)
    MACH_CHANNEL = 4

    def __init__(
        self,
        root=None,
        split="train",
        raw_dir=None,
        num_train=1000,
        num_test=200,
        subsample=1,
        transform=None,
    ):
        super().__init__(
            root,
            split,
            raw_dir,
            transform,
            num_train=int(num_train),
            num_test=int(num_test),
            subsample=int(subsample),
        )

    def read(self):
        x = _load_npy(self.raw(self.files[0]), 3, "[S, 221, 51]")
        y = _load_npy(self.raw(self.files[1]), 3, "[S, 221, 51]")
        q = _load_npy(self.raw(self.files[2]), 4, "[S, 5, 221, 51]")
        if (
            y.shape != x.shape
            or q.shape[:1] + q.shape[2:] != x.shape
            or q.shape[1] <= self.MACH_CHANNEL
        ):
            raise FieldError(
                f"inconsistent Geo-FNO airfoil files: X {x.shape}, Y {y.shape}, Q {q.shape}; "
                "expected [S, H, W], [S, H, W] and [S, 5, H, W]"
            )
        r = self.config["subsample"]
        n_train, n_test = self.config["num_train"], self.config["num_test"]
        _split_counts(len(x), n_train, n_test, self.files_dir)
        shape = x[0, ::r, ::r].shape
        quads = structured_quads(shape)

        def sample(i):
            pos = np.stack([x[i, ::r, ::r], y[i, ::r, ::r]], axis=-1).reshape(-1, 2)
            pos = pos.astype(np.float64)
            area = cell_measures(pos, "quad", quads)
            cells = quads[area > 1e-12 * np.ptp(pos, axis=0).max() ** 2]
            data = from_points(
                pos,
                y=q[i, self.MACH_CHANNEL, ::r, ::r].reshape(-1),
                weight=lumped_mass_weights(pos, [("quad", cells)]),
            )
            data.cell_index_quad = torch.as_tensor(cells.T.copy(), dtype=torch.long)
            return data

        return [sample(i) for i in range(n_train)], [
            sample(i) for i in range(n_train, n_train + n_test)
        ]


class FNODarcy(StandardFiles):
    """FNO's Darcy flow files: ``-div(a grad u) = 1`` on the unit square, ``u = 0`` on its boundary.

    ``piececonst_r421_N1024_smooth1.mat`` (train) and ``piececonst_r421_N1024_smooth2.mat`` (test)
    hold ``coeff`` (the piecewise-constant permeability a, values 12 and 3) and ``sol`` (u), each
    [1024, 421, 421]. As in the FNO script, ``subsample`` r keeps every r-th grid line:
    r = 5 gives 85 x 85 (FNO), 2 gives 211 x 211 (PiT, Galerkin Transformer).

    Samples: uniform grids on the unit square, ``x`` [s^2, 1] = a, ``y`` [s^2, 1] = u,
    ``grid_shape = (s, s)``; ``coeff[n, i, j]`` is at ``(x_i, y_j)`` as in the FNO script, which is
    node ``i s + j`` (C order).
    """

    name = "fno_darcy"
    files = ("piececonst_r421_N1024_smooth1.mat", "piececonst_r421_N1024_smooth2.mat")
    origin = FNO_URL
    input_names = ("a",)
    target_names = ("u",)

    def __init__(
        self,
        root=None,
        split="train",
        raw_dir=None,
        num_train=1000,
        num_test=100,
        subsample=5,
        transform=None,
    ):
        super().__init__(
            root,
            split,
            raw_dir,
            transform,
            num_train=int(num_train),
            num_test=int(num_test),
            subsample=int(subsample),
        )

    def read(self):
        r = self.config["subsample"]
        splits = []
        for name, count in zip(self.files, (self.config["num_train"], self.config["num_test"])):
            arrays = read_mat(self.raw(name), ("coeff", "sol"))
            coeff, sol = arrays["coeff"], arrays["sol"]
            if coeff.ndim != 3 or sol.shape != coeff.shape:
                raise FieldError(
                    f"'{self.raw(name)}': coeff {coeff.shape} and sol {sol.shape}; "
                    "expected both [S, s, s]"
                )
            _split_counts(len(coeff), count, 0, str(self.raw(name)))
            shape = coeff[0, ::r, ::r].shape
            splits.append(
                [
                    uniform_grid(shape, x=coeff[i, ::r, ::r], y=sol[i, ::r, ::r])
                    for i in range(count)
                ]
            )
        return splits


class FNOBurgers(StandardFiles):
    """FNO's Burgers files: ``u_t + (u^2/2)_x = 0.1 u_xx``, periodic on [0, 1), ``u(0) -> u(1)``.

    ``burgers_data_R10.mat`` holds ``a`` (initial conditions) and ``u`` (solutions at t = 1), each
    [2048, 8192]. As in the FNO script, train = the first ``num_train`` samples, test = the last
    ``num_test``; ``subsample`` r = 8 gives 1024 points.

    Samples: 1D uniform grids ``x`` [s, 1] = a, ``y`` [s, 1] = u, ``grid_shape = (s,)``; the
    periodic grid's nodes are ``pos = i / s`` and every node has weight ``1 / s``.
    """

    name = "fno_burgers"
    files = ("burgers_data_R10.mat",)
    origin = FNO_URL
    input_names = ("u0",)
    target_names = ("u",)

    def __init__(
        self,
        root=None,
        split="train",
        raw_dir=None,
        num_train=1000,
        num_test=100,
        subsample=8,
        transform=None,
    ):
        super().__init__(
            root,
            split,
            raw_dir,
            transform,
            num_train=int(num_train),
            num_test=int(num_test),
            subsample=int(subsample),
        )

    def read(self):
        arrays = read_mat(self.raw(self.files[0]), ("a", "u"))
        a, u = arrays["a"], arrays["u"]
        if a.ndim != 2 or u.shape != a.shape:
            raise FieldError(
                f"'{self.raw(self.files[0])}': a {a.shape} and u {u.shape}; expected both [S, n]"
            )
        r = self.config["subsample"]
        n_train, n_test = self.config["num_train"], self.config["num_test"]
        _split_counts(len(a), n_train, n_test, self.files_dir)
        s = a[0, ::r].shape[0]

        def sample(i):
            data = uniform_grid((s,), x=a[i, ::r], y=u[i, ::r], bounds=[(0.0, 1.0 - 1.0 / s)])
            data.weight = torch.full((s,), 1.0 / s)
            return data

        return [sample(i) for i in range(n_train)], [
            sample(i) for i in range(len(a) - n_test, len(a))
        ]

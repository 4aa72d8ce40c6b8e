"""Elasticity: stress in a unit cell with a random star-shaped cavity, by FEM (scikit-fem)."""

from __future__ import annotations

import os

import numpy as np
import torch

from meshop._pyg import Data
from meshop.data import from_points, lumped_mass_weights
from meshop.datasets.base import GeneratedDataset
from meshop.datasets.fem import MATERIALS, cavity_radius, cell_mesh, solve_cell
from meshop.errors import ConfigError

#: points of the cavity's polygon at refinement level 0 (doubled at every finer level)
CAVITY_POINTS = 64


def random_cavity(
    rng: np.random.Generator,
    num_modes: int = 4,
    mean_radius: tuple[float, float] = (0.2, 0.3),
    amplitude: float = 0.05,
    radius_range: tuple[float, float] = (0.1, 0.4),
) -> np.ndarray:
    """Fourier coefficients ``[r_0, a_1, b_1, ..., a_K, b_K]`` of a random smooth cavity.

    ``r_0 ~ U(mean_radius)`` and ``a_k, b_k ~ N(0, (amplitude / k)^2)``; if the radius leaves
    ``radius_range`` somewhere, the modes are scaled down until it fits (the cavity keeps a ligament
    of at least ``0.5 - radius_range[1]`` to the cell's sides).
    """
    r0 = rng.uniform(*mean_radius)
    modes = rng.normal(size=(num_modes, 2)) * (amplitude / np.arange(1, num_modes + 1))[:, None]
    coefficients = np.concatenate([[r0], modes.ravel()])
    theta = np.linspace(0.0, 2.0 * np.pi, 2048, endpoint=False)
    r = cavity_radius(theta, coefficients)
    lo, hi = radius_range
    shrink = min(1.0, (r0 - lo) / max(r0 - r.min(), 1e-12), (hi - r0) / max(r.max() - r0, 1e-12))
    coefficients[1:] *= shrink
    return coefficients


def refinement_level(refinement) -> int:
    """``refinement`` as an integer level >= 0 (an integral float such as ``2.0`` too), else a
    :class:`ConfigError`."""
    integral = isinstance(refinement, (int, np.integer)) and not isinstance(refinement, bool)
    integral |= isinstance(refinement, float) and refinement.is_integer()
    if not integral or refinement < 0:
        raise ConfigError(
            f"refinement must be an integer >= 0 (0: the training meshes, 1 and 2: 2x and 4x "
            f"finer), got {refinement!r}"
        )
    return int(refinement)


class Elasticity(GeneratedDataset):
    r"""Von Mises stress in an elastic unit cell with a random cavity (after Geo-FNO's Elasticity).

    The unit cell :math:`[0, 1]^2` has a star-shaped cavity centred at (0.5, 0.5) with boundary
    :math:`r(\theta) = r_0 + \sum_{k=1}^K a_k \cos k\theta + b_k \sin k\theta`. It is meshed with
    Triangle (~1000 nodes) and solved in plane strain by P2 finite elements (scikit-fem): bottom
    edge clamped, uniform upward traction on the top edge, sides and cavity free
    (:mod:`meshop.datasets.fem`). The operator maps the cavity shape to the stress field. As in
    Geo-FNO, the shape reaches the model only through the mesh: the node positions (and the
    cells and weights), so a pointwise model cannot know the cavity.

    ``refinement`` selects the mesh, as in :class:`~meshop.datasets.darcy_mesh.DarcyMesh`: level
    ``l`` bounds the triangle areas by ``max_area / 4**l`` (mesh size h / 2**l: about 4x the nodes
    per level) and draws the cavity's curve as a polygon of ``64 * 2**l`` points, for the same
    cavities, material and load, solved again on the finer mesh. The polygon is refined with the
    mesh because the polygon's corners are (weak) stress singularities: with a 64-gon at every
    level the stress at the cavity kept growing from level to level instead of converging. Each
    level's polygon holds the vertices of the coarser ones, so the coarse cavity nodes are nodes of
    every finer mesh. Train at level 0 and evaluate zero-shot at levels 1 and 2
    (``meshop evaluate --dataset-arg refinement=2``): about 3,800 and 15,000 nodes per sample with
    the default ``max_area``.

    Each sample is a ``Data`` with

    - ``pos`` [N, 2]: mesh nodes (N varies per sample), ``face`` [3, F]: the triangles;
    - ``y`` [N, 1]: von Mises stress divided by the applied traction (``target_names``);
    - ``displacement`` [N, 2]: displacement in units of the cell side;
    - ``weight`` [N]: lumped-mass quadrature weights (summing to the area of the cell minus the
      cavity);
    - only with ``shape_params=True``: ``params`` [1, 2K + 1], the Fourier coefficients
      ``[r_0, a_1, b_1, ..., a_K, b_K]``, which every model then receives at every node.

    Args:
        root: data root (default ``$MESHOP_DATA`` or the repository's ``datasets/``).
        split: ``"train"`` or ``"test"``.
        num_train: training samples; sample ``i`` depends only on ``seed`` and ``i``.
        num_test: test samples (they follow the training samples).
        seed: random seed of the cavity shapes.
        material: ``"linear"`` (Hooke) or ``"neo-hookean"`` (Newton with load stepping, slower).
        num_modes: K, the number of Fourier modes of the cavity.
        refinement: mesh level (0: ``max_area``; each level 4x smaller triangles).
        max_area: largest triangle area at level 0 (7e-4 gives ~1000 nodes).
        youngs_modulus: E in MPa.
        poisson_ratio: nu.
        traction: upward traction on the top edge in MPa (per reference length).
        shape_params: also give each sample the cavity's Fourier coefficients as ``params`` (off
            by default: with them, a pointwise regression on coordinates and coefficients already
            knows the geometry). The cavities and meshes are the same either way.
        transform: PyG transform applied on access.
        progress: show a tqdm progress bar while generating.

    Example:
        >>> train = Elasticity(split="train", num_train=1000, num_test=200)  # doctest: +SKIP
        >>> train[0]  # doctest: +SKIP
        Data(pos=[981, 2], weight=[981], y=[981, 1], displacement=[981, 2], face=[3, 1771], ...)
    """

    name = "elasticity"
    #: 2: samples carry no ``params`` unless ``shape_params=True``
    version = 2
    target_names = ("von_mises",)

    def __init__(
        self,
        root: str | os.PathLike | None = None,
        split: str = "train",
        num_train: int = 1000,
        num_test: int = 200,
        seed: int = 0,
        *,
        material: str = "linear",
        num_modes: int = 4,
        refinement: int = 0,
        max_area: float = 7e-4,
        youngs_modulus: float = 10.0,
        poisson_ratio: float = 0.3,
        traction: float = 1.0,
        shape_params: bool = False,
        transform=None,
        progress: bool = True,
    ):
        if material not in MATERIALS:
            raise ConfigError(f"material must be one of {MATERIALS}, got '{material}'")
        refinement = refinement_level(refinement)
        if num_modes < 0 or max_area <= 0 or traction <= 0:
            raise ConfigError(
                f"need num_modes >= 0, max_area > 0 and traction > 0; got num_modes={num_modes}, "
                f"max_area={max_area}, traction={traction}"
            )
        super().__init__(
            root,
            split,
            num_train,
            num_test,
            seed,
            transform=transform,
            progress=progress,
            material=material,
            num_modes=int(num_modes),
            max_area=float(max_area),
            youngs_modulus=float(youngs_modulus),
            poisson_ratio=float(poisson_ratio),
            traction=float(traction),
            shape_params=bool(shape_params),
            # level 0 keeps the cache key of the datasets generated before refinement existed
            **({"refinement": refinement} if refinement else {}),
        )

    def generate(self, index: int, rng: np.random.Generator) -> Data:
        c = self.config
        coefficients = random_cavity(rng, c["num_modes"])
        level = c.get("refinement", 0)  # h / 2**level: the polygon's sides too
        area, sides = c["max_area"] / 4**level, CAVITY_POINTS * 2**level
        points, triangles = cell_mesh(coefficients, max_area=area, boundary_points=sides)
        solution = solve_cell(
            points,
            triangles,
            youngs_modulus=c["youngs_modulus"],
            poisson_ratio=c["poisson_ratio"],
            traction=c["traction"],
            material=c["material"],
        )
        data = from_points(
            points,
            y=solution.von_mises / c["traction"],
            weight=lumped_mass_weights(points, [("triangle", triangles)]),
            params=coefficients if c["shape_params"] else None,
        )
        data.displacement = torch.as_tensor(solution.displacement, dtype=torch.float32)
        data.face = torch.as_tensor(triangles.T.copy(), dtype=torch.long)
        return data

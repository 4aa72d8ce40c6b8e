"""Darcy flow on random irregular domains: a coefficient field on a Triangle mesh -> the pressure.

Each sample draws a domain inside the unit square (a smooth star-shaped or a polygonal outer
boundary, with impermeable holes in some samples) and a random permeability field ``a`` (a
Gaussian random field, log-normal or thresholded), meshes the domain with Triangle and solves

.. math::
    -\\nabla\\cdot(a\\nabla u) = f \\ \\text{in } \\Omega,\\qquad u = 0 \\text{ on the outer
    boundary},\\qquad a\\,\\partial_n u = 0 \\text{ on the holes' boundaries},

with ``f = 1``, by P2 (or P1) finite elements with scikit-fem. The coefficient is the random
field itself, evaluated at the quadrature points (not interpolated from the nodes), so meshes of
the same domain at several refinement levels solve the same problem with the same field.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from matplotlib.path import Path as PolygonPath
from skfem import (
    Basis,
    BilinearForm,
    ElementTriP1,
    ElementTriP2,
    LinearForm,
    MeshTri,
    asm,
    condense,
    solve,
)
from skfem.helpers import dot, grad

from meshop._pyg import Data
from meshop.data import from_points, lumped_mass_weights
from meshop.datasets.base import GeneratedDataset
from meshop.datasets.elasticity import random_cavity
from meshop.datasets.fem import star_polygon, triangulate
from meshop.datasets.grf import CosineSeriesField
from meshop.errors import ConfigError

COEFFICIENTS = ("lognormal", "threshold")
#: the finest refinement level solved with P2 elements when no ``degree`` is given: above it the
#: direct solve of P2 (4 unknowns per node) outgrows the memory (3.5 GB at level 4, ~160k nodes)
FINEST_P2 = 3
DOMAIN_CENTER = (0.5, 0.5)

Field = Callable[[np.ndarray], np.ndarray]


@dataclass
class DiffusionSolution:
    """A finite element solution of :func:`solve_diffusion`.

    Attributes:
        u: [N] the solution at the mesh vertices.
        basis: the scikit-fem basis (P1 or P2 Lagrange on the mesh).
        dofs: the solution's coefficients in ``basis`` (for norms and interpolation).
    """

    u: np.ndarray
    basis: Basis
    dofs: np.ndarray


def solve_diffusion(
    points: np.ndarray,
    triangles: np.ndarray,
    dirichlet: np.ndarray,
    coefficient: Field | float = 1.0,
    source: Field | float = 1.0,
    boundary_value: Field | None = None,
    degree: int = 2,
) -> DiffusionSolution:
    """Solve :math:`-\\nabla\\cdot(a\\nabla u) = f` by Lagrange finite elements (scikit-fem).

    ``u = g`` on the boundary edges whose two end nodes are in ``dirichlet``, ``a du/dn = 0`` on
    the rest of the boundary. ``a``, ``f`` and ``g`` are functions of the coordinates [2, ...]
    (or constants): ``a`` and ``f`` are evaluated at the quadrature points, ``g`` is interpolated
    at the boundary degrees of freedom.

    Args:
        points: [N, 2] vertices; triangles: [F, 3] vertex indices.
        dirichlet: [N] bool, the vertices of the Dirichlet boundary.
        coefficient: ``a(x)``, positive.
        source: ``f(x)``.
        boundary_value: ``g(x)`` (None: 0).
        degree: 1 (P1) or 2 (P2).

    Returns:
        a :class:`DiffusionSolution`.
    """
    if degree not in (1, 2):
        raise ConfigError(f"degree must be 1 (P1) or 2 (P2), got {degree}")
    mesh = MeshTri(np.ascontiguousarray(points.T), np.ascontiguousarray(triangles.T))
    element = ElementTriP2() if degree == 2 else ElementTriP1()
    basis = Basis(mesh, element, intorder=2 * degree)

    x = np.asarray(basis.global_coordinates())  # [2, F, quadrature points]
    a, f = (g(x) if callable(g) else np.full(x.shape[1:], float(g)) for g in (coefficient, source))

    @BilinearForm
    def stiffness(u, v, w):
        return w["a"] * dot(grad(u), grad(v))

    @LinearForm
    def load(v, w):
        return w["f"] * v

    boundary = mesh.boundary_facets()
    ends = mesh.facets[:, boundary]
    dirichlet = np.asarray(dirichlet, dtype=bool)
    fixed = basis.get_dofs(boundary[dirichlet[ends[0]] & dirichlet[ends[1]]]).all()
    dofs = np.zeros(basis.N)
    if boundary_value is not None:
        dofs[fixed] = boundary_value(basis.doflocs[:, fixed])
    system = asm(stiffness, basis, a=a), asm(load, basis, f=f)
    dofs = solve(*condense(*system, x=dofs, D=fixed))
    return DiffusionSolution(dofs[basis.nodal_dofs[0]], basis, dofs)


def _segment_distance(points: np.ndarray, loop: np.ndarray) -> np.ndarray:
    """Distance [P] from each point to the closed polygon ``loop`` [M, 2]."""
    a, b = loop, np.roll(loop, -1, axis=0)
    ab = b - a
    t = np.einsum("pmd,md->pm", points[:, None] - a[None], ab) / np.sum(ab**2, axis=1)
    closest = a[None] + np.clip(t, 0.0, 1.0)[..., None] * ab[None]
    return np.linalg.norm(points[:, None] - closest, axis=-1).min(axis=1)


def random_polygon(
    rng: np.random.Generator,
    sides: tuple[int, int] = (5, 9),
    radius: tuple[float, float] = (0.25, 0.48),
) -> np.ndarray:
    """A random polygon [n, 2] star-shaped around (0.5, 0.5), counter-clockwise.

    ``n ~ U{sides}`` vertices at angles ``2 pi (i + d_i) / n + phi`` (``d_i ~ U(-0.3, 0.3)``,
    ``phi ~ U(0, 2 pi)``) and radii ``~ U(radius)``.
    """
    n = int(rng.integers(sides[0], sides[1] + 1))
    theta = 2 * np.pi * (np.arange(n) + rng.uniform(-0.3, 0.3, n)) / n + rng.uniform(0, 2 * np.pi)
    r = rng.uniform(*radius, n)
    return np.asarray(DOMAIN_CENTER) + r[:, None] * np.stack([np.cos(theta), np.sin(theta)], 1)


def random_domain(
    rng: np.random.Generator,
    polygon_fraction: float = 0.5,
    hole_fraction: float = 0.5,
    max_holes: int = 2,
    boundary_points: int = 64,
    clearance: float = 0.05,
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """A random domain in the unit square: its boundary loops and a point inside each hole.

    The outer boundary is, with probability ``polygon_fraction``, a :func:`random_polygon`, else a
    smooth star-shaped curve :math:`r(\\theta) = r_0 + \\sum_{k \\le 4} a_k\\cos k\\theta + b_k
    \\sin k\\theta` around (0.5, 0.5) (``r_0 ~ U(0.3, 0.42)``, radii kept in [0.18, 0.48]) sampled
    at ``boundary_points`` angles. With probability ``hole_fraction`` the domain has 1 to
    ``max_holes`` holes: small star-shaped curves (mean radius 0.04 to 0.08, 32 points) placed
    uniformly at random at least ``clearance`` from the outer boundary and from each other (a hole
    that does not fit in 100 draws is left out).

    Returns:
        ``(loops, hole_points)``: loops[0] the outer boundary, loops[1:] the holes'.
    """
    if rng.uniform() < polygon_fraction:
        outer = random_polygon(rng)
    else:
        shape = random_cavity(rng, 4, (0.3, 0.42), 0.06, (0.18, 0.48))
        outer = star_polygon(np.asarray(DOMAIN_CENTER), shape, boundary_points)
    loops, centres = [outer], []
    count = int(rng.integers(1, max_holes + 1)) if rng.uniform() < hole_fraction else 0
    inside = PolygonPath(outer)
    for _ in range(count):
        shape = random_cavity(rng, 3, (0.04, 0.08), 0.015, (0.03, 0.1))
        for _ in range(100):
            centre = rng.uniform(outer.min(0), outer.max(0))
            loop = star_polygon(centre, shape, 32)
            if not inside.contains_points(loop).all():
                continue
            gaps = [_segment_distance(loop, other).min() for other in loops]
            if min(gaps) >= clearance:
                loops.append(loop)
                centres.append(centre)
                break
    return loops, centres


class DarcyMesh(GeneratedDataset):
    """Darcy flow on random irregular domains, Triangle meshes at several refinement levels.

    The operator maps a permeability field ``a`` on a mesh of a random domain to the pressure
    ``u`` solving :math:`-\\nabla\\cdot(a\\nabla u) = 1`, ``u = 0`` on the outer boundary, no flux
    through the holes (see the module docstring). Neither a grid method nor a pointwise model can
    do it: the domains and meshes change from sample to sample, and ``u`` at a point depends on
    ``a`` and on the boundary everywhere.

    Each sample (:func:`random_domain`, a :class:`~meshop.datasets.grf.CosineSeriesField` ``g``,
    then the mesh and the solve) is a ``Data`` with

    - ``pos`` [N, 2]: the mesh nodes (N varies with the domain), ``face`` [3, F]: the triangles;
    - ``x`` [N, 1]: the permeability ``a`` at the nodes, ``exp(log_std g)`` (``"lognormal"``) or
      ``high`` where ``g >= 0`` and ``low`` elsewhere (``"threshold"``, as FNO's Darcy);
    - ``y`` [N, 1]: the pressure ``u`` at the nodes (P2 finite elements by default);
    - ``weight`` [N]: lumped-mass quadrature weights (summing to the domain's area).

    No ``params``: the domain reaches a model only through the mesh. ``refinement`` selects the
    mesh: level ``l`` bounds the triangle areas by ``max_area / 4**l`` (2x finer per level, about 4x
    the nodes) for the same domains, boundaries and fields (the same ``seed`` and sizes): train at
    level 0, evaluate zero-shot at levels 1 and 2 (``meshop evaluate --dataset-arg refinement=2``),
    or at level 5 on meshes of about a million nodes (``--dataset-arg num_test=2`` keeps the
    generation to minutes).

    Args:
        root: data root (default ``$MESHOP_DATA`` or the repository's ``datasets/``).
        split: ``"train"`` or ``"test"``.
        num_train: training samples; sample ``i`` depends only on ``seed`` and ``i``.
        num_test: test samples (the samples after the training ones).
        seed: random seed of the domains and fields.
        refinement: mesh level (0: ``max_area``; each level 4x smaller triangles).
        max_area: largest triangle area at level 0 (4e-4: about 600 to 1300 nodes).
        coefficient: ``"lognormal"`` or ``"threshold"``.
        log_std: standard deviation of ``log a`` (lognormal).
        threshold_values: ``(high, low)`` values of ``a`` (threshold).
        alpha: exponent of the Gaussian field's covariance
            :math:`(-\\Delta + \\tau^2 I)^{-\\alpha}` (scaled to unit variance).
        tau: inverse length scale of that covariance.
        modes: cosines per axis of the field's series.
        polygon_fraction: share of polygonal outer boundaries (see :func:`random_domain`).
        hole_fraction: share of domains with holes.
        max_holes: most holes in one domain.
        degree: finite elements, 1 (P1) or 2 (P2); None: P2 up to refinement
            :data:`FINEST_P2`, P1 on the finer levels (their discretisation error is far below
            a model's).
        transform: PyG transform applied on access.
        progress: show a tqdm progress bar while generating.
    """

    name = "darcy_mesh"
    input_names = ("a",)
    target_names = ("u",)

    def __init__(
        self,
        root: str | os.PathLike | None = None,
        split: str = "train",
        num_train: int = 1000,
        num_test: int = 200,
        seed: int = 0,
        *,
        refinement: int = 0,
        max_area: float = 4e-4,
        coefficient: str = "lognormal",
        log_std: float = 1.0,
        threshold_values: tuple[float, float] = (12.0, 3.0),
        alpha: float = 2.0,
        tau: float = 3.0,
        modes: int = 16,
        polygon_fraction: float = 0.5,
        hole_fraction: float = 0.5,
        max_holes: int = 2,
        degree: int | None = None,
        transform=None,
        progress: bool = True,
    ):
        if coefficient not in COEFFICIENTS:
            raise ConfigError(f"coefficient must be one of {COEFFICIENTS}, got '{coefficient}'")
        if int(refinement) != refinement or refinement < 0 or max_area <= 0:
            raise ConfigError(
                f"refinement must be an integer >= 0 (0: training meshes, 1 and 2: 2x and 4x "
                f"finer) and max_area positive; got refinement={refinement}, max_area={max_area}"
            )
        if min(threshold_values) <= 0 or len(threshold_values) != 2:
            raise ConfigError(
                f"threshold_values must be two positive values, got {threshold_values}"
            )
        if degree is None:
            degree = 2 if refinement <= FINEST_P2 else 1
        if degree not in (1, 2):
            raise ConfigError(f"degree must be 1 (P1) or 2 (P2), got {degree}")
        super().__init__(
            root,
            split,
            num_train,
            num_test,
            seed,
            transform=transform,
            progress=progress,
            refinement=int(refinement),
            max_area=float(max_area),
            coefficient=coefficient,
            log_std=float(log_std),
            threshold_values=[float(v) for v in threshold_values],
            alpha=float(alpha),
            tau=float(tau),
            modes=int(modes),
            polygon_fraction=float(polygon_fraction),
            hole_fraction=float(hole_fraction),
            max_holes=int(max_holes),
            degree=int(degree),
        )

    def permeability(self, g: CosineSeriesField) -> Field:
        """The coefficient ``a`` as a function of the coordinates, from the Gaussian field."""
        c = self.config
        if c["coefficient"] == "lognormal":
            return lambda x: np.exp(c["log_std"] * g(x))
        high, low = c["threshold_values"]
        return lambda x: np.where(g(x) >= 0, high, low)

    def generate(self, index: int, rng: np.random.Generator) -> Data:
        c = self.config
        loops, hole_points = random_domain(
            rng, c["polygon_fraction"], c["hole_fraction"], c["max_holes"]
        )
        g = CosineSeriesField(rng, 2, c["modes"], c["alpha"], c["tau"])
        a = self.permeability(g)
        area = c["max_area"] / 4 ** c["refinement"]
        points, triangles, boundary = triangulate(loops, hole_points, max_area=area)
        solution = solve_diffusion(
            points, triangles, boundary == 1, coefficient=a, degree=c["degree"]
        )
        data = from_points(
            points,
            x=a(points.T),
            y=solution.u,
            weight=lumped_mass_weights(points, [("triangle", triangles)]),
        )
        data.face = torch.as_tensor(triangles.T.copy(), dtype=torch.long)
        return data

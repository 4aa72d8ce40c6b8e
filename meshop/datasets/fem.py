"""Plane-strain elasticity of a unit cell with a star-shaped cavity: Triangle meshes, scikit-fem.

The unit cell ``[0, 1]^2`` has a cavity centred at ``(0.5, 0.5)`` whose boundary is the star-shaped
curve ``r(theta) = r_0 + sum_k a_k cos(k theta) + b_k sin(k theta)``. The bottom edge is clamped,
a uniform traction ``t`` pulls the top edge upwards (a dead load: fixed direction and magnitude
per reference area), the sides and the cavity are traction-free, and the out-of-plane strain is zero
(plane strain).

Displacements are quadratic (P2) Lagrange elements on the Triangle mesh. P2 rather than P1
because the target is the stress: P1 stress is constant per triangle and its nodal average
underestimates the peak at a hole by about 10% on a ~1000-node mesh, while P2 gives the Kirsch
concentration within 3% (tests/datasets/test_elasticity.py). Two constitutive laws:

- ``"linear"``: Hooke's law, one sparse solve;
- ``"neo-hookean"``: compressible neo-Hookean, ``W = mu/2 (I_1 - 3) - mu ln J + lambda/2 (ln J)^2``
  with ``I_1 = tr(F^T F) + 1`` (plane strain), total-Lagrangian Newton iterations with load stepping
  (an increment that fails to converge is halved).

Stresses are Cauchy stresses, evaluated at the corners of every triangle (from that triangle's
P2 gradient) and averaged to the mesh nodes weighted by triangle area; they are reported at the
reference (undeformed) node positions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import triangle
from skfem import (
    Basis,
    BilinearForm,
    ElementTriP2,
    ElementVector,
    FacetBasis,
    LinearForm,
    MeshTri,
    asm,
    condense,
    solve,
)
from skfem.helpers import ddot, det, eye, grad, inv, mul, sym_grad, trace, transpose

from meshop.errors import ConfigError, MeshopError

MATERIALS = ("linear", "neo-hookean")
CAVITY_CENTER = (0.5, 0.5)


def lame_parameters(youngs_modulus: float, poisson_ratio: float) -> tuple[float, float]:
    """Lamé parameters ``(lambda, mu)`` of an isotropic material (plane strain uses them as is)."""
    lam = youngs_modulus * poisson_ratio / ((1.0 + poisson_ratio) * (1.0 - 2.0 * poisson_ratio))
    return lam, youngs_modulus / (2.0 * (1.0 + poisson_ratio))


def cavity_radius(theta: np.ndarray, coefficients: np.ndarray) -> np.ndarray:
    """Radius of the cavity boundary at angles ``theta``.

    ``coefficients = [r_0, a_1, b_1, ..., a_K, b_K]`` gives
    ``r(theta) = r_0 + sum_k a_k cos(k theta) + b_k sin(k theta)``; ``[r_0]`` is a circle.
    """
    coefficients = np.asarray(coefficients, dtype=np.float64)
    modes = coefficients[1:].reshape(-1, 2)
    k = np.arange(1, len(modes) + 1)[:, None]
    theta = np.asarray(theta, dtype=np.float64)[None, :]
    return coefficients[0] + (
        modes[:, :1] * np.cos(k * theta) + modes[:, 1:] * np.sin(k * theta)
    ).sum(0)


def triangulate(
    loops: Sequence[np.ndarray],
    hole_points: Sequence[Sequence[float]] = (),
    max_area: float = 1e-3,
    min_angle: float = 30.0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Quality triangle mesh of a polygonal domain with holes, by Triangle (deterministic).

    Args:
        loops: closed polygons [M_i, 2] (last vertex not repeated): the outer boundary first, then
            the boundaries of the holes.
        hole_points: one point inside each hole (Triangle removes the triangles it can reach
            from there without crossing a boundary).
        max_area: largest triangle area.
        min_angle: smallest triangle angle in degrees.

    Returns:
        points [N, 2], triangles [F, 3] (counter-clockwise) and ``boundary`` [N]: 0 for interior
        nodes, ``i + 1`` for nodes on ``loops[i]`` (its vertices and the nodes Triangle inserts
        on its edges).
    """
    if max_area <= 0 or not 0 < min_angle <= 34:
        raise ConfigError(
            f"need max_area > 0 and 0 < min_angle <= 34 degrees (Triangle's limit for a "
            f"guaranteed termination), got max_area={max_area}, min_angle={min_angle}"
        )
    vertices, segments, markers, start = [], [], [], 0
    for i, loop in enumerate(loops):
        loop = np.asarray(loop, dtype=np.float64)
        ring = start + np.arange(len(loop))
        vertices.append(loop)
        segments.append(np.stack([ring, np.roll(ring, -1)], axis=1))
        markers.append(np.full(len(loop), i + 1))
        start += len(loop)
    geometry = {
        "vertices": np.concatenate(vertices),
        "vertex_markers": np.concatenate(markers)[:, None],
        "segments": np.concatenate(segments),
        "segment_markers": np.concatenate(markers)[:, None],
    }
    if len(hole_points):
        geometry["holes"] = np.asarray(hole_points, dtype=np.float64).reshape(-1, 2)
    mesh = triangle.triangulate(geometry, f"pq{min_angle}a{max_area:.12f}Q")
    return (
        mesh["vertices"].astype(np.float64),
        mesh["triangles"].astype(np.int64),
        mesh["vertex_markers"].astype(np.int64).ravel(),
    )


def cell_mesh(
    coefficients: np.ndarray | None = None,
    max_area: float = 1e-3,
    boundary_points: int = 64,
    min_angle: float = 30.0,
) -> tuple[np.ndarray, np.ndarray]:
    """Triangulate the unit cell minus the cavity with Triangle (quality mesh, deterministic).

    Args:
        coefficients: the cavity's Fourier coefficients (see :func:`cavity_radius`); None: none.
        max_area: largest triangle area (7e-4: ~1000 nodes for the cavities of ``Elasticity``).
        boundary_points: points on the cavity boundary, equally spaced in angle.
        min_angle: smallest triangle angle in degrees.

    Returns:
        points [N, 2] and triangles [F, 3] (counter-clockwise).
    """
    square = np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    loops, holes = [square], []
    if coefficients is not None:
        centre = np.asarray(CAVITY_CENTER)
        loop = star_polygon(centre, coefficients, boundary_points)
        r = cavity_radius(np.linspace(0.0, 2.0 * np.pi, boundary_points, endpoint=False), coefficients)
        if r.min() <= 0.0 or loop.min() <= 0.0 or loop.max() >= 1.0:
            raise ConfigError(
                f"the cavity must lie inside the unit cell with a positive radius; coefficients "
                f"{np.round(coefficients, 4).tolist()} give radii in [{r.min():.3f}, {r.max():.3f}]"
            )
        loops.append(loop)
        holes.append(centre)
    points, triangles, _ = triangulate(loops, holes, max_area=max_area, min_angle=min_angle)
    return points, triangles


def star_polygon(centre: np.ndarray, coefficients: np.ndarray, count: int) -> np.ndarray:
    """``count`` points [count, 2] of the star-shaped curve ``centre + r(theta) (cos, sin)``,
    equally spaced in angle from ``theta = 0`` (``r`` from :func:`cavity_radius`)."""
    theta = np.linspace(0.0, 2.0 * np.pi, count, endpoint=False)
    r = cavity_radius(theta, coefficients)
    return np.asarray(centre) + r[:, None] * np.stack([np.cos(theta), np.sin(theta)], axis=1)


@dataclass
class ElasticitySolution:
    """A solved cell: node fields at the reference positions.

    Attributes:
        displacement: [N, 2] displacement of the mesh nodes.
        stress: [N, 4] Cauchy stress ``(s_xx, s_yy, s_zz, s_xy)`` averaged to the nodes.
        von_mises: [N] von Mises stress of ``stress``.
        newton_iterations: total Newton iterations (1 for the linear material).
    """

    displacement: np.ndarray
    stress: np.ndarray
    von_mises: np.ndarray
    newton_iterations: int


def von_mises(stress: np.ndarray) -> np.ndarray:
    """Von Mises stress of ``stress`` [..., 4] = ``(s_xx, s_yy, s_zz, s_xy)`` (plane strain)."""
    sxx, syy, szz, sxy = np.moveaxis(np.asarray(stress), -1, 0)
    return np.sqrt(0.5 * ((sxx - syy) ** 2 + (syy - szz) ** 2 + (szz - sxx) ** 2) + 3.0 * sxy**2)


def _deformation_gradient(u) -> np.ndarray:
    g = grad(u)
    return g + eye(np.ones_like(g[0, 0]), 2)


def _neo_hookean_piola(F: np.ndarray, lam: float, mu: float) -> np.ndarray:
    """First Piola-Kirchhoff stress ``P = mu (F - F^-T) + lambda ln(J) F^-T``."""
    F_inv_t = transpose(inv(F))
    return mu * (F - F_inv_t) + lam * np.log(det(F)) * F_inv_t


def _cauchy_stress(F: np.ndarray, lam: float, mu: float, material: str) -> np.ndarray:
    """Cauchy stress ``(s_xx, s_yy, s_zz, s_xy)`` [4, ...] from the in-plane F [2, 2, ...]."""
    if material == "linear":
        eps = 0.5 * (F + transpose(F)) - eye(np.ones_like(F[0, 0]), 2)
        tr = trace(eps)
        s = 2.0 * mu * eps + lam * eye(tr, 2)
        szz = lam * tr
    else:
        J = det(F)
        s = mu / J * (mul(F, transpose(F)) - eye(np.ones_like(J), 2)) + eye(lam * np.log(J) / J, 2)
        szz = lam * np.log(J) / J
    return np.stack([s[0, 0], s[1, 1], szz, s[0, 1]])


def _nodal_stress(mesh: MeshTri, element, u: np.ndarray, lam, mu, material) -> np.ndarray:
    """Cauchy stress at the corners of each triangle, averaged to nodes weighted by area: [N, 4]."""
    corners = Basis(
        mesh, element, quadrature=(np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]), np.full(3, 1 / 6))
    )
    F = _deformation_gradient(corners.interpolate(u))  # [2, 2, F, 3]
    stress = _cauchy_stress(F, lam, mu, material)  # [4, F, 3]
    area = corners.dx.sum(axis=1)  # [F]
    total, mass = np.zeros((mesh.nvertices, 4)), np.zeros(mesh.nvertices)
    for corner in range(3):
        np.add.at(total, mesh.t[corner], (stress[:, :, corner] * area).T)
        np.add.at(mass, mesh.t[corner], area)
    return total / mass[:, None]


def solve_cell(
    points: np.ndarray,
    triangles: np.ndarray,
    youngs_modulus: float = 10.0,
    poisson_ratio: float = 0.3,
    traction: float = 1.0,
    material: str = "linear",
    load_steps: int = 1,
    tol: float = 1e-9,
    max_iter: int = 25,
) -> ElasticitySolution:
    """Solve the clamped, top-loaded plane-strain cell on a mesh from :func:`cell_mesh`.

    Args:
        points: [N, 2] node coordinates of the unit cell (bottom edge ``y = 0``, top ``y = 1``).
        triangles: [F, 3] node indices.
        youngs_modulus: E (same unit as ``traction``, e.g. MPa).
        poisson_ratio: nu, in [0, 0.5).
        traction: upward traction on the top edge (force per reference length).
        material: ``"linear"`` or ``"neo-hookean"``.
        load_steps: initial number of equal load increments of the Newton solve (neo-Hookean);
            an increment that does not converge in `max_iter` iterations is halved, a converged
            one lets the next increment double.
        tol: Newton stops when the residual norm is below ``tol`` times the applied load's norm.
        max_iter: Newton iterations allowed per increment before the increment is halved.

    Raises:
        ConfigError: unknown material or invalid constants.
        MeshopError: Newton does not converge even with increments 32 times smaller.
    """
    if material not in MATERIALS:
        raise ConfigError(f"material must be one of {MATERIALS}, got '{material}'")
    if youngs_modulus <= 0 or not 0.0 <= poisson_ratio < 0.5:
        raise ConfigError(
            f"need youngs_modulus > 0 and 0 <= poisson_ratio < 0.5, got E={youngs_modulus}, "
            f"nu={poisson_ratio}"
        )
    lam, mu = lame_parameters(youngs_modulus, poisson_ratio)
    mesh = MeshTri(np.ascontiguousarray(points.T), np.ascontiguousarray(triangles.T))
    element = ElementVector(ElementTriP2())
    basis = Basis(mesh, element, intorder=2 if material == "linear" else 4)
    top = FacetBasis(mesh, element, facets=mesh.facets_satisfying(lambda x: x[1] > 1.0 - 1e-9))
    load = asm(LinearForm(lambda v, w: traction * v[1]), top)
    clamped = basis.get_dofs(lambda x: x[1] < 1e-9).all()

    if material == "linear":

        @BilinearForm
        def stiffness(u, v, w):
            eps_u, eps_v = sym_grad(u), sym_grad(v)
            return 2.0 * mu * ddot(eps_u, eps_v) + lam * trace(eps_u) * trace(eps_v)

        u = solve(*condense(asm(stiffness, basis), load, D=clamped))
        iterations = 1
    else:
        u, iterations = _newton(basis, load, clamped, lam, mu, load_steps, tol, max_iter)
    stress = _nodal_stress(mesh, element, u, lam, mu, material)
    displacement = u[basis.nodal_dofs].T
    return ElasticitySolution(displacement, stress, von_mises(stress), iterations)


def _newton(basis, load, clamped, lam, mu, load_steps, tol, max_iter):
    """Total-Lagrangian Newton with adaptive load stepping for the neo-Hookean cell."""

    @BilinearForm
    def tangent(du, v, w):
        F = _deformation_gradient(w["u"])
        F_inv_t = transpose(inv(F))
        H = grad(du)
        dP = (
            mu * H
            + (mu - lam * np.log(det(F))) * mul(F_inv_t, mul(transpose(H), F_inv_t))
            + lam * ddot(F_inv_t, H) * F_inv_t
        )
        return ddot(dP, grad(v))

    @LinearForm
    def internal_force(v, w):
        return ddot(_neo_hookean_piola(_deformation_gradient(w["u"]), lam, mu), grad(v))

    free = basis.complement_dofs(clamped)
    u = np.zeros(basis.N)
    done, step, iterations = 0.0, 1.0 / load_steps, 0
    scale = np.linalg.norm(load[free])
    while done < 1.0:
        step = min(step, 1.0 - done)
        trial, converged = u.copy(), False
        with np.errstate(invalid="ignore", divide="ignore"):
            for _ in range(max_iter):
                field = basis.interpolate(trial)
                if np.any(det(_deformation_gradient(field)) <= 0.0):
                    break
                residual = asm(internal_force, basis, u=field) - (done + step) * load
                iterations += 1
                if np.linalg.norm(residual[free]) <= tol * scale:
                    converged = True
                    break
                K = asm(tangent, basis, u=field)
                trial = trial + solve(*condense(K, -residual, D=clamped))
                if not np.all(np.isfinite(trial)):
                    break
        if converged:
            u, done = trial, done + step
            step *= 2.0
        elif step > 1.0 / (32 * load_steps):
            step *= 0.5
        else:
            raise MeshopError(
                f"neo-Hookean Newton solve did not converge at load fraction {done:.3f} even with "
                f"increments of {step:.2e}; lower the traction or raise youngs_modulus"
            )
    return u, iterations

"""Regenerate the sample meshes of this folder (deterministic: the same files every run).

    python datasets/meshes/make_samples.py [--out datasets/meshes]

- ``elasticity_2d.msh``: meshop's plane-strain elasticity solver (:mod:`meshop.datasets.fem`, the
  generator of the Elasticity dataset) on a unit cell with a star-shaped cavity, clamped at the
  bottom and pulled up at the top; gmsh 2.2 ASCII with the physical groups ``clamped``,
  ``loaded``, ``sides``, ``cavity`` (boundary lines) and ``solid`` (triangles); point fields
  ``displacement`` [N, 2] (a vector, stored with z = 0) and ``von_mises`` [N].
- ``sphere_surface.vtu``: a triangulated unit sphere (a 3D surface) in potential flow along x,
  from the closed-form solution: point fields ``normals`` [N, 3], ``pressure`` (the pressure
  coefficient ``1 - 9/4 sin^2 theta``) and the surface ``velocity`` [N, 3]
  ``3/2 (U - (U . n) n)``.
- ``box_tetra.vtu``: steady heat conduction ``-div(k grad T) = 1`` in the unit cube with
  ``T = 0`` on its boundary, solved with scikit-fem (P1 tetrahedra): point fields
  ``conductivity`` ``k``, ``temperature`` ``T`` and ``heat_flux`` ``-k grad T`` [N, 3] (averaged
  from the tetrahedra to the nodes, weighted by volume).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import meshio
import numpy as np
import skfem
from scipy.spatial import ConvexHull
from skfem.helpers import dot, grad

from meshop.datasets.fem import cell_mesh, solve_cell

HERE = Path(__file__).resolve().parent


def elasticity_2d() -> meshio.Mesh:
    """The 2D FEM result with a vector field and named boundary groups (gmsh physical groups)."""
    coefficients = np.array([0.22, 0.03, -0.02, 0.015, 0.01])
    points, triangles = cell_mesh(coefficients, max_area=4e-3, boundary_points=32)
    solution = solve_cell(points, triangles, youngs_modulus=10.0, traction=1.0)
    edges = np.sort(
        np.concatenate([triangles[:, [0, 1]], triangles[:, [1, 2]], triangles[:, [2, 0]]]), 1
    )
    unique, count = np.unique(edges, axis=0, return_counts=True)
    boundary = unique[count == 1]
    mid = points[boundary].mean(1)
    eps = 1e-9
    groups = {
        "clamped": mid[:, 1] < eps,
        "loaded": mid[:, 1] > 1 - eps,
        "sides": (mid[:, 0] < eps) | (mid[:, 0] > 1 - eps),
    }
    groups["cavity"] = ~(groups["clamped"] | groups["loaded"] | groups["sides"])
    lines = np.concatenate([boundary[m] for m in groups.values()])
    line_tags = np.concatenate([np.full(m.sum(), i + 1) for i, m in enumerate(groups.values())])
    field_data = {name: np.array([i + 1, 1]) for i, name in enumerate(groups)}
    field_data["solid"] = np.array([len(groups) + 1, 2])
    points3d = np.column_stack([points, np.zeros(len(points))])
    displacement = np.column_stack([solution.displacement, np.zeros(len(points))])
    return meshio.Mesh(
        points3d,
        [("line", lines), ("triangle", triangles)],
        point_data={
            "displacement": displacement,
            "von_mises": solution.von_mises,
        },
        cell_data={
            "gmsh:physical": [line_tags, np.full(len(triangles), len(groups) + 1)],
            "gmsh:geometrical": [line_tags, np.full(len(triangles), len(groups) + 1)],
        },
        field_data=field_data,
    )


def sphere_surface(n: int = 400) -> meshio.Mesh:
    """A unit sphere triangulated through n Fibonacci points, in potential flow U = (1, 0, 0)."""
    i = np.arange(n) + 0.5
    polar, azimuth = np.arccos(1 - 2 * i / n), np.pi * (1 + 5**0.5) * i
    points = np.column_stack(
        [np.cos(azimuth) * np.sin(polar), np.sin(azimuth) * np.sin(polar), np.cos(polar)]
    )
    triangles = ConvexHull(points).simplices
    # orient every triangle outwards (counter-clockwise seen from outside)
    a, b, c = (points[triangles[:, k]] for k in range(3))
    inward = np.einsum("ij,ij->i", np.cross(b - a, c - a), a + b + c) < 0
    triangles[inward] = triangles[inward][:, ::-1]
    normals = points.copy()
    flow = np.array([1.0, 0.0, 0.0])
    sin2 = 1.0 - normals[:, 0] ** 2  # angle to the flow direction
    velocity = 1.5 * (flow - normals[:, :1] * normals)
    return meshio.Mesh(
        points,
        [("triangle", triangles)],
        point_data={"normals": normals, "pressure": 1.0 - 2.25 * sin2, "velocity": velocity},
    )


def box_tetra(n: int = 7) -> meshio.Mesh:
    """Heat conduction with a varying conductivity in the unit cube (P1 tetrahedra)."""
    t = np.linspace(0.0, 1.0, n)
    mesh = skfem.MeshTet.init_tensor(t, t, t)
    points = mesh.p.T
    conductivity = 1.0 + points[:, 0]
    basis = skfem.Basis(mesh, skfem.ElementTetP1())
    k = basis.interpolate(conductivity)
    stiffness = skfem.BilinearForm(lambda u, v, w: w.k * dot(grad(u), grad(v)))
    load = skfem.LinearForm(lambda v, w: 1.0 * v)
    A, b = stiffness.assemble(basis, k=k), load.assemble(basis)
    T = skfem.solve(*skfem.condense(A, b, D=mesh.boundary_nodes()))
    # -k grad T is constant on each tetrahedron: average it to the nodes, weighted by volume
    cells = mesh.t.T
    corners = points[cells]
    edges = corners[:, 1:] - corners[:, :1]  # [M, 3, 3]
    rises = T[cells[:, 1:]] - T[cells[:, :1]]  # [M, 3]: edges @ grad T
    gradients = np.linalg.solve(edges, rises[..., None])[..., 0]
    volume = np.abs(np.linalg.det(edges)) / 6.0
    flux = -conductivity[cells].mean(1)[:, None] * gradients
    total, mass = np.zeros((len(points), 3)), np.zeros(len(points))
    for corner in range(4):
        np.add.at(total, cells[:, corner], flux * volume[:, None])
        np.add.at(mass, cells[:, corner], volume)
    return meshio.Mesh(
        points,
        [("tetra", cells)],
        point_data={
            "conductivity": conductivity,
            "temperature": T,
            "heat_flux": total / mass[:, None],
        },
    )


def write_samples(out: Path) -> list[Path]:
    """Write the three sample meshes into ``out``; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "elasticity_2d.msh", out / "sphere_surface.vtu", out / "box_tetra.vtu"]
    plate = elasticity_2d()
    # meshio's ASCII gmsh writer prints numpy scalars with repr(): give it Python floats
    plate.point_data = {k: v.astype(object) for k, v in plate.point_data.items()}
    meshio.write(paths[0], plate, file_format="gmsh22", binary=False)
    meshio.write(paths[1], sphere_surface())
    meshio.write(paths[2], box_tetra())
    return paths


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE)
    for path in write_samples(parser.parse_args().out):
        print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KB)")

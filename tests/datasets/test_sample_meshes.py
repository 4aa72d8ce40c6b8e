"""The sample meshes committed in datasets/meshes: what they hold, and that their script
regenerates them exactly."""

import importlib.util
from pathlib import Path

import meshio
import numpy as np
import pytest

from meshop.data import group_masks, mesh_integrals, read_mesh

FOLDER = Path(__file__).resolve().parents[2] / "datasets" / "meshes"


def make_samples():
    spec = importlib.util.spec_from_file_location("make_samples", FOLDER / "make_samples.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_2d_fem_result_has_a_vector_field_and_boundary_groups():
    path = FOLDER / "elasticity_2d.msh"
    data = read_mesh(path, inputs=["displacement"], targets=["von_mises"], groups="masks")
    assert data.pos.shape[1] == 2 and data.x.shape[1] == 2  # a 2D vector, z dropped
    assert 200 < data.num_nodes < 1000
    mesh = meshio.read(path)
    assert set(group_masks(mesh)) == {"cavity", "clamped", "loaded", "sides", "solid"}
    assert bool((data.pos[data.group_clamped, 1] == 0).all())
    assert float(data.x[data.group_clamped].abs().max()) == 0.0  # clamped: no displacement
    lengths = mesh_integrals(mesh, {"one": np.ones(len(mesh.points))}, ["loaded", "sides"])
    assert lengths["loaded"]["one"] == pytest.approx(1.0)
    assert lengths["sides"]["one"] == pytest.approx(2.0)
    assert 0.75 < lengths["domain"]["one"] < 0.9  # the unit cell minus its cavity


def test_the_3d_surface_and_the_tetrahedral_volume_have_fields():
    sphere = read_mesh(FOLDER / "sphere_surface.vtu", inputs=["normals"], targets=["velocity"])
    assert sphere.pos.shape == (400, 3) and sphere.x.shape[1] == 3 and sphere.y.shape[1] == 3
    assert float(sphere.weight.sum()) == pytest.approx(4 * np.pi, rel=0.01)  # triangle areas
    box = read_mesh(FOLDER / "box_tetra.vtu", inputs=["conductivity"], targets=["heat_flux"])
    assert box.pos.shape[1] == 3 and "cell_index_tetra" in box and box.y.shape[1] == 3
    assert float(box.weight.sum()) == pytest.approx(1.0)
    # the heat produced (source 1 in the unit cube) leaves through the boundary: div q = 1
    mesh = meshio.read(FOLDER / "box_tetra.vtu")
    assert mesh_integrals(mesh, {"T": mesh.point_data["temperature"]})["domain"]["T"] > 0


def test_the_samples_are_small_and_regenerate_exactly(tmp_path):
    committed = sorted(p.name for p in FOLDER.iterdir() if p.suffix in (".msh", ".vtu"))
    assert committed == ["box_tetra.vtu", "elasticity_2d.msh", "sphere_surface.vtu"]
    for path in make_samples().write_samples(tmp_path):
        assert (FOLDER / path.name).stat().st_size < 100_000
        new, old = meshio.read(path), meshio.read(FOLDER / path.name)
        np.testing.assert_allclose(new.points, old.points, atol=1e-12)
        assert set(new.point_data) == set(old.point_data)
        for name in old.point_data:
            np.testing.assert_allclose(new.point_data[name], old.point_data[name], atol=1e-9)

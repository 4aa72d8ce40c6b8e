"""MeshFolder: a folder of mesh files as a dataset, its splits, cache and boundary errors."""

import os

import meshio
import numpy as np
import pytest
import torch

from meshop.data import make_loader
from meshop.datasets import MeshFolder
from meshop.errors import FieldError, MeshError, MeshReadError


def square_mesh(n: int, shift: float = 0.0) -> meshio.Mesh:
    """An n x n-node triangulated unit square with fields 'load' [N], 'u' [N, 2], 'vm' [N]."""
    x, y = np.meshgrid(np.linspace(0, 1, n), np.linspace(0, 1, n), indexing="ij")
    points = np.stack([x.ravel(), y.ravel(), np.zeros(n * n)], axis=1)
    node = np.arange(n * n).reshape(n, n)
    a, b, c, d = node[:-1, :-1], node[1:, :-1], node[1:, 1:], node[:-1, 1:]
    tri = np.concatenate(
        [np.stack([a, b, c], -1).reshape(-1, 3), np.stack([a, c, d], -1).reshape(-1, 3)]
    )
    load = points[:, 0] + shift
    fields = {"load": load, "u": np.stack([load, -load], 1), "vm": load**2}
    return meshio.Mesh(points, [("triangle", tri)], point_data=fields)


def names(dataset) -> set[str]:
    return {data.source for data in dataset}


@pytest.fixture
def folder(tmp_path):
    for i in range(5):
        meshio.write(tmp_path / f"run_{i}.vtu", square_mesh(3 + i, shift=float(i)))
    return tmp_path


def test_every_file_becomes_a_sample_with_stacked_fields(folder):
    ds = MeshFolder(folder, inputs=["load"], targets=["u", "vm"], split="all", progress=False)
    assert len(ds) == 5
    data = ds[2]  # run_2.vtu: a 5 x 5-node square, load = x + 2
    assert data.pos.shape == (25, 2) and data.x.shape == (25, 1) and data.y.shape == (25, 3)
    torch.testing.assert_close(data.x[:, 0], data.pos[:, 0] + 2.0)
    torch.testing.assert_close(data.y[:, 2], data.x[:, 0] ** 2)
    assert data.weight.sum().item() == pytest.approx(1.0)
    assert data.face.shape == (3, 32) and data.source.endswith("run_2.vtu")
    batch = next(iter(make_loader(ds, batch_size=5)))
    assert batch.num_graphs == 5 and batch.x.shape[0] == sum(d.num_nodes for d in ds)


def test_train_and_test_splits_partition_the_files_by_seed(folder):
    train = MeshFolder(folder, targets="vm", test_fraction=0.4, progress=False)
    test = MeshFolder(folder, targets="vm", split="test", test_fraction=0.4, progress=False)
    assert len(train) == 3 and len(test) == 2
    assert names(train) | names(test) == {str(folder / f"run_{i}.vtu") for i in range(5)}
    assert not names(train) & names(test)
    other = MeshFolder(
        folder, targets="vm", split="test", test_fraction=0.4, seed=5, progress=False
    )
    assert len(other) == 2


def test_second_construction_reads_the_cache_until_the_folder_changes(folder, monkeypatch):
    first = MeshFolder(folder, targets="vm", split="all", progress=False)
    import meshop.datasets.mesh_folder as module

    def no_reading(*args, **kwargs):
        raise AssertionError("cached files must not be read again")

    monkeypatch.setattr(module, "read_meshio", no_reading)
    cached = MeshFolder(folder, targets="vm", split="all", progress=False)
    torch.testing.assert_close(cached[4].y, first[4].y)
    monkeypatch.undo()

    meshio.write(folder / "run_1.vtu", square_mesh(3, shift=10.0))
    os.utime(folder / "run_1.vtu", ns=(1, 1))  # a new mtime even on coarse-clock filesystems
    changed = MeshFolder(folder, targets="vm", split="all", progress=False)
    torch.testing.assert_close(changed[1].y[:, 0], (changed[1].pos[:, 0] + 10.0) ** 2)


def test_pattern_selects_other_formats(tmp_path):
    for i in range(2):
        meshio.write(tmp_path / f"case{i}.vtk", square_mesh(3))
    meshio.write(tmp_path / "ignored.vtu", square_mesh(4))
    ds = MeshFolder(tmp_path, targets="vm", pattern="*.vtk", split="all", progress=False)
    assert len(ds) == 2 and all(d.num_nodes == 9 for d in ds)


def test_empty_or_missing_folder_says_what_it_found(tmp_path):
    (tmp_path / "notes.txt").write_text("no meshes here")
    with pytest.raises(MeshReadError, match=r"matches pattern '\*\.vtu'.*notes\.txt"):
        MeshFolder(tmp_path, targets="vm")
    with pytest.raises(MeshReadError, match="does not exist"):
        MeshFolder(tmp_path / "nowhere", targets="vm")


def test_missing_field_names_the_file_and_the_fields_it_has(folder):
    with pytest.raises(FieldError, match=r"run_0\.vtu.*'stress'.*\['load', 'u', 'vm'\]"):
        MeshFolder(folder, targets="stress", progress=False)


def test_mixed_dimensions_across_files_are_rejected(tmp_path):
    meshio.write(tmp_path / "a_plate.vtu", square_mesh(3))
    points = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1.0]])
    solid = meshio.Mesh(
        points, [("tetra", np.array([[0, 1, 2, 3]]))], point_data={"vm": np.ones(4)}
    )
    meshio.write(tmp_path / "b_solid.vtu", solid)
    with pytest.raises(
        MeshError, match=r"mixed dimensions: 'b_solid\.vtu' is 3D but 'a_plate\.vtu' is 2D"
    ):
        MeshFolder(tmp_path, targets="vm", progress=False)


def test_a_field_with_different_components_across_files_is_rejected(tmp_path):
    meshio.write(tmp_path / "a.vtu", square_mesh(3))
    other = square_mesh(3)
    other.point_data["vm"] = np.ones((9, 3))
    meshio.write(tmp_path / "b.vtu", other)
    with pytest.raises(
        FieldError, match=r"field 'vm' has 3 components in 'b\.vtu' but 1 in 'a\.vtu'"
    ):
        MeshFolder(tmp_path, targets=["u", "vm"], progress=False)

"""MeshFolder: a folder of mesh files as a dataset, its splits, cache and boundary errors."""

import meshio
import numpy as np
import pytest
import torch

from meshop.data import make_loader
from meshop.datasets import MeshFolder
from meshop.errors import ConfigError, FieldError, MeshError, MeshReadError
from tests.helpers import CountingReads, square_meshio


def names(dataset) -> set[str]:
    return {data.source for data in dataset}


@pytest.fixture
def folder(tmp_path):
    for i in range(5):
        meshio.write(tmp_path / f"run_{i}.vtu", square_meshio(3 + i, shift=float(i)))
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


def test_files_are_read_when_accessed_not_when_the_dataset_is_built(folder, monkeypatch):
    reads = CountingReads(monkeypatch)
    ds = MeshFolder(folder, targets="vm", split="all", progress=False)
    assert reads.files == ["run_0.vtu"]  # the first file only: the fields' layout
    assert len(ds) == 5 and ds.input_fields == [] and ds.target_fields == [("vm", 1)]
    assert reads.files == ["run_0.vtu"]
    data = ds[3]
    assert data.num_nodes == 36 and data.sample_id.item() == 3
    assert reads.files == ["run_0.vtu", "run_3.vtu"]
    ds[3]
    assert reads.files[-1] == "run_3.vtu" and len(reads.files) == 3  # no cache: read again
    MeshFolder(folder, targets="vm", split="train", progress=False)
    assert len(reads.files) == 4  # building a split reads one file too


def test_a_small_cache_keeps_the_most_recently_used_samples(folder, monkeypatch):
    reads = CountingReads(monkeypatch)
    ds = MeshFolder(folder, targets="vm", split="all", cache_size=2, progress=False)
    for i in (1, 2, 1, 3, 1, 2):
        ds[i]
    # 1, 2 read; 1 from the cache; 3 evicts 2 (the least recently used); 1 cached; 2 read again
    assert reads.files[1:] == ["run_1.vtu", "run_2.vtu", "run_3.vtu", "run_2.vtu"]
    assert len(ds._cache) == 2
    with pytest.raises(ConfigError, match="cache_size"):
        MeshFolder(folder, targets="vm", cache_size=-1)


def test_a_modified_file_is_read_afresh(folder):
    ds = MeshFolder(folder, targets="vm", split="all", progress=False)
    meshio.write(folder / "run_1.vtu", square_meshio(3, shift=10.0))
    torch.testing.assert_close(ds[1].y[:, 0], (ds[1].pos[:, 0] + 10.0) ** 2)


def test_dataloader_workers_read_the_same_samples(folder):
    ds = MeshFolder(folder, inputs="load", targets=["u", "vm"], split="all", progress=False)
    serial = list(make_loader(ds, batch_size=2))
    parallel = list(make_loader(ds, batch_size=2, num_workers=2))
    assert len(serial) == len(parallel) == 3
    for a, b in zip(serial, parallel):
        torch.testing.assert_close(a.y, b.y)
        assert a.sample_id.tolist() == b.sample_id.tolist()


def test_pattern_selects_other_formats(tmp_path):
    for i in range(2):
        meshio.write(tmp_path / f"case{i}.vtk", square_meshio(3))
    meshio.write(tmp_path / "ignored.vtu", square_meshio(4))
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
    meshio.write(tmp_path / "a_plate.vtu", square_meshio(3))
    points = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1.0]])
    solid = meshio.Mesh(
        points, [("tetra", np.array([[0, 1, 2, 3]]))], point_data={"vm": np.ones(4)}
    )
    meshio.write(tmp_path / "b_solid.vtu", solid)
    ds = MeshFolder(tmp_path, targets="vm", split="all", progress=False)
    with pytest.raises(
        MeshError, match=r"mixed dimensions: 'b_solid\.vtu' is 3D but 'a_plate\.vtu' is 2D"
    ):
        ds[1]  # checked when the file is read


def test_a_field_with_different_components_across_files_is_rejected(tmp_path):
    meshio.write(tmp_path / "a.vtu", square_meshio(3))
    other = square_meshio(3)
    other.point_data["vm"] = np.ones((9, 3))
    meshio.write(tmp_path / "b.vtu", other)
    ds = MeshFolder(tmp_path, targets=["u", "vm"], split="all", progress=False)
    with pytest.raises(
        FieldError, match=r"field 'vm' has 3 components in 'b\.vtu' but 1 in 'a\.vtu'"
    ):
        list(ds)


def test_build_dataset_takes_the_split_as_a_dataset_option_too(folder):
    from meshop.datasets.registry import build_dataset

    every = build_dataset("folder", "test", str(folder), split="all", targets="vm")
    assert len(every) == 5 and every.split == "all"  # as `meshop evaluate --dataset-arg split=...`
    assert len(build_dataset("folder", "test", str(folder), targets="vm")) == 1
    with pytest.raises(ConfigError, match="^'split' of dataset 'folder' expects a string, got 1"):
        build_dataset("folder", "test", str(folder), split=1)

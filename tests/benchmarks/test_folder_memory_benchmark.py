"""benchmarks/speed/folder_memory.py: writes its folder, measures a training process, cleans up."""

import json

import meshio

from benchmarks.speed import folder_memory as bench


def test_folder_memory_measures_one_epoch_and_deletes_its_folder(tmp_path):
    mesh = tmp_path / "one.vtu"
    bench.write_mesh(mesh, 400, seed=1)
    read = meshio.read(mesh)
    assert read.points.shape == (400, 3) and read.point_data["u"].shape == (400, 2)
    scratch = tmp_path / "scratch"
    argv = ["--quick", "--cases", "lazy", "--scratch", str(scratch), "--out", str(tmp_path)]
    records = bench.main(argv)
    assert len(records) == 1 and "error" not in records[0], records
    assert records[0]["files"] >= 10 and records[0]["peak_mb"] > 50  # torch alone is more
    assert records[0]["tree_peak_mb"] > 50
    assert not scratch.exists()  # the scratch folder is deleted
    assert json.loads((tmp_path / "folder_memory.json").read_text())["records"] == records
    assert "| lazy | " in (tmp_path / "folder_memory.md").read_text()

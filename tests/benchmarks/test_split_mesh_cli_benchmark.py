"""benchmarks.speed.split_mesh_cli: `meshop train` on one process and with `--split-mesh` on two,
the same command otherwise, its steps timed and its losses compared."""

import json
import statistics

from benchmarks.speed import split_mesh_cli


def test_split_mesh_cli_times_the_same_training_on_one_and_two_processes(tmp_path, capsys):
    split_mesh_cli.main(["--quick", "--out", str(tmp_path)])
    records = json.loads((tmp_path / "split_mesh_cli.json").read_text())["records"]
    runs = [(r["model"], r["processes"]) for r in records]
    assert runs == [("pit", 1), ("pit", 2), ("transolver", 1), ("transolver", 2)]
    for one, two in zip(records[::2], records[1::2]):
        assert one["command"].startswith("meshop train --dataset folder --data-dir FOLDER")
        split = f"torchrun --nproc_per_node=2 -m meshop.cli {one['command'][7:]} --split-mesh"
        assert two["command"] == split
        for r in (one, two):
            assert len(r["steps_s"]) == len(r["losses"]) == 4  # 2 meshes, 2 epochs
            assert r["step_s"] == statistics.median(r["steps_s"][1:]) > 0
            assert r["epoch_step_s"] > 0 and r["peak_mb"] >= r["step_peak_mb"] > 0
        # float32: the sums of two processes' parts in another order
        assert two["loss_rel_diff"] < 1e-4 and two["param_rel_diff"] < 1e-3
    table = (tmp_path / "split_mesh_cli.md").read_text()
    assert table in capsys.readouterr().out
    header = "| processes | N | training step | step with reading | peak memory per process |"
    assert table.count(header) == 2 and "### PiT(width=64" in table
    assert "### Transolver(width=64, layers=4, heads=4, slices=32): speed-up " in table

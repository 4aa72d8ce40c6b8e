"""The benchmark scripts: each runs at a tiny size and writes its tables; the measurement and the
dense references they compare against are right."""

import copy
import importlib
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from benchmarks import run_all
from benchmarks.accuracy import grid_zero_shot, large_mesh_zero_shot, tune
from benchmarks.accuracy import model_table as accuracy
from benchmarks.lib import attention_layers, common
from benchmarks.lib.training_runs import dataset_options, parse_settings
from benchmarks.report import demo, figures, summary
from benchmarks.speed import global_attention, local_attention, whole_models

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def allocate(megabytes: int, device: str):
    """A case whose input holds ``megabytes`` and whose step allocates as much again."""
    held = torch.ones(megabytes * 2**18)

    def step():
        return torch.empty_like(held).fill_(2.0)

    return step


@pytest.mark.parametrize(("module", "name"), run_all.SCRIPTS.items())
def test_benchmark_script_runs_quick_and_writes_its_tables(module, name, tmp_path, capsys):
    importlib.import_module(module).main(["--quick", "--out", str(tmp_path)])
    records = json.loads((tmp_path / f"{name}.json").read_text())["records"]
    assert records
    for record in records:
        assert "error" not in record, record
        assert "skipped" in record or (record["time_s"] > 0 and record["peak_mb"] >= 0), record
    table = (tmp_path / f"{name}.md").read_text()
    assert table.startswith("## ") and "| " in table
    assert table in capsys.readouterr().out
    assert f" at commit {common.commit()} " in table and ", load average " in table


def test_the_commit_of_a_measurement_is_the_checkout_and_says_when_the_code_differs(
    tmp_path, monkeypatch
):
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=common.ROOT, capture_output=True, text=True
    ).stdout.strip()
    assert common.commit().removesuffix("+changes") == head
    monkeypatch.setattr(common, "ROOT", tmp_path)  # not a git clone
    assert common.commit() == "unknown"
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "meshop").mkdir()
    (tmp_path / "meshop" / "a.py").write_text("x = 1\n")
    env = ["-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "add", "."], cwd=tmp_path, check=True)
    subprocess.run(["git", *env, "commit", "-qm", "a"], cwd=tmp_path, check=True)
    clean = common.commit()
    assert len(clean) >= 7 and "+" not in clean
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "benchmarks" / "results" / "x.md").write_text("a result\n")
    assert common.commit() == clean  # result files are what a measurement writes
    (tmp_path / "meshop" / "a.py").write_text("x = 2\n")
    assert common.commit() == clean + "+changes"


def test_measured_peak_memory_counts_the_call_and_not_the_inputs():
    result = common.run_case(
        allocate,
        {"megabytes": 200},
        device="cpu",
        threads=1,
        timeout=120,
        min_time=0.0,
    )
    assert 190 <= result["peak_mb"] <= 260, result
    assert result["total_peak_mb"] >= result["peak_mb"] + 200  # the 200 MB input exists too


def test_a_warm_measurement_times_the_calls_after_the_first_and_keeps_the_larger_peak():
    """A slow step is timed once, cold, unless the case asks for warm calls (training steps,
    whose first call searches the neighbours): then its first call is left out of the time but
    not out of the peak memory."""
    calls = []

    def step():
        calls.append(1)
        if len(calls) == 1:  # the first call: slow, and 50 MB at its peak
            block = bytearray(50 * 2**20)
            block[::4096] = b"x" * len(block[::4096])
            time.sleep(0.3)

    cold = common.measure(step, "cpu", min_time=0.1, max_repeats=3)
    assert cold["time_s"] >= 0.3 and cold["calls_timed"] == 1 and len(calls) == 1
    calls.clear()
    warm = common.measure(step, "cpu", min_time=0.1, max_repeats=3, warm=True)
    assert warm["time_s"] < 0.1 and warm["calls_timed"] == 3 and len(calls) == 4
    assert warm["peak_mb"] >= 40


def test_dense_estimate_scales_the_largest_measured_case():
    records = [
        {"impl": "dense", "elements": 2**20, "peak_mb": 12.0},
        {"impl": "dense", "elements": 2**22, "peak_mb": 80.0},  # 5 matrices of 16 MB
        {"impl": "meshop", "elements": 2**24, "peak_mb": 1.0},
    ]
    gb, k = common.dense_estimate(records, {"impl": "dense"}, 2**28, default_k=9.0)
    assert k == pytest.approx(5.0)
    assert gb == pytest.approx(5.0)
    assert common.dense_estimate([], {"impl": "dense"}, 2**28, default_k=9.0)[1] == 9.0


def test_dense_position_attention_is_the_same_layer():
    assert global_attention.check_agreement(400, 50) < 1e-5


def test_dense_local_attention_is_the_same_layer():
    assert local_attention.check_agreement(500) < 1e-5


def test_dense_pit_is_the_same_model():
    assert whole_models.check_agreement(150, 2) < 1e-5


def test_dense_quantile_mask_keeps_the_quantile_of_every_row():
    pos_src, pos_dst = torch.rand(200, 2), torch.rand(30, 2)
    v = torch.eye(200)[:, None, :]  # one head whose output row is the attention row itself
    lam = torch.tensor([0.0])
    attn = attention_layers.dense_attention(v, pos_src, pos_dst, lam, quantile=0.1)
    kept = (attn > 0).sum(1)
    assert torch.all(kept == 20)  # ceil(0.1 * 199) + ties; random points have none
    assert torch.allclose(attn.sum(1), torch.ones(30))


def test_accuracy_script_trains_within_budget_and_evaluates_finer_grids(tmp_path, monkeypatch):
    """Two runs side by side (--jobs 2, one process each) after the data is generated once."""
    monkeypatch.setenv("MESHOP_DATA", str(tmp_path / "data"))
    runs, out = str(tmp_path / "runs"), str(tmp_path)
    args = ["--quick", "--datasets", "darcy", "--models", "pit,mlp", "--runs", runs, "--out", out]
    accuracy.main([*args, "--jobs", "2"])
    records = json.loads((tmp_path / "accuracy.json").read_text())["records"]
    assert [r["model"] for r in records] == ["pit", "mlp"]
    for record in records:
        assert record["epochs"] >= 1 and record["parameters"] > 0
        assert 0 < record["test_rel_l2"] < 10
    grids = records[0]["super_resolution"]
    assert list(grids) == ["6", "11", "21"]  # the training grid, 2x and 4x finer
    assert "super_resolution" not in records[1]  # the baseline is not a resolution-free operator
    tables = (tmp_path / "accuracy.md").read_text()
    assert "zero-shot super-resolution" in tables
    redrawn = tmp_path / "redrawn"
    results = str(tmp_path / "accuracy.json")
    accuracy.main(["--tables-from", results, "--out", str(redrawn)])
    assert (redrawn / "accuracy.md").read_text() == tables
    assert "the whole command took" in tables
    # a second budget: its own result files, and the README section of its name
    readme = tmp_path / "README.md"
    readme.write_text(
        "<!-- --8<-- [start:accuracy] -->\nA\n<!-- --8<-- [end:accuracy] -->\n"
        "<!-- --8<-- [start:accuracy_600s] -->\nB\n<!-- --8<-- [end:accuracy_600s] -->\n"
    )
    monkeypatch.setattr(accuracy, "README", readme)
    monkeypatch.setattr(accuracy.common, "RESULTS", redrawn)
    accuracy.main(["--tables-from", results, "--out", str(redrawn), "--name", "accuracy_600s"])
    assert (redrawn / "accuracy_600s.md").read_text() == tables
    sections = readme.read_text()
    assert "\nA\n" in sections and "\nB\n" not in sections
    assert accuracy.summary_table(records) in sections.split("[start:accuracy_600s]")[1]

    # an interrupted table resumes from the pairs already finished, trains nothing twice and
    # reuses no record measured with another budget
    log = tmp_path / "runs" / "records.jsonl"
    with log.open("a") as f:
        f.write('{"key": {"budget"')  # a line cut short by the interruption
    trained = []
    monkeypatch.setattr(accuracy, "pair_record", lambda d, m, a: trained.append(m) or records[1])
    accuracy.main([*args, "--out", str(tmp_path / "resumed"), "--resume"])
    assert trained == []
    resumed = json.loads((tmp_path / "resumed" / "accuracy.json").read_text())["records"]
    assert resumed == records
    page = (tmp_path / "resumed" / "accuracy.md").read_text()  # says it trained none
    assert "this command trained none" in page and "the whole command took" not in page
    accuracy.main([*args, "--out", str(tmp_path / "other"), "--resume", "--epochs", "2"])
    assert trained == ["pit", "mlp"]
    accuracy.main([*args, "--out", str(tmp_path / "fresh")])  # no --resume: starts over
    assert trained == ["pit", "mlp"] * 2 and len(log.read_text().splitlines()) == 2


def test_accuracy_equal_time_divides_frozen_epoch_times_and_trains_every_seed(
    tmp_path, monkeypatch
):
    """--calibrate freezes each pair's time per epoch; --equal-time gives every pair that time
    in epochs from the frozen file; --seeds trains each pair once per seed on the same data and
    reports the mean and the spread."""
    monkeypatch.setenv("MESHOP_DATA", str(tmp_path / "data"))
    args = ["--quick", "--datasets", "darcy", "--models", "pit,mlp"]
    args += ["--runs", str(tmp_path / "runs"), "--out", str(tmp_path)]
    with pytest.raises(SystemExit, match="--calibrate"):
        accuracy.main([*args, "--equal-time", "4"])
    with pytest.raises(SystemExit):
        accuracy.parse_args(["--epochs", "2", "--equal-time", "4"])  # one budget at a time
    accuracy.main([*args, "--calibrate"])
    path = tmp_path / accuracy.EPOCH_SECONDS
    frozen = json.loads(path.read_text())
    assert {(r["dataset"], r["model"]) for r in frozen["records"]} == {
        ("darcy", "pit"),
        ("darcy", "mlp"),
    }
    assert all(r["epoch_seconds"] > 0 for r in frozen["records"])
    assert "CPU time per epoch" in path.with_suffix(".md").read_text()
    for record in frozen["records"]:  # known times: known epochs
        record["epoch_seconds"] = {"pit": 2.0, "mlp": 0.5}[record["model"]]
    path.write_text(json.dumps(frozen))
    accuracy.main([*args, "--equal-time", "4", "--seeds", "0,1"])
    data = json.loads((tmp_path / "accuracy.json").read_text())
    records = {r["model"]: r for r in data["records"]}
    assert records["pit"]["epochs"] == 2 and records["mlp"]["epochs"] == 8
    for record in records.values():
        runs = record["seeds"]
        errors = [run["test_rel_l2"] for run in runs.values()]
        assert list(runs) == ["0", "1"] and errors[0] != errors[1]  # another initialisation
        assert record["test_rel_l2"] == pytest.approx(sum(errors) / 2)
        assert record["spread"] == pytest.approx(abs(errors[0] - errors[1]))
        assert len({run["checkpoint"] for run in runs.values()}) == 2
    assert data["machine"]["seeds"] == [0, 1]
    assert "4 s of training" in data["machine"]["budget"]
    tables = (tmp_path / "accuracy.md").read_text()
    assert "training seeds 0, 1" in tables and "| seed 0 / 1 | spread |" in tables
    assert "| epochs | time per epoch | training |" in tables  # the divisor of each row
    assert "| 2 | 2.00 s |" in tables and "| 8 | 500.0 ms |" in tables
    assert f"{records['mlp']['test_rel_l2']:.4f} ± {records['mlp']['spread'] / 2:.4f}" in tables


def test_accuracy_samples_train_other_splits_on_their_own_calibration(tmp_path, monkeypatch):
    """--samples gives a dataset other split sizes: --calibrate times an epoch of that split
    beside the table split's time (neither replaces the other), --equal-time divides the time of
    the split it trains on (a clear error when that split was never timed), the records and
    tables say the split, and --resume reuses no record of another split."""
    monkeypatch.setenv("MESHOP_DATA", str(tmp_path / "data"))
    args = ["--quick", "--datasets", "darcy", "--models", "mlp"]
    args += ["--runs", str(tmp_path / "runs"), "--out", str(tmp_path)]
    for bad in ("darcy", "darcy=0", "darcy=x/2", "nowhere=10", "darcy=10/"):
        with pytest.raises(SystemExit):
            accuracy.parse_args(["--samples", bad])
    parsed = accuracy.parse_args(["--samples", "darcy=6/3,burgers=9"])
    assert parsed.samples == {"darcy": {"num_train": 6, "num_test": 3}, "burgers": {"num_train": 9}}
    parsed.quick = True
    assert dataset_options("darcy", parsed)["num_train"] == 6
    assert dataset_options("darcy", parsed)["resolution"] == 6  # the table's other options
    accuracy.main([*args, "--calibrate"])
    with pytest.raises(SystemExit, match="--samples darcy=6"):
        accuracy.main([*args, "--equal-time", "4", "--samples", "darcy=6/3"])
    accuracy.main([*args, "--calibrate", "--samples", "darcy=6/3"])
    path = tmp_path / accuracy.EPOCH_SECONDS
    frozen = json.loads(path.read_text())
    assert sorted(r["num_train"] for r in frozen["records"]) == [4, 6]
    for record in frozen["records"]:  # known times: known epochs
        record["epoch_seconds"] = {4: 2.0, 6: 0.5}[record["num_train"]]
    path.write_text(json.dumps(frozen))
    assert "| darcy | MLP baseline | 6 | 500.0 ms |" in accuracy.write_epoch_table(path)
    accuracy.main([*args, "--equal-time", "4", "--samples", "darcy=6/3"])
    (record,) = json.loads((tmp_path / "accuracy.json").read_text())["records"]
    assert record["epochs"] == 8 and record["options"]["num_train"] == 6
    assert "darcy: 6 train / 3 test samples" in (tmp_path / "accuracy.md").read_text()
    trained = []
    monkeypatch.setattr(accuracy, "pair_record", lambda d, m, a: trained.append(m) or record)
    accuracy.main([*args, "--equal-time", "4", "--resume", "--out", str(tmp_path)])
    assert trained == ["mlp"]  # the table's split: the 6-sample record is not reused


def test_a_calibration_on_another_processor_keeps_each_rows_processor(tmp_path, monkeypatch):
    """Calibrations merge: a pair timed on another processor than the file's earlier pairs says
    so in a processor column, and the earlier pairs keep the processor they were timed on."""
    path = tmp_path / accuracy.EPOCH_SECONDS
    earlier = {"dataset": "d", "model": "pit", "epoch_seconds": 2.0, "wall_seconds": 2.0}
    path.write_text(json.dumps({"machine": {"cpu": "AMD EPYC"}, "records": [earlier]}))
    timed = {"dataset": "d", "model": "mlp", "epoch_seconds": 0.5, "wall_seconds": 0.5}
    monkeypatch.setattr(accuracy, "calibrate_pair", lambda d, m, a: dict(timed))
    machine = accuracy.common.machine
    monkeypatch.setattr(accuracy.common, "machine", lambda: {**machine(), "cpu": "Intel Xeon"})
    args = accuracy.parse_args(["--out", str(tmp_path)])
    accuracy.calibrate([("d", "mlp")], args)
    records = {r["model"]: r for r in json.loads(path.read_text())["records"]}
    assert (records["pit"]["cpu"], records["mlp"]["cpu"]) == ("AMD EPYC", "Intel Xeon")
    table = path.with_suffix(".md").read_text()
    assert "on the processor of each row" in table and "| measured | processor |" in table
    assert "| 2.00 s | 2.00 s | - | AMD EPYC |" in table
    # one processor: no column
    accuracy.calibrate([("d", "mlp")], args)
    path.write_text(json.dumps({**json.loads(path.read_text()), "records": [records["mlp"]]}))
    assert "processor" not in accuracy.write_epoch_table(path)


def test_accuracy_single_seed_datasets_train_the_first_seed_only(tmp_path, monkeypatch):
    """--single-seed trains its datasets with the first of --seeds only (the others with every
    seed), says so in the tables, and --resume reuses a record only with the seeds it needs."""
    monkeypatch.setenv("MESHOP_DATA", str(tmp_path / "data"))
    args = ["--quick", "--datasets", "darcy,burgers", "--models", "mlp", "--seeds", "0,1"]
    args += ["--runs", str(tmp_path / "runs"), "--out", str(tmp_path)]
    accuracy.main([*args, "--single-seed", "burgers"])
    data = json.loads((tmp_path / "accuracy.json").read_text())
    records = {r["dataset"]: r for r in data["records"]}
    assert list(records["darcy"]["seeds"]) == ["0", "1"] and "spread" in records["darcy"]
    assert "seeds" not in records["burgers"] and "spread" not in records["burgers"]
    assert not (tmp_path / "runs" / "burgers-mlp-seed1").exists()
    tables = " ".join((tmp_path / "accuracy.md").read_text().split())
    assert "training seeds 0, 1 (Burgers: seed 0 only)" in tables
    trained = []
    monkeypatch.setattr(accuracy, "pair_record", lambda d, m, a: trained.append(d) or records[d])
    accuracy.main([*args, "--single-seed", "burgers", "--resume", "--out", str(tmp_path / "r")])
    assert trained == []
    accuracy.main([*args, "--resume", "--out", str(tmp_path / "r2")])
    assert trained == ["burgers"]  # its record has one seed, this command wants two


def test_accuracy_update_merges_rows_and_evaluates_finer_meshes(tmp_path, monkeypatch):
    """--update replaces the rows of the same dataset and model in their place, notes them with the
    command, and keeps the other rows except those of --forget datasets; DarcyMesh models are
    evaluated on the same test domains meshed 2x and 4x finer."""
    monkeypatch.setenv("MESHOP_DATA", str(tmp_path / "data"))
    old = {"date": "then", "command": "python accuracy.py", "cpu": "cpu", "torch": "t"}
    old.update(threads=1, seed=0, budget="2 min of training", quick=False)

    def row(dataset, model, error):
        options = {"num_train": 2, "num_test": 1}
        return dict(
            dataset=dataset,
            model=model,
            test_rel_l2=error,
            test_rel_l2_median=error,
            parameters=1,
            epochs=1,
            train_seconds=1.0,
            options=options,
        )

    rows = [
        row("darcy-mesh", "mlp", 9.0),
        row("darcy-mesh", "pit", 8.0),
        row("airfoil", "pit", 7.0),
    ]
    (tmp_path / "accuracy.json").write_text(json.dumps({"machine": old, "records": rows}))
    runs, out = str(tmp_path / "runs"), str(tmp_path)
    args = ["--quick", "--datasets", "darcy-mesh", "--models", "mlp", "--runs", runs, "--out", out]
    accuracy.main([*args, "--update", "--forget", "airfoil"])
    data = json.loads((tmp_path / "accuracy.json").read_text())
    assert data["machine"]["date"] == "then"  # the table keeps its first header
    records = {(r["dataset"], r["model"]): r for r in data["records"]}
    assert set(records) == {("darcy-mesh", "pit"), ("darcy-mesh", "mlp")}
    assert [r["model"] for r in data["records"]] == ["mlp", "pit"]  # the rerun row keeps its place
    assert (
        records["darcy-mesh", "pit"]["test_rel_l2"] == 8.0
        and "rerun" not in records["darcy-mesh", "pit"]
    )
    mlp = records["darcy-mesh", "mlp"]
    assert 0 < mlp["test_rel_l2"] < 10
    assert mlp["rerun"]["date"] != "then"
    assert mlp["rerun"]["command"] and "budget: 1 epochs" in mlp["rerun"]["why"]
    assert list(mlp["refinement"]) == ["0", "1", "2"]  # training meshes, 2x and 4x finer
    assert mlp["refinement"]["0"] == mlp["test_rel_l2"]
    tables = (tmp_path / "accuracy.md").read_text()
    assert "Darcy-mesh 2x / 4x finer (zero-shot)" in tables
    assert "darcy-mesh zero-shot" in tables and "The MLP baseline row was measured" in tables


def test_rows_measured_by_one_command_share_one_note():
    def row(model, command):
        note = {"what": "measured", "date": "d", "command": command, "why": "(w)"}
        record = dict(dataset="d", model=model, parameters=1, test_rel_l2=0.5, epochs=1)
        record.update(test_rel_l2_median=0.5, train_seconds=1.0)
        record["options"] = {"num_train": 2, "num_test": 1}
        return {**record, "rerun": note} if command else record

    rows = [row("pit", "a"), row("ono", "b"), row("mlp", "a"), row("galerkin", None)]
    _, table = accuracy.dataset_table(rows, "d")
    assert "The PiT and MLP baseline rows were measured at d with `a` (w)." in table
    assert "The ONO row was measured at d with `b` (w)." in table
    assert table.count("measured at") == 2
    _, table = accuracy.dataset_table(rows[:1], "d")
    assert table.startswith("Every row was measured at d with `a` (w).")


def test_accuracy_update_of_every_row_takes_the_new_header(tmp_path):
    old = {
        "machine": {"date": "then", "budget": "2 min"},
        "records": [{"dataset": "d", "model": "m"}],
    }
    path = tmp_path / "accuracy.json"
    path.write_text(json.dumps(old))
    new = {"date": "now", "command": "c", "budget": "epochs", "threads": 1}
    info, records = accuracy.merged(path, new, [{"dataset": "d", "model": "m", "x": 1}], "")
    assert info["date"] == "now" and records == [{"dataset": "d", "model": "m", "x": 1}]
    info, records = accuracy.merged(path, new, [{"dataset": "e", "model": "m"}], "")
    assert info["date"] == "then" and len(records) == 2 and "rerun" in records[1]


def test_accuracy_update_on_another_processor_says_so_in_the_rows_note(tmp_path):
    old = {
        "machine": {"date": "then", "budget": "2 min", "cpu": "AMD EPYC"},
        "records": [{"dataset": "d", "model": "m"}, {"dataset": "d", "model": "k"}],
    }
    path = tmp_path / "accuracy.json"
    path.write_text(json.dumps(old))
    for cpu, said in (
        ("Intel Xeon", ", on Intel Xeon, not the table's AMD EPYC"),
        ("AMD EPYC", ""),
    ):
        new = {"date": "now", "command": "c", "budget": "epochs", "threads": 1, "cpu": cpu}
        _, records = accuracy.merged(path, new, [{"dataset": "d", "model": "m"}], "")
        rerun = next(r["rerun"] for r in records if r["model"] == "m")
        assert rerun["why"] == f"(budget: epochs, 1 thread(s){said})"


def test_accuracy_epoch_budget_covers_every_pair_of_the_table():
    from meshop.datasets.registry import dataset_entry

    pairs = {
        (d, m) for d in accuracy.DATASETS for m in accuracy.MODELS if m in dataset_entry(d).models
    }
    assert pairs <= set(accuracy.EPOCHS)
    args = accuracy.parse_args([])
    assert (
        accuracy.epochs_in_budget("elasticity", "pit", args)[0]
        == accuracy.EPOCHS["elasticity", "pit"]
    )
    assert "EPOCHS" in accuracy.budget(args)


def test_super_resolution_grids_sample_the_same_fine_fields():
    assert accuracy.super_resolutions(22, 421) == [43, 85]
    assert accuracy.super_resolutions(6, 41) == [11, 21]
    assert accuracy.super_resolutions(29, 421) == []  # 56 and 112 intervals do not divide 420


def test_large_mesh_zero_shot_trains_on_every_node_and_on_a_fraction_and_evaluates_finer(
    tmp_path,
):
    """Both runs train on the same samples and are evaluated on the same test domains at every
    finer level, in chunks (--quick: chunks of 64 nodes)."""
    where = ["--data-dir", str(tmp_path / "data"), "--runs", str(tmp_path / "runs")]
    large_mesh_zero_shot.main(["--quick", *where, "--out", str(tmp_path)])
    records = json.loads((tmp_path / "large_mesh_zero_shot.json").read_text())["records"]
    trained = [r for r in records if r["kind"] == "training"]
    assert [r["node_fraction"] for r in trained] == [1.0, 0.25]
    assert trained[0]["parameters"] == trained[1]["parameters"]
    assert all(r["train_seconds"] > 0 and r["epochs"] == 1 for r in trained)
    evaluated = [r for r in records if r["kind"] == "evaluation"]
    runs = ("every node", "node fraction")
    assert [(r["run"], r["refinement"]) for r in evaluated] == [
        (run, level) for level in (0, 1, 2) for run in runs
    ]
    first_mesh = [r["nodes"][0] for r in evaluated[::2]]
    assert first_mesh[0] < first_mesh[1] < first_mesh[2]  # the same domain, finer
    assert all(r["chunk_nodes"] == 64 and 0 < r["test_rel_l2"] < 10 for r in evaluated)
    # in chunks, the training level's error is the one the training run measured whole
    assert evaluated[0]["test_rel_l2"] == pytest.approx(trained[0]["test_rel_l2"], rel=1e-4)
    text = (tmp_path / "large_mesh_zero_shot.md").read_text()
    assert "| 2 (4x finer) |" in text and "### Generation and evaluation per refinement" in text
    assert "What the tables show" not in text  # the findings are written in docs/large_meshes.md
    assert "per epoch while both trained" in text
    results = str(tmp_path / "large_mesh_zero_shot.json")
    large_mesh_zero_shot.main(["--tables-from", results, "--out", str(tmp_path / "redrawn")])
    assert (tmp_path / "redrawn" / "large_mesh_zero_shot.md").read_text() == text
    with pytest.raises(SystemExit):
        large_mesh_zero_shot.parse_args(["--quick", "--num-test", "2,2"])  # levels 0, 1, 2


def test_plots_draw_every_figure_from_the_results(tmp_path):
    def record(**fields):
        return {"device": "cpu", "time_s": 0.1 * fields.pop("scale"), "peak_mb": 3.0, **fields}

    results = {
        "position_attention": [
            record(kind="cross", impl=impl, n_src=n, n_dst=t, backward=True, scale=n / 1e3)
            for impl in ("meshop", "dense")
            for n in (1000, 10000)
            for t in (256, 4096)
        ],
        "local_attention": [
            record(field=f, impl=impl, n_src=n, backward=True, scale=n / 1e3)
            for f in ("knn", "quantile")
            for impl in ("meshop", "dense")
            for n in (1000, 10000)
        ],
        "linear_attention": [
            record(attention=a, n=n, scale=n / 512)
            for a in ("galerkin", "linear", "fourier", "softmax")
            for n in (512, 2048)
        ],
    }
    for name, records in results.items():
        (tmp_path / f"{name}.json").write_text(json.dumps({"records": records}))
    figures.main(["--results", str(tmp_path), "--out", str(tmp_path / "figures")])
    for name in ("position_attention", "local_attention", "attention_cost"):
        assert (tmp_path / "figures" / f"benchmarks_{name}.png").stat().st_size > 10_000


def accuracy_section(table: str) -> str:
    return f"<!-- --8<-- [start:accuracy] -->\n{table}\n<!-- --8<-- [end:accuracy] -->"


def test_readme_accuracy_table_is_generated_from_the_measured_results():
    """The README's accuracy table is accuracy.json's (rerun ``python -m
    benchmarks.accuracy.model_table --tables-from benchmarks/results/accuracy.json`` after
    changing the results); the sentences around it are checked in tests/docs."""
    data = json.loads((BENCHMARKS / "results" / "accuracy.json").read_text())
    readme = (BENCHMARKS.parent / "README.md").read_text()
    assert accuracy_section(accuracy.summary_table(data["records"])) in readme


def test_accuracy_tables_of_the_project_results_update_the_readme_table(tmp_path, monkeypatch):
    """Tables drawn into the project's own result folder rewrite the README's marked table and
    nothing else; drawn elsewhere (a quick run), they leave the README alone."""
    results = tmp_path / "results"
    results.mkdir()
    shutil.copy(BENCHMARKS / "results" / "accuracy.json", results)
    readme = tmp_path / "README.md"
    readme.write_text(f"top\n{accuracy_section('old')}\nbottom\n")
    monkeypatch.setattr(accuracy, "README", readme)
    monkeypatch.setattr(common, "RESULTS", results.resolve())
    redraw = ["--tables-from", str(results / "accuracy.json"), "--out"]
    accuracy.main([*redraw, str(tmp_path / "elsewhere")])
    assert readme.read_text() == f"top\n{accuracy_section('old')}\nbottom\n"
    accuracy.main([*redraw, str(results)])
    records = json.loads((results / "accuracy.json").read_text())["records"]
    table = accuracy.summary_table(records)
    assert readme.read_text() == f"top\n{accuracy_section(table)}\nbottom\n"
    readme.write_text("no markers")
    with pytest.raises(SystemExit, match="lacks the markers"):
        accuracy.main([*redraw, str(results)])


def test_grid_zero_shot_stages_run_from_the_old_grid_path_to_the_models_forward():
    from meshop.data import make_loader, uniform_grid
    from meshop.models import GalerkinTransformer

    torch.manual_seed(0)
    sizes = dict(width=8, heads=2, layers=1, spectral_width=6, modes=12, mlp_ratio=2)
    trained = GalerkinTransformer(3, 1, 2, grid_shape=22, **sizes).eval()
    unrecorded = GalerkinTransformer(3, 1, 2, **sizes).eval()  # every grid its own training grid
    unrecorded.load_state_dict(trained.state_dict())
    unrecorded.grid_shape = None  # the state dict carries the training grid
    g = torch.Generator().manual_seed(0)
    fields = [uniform_grid((43, 43), x=torch.randn(43 * 43, generator=g)) for _ in range(2)]
    batch = next(iter(make_loader(fields, batch_size=2)))
    with torch.no_grad():
        every_stage = grid_zero_shot.StagedGridPath(trained, (22, 22), grid_zero_shot.STAGES)(batch)
        no_stage = grid_zero_shot.StagedGridPath(trained, (22, 22), ())(batch)
        torch.testing.assert_close(every_stage, trained(batch), atol=1e-6, rtol=0)
        torch.testing.assert_close(no_stage, unrecorded(batch), atol=1e-6, rtol=0)
        assert (every_stage - no_stage).abs().max() > 1e-4  # so the two checks differ


def test_tune_reads_settings_and_tabulates_trials(tmp_path):
    chosen = parse_settings(["train.lr=3e-3", "model.path=mesh", "dataset.num_train=10"])
    assert chosen == {
        "train": {"lr": 0.003},
        "model": {"path": "mesh"},
        "dataset": {"num_train": 10},
    }
    for bad in ("lr=3e-3", "optim.lr=1", "train.lr"):
        with pytest.raises(SystemExit, match="PART.KEY=VALUE"):
            parse_settings([bad])
    trial = dict(dataset="elasticity", model="pit", epochs=3, parameters=1000, train_seconds=9.4)
    trials = [
        {**trial, "settings": [], "test_rel_l2": 0.5, "load_average": 1.0},
        {**trial, "settings": ["train.lr=5e-3"], "test_rel_l2": 0.25, "load_average": 2.0},
    ]
    log = tmp_path / "tuning.jsonl"
    log.write_text("".join(json.dumps(t) + "\n" for t in trials))
    text = tune.table(log)
    assert "## PiT on elasticity" in text
    assert "| preset | 3 | 1,000 | 0.5000 | 9 s | 1.0 |" in text
    assert "| train.lr=5e-3 | 3 | 1,000 | 0.2500 | 9 s | 2.0 |" in text
    assert "(zero-shot)" not in text  # no zero-shot column without a trial that has one
    finer = {"0": 0.25, "1": 0.3, "2": 0.4}
    trials[1] = {**trials[1], "refinement": finer, "reused": "runs/x"}
    del trials[1]["load_average"]
    log.write_text("".join(json.dumps(t) + "\n" for t in trials))
    text = tune.table(log)
    assert "| preset | 3 | 1,000 | 0.5000 | - | 9 s | 1.0 |" in text
    assert (
        "| train.lr=5e-3 | 3 | 1,000 | 0.2500 | 0.3000 / 0.4000 (1.20x / 1.60x) | 9 s | reused |"
        in text
    )
    lr = {**trials[0], "settings": ["train.lr=5e-3"], "seed": 2, "threads": 2}
    trials += [{**trials[0], "seed": 1}, lr]
    log.write_text("".join(json.dumps(t) + "\n" for t in trials))
    text = tune.table(log)
    assert "| preset | 3 |" in text and "| seed 1 | 3 | 1,000 | 0.5000 | - |" in text
    assert "| train.lr=5e-3, seed 2, 2 threads | 3 |" in text
    trials[-1]["reused"] = "runs/y"  # the threads of the command that evaluated it
    log.write_text("".join(json.dumps(t) + "\n" for t in trials))
    assert "| train.lr=5e-3, seed 2 | 3 |" in tune.table(log)


def test_tune_reuses_only_a_run_of_the_trials_epochs_seed_and_settings(monkeypatch, tmp_path):
    model, train = {"k": None, "quantile": 0.016}, {"lr": 3e-3, "seed": 0}
    ckpt = {"model_config": model, "train_config": train, "history": [{}] * 5}
    monkeypatch.setattr(tune, "load_model", lambda out: (None, ckpt))
    settings = parse_settings(["model.k=null", "model.quantile=0.016", "train.lr=3e-3"])
    assert tune.trained_already(tmp_path, 5, 0, settings)
    assert not tune.trained_already(tmp_path, 6, 0, settings)  # other epochs
    assert not tune.trained_already(tmp_path, 5, 1, settings)  # another seed
    assert not tune.trained_already(tmp_path, 5, 0, parse_settings(["model.k=16"]))
    assert not tune.trained_already(tmp_path, 5, 0, parse_settings(["train.batch_size=2"]))
    monkeypatch.undo()
    assert not tune.trained_already(tmp_path, 5, 0, settings)  # no checkpoint there


def _results():
    return summary.load(BENCHMARKS / "results")


def speed_section(table: str) -> str:
    return f"<!-- --8<-- [start:speed] -->\n{table}\n<!-- --8<-- [end:speed] -->"


def test_readme_speed_table_is_generated_from_the_results_and_the_docs_include_it():
    readme = (BENCHMARKS.parent / "README.md").read_text()
    assert speed_section(summary.table(_results())) in readme, (
        "run python -m benchmarks.report.summary"
    )
    page = (BENCHMARKS.parent / "docs" / "benchmarks.md").read_text()
    assert '--8<-- "README.md:speed"' in page  # the table itself, not a copy of it
    assert "| what | measured |" not in page


def test_summary_follows_the_numbers_of_the_result_files():
    data = copy.deepcopy(_results())
    records = data["position_attention"]["records"]
    case = dict(kind="cross", n_src=10**5, n_dst=4096, backward=False)
    ours = next(r for r in records if r.items() >= {**case, "impl": "meshop"}.items())
    dense = next(r for r in records if r.items() >= {**case, "impl": "dense"}.items())
    ours.update(peak_mb=dense["peak_mb"] / 4, time_s=dense["time_s"] / 3)
    row = summary.rows(data)[0]
    assert row[1].endswith("(4x less), 3.0x faster") and row[2] == "`position_attention.md`"
    training = data["models"]["records"]
    step = next(r for r in training if r.items() >= {"n": 972, "impl": "dense"}.items())
    pit = next(
        r for r in training if r.items() >= {"n": 972, "impl": "meshop", "model": "PiT"}.items()
    )
    pit["time_s"] = step["time_s"] / 25
    # the speed at 972 nodes: the interleaved steps of training_vs_reference, the newest
    # measurement; the larger meshes' row names the whole-model run's own ratio there
    interleaved = next(
        r
        for r in data["speed_vs_reference"]["records"]
        if (r["case"], r["threads"]) == ("PiT, 972 / 972 nodes, batch 8", 1)
    )
    interleaved["meshop"]["median_s"] = interleaved["dense"]["median_s"] / 4
    found = summary.rows(data)
    row = next(r for r in found if r[0].startswith("PiT training step, 972"))
    assert row[1].startswith("4.00x faster than dense (one thread")
    larger = next(r for r in found if r[0].startswith("PiT training step, 9,720"))
    assert larger[1].endswith("which gave 25.0x at 972 nodes)")
    # without it, the whole-model run's
    data["speed_vs_reference"]["records"].remove(interleaved)
    row = next(r for r in summary.rows(data) if r[0].startswith("PiT training step, 972"))
    assert row[1].startswith("25.0x faster")
    # a case missing from the results (a quick run) is shown as such, not invented
    records.remove(ours)
    assert summary.rows(data)[0][1] == summary.NOT_MEASURED


def test_summary_reports_the_training_steps_against_the_papers_code():
    data = copy.deepcopy(_results())
    records = data["speed_vs_reference"]["records"]
    for record in records:
        if record["case"] in ("ONO, 16x16 grid, batch 20", "ONO, 972 nodes, batch 8"):
            record["meshop"]["median_s"] = record["reference"]["median_s"] / 2
    what, measured, source = summary.rows(data)[-1]
    assert source == "`speed_vs_reference.md`"
    assert what.startswith("training step, speed-up over the papers' code: ONO as the authors'")
    assert measured == "2.00x / 2.00x (one thread), 2.00x / 2.00x (two threads)"
    # each thread count and case has its own ratio
    record = next(
        r for r in records if r["case"] == "ONO, 972 nodes, batch 8" and r["threads"] == 2
    )
    record["meshop"]["median_s"] = record["reference"]["median_s"]
    _, measured, _ = summary.rows(data)[-1]
    assert measured.endswith("2.00x / 1.00x (two threads)")
    # a case missing from the results (at every thread count) is shown as such
    records[:] = [r for r in records if r["case"] != "ONO, 972 nodes, batch 8"]
    assert summary.rows(data)[-1][1] == summary.NOT_MEASURED


def test_summary_command_rewrites_only_the_marked_readme_section(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    for name in summary.SOURCES:
        shutil.copy(BENCHMARKS / "results" / f"{name}.json", results)
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{speed_section('old table')}\nrest\n")
    args = ["--results", str(results), "--readme", str(readme)]
    assert summary.main([*args, "--check"]) == 1
    assert summary.main(args) == 0
    assert summary.main([*args, "--check"]) == 0
    table = summary.table(summary.load(results))
    assert readme.read_text() == f"intro\n{speed_section(table)}\nrest\n"
    readme.write_text("no markers\n")
    with pytest.raises(SystemExit, match="lacks the markers"):
        summary.main(args)


def test_attention_cost_gives_the_growth_of_each_form():

    def data(fourier_power):
        records = [
            {"attention": kind, "n": n, "time_s": n**power * 1e-6, "peak_mb": n / 100}
            for kind, power in (
                ("galerkin", 1),
                ("linear", 1),
                ("fourier", fourier_power),
                ("softmax", 2),
            )
            for n in (1024, 2048, 4096)
        ]
        return {"linear_attention": {"records": records}}

    linear = summary.attention_cost(data(1))[0]
    assert linear[0] == "Galerkin / Fourier attention at n = 4096"
    assert linear[1] == "41.0 MB / 41.0 MB; time grows as n^1.0 / n^1.0 (softmax n^2.0)"
    assert summary.attention_cost(data(2))[0][1].endswith("n^1.0 / n^2.0 (softmax n^2.0)")


def test_accuracy_runs_longest_first(tmp_path):
    """Runs side by side pack best with the longest first: time per epoch of the last results
    times this run's epochs; never-measured pairs first."""
    rows = [
        {"dataset": "darcy", "model": "pit", "train_seconds": 100.0, "epochs": 10},
        {"dataset": "darcy", "model": "mlp", "train_seconds": 30.0, "epochs": 10},
    ]
    (tmp_path / "accuracy.json").write_text(json.dumps({"machine": {}, "records": rows}))
    pairs = [("darcy", "mlp"), ("darcy", "pit"), ("burgers", "pit")]
    args = accuracy.parse_args(["--out", str(tmp_path), "--epochs", "5"])
    assert accuracy.longest_first(pairs, args) == [("burgers", "pit"), ("darcy", "pit"), pairs[0]]
    args = accuracy.parse_args(["--out", str(tmp_path)])  # the table's epochs: MLP 304 of 3 s
    assert accuracy.longest_first(pairs, args)[1:] == [("darcy", "mlp"), ("darcy", "pit")]


def test_result_files_are_read_only_where_they_exist_and_must_hold_records(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps({"machine": {}, "records": [1]}))
    assert common.load_results(tmp_path, ["a", "missing"]) == {"a": {"machine": {}, "records": [1]}}
    (tmp_path / "b.json").write_text("{}")
    with pytest.raises(SystemExit, match="b.json has no 'records'"):
        common.load_results(tmp_path, ["b"])


def test_the_recorded_command_leaves_out_where_files_go(monkeypatch):
    """Results record the command that reruns them on any machine: ``--out`` and ``--runs`` name
    the measuring machine's folders and change no number."""
    argv = ["--jobs", "2", "--runs", "/work/x", "--out=/tmp/y", "--datasets", "darcy", "--out", "z"]
    assert common.rerun_args(argv) == ["--jobs", "2", "--datasets", "darcy"]
    assert common.rerun_args(["--outline", "a"]) == ["--outline", "a"]  # only the exact names
    script = BENCHMARKS / "speed" / "whole_models.py"  # sys.argv[0] under python -m
    monkeypatch.setattr(sys, "argv", [str(script), "--quick", "--out", "/tmp/q"])
    python = Path(sys.executable).name
    assert common.machine()["command"] == f"{python} -m benchmarks.speed.whole_models --quick"


def test_vs_authors_skips_a_model_whose_authors_code_is_not_given(tmp_path, capsys, monkeypatch):
    """Without a clone (or with a folder that is not one) each model's rows are skipped with a
    message naming what to pass, and the result files say so; nothing is trained. The clone is
    asked for first, whatever the authors' packages (none installed here, as on CI)."""
    from benchmarks.accuracy import vs_authors
    from benchmarks.lib import authors

    monkeypatch.setattr(authors, "_installed", lambda package: False)

    out = ["--out", str(tmp_path), "--data-dir", str(tmp_path / "data")]
    vs_authors.main(["--quick", *out])
    result = json.loads((tmp_path / "vs_authors.json").read_text())
    assert result["records"] == [] and set(result["skipped"]) == {"transolver", "ono"}
    assert "pass --transolver-dir /path/to/clone" in result["skipped"]["transolver"]
    assert "pass --ono-dir /path/to/clone" in result["skipped"]["ono"]
    err = capsys.readouterr().err
    assert "skipping the Transolver: no clone" in err and "skipping the ONO: no clone" in err
    assert (
        "Skipped: no clone of the ONO authors' repository"
        in (tmp_path / "vs_authors.md").read_text()
    )
    assert not (tmp_path / "data").exists()
    redrawn = ["--tables-from", str(tmp_path / "vs_authors.json"), "--out", str(tmp_path / "r")]
    vs_authors.main(redrawn)
    assert (tmp_path / "r" / "vs_authors.md").read_text() == (
        tmp_path / "vs_authors.md"
    ).read_text()
    vs_authors.main(["--quick", "--models", "transolver", "--transolver-dir", str(tmp_path), *out])
    skipped = json.loads((tmp_path / "vs_authors.json").read_text())["skipped"]
    assert "Transolver_Irregular_Mesh.py there" in skipped["transolver"]


def test_vs_authors_records_no_folder_of_the_measuring_machine(tmp_path):
    """The recorded command names the clones as CLONE, and the tables say which repository and
    commit ran instead of where the clone was."""
    from benchmarks.accuracy import vs_authors

    command = (
        "python -m benchmarks.accuracy.vs_authors --transolver-dir /tmp/authors/Transolver "
        "--ono-dir=/home/me/ONO --epochs 3"
    )
    assert vs_authors.neutral_command(command) == (
        "python -m benchmarks.accuracy.vs_authors --transolver-dir CLONE --ono-dir CLONE --epochs 3"
    )
    assert vs_authors.authors_source("ono", tmp_path) == {
        "repository": "https://github.com/xzppp/ONO",
        "commit": None,  # not a git checkout
    }
    text = vs_authors.authors_text(
        {"transolver": {"repository": "https://github.com/thuml/Transolver", "commit": "ab" * 20}}
    )
    assert "https://github.com/thuml/Transolver at commit abababababab" in text
    assert str(tmp_path) not in text


def test_vs_authors_on_burgers_writes_its_own_result_files(tmp_path, monkeypatch):
    """``--dataset burgers`` writes ``vs_authors_burgers.*`` (the Darcy files stay), records the
    dataset, and its redrawn tables go to the same name."""
    from benchmarks.accuracy import vs_authors
    from benchmarks.lib import authors

    monkeypatch.setattr(authors, "_installed", lambda package: False)
    out = ["--out", str(tmp_path), "--data-dir", str(tmp_path / "data")]
    vs_authors.main(["--quick", "--dataset", "burgers", *out])
    assert not (tmp_path / "vs_authors.json").exists()
    result = json.loads((tmp_path / "vs_authors_burgers.json").read_text())
    assert result["data"]["dataset"] == "burgers" and result["records"] == []
    again = [
        "--tables-from",
        str(tmp_path / "vs_authors_burgers.json"),
        "--out",
        str(tmp_path / "r"),
    ]
    vs_authors.main(again)
    assert (tmp_path / "r" / "vs_authors_burgers.md").read_text() == (
        tmp_path / "vs_authors_burgers.md"
    ).read_text()


#: (model, environment variable naming a clone of the authors' repository, option)
AUTHORS_CLONES = [
    ("transolver", "MESHOP_TRANSOLVER_CLONE", "--transolver-dir"),
    ("ono", "MESHOP_ONO_CLONE", "--ono-dir"),
]


@pytest.mark.parametrize("dataset", ["darcy", "burgers"])
@pytest.mark.parametrize(("model", "variable", "option"), AUTHORS_CLONES)
def test_vs_authors_trains_both_implementations_alike(model, variable, option, dataset, tmp_path):
    """With a clone of the authors' repository (named by the environment variable), meshop's
    model and the authors' train on the same data (2D Darcy, 1D Burgers) for the same epochs
    with each seed; their parameter counts differ only where the parameterisations do."""
    import os

    from benchmarks.accuracy import vs_authors

    clone = os.environ.get(variable)
    if not clone:
        pytest.skip(
            f"set {variable} to a clone of the {vs_authors.TITLES[model]} authors' repository"
        )
    out = ["--out", str(tmp_path), "--data-dir", str(tmp_path / "data")]
    vs_authors.main(["--quick", "--dataset", dataset, "--models", model, option, clone, *out])
    name = vs_authors.result_name(dataset)
    result = json.loads((tmp_path / f"{name}.json").read_text())
    assert result["skipped"] == {} and result["data"]["dataset"] == dataset
    runs = {(r["implementation"], r["seed"]): r for r in result["records"]}
    assert {seed for _, seed in runs} == {0, 1} and {"meshop", "authors"} <= {i for i, _ in runs}
    assert all(r["epochs"] == 1 and 0 < r["test_rel_l2"] < 10 for r in runs.values())
    width = vs_authors.QUICK_SIZES[model]["width"]
    ours, theirs = runs["meshop", 0]["parameters"], runs["authors", 0]["parameters"]
    if model == "transolver":
        assert theirs == ours + width  # the placeholder, in meshop's lift's bias
    else:  # ONO_AUTHORS: ONO2 parameter for parameter (its lift, bias-free Q, K, V)
        assert ours == theirs
    text = (tmp_path / f"{name}.md").read_text()
    assert "meshop: mean " in text and "against the authors'" in text and "| authors |" in text


def test_grid_zero_shot_of_several_runs_is_the_mean_of_each_run(tmp_path):
    """Given the runs of several training seeds (as the accuracy table's row), every error of
    the stage table is the mean of the runs' own errors."""
    import argparse

    from benchmarks.lib.training_runs import run_config
    from meshop.train.run import train_run

    args = argparse.Namespace(quick=True, seed=0, data_dir=str(tmp_path / "data"))
    small = {"model": {"width": 8, "layers": 1, "heads": 2}}
    runs = []
    for seed in (0, 1):
        out = tmp_path / f"darcy-galerkin-seed{seed}"
        config = run_config("darcy", "galerkin", 1, out, args, small, train_seed=seed)
        train_run(config, figures=False, log=lambda *_: None)
        runs.append(str(out))
    results = {}
    for name, checkpoints in (("0", runs[:1]), ("1", runs[1:]), ("both", runs)):
        grid_zero_shot.main([*checkpoints, "--out", str(tmp_path / name)])
        records = json.loads((tmp_path / name / "grid_zero_shot.json").read_text())["records"]
        results[name] = [record["errors"] for record in records]
    assert len(results["both"]) == len(grid_zero_shot.STAGES) + 1
    for both, one, other in zip(results["both"], results["0"], results["1"], strict=True):
        assert both.keys() == one.keys() == {"6", "11", "21"}
        for grid, error in both.items():
            assert error == pytest.approx((one[grid] + other[grid]) / 2, rel=1e-6)
        assert one != other  # two initialisations: the mean is not either run's
    text = (tmp_path / "both" / "grid_zero_shot.md").read_text()
    assert "mean of darcy-galerkin-seed0 and darcy-galerkin-seed1" in text


def test_run_trainer_is_meshop_trains_trainer_with_or_without_the_test_split(tmp_path):
    """The benchmarks' run_trainer is build_trainer, the Trainer that ``meshop train`` fits: the
    pair's preset under the run's settings, the test split only when asked for."""
    import argparse

    from benchmarks.lib.training_runs import run_config, run_trainer

    args = argparse.Namespace(quick=True, seed=0, data_dir=str(tmp_path / "data"))
    run = run_config("darcy", "mlp", 1, tmp_path / "run", args)
    with_test, times = run_trainer(run, tmp_path / "run")
    without, _ = run_trainer(run, tmp_path / "run", test=False)
    assert len(with_test.test_set) == 2 and without.test_set is None
    assert set(times) == {"load_s", "prepare_s"} and all(t >= 0 for t in times.values())
    assert with_test.config.lr == 1e-3 and with_test.config.schedule == "cosine"  # MLP preset


def test_demo_record_runs_the_demo_from_a_cold_cache_and_redraws_the_readme(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("intro\n<!-- --8<-- [start:demo] -->\nold\n<!-- --8<-- [end:demo] -->\nend\n")
    demo.main(["--quick", "--out", str(tmp_path / "results"), "--readme", str(readme)])
    record = json.loads((tmp_path / "results" / "demo.json").read_text())
    assert record["machine"]["command"] == "meshop demo --quick"
    assert record["machine"]["commit"] == common.commit() and len(record["machine"]["load"]) == 3
    assert record["machine"]["wall_seconds"] >= record["total_seconds"] > 0
    assert record["settings"]["epochs"] == 2 and set(record["results"]) == {"pit", "mlp"}
    text = readme.read_text()
    assert text.startswith("intro\n") and text.endswith("end\n") and "\nold\n" not in text
    assert demo.section(record) in text
    pit = record["results"]["pit"]
    assert f"| {pit['parameters']:,} |" in text and f"{100 * pit['test_rel_l2']:.2f} %" in text
    ratio = record["results"]["mlp"]["test_rel_l2"] / pit["test_rel_l2"]
    assert f"{ratio:.1f} times smaller" in text


def test_demo_section_says_when_other_jobs_shared_the_cores():
    record = json.loads((common.RESULTS / "demo.json").read_text())
    record["machine"] |= {"load": [1.0, 1.0, 1.5], "cpu_cores": 2}
    assert "load average 1.50;" in demo.section(record)
    record["machine"]["load"] = [6.0, 6.0, 5.85]
    assert "load average 5.85 (other jobs shared the cores" in demo.section(record)


def test_readme_demo_section_is_drawn_from_the_recorded_run():
    record = json.loads((common.RESULTS / "demo.json").read_text())
    assert demo.section(record) in (common.ROOT / "README.md").read_text()


def test_summary_says_when_and_under_which_load_each_result_file_was_measured():
    data = copy.deepcopy(_results())
    data["models"]["machine"] |= {"date": "2026-01-02 03:04 UTC", "commit": "abc1234"}
    data["models"]["machine"]["load"] = [0.5, 0.75, 1.25]
    data["large_meshes"]["machine"].pop("load", None)  # an older record: no load, no commit
    data["large_meshes"]["machine"].pop("commit", None)
    data["large_meshes"]["machine"] |= {"date": "2026-01-01 00:00 UTC", "note": "busy"}
    text = summary.table(data)
    assert (
        "`models.md` 2026-01-02 03:04 UTC, commit abc1234, load average 1.25 over 15 minutes"
        in (text)
    )
    assert "`large_meshes.md` 2026-01-01 00:00 UTC, busy;" in text
    del data["large_meshes"]["machine"]["note"]
    assert "`large_meshes.md` 2026-01-01 00:00 UTC, load not recorded;" in summary.table(data)
    row = next(r for r in summary.rows(data) if r[0].startswith("inference on a 1e7"))
    assert row[2] == "`large_meshes.md`"

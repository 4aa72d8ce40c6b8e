"""The large-mesh benchmarks run in their smoke mode and write their tables."""

import json

from benchmarks.speed import large_meshes, split_mesh


def test_large_meshes_measures_whole_and_chunked_passes_and_training_steps(tmp_path):
    large_meshes.main(["--quick", "--models", "transolver,mlp", "--out", str(tmp_path)])
    records = json.loads((tmp_path / "large_meshes.json").read_text())["records"]
    modes = {(r["model"], r["n"], r["mode"]) for r in records if "time_s" in r}
    for model in ("transolver", "mlp"):
        for mode in ("whole", "chunks", "train, whole", "train, chunks"):
            assert (model, 20_000, mode) in modes
    assert "| Transolver(width=64" in (tmp_path / "large_meshes.md").read_text()


def test_large_meshes_leaves_out_whole_passes_above_their_limit(tmp_path):
    large_meshes.main(
        ["--quick", "--models", "mlp", "--whole-up-to", "5000", "--out", str(tmp_path)]
    )
    records = json.loads((tmp_path / "large_meshes.json").read_text())["records"]
    rows = {(r["n"], r["mode"]) for r in records}
    assert (20_000, "whole") not in rows and (2000, "whole") in rows
    assert (2000, "train, whole") not in rows  # a tenth of the limit: 500 nodes
    assert (20_000, "chunks") in rows and (20_000, "train, chunks") in rows


def test_split_mesh_times_one_and_two_processes(tmp_path):
    split_mesh.main(["--quick", "--out", str(tmp_path)])
    records = json.loads((tmp_path / "split_mesh.json").read_text())["records"]
    assert [r["processes"] for r in records] == [1, 2]
    assert all(r["time_s"] > 0 and r["peak_mb"] > 0 for r in records)


def test_large_meshes_measures_the_sizes_it_is_given(tmp_path):
    large_meshes.main(["--models", "mlp", "--sizes", "1000,3e3", "--out", str(tmp_path)])
    records = json.loads((tmp_path / "large_meshes.json").read_text())["records"]
    assert {r["n"] for r in records} == {1000, 3000}


def test_the_summary_gives_the_large_mesh_figures_model_by_model():
    from benchmarks.report import summary

    def record(model, n, mode, gb):
        return dict(model=model, n=n, mode=mode, time_s=10.0, total_peak_mb=gb * 1024)

    records = [record("pit", 10**7, "chunks", 2.5), record("ono", 10**7, "chunks", 7.0)]
    records += [record(m, 10**6, "train, chunks", 1.0) for m in summary.LARGE_NAMES]
    inference, training = summary.large_meshes({"large_meshes": {"records": records}})
    assert inference[1] == (
        "PiT 10.00 s, 2.50 GB; ONO 10.00 s, 7.00 GB; "
        "Galerkin Transformer, Transolver, MLP not measured"
    )
    assert training[1].startswith("PiT 10.00 s, 1.00 GB; Galerkin Transformer 10.00 s, 1.00 GB")
    assert "not measured" not in training[1] and len(training) == 2
    assert summary.large_meshes({})[0][1:] == ["not measured"]


def test_runs_split_by_models_make_one_table(tmp_path):
    for models, out in (("mlp", "a"), ("transolver", "b")):
        argv = ["--models", models, "--sizes", "1000", "--out", str(tmp_path / out)]
        large_meshes.main([*argv, "--whole-up-to", "0"])
    files = [str(tmp_path / out / "large_meshes.json") for out in "ab"]
    large_meshes.main(["--tables-from", *files, "--out", str(tmp_path)])
    merged = json.loads((tmp_path / "large_meshes.json").read_text())
    assert [r["model"] for r in merged["records"]] == ["mlp", "mlp", "transolver", "transolver"]
    page = (tmp_path / "large_meshes.md").read_text()
    commands = [json.loads(open(f).read())["machine"]["command"] for f in files]
    assert f"`{commands[0]}` and `{commands[1]}`" in page  # both runs' commands named
    assert "| MLPBaseline(width=128" in page and "| Transolver(width=64" in page
    assert "chunks of 65,536 nodes" in page
    assert merged["machine"]["note"] == "2 runs split by --models side by side, 1 thread(s) each"


def test_the_summary_names_each_result_files_load_and_note():
    from benchmarks.report import summary

    machine = {"date": "2026-11-27 20:54 UTC", "commit": "abc1234", "load": [2.0, 2.1, 2.38]}
    assert summary.provenance("x", machine) == (
        "`x.md` 2026-11-27 20:54 UTC, commit abc1234, load average 2.38 over 15 minutes"
    )
    machine["note"] = "2 runs side by side"
    assert summary.provenance("x", machine).endswith("over 15 minutes (2 runs side by side)")
    old = {"date": "2026-11-25 16:26 UTC", "note": "other jobs shared the cores"}
    assert (
        summary.provenance("x", old) == "`x.md` 2026-11-25 16:26 UTC, other jobs shared the cores"
    )

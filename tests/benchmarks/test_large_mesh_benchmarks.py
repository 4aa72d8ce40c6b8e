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


def test_the_summary_checks_the_large_mesh_aims_model_by_model():
    from benchmarks.report import summary

    def record(model, n, mode, gb):
        return dict(model=model, n=n, mode=mode, time_s=10.0, total_peak_mb=gb * 1024)

    records = [record("pit", 10**7, "chunks", 2.5), record("ono", 10**7, "chunks", 7.0)]
    records += [record(m, 10**6, "train, chunks", 1.0) for m in summary.LARGE_NAMES]
    records[-1]["total_peak_mb"] = 5 * 1024  # the MLP over 4 GB
    inference, training = summary.large_meshes({"large_meshes": {"records": records}})
    aim = "PiT under 3 GB, the others under 8 GB"
    assert inference[1] == "PiT 10.00 s, 2.50 GB; ONO 10.00 s, 7.00 GB"
    assert inference[2] == f"{aim}: met; not measured: Galerkin Transformer, Transolver, MLP"
    assert training[2] == "under 4 GB: not met (MLP)"
    records[0]["total_peak_mb"] = 3.5 * 1024  # PiT's own aim is 3 GB
    inference, _ = summary.large_meshes({"large_meshes": {"records": records}})
    assert inference[2].startswith(f"{aim}: not met (PiT)")
    assert summary.large_meshes({})[0][1:] == ["not measured", aim]


def test_growth_exponents_compare_a_case_with_its_own_smaller_size():
    from benchmarks.lib.common import growth_exponent

    records = [
        dict(model="a", n=10, time_s=1.0),
        dict(model="b", n=100, time_s=1.0),
        dict(model="a", n=100, time_s=10.0),
        dict(model="a", n=1000, time_s=1000.0),
        dict(model="a", n=10000, time_s=0.0),
    ]
    assert growth_exponent(records, records[2], same=("model",)) == "1.00"
    assert growth_exponent(records, records[3], same=("model",)) == "2.00"
    assert growth_exponent(records, records[1], same=("model",)) == "-"  # nothing smaller
    assert growth_exponent(records, records[4], same=("model",)) == "-"  # no positive value
    assert growth_exponent(records, records[1]) == "0.00"  # without keys: against a at 10

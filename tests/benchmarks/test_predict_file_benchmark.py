"""benchmarks.speed.predict_file: `meshop predict` end to end in a new process, with the peak that
the process itself reports (its high-water mark before each of the estimate's resets, and after)."""

import json

from benchmarks.speed import predict_file


def test_predict_file_times_the_command_and_reports_the_processes_own_peak(tmp_path, capsys):
    predict_file.main(["--quick", "--out", str(tmp_path)])
    records = json.loads((tmp_path / "predict_file.json").read_text())["records"]
    assert records
    for record in records:
        # the process's own peak: more than torch and the mesh, far less than the 2-core
        # machine's memory (wait4's figure would also count the parent's memory at the fork)
        assert 100 < record["peak_mb"] < 4000
        assert 0 < record["forward_s"] < record["time_s"]
        # the phases: each timed once, inside the command, which is inside the process
        parts = ("load_s", "read_s", "probe_s", "forward_s", "write_s")
        assert all(record[part] > 0 for part in parts)
        assert sum(record[part] for part in parts) < record["command_s"] < record["time_s"]
        assert 0.25 < record["estimate_mb"] / record["peak_mb"] < 4
    page = (tmp_path / "predict_file.md").read_text()
    assert "### CPU, `meshop predict`" in page and "command / forward" in page
    assert "command less the estimate / forward" in page
    for record in records:  # the command's time without the estimate's subsets, over the pass
        less = (record["command_s"] - record["probe_s"]) / record["forward_s"]
        assert f"{record['command_s'] / record['forward_s']:.2f} | {less:.2f} |" in page
    assert "### The estimate printed before the prediction" in page

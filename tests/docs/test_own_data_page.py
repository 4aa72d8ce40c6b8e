"""docs/own-data.md runs as written: its Python block writes the example folders, then every
command line of its bash blocks runs in order in the same folder, and each command writes the
files it names and prints what the page says it prints.

The only change to the page's commands: ``meshop train`` gets one epoch of a small model appended
(later options win), so that the page's whole journey takes seconds. A renamed option, a wrong
file name or a broken step of the page fails here."""

import csv
import io
import json
import os
import re
import shlex
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path

import meshio

from meshop.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "own-data.md"
PYTHON = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
BASH = re.compile(r"^```bash\n(.*?)^```", re.S | re.M)
#: appended to the page's `meshop train`: one epoch of a small model
SHORTER = "--epochs 1 --model-arg width=8 --model-arg layers=1 --no-progress"


def command_lines(text: str) -> list[str]:
    """The command lines of the bash blocks of ``text``, in order: continued lines joined,
    comments and blank lines left out."""
    lines = []
    for block in BASH.findall(text):
        joined = re.sub(r"\\\n\s*", "", block)
        lines += [line.strip() for line in joined.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def test_command_lines_are_joined_and_stripped():
    text = "```bash\n# a comment\nmeshop train --a 1 \\\n    --b 2\n\nhead -3 x.csv\n```\n"
    assert command_lines(text) == ["meshop train --a 1 --b 2", "head -3 x.csv"]


def run_meshop(argv: list[str]) -> str:
    """``meshop ARGV`` in this process; its standard output."""
    out = io.StringIO()
    with redirect_stdout(out):
        status = main(argv)
    assert status == 0, f"`meshop {shlex.join(argv)}` failed (status {status})"
    return out.getvalue()


def run_shell(line: str) -> str:
    """Any other command line, in bash, with this Python's scripts (meshio) on the PATH."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    proc = subprocess.run(
        ["bash", "-c", line], capture_output=True, text=True, env={**os.environ, "PATH": path}
    )
    assert proc.returncode == 0, f"`{line}` failed: {proc.stderr}"
    return proc.stdout


def last_json(printed: str) -> dict:
    return json.loads(printed.strip().splitlines()[-1])


def check_train(args, printed: str) -> None:
    run = Path(args.out)
    assert {"checkpoint.pt", "metrics.jsonl", "run.json"} <= {p.name for p in run.iterdir()}
    assert (run / "figures" / "loss.png").is_file() and (run / "figures" / "test_000.png").is_file()
    assert last_json(printed)["test_rel_l2"] > 0
    assert "settings:" in printed


def check_evaluate(args, printed: str) -> None:
    summary = last_json(printed)
    assert set(summary) == {"samples", "test_rel_l2", "test_rel_l2_median", "mean_nodes"}
    if args.all_files:  # every file of the folder
        assert summary["samples"] == len(list(Path(args.data_dir).iterdir()))
    if args.out is not None:
        out = Path(args.out)
        assert json.loads((out / "summary.json").read_text()) == summary
        with open(out / "per_sample.csv") as f:
            rows = list(csv.DictReader(f))
        assert list(rows[0]) == ["sample", "source", "nodes", "rel_l2"]
        assert len(rows) == summary["samples"]
        assert all(Path(row["source"]).is_file() for row in rows)


def check_predict(args, printed: str) -> None:
    out = Path(args.out)
    assert f"wrote {out} (" in printed
    if out.suffix == ".csv":
        with open(out) as f:
            rows = list(csv.reader(f))
        points = Path(args.query).read_text().splitlines()[1:]  # after the header line
        assert rows[0] == ["x", "y", "temperature"] and len(rows) == 1 + len(points)
    else:
        written = meshio.read(out)
        assert {"heat", "temperature"} <= set(written.point_data)
        assert len(written.points) == len(meshio.read(args.mesh).points)
    if args.integrate:
        integrals = last_json(printed)
        assert set(integrals) == {"domain", *args.group}
        assert all(set(values) == {"temperature"} for values in integrals.values())


CHECKS = {"train": check_train, "evaluate": check_evaluate, "predict": check_predict}


def test_own_data_page_runs_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MESHOP_DATA", str(tmp_path / "data"))
    text = PAGE.read_text()
    for index, block in enumerate(PYTHON.findall(text)):
        exec(compile(block, f"own-data.md[block {index}]", "exec"), {"__name__": "__docs__"})
    lines = command_lines(text)
    ran = []
    for line in lines:
        argv = shlex.split(line)
        if argv[0] != "meshop":
            assert run_shell(line).strip(), f"`{line}` printed nothing"
            continue
        if argv[1] == "train":
            argv += shlex.split(SHORTER)
        printed = run_meshop(argv[1:])
        args = build_parser().parse_args(argv[1:])
        CHECKS[args.command](args, printed)
        ran.append(args)
    # the journey the page promises: train, evaluate a folder, predict at points, integrate
    assert any(a.command == "evaluate" and a.all_files and a.data_dir for a in ran)
    assert any(a.command == "predict" and a.query and a.query.endswith(".csv") for a in ran)
    assert any(a.command == "predict" and a.integrate and a.group for a in ran)
    assert ran[0].command == "train"

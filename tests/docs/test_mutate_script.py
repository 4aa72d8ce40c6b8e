"""scripts/mutate.py --verify: each survivor applied to the source, the target's tests run on it."""

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
mutate = importlib.import_module("mutate")

MODULE = (
    "def add(a, b):\n    return a + b  # the sum\n\n\ndef unused():\n    return 1\n\n\n"
    "def same():\n    return 0\n\n\ndef also():\n    return 0\n\n\n"
    "class K:\n    def twice(self, a):\n\n        return 2 * a\n"
)
TEST = (
    "from pkg.tiny import K, add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
    "def test_twice():\n    assert K().twice(2) == 4\n"
)


def diff(old: str, new: str) -> str:
    """A survivor as ``mutmut show`` prints it: one hunk of the module."""
    return f"# survivor\n--- pkg/tiny.py\n+++ pkg/tiny.py\n@@ -1,2 +1,2 @@\n def {old}\n{new}"


SUM = "-    return a + b  # the sum\n"
DIFFS = {
    "killed_one": diff("add(a, b):", SUM + "+    return a - b  # the sum\n"),
    "equivalent": diff("add(a, b):", SUM + "+    return b + a  # the sum\n"),
    "elsewhere": diff("gone(a):", "-    return a\n+    return -a\n"),
    # numbered from its function, with no context after the change: patch reads the hunk as the
    # end of the file; its removed line occurs once in the module, so it is placed by it
    "tail": diff("unused():", "-    return 1\n+    return 2\n"),
    # ... but not where they occur twice: which one is meant is unknown
    "ambiguous": diff("also():", "-    return 0\n+    return 5\n"),
    # a method as mutmut shows it: dedented to the top level (with a blank line in its body)
    "method": "--- pkg/tiny.py\n+++ pkg/tiny.py\n@@ -1,3 +1,3 @@\n def twice(self, a):\n \n"
    "-    return 2 * a\n+    return 3 * a\n",
}


def tiny_repository(tmp_path, monkeypatch):
    """The ``tiny`` target: a module, its tests, and a last run whose survivors are ``DIFFS``."""
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "pkg" / "__init__.py").write_text("")
    (repo / "pkg" / "tiny.py").write_text(MODULE)
    (repo / "tests" / "test_tiny.py").write_text(TEST)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    (tmp_path / "work" / "tiny" / "mutants").mkdir(parents=True)
    monkeypatch.setattr(mutate, "ROOT", repo)
    monkeypatch.setattr(mutate, "WORK", tmp_path / "work")
    monkeypatch.setattr(mutate, "TARGETS", {"tiny": ("pkg/tiny.py", ["tests/test_tiny.py"])})
    # a mutant that no test reached is verified too: the whole test files may reach it
    survived = ["killed_one", "equivalent", "elsewhere", "tail", "ambiguous"]
    found = {"survived": survived, "no tests": ["method"], "killed": ["x"]}
    monkeypatch.setattr(mutate, "results", lambda dest: found)

    def show(dest, *args, check=True):
        assert args[0] == "show" and dest == tmp_path / "work" / "tiny"
        return subprocess.CompletedProcess(args, 0, stdout=DIFFS[args[1]], stderr="")

    monkeypatch.setattr(mutate, "mutmut", show)
    return repo


def test_verify_applies_each_survivor_runs_the_tests_and_restores_the_module(
    tmp_path, monkeypatch, capsys
):
    repo = tiny_repository(tmp_path, monkeypatch)
    verdicts = mutate.verify_survivors("tiny")
    assert verdicts == {
        "killed": ["killed_one", "method"],
        "survived": ["equivalent", "tail"],
        "not applied": ["elsewhere", "ambiguous"],
    }
    assert (tmp_path / "work" / "tiny-verify" / "pkg" / "tiny.py").read_text() == MODULE
    assert (repo / "pkg" / "tiny.py").read_text() == MODULE  # the checkout is left alone
    out = capsys.readouterr().out
    assert "6 survivors applied to the source" in out
    assert "survived: equivalent" in out and "not applied: elsewhere" in out


def test_verify_without_a_run_says_what_to_run_first(tmp_path, monkeypatch):
    monkeypatch.setattr(mutate, "WORK", tmp_path)
    try:
        mutate.verify_survivors("losses")
    except SystemExit as exc:
        assert "run scripts/mutate.py losses first" in str(exc)
    else:
        raise AssertionError("a target without a run must be refused")


def test_verify_takes_other_test_files_and_a_selection_of_survivors(tmp_path, monkeypatch, capsys):
    repo = tiny_repository(tmp_path, monkeypatch)
    (repo / "tests" / "test_other.py").write_text("def test_nothing():\n    pass\n")
    verdicts = mutate.verify_survivors("tiny", tests=["tests/test_other.py"], only="one|method")
    assert verdicts == {"killed": [], "survived": ["killed_one", "method"], "not applied": []}
    with pytest.raises(SystemExit) as refused:
        mutate.main(["tiny", "--only", "one"])  # a selection needs --verify
    assert refused.value.code == 2
    assert "--tests and --only go with --verify" in capsys.readouterr().err


def test_verify_never_runs_the_bytecode_of_an_earlier_mutant(tmp_path, monkeypatch):
    """Python reuses a module's cached bytecode while the source keeps its size and modification
    time (to the second): ``a - b`` and ``b + a`` are the same size, and two mutants are often
    applied within one second. Here every mutant is given the same time; the second must still run
    as written, not as the first one's bytecode."""
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)  # as in most shells
    tiny_repository(tmp_path, monkeypatch)
    module = tmp_path / "work" / "tiny-verify" / "pkg" / "tiny.py"
    apply = mutate._apply

    def apply_in_the_same_second(dest, diff, fuzz=0):
        applied = apply(dest, diff, fuzz)
        os.utime(module, (1_700_000_000, 1_700_000_000))
        return applied

    monkeypatch.setattr(mutate, "_apply", apply_in_the_same_second)
    verdicts = mutate.verify_survivors("tiny", only="killed_one|equivalent")
    assert verdicts == {"killed": ["killed_one"], "survived": ["equivalent"], "not applied": []}

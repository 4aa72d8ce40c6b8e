"""The ``meshop`` command parses its line before it imports torch: ``--help`` and argument errors
import neither torch nor PyG nor meshop's models, datasets and training; and ``--threads`` of
train, evaluate and predict sets torch's thread count."""

import argparse
import subprocess
import sys

import pytest
import torch

import meshop.train.inference
import meshop.train.run
from meshop.cli import build_parser, main

#: modules (and their submodules) that ``meshop --help`` and argument errors must not import
HEAVY = (
    "torch",
    "torch_geometric",
    "torch_cluster",
    "numpy",
    "scipy",
    "meshio",
    "matplotlib",
    "meshop.data",
    "meshop.datasets",
    "meshop.models",
    "meshop.nn",
    "meshop.train",
)


def imported_modules(argv: list[str]) -> tuple[subprocess.CompletedProcess, set[str]]:
    """``python -m meshop ARGV`` in a fresh interpreter, and every module it imported (from
    ``-X importtime``, which lists each import on stderr)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "meshop", *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )
    modules = {
        line.rpartition("|")[2].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert "meshop.cli" in modules, done.stderr  # the listing is there at all
    return done, modules


def heavy_among(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(f"{h}.") for h in HEAVY))


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        [],
        ["train", "--help"],
        ["evaluate", "--help"],
        ["predict", "--help"],
        ["plot", "--help"],
        ["demo", "--help"],
    ],
    ids=lambda argv: " ".join(argv) or "no command",
)
def test_help_imports_no_torch(argv):
    done, modules = imported_modules(argv)
    assert heavy_among(modules) == []
    assert done.returncode == (2 if not argv else 0), done.stderr
    assert done.stdout.startswith("usage: meshop")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "--bogus"], "unrecognized arguments: --bogus"),
        (["--bogus"], "unrecognized arguments: --bogus"),
        (["fly"], "invalid choice: 'fly'"),
        (["predict", "--checkpoint", "run"], "required: --mesh, --out"),
        (["evaluate"], "required: --checkpoint"),
        (["evaluate", "--checkpoint", "run", "--threads", "two"], "--threads: invalid int"),
        (["train", "--epochs", "ten"], "--epochs: invalid int"),
    ],
)
def test_argument_errors_import_no_torch(argv, message):
    done, modules = imported_modules(argv)
    assert heavy_among(modules) == []
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if not line.startswith("import time:")]
    assert len(errors) == 1 and errors[0].startswith("meshop: error: "), errors
    assert message in errors[0]


def test_the_heavy_modules_are_seen_when_a_command_imports_them(tmp_path):
    """The checks above can fail: a command that gets as far as its work is seen importing torch."""
    done, modules = imported_modules(["evaluate", "--checkpoint", str(tmp_path / "none.pt")])
    assert done.returncode == 2 and "does not exist" in done.stderr
    assert {"torch", "meshop.train"} <= set(heavy_among(modules))


@pytest.fixture
def torch_threads():
    """A thread count other than the current one; the current one is restored afterwards."""
    before = torch.get_num_threads()
    yield before + 1
    torch.set_num_threads(before)


def test_threads_has_one_meaning_in_train_evaluate_and_predict():
    commands = next(
        a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)
    ).choices
    options = {}
    for command in ("train", "evaluate", "predict"):
        (action,) = [a for a in commands[command]._actions if "--threads" in a.option_strings]
        options[command] = (action.type, action.default, action.help)
    assert len(set(options.values())) == 1
    assert options["train"] == (int, None, "CPU threads per process (torch.set_num_threads)")


def record_threads(monkeypatch, module, name, result):
    """Replace ``module.name`` by a stand-in that records torch's thread count when called."""
    seen = []

    def stand_in(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return result

    monkeypatch.setattr(module, name, stand_in)
    return seen


@pytest.mark.parametrize("given", [True, False], ids=["--threads", "without"])
def test_threads_sets_the_thread_count_of_train_evaluate_and_predict(
    given, torch_threads, monkeypatch, tmp_path, capsys
):
    before = torch.get_num_threads()
    threads = ["--threads", str(torch_threads)] if given else []
    expected = torch_threads if given else before
    runs = {
        "train": (
            record_threads(monkeypatch, meshop.train.run, "train_run", None),
            ["train", "--dataset", "elasticity", "--model", "pit", "--out", tmp_path / "run"],
        ),
        "evaluate": (
            record_threads(monkeypatch, meshop.train.run, "evaluate_run", {"test_rel_l2": 0.1}),
            ["evaluate", "--checkpoint", tmp_path / "run"],
        ),
        "predict": (
            record_threads(
                monkeypatch,
                meshop.train.inference,
                "predict_file",
                (tmp_path / "pred.vtu", torch.zeros(3, 1)),
            ),
            ["predict", "--checkpoint", tmp_path / "run", "--mesh", "in.vtu", "--out", "p.vtu"],
        ),
    }
    for command, (seen, argv) in runs.items():
        torch.set_num_threads(before)
        assert main([str(a) for a in [*argv, *threads]]) == 0, capsys.readouterr().err
        assert seen == [expected], command

"""Mutation testing with mutmut 3: break the code one small change at a time and list the changes
("mutants") that no test notices.

Each target is one module of ``meshop/`` and the test files that exercise it; it runs in its own
scratch copy of the working tree (``.mutmut/NAME/``), so targets do not share mutmut's state and the
checkout is left alone. Only the target's tests run, and mutmut runs for each mutant only the tests
that reach the mutated function.

    python scripts/mutate.py                  # every target below (slow: tens of minutes)
    python scripts/mutate.py losses metrics   # some of them
    python scripts/mutate.py --list           # the targets
    python scripts/mutate.py trainer --time-limit 900   # stop after 15 minutes, count what ran
    make mutate TARGETS="losses"              # the same, installing mutmut into .venv first

Prints, per target, the number of mutants, killed, survived (and timeouts, suspicious), the run
time and the names of the surviving mutants; ``cd .mutmut/NAME && mutmut show MUTANT`` shows one
as a diff. Exit status 0 whatever survives: surviving mutants are to be read, not to fail a build.

mutmut switches a mutant on inside the test process only, so code that runs in processes a test
starts (``torch.multiprocessing`` workers, ``meshop`` commands run as subprocesses) keeps the
original there, and such mutants survive although a test would catch them. ``--verify`` checks
the survivors of a target's last run without mutmut: each survivor's diff is applied to the
module in a clean copy of the working tree (``.mutmut/NAME-verify/``), the target's test files run
on it (every process they start imports that copy), and the module is restored:

    python scripts/mutate.py distributed --verify   # after a run of the target
    python scripts/mutate.py trainer --verify --only "compile|step" \\
        --tests tests/train/test_trainer.py
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from itertools import product
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / ".mutmut"

# The measured runs (counts, run times) and the kinds of survivors left as equivalent, with why:
# DEVELOPMENT.md, section "Mutation testing".

#: name -> (module to mutate, the test files that exercise it)
TARGETS: dict[str, tuple[str, list[str]]] = {
    "losses": (
        "meshop/train/losses.py",
        ["tests/train/test_metrics.py", "tests/train/test_train.py"],
    ),
    "metrics": (
        "meshop/train/metrics.py",
        [
            "tests/train/test_metrics.py",
            "tests/train/test_train.py",
            "tests/train/test_eval_mode.py",
        ],
    ),
    "trainer": (
        "meshop/train/trainer.py",
        [
            "tests/train/test_train.py",
            "tests/train/test_resume.py",
            "tests/train/test_metrics.py",
            "tests/train/test_trainer.py",
            "tests/train/test_logs_and_errors.py",
        ],
    ),
    "checkpoint": (
        "meshop/train/checkpoint.py",
        [
            "tests/train/test_train.py",
            "tests/train/test_resume.py",
            "tests/train/test_checkpoint.py",
        ],
    ),
    "optim": (
        "meshop/train/optim.py",
        ["tests/train/test_train.py", "tests/train/test_presets.py"],
    ),
    "normalized": (
        "meshop/train/normalized.py",
        [
            "tests/train/test_train.py",
            "tests/train/test_predict_values.py",
            "tests/train/test_normalized.py",
        ],
    ),
    "inference": (
        "meshop/train/inference.py",
        [
            "tests/train/test_predict_values.py",
            "tests/cli/test_cli.py",
            "tests/data/test_vector_fields.py",
            "tests/data/test_groups_integrals.py",
            "tests/train/test_logs_and_errors.py",
            "tests/train/test_inference_files.py",
            "tests/train/test_prediction_csv.py",
        ],
    ),
    "pit": (
        "meshop/models/pit.py",
        ["tests/models/test_pit.py", "tests/models/test_pit_reference.py"],
    ),
    "mlp_baseline": (
        "meshop/models/mlp_baseline.py",
        ["tests/train/test_train.py", "tests/models/test_mlp_baseline.py"],
    ),
    **{
        name: (
            f"meshop/nn/{name}.py",
            [
                "tests/nn/test_grid_layers.py",
                "tests/nn/test_grid_decoder.py",
                "tests/nn/test_grid_options.py",
            ],
        )
        for name in ("cinn", "spectral_conv", "spectral_regressor")
    },
    "galerkin_transformer": (
        "meshop/models/galerkin_transformer.py",
        ["tests/models/test_galerkin_transformer.py", "tests/models/test_galerkin_presets.py"],
    ),
    "base": ("meshop/models/base.py", ["tests/models/test_base.py"]),
    "registry": (
        "meshop/models/registry.py",
        ["tests/train/test_train_registry.py", "tests/models/test_registry_errors.py"],
    ),
    # the ONO2 options (the authors' model) are tested against the reference in test_speed_paths
    "ono": ("meshop/models/ono.py", ["tests/models/test_ono.py", "tests/nn/test_speed_paths.py"]),
    "config": (
        "meshop/train/config.py",
        [
            "tests/train/test_train.py",
            "tests/train/test_train_registry.py",
            "tests/train/test_logs_and_errors.py",
            "tests/train/test_config.py",
        ],
    ),
    "presets": (
        "meshop/train/presets.py",
        ["tests/train/test_presets.py", "tests/train/test_train_registry.py"],
    ),
    "data": (
        "meshop/train/data.py",
        [
            "tests/train/test_train_data.py",
            "tests/train/test_train.py",
            "tests/train/test_folder_training.py",
            "tests/train/test_predict_values.py",
        ],
    ),
    "distributed": (
        "meshop/train/distributed.py",
        [
            "tests/train/test_distributed.py",
            "tests/train/test_train.py",
            "tests/train/test_resume.py",
        ],
    ),
    "run": (
        "meshop/train/run.py",
        ["tests/train/test_run.py", "tests/cli/test_cli.py", "tests/train/test_train_registry.py"],
    ),
    "plots": ("meshop/train/plots.py", ["tests/train/test_plots.py", "tests/cli/test_cli.py"]),
    "demo": (
        "meshop/train/demo.py",
        [
            "tests/train/test_demo.py",
            "tests/train/test_runs_reproduce.py",
            "tests/datasets/test_elasticity.py",
        ],
    ),
    "transolver": ("meshop/models/transolver.py", ["tests/models/test_transolver.py"]),
    "mesh_io": (
        "meshop/data/mesh_io.py",
        [
            "tests/data/test_mesh_io.py",
            "tests/data/test_groups_integrals.py",
            "tests/data/test_gmsh_groups.py",
            "tests/data/test_mesh_cells.py",
            "tests/data/test_vector_fields.py",
            "tests/data/test_mesh_io_options.py",
        ],
    ),
    "normalizers": (
        "meshop/data/normalizers.py",
        [
            "tests/train/test_normalized.py",
            "tests/data/test_normalizer_offsets.py",
            "tests/train/test_train.py",
        ],
    ),
    "weights": (
        "meshop/data/weights.py",
        [
            "tests/data/test_weights.py",
            "tests/data/test_mesh_cells.py",
            "tests/data/test_point_weights.py",
            "tests/data/test_distorted_cells.py",
            "tests/data/test_gmsh_groups.py",
            "tests/data/test_degenerate_cells.py",
            "tests/data/test_point_cloud_weights.py",
        ],
    ),
    "physics_attention": (
        "meshop/nn/physics_attention.py",
        [
            "tests/nn/test_physics_attention.py",
            "tests/nn/test_attention_interface.py",
            "tests/nn/test_weight_scale.py",
            "tests/models/test_transolver.py",
            "tests/nn/test_physics_attention_paths.py",
            "tests/nn/test_physics_attention_batches.py",
        ],
    ),
}
SUMMARY = re.compile(r"(killed|survived|timeout|suspicious|no tests|skipped)", re.I)


def scratch_copy(name: str) -> Path:
    """The working tree's files that git tracks or would track (new, not ignored) under
    ``.mutmut/NAME``; data, runs and the virtual environment are not copied."""
    dest = WORK / name
    if dest.exists():
        shutil.rmtree(dest)
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.split(b"\0")
    for entry in filter(None, listed):
        source = ROOT / os.fsdecode(entry)
        if source.is_file():
            target = dest / os.fsdecode(entry)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return dest


def write_config(dest: Path, module: str, tests: list[str]) -> None:
    """mutmut reads ``[mutmut]`` from setup.cfg when pyproject.toml has no ``[tool.mutmut]``."""
    lines = [
        "[mutmut]",
        "source_paths = meshop",
        f"only_mutate = {module}",
        "pytest_add_cli_args_test_selection =",
        *[f"    {t}" for t in tests],
        "pytest_add_cli_args =",
        "    -p",
        "    no:cacheprovider",
        "    -q",
        # torch is not fork-safe after it has run: fork mutants from a clean server process
        "process_isolation = forkserver",
        # what tests read beside the code (the presets table, examples)
        "also_copy =",
        "    docs",
        "    scripts",
        "    examples",
        "    README.md",
        "use_git_change_detection = false",
    ]
    (dest / "setup.cfg").write_text("\n".join(lines) + "\n")


def _env() -> dict[str, str]:
    # the mutated copy must be the meshop that tests import: no checkout of it on the path
    path = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    path = [p for p in path if p and not (Path(p) / "meshop").is_dir()]
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(path)}


def mutmut(dest: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    exe = [sys.executable, "-m", "mutmut"]
    return subprocess.run(
        [*exe, *args], cwd=dest, env=_env(), check=check, capture_output=True, text=True
    )


def _meta_files(dest: Path) -> dict[Path, str]:
    """mutmut's per-module results (``mutants/**/*.meta``) that are complete JSON now."""
    found = {}
    for path in (dest / "mutants").rglob("*.meta"):
        try:
            text = path.read_text()
            json.loads(text)
        except (OSError, ValueError):
            continue
        found[path] = text
    return found


def mutmut_run(dest: Path, max_children: int, time_limit: float | None) -> tuple[int, str]:
    """``mutmut run``; after ``time_limit`` seconds it is stopped (with its workers) and the
    mutants it did not reach count as "not checked". mutmut rewrites its result files after every
    mutant, so a stop can cut one short: the last complete copy of each is put back. Returns (exit
    status, the tail of its output, which is also in ``.mutmut/NAME/mutmut-run.log``)."""
    command = [sys.executable, "-m", "mutmut", "run", "--max-children", str(max_children)]
    log = dest / "mutmut-run.log"
    deadline = None if time_limit is None else time.monotonic() + time_limit
    complete: dict[Path, str] = {}
    with open(log, "w") as out:
        run = subprocess.Popen(
            command,
            cwd=dest,
            env=_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stopped with every worker it forked
        )
        status = None
        while status is None:
            try:
                status = run.wait(timeout=5)
            except subprocess.TimeoutExpired:
                complete.update(_meta_files(dest))
                if deadline is not None and time.monotonic() > deadline:
                    os.killpg(run.pid, signal.SIGKILL)
                    run.wait()
                    status = 0
                    for path, text in complete.items():
                        if path not in _meta_files(dest):
                            path.write_text(text)
    return status, log.read_text()[-3000:]


def results(dest: Path) -> dict[str, list[str]]:
    """Mutant names by status, from ``mutmut results --all true``."""
    out = mutmut(dest, "results", "--all", "true").stdout
    by_status: dict[str, list[str]] = {}
    for line in out.splitlines():
        if ":" not in line:
            continue
        name, status = (part.strip() for part in line.rsplit(":", 1))
        by_status.setdefault(status, []).append(name)
    return by_status


def run_target(name: str, max_children: int, time_limit: float | None = None) -> dict:
    module, tests = TARGETS[name]
    start = time.perf_counter()
    dest = scratch_copy(name)
    write_config(dest, module, tests)
    status, output = mutmut_run(dest, max_children, time_limit)
    if status != 0:
        print(output, file=sys.stderr)
        raise SystemExit(f"mutmut failed on target {name} (exit status {status})")
    by_status = results(dest)
    seconds = time.perf_counter() - start
    counts = {status: len(names) for status, names in sorted(by_status.items())}
    total = sum(counts.values())
    print(f"\n== {name}: {module} ({total} mutants, {seconds:.0f} s) {counts}")
    for mutant in by_status.get("survived", []):
        print(f"  survived: {mutant}")
    return {"target": name, "module": module, "seconds": seconds, "counts": counts}


def _indented(diff: str, indent: str) -> str:
    """``diff`` with every line of its hunks (context, removed, added) indented by ``indent``."""
    lines = []
    for line in diff.splitlines(keepends=True):
        if line[:1] in (" ", "-", "+") and not line.startswith(("---", "+++")) and line.strip():
            line = line[0] + indent + line[1:]
        lines.append(line)
    return "".join(lines)


def _removed(diff: str) -> str:
    """The lines ``diff`` removes, as they read in the source."""
    lines = diff.splitlines(keepends=True)
    return "".join(line[1:] for line in lines if line[:1] == "-" and not line.startswith("---"))


def _apply(dest: Path, diff: str, fuzz: int = 0) -> bool:
    """Whether ``patch`` placed ``diff`` in the tree at ``dest`` (rejects are dropped)."""
    applied = subprocess.run(
        [
            "patch",
            "-p0",
            "--forward",
            "--no-backup-if-mismatch",
            "--reject-file=-",
            "-s",
            f"--fuzz={fuzz}",
        ],
        cwd=dest,
        input=diff,
        text=True,
        capture_output=True,
    )
    return bool(diff) and applied.returncode == 0


def verify_survivors(
    name: str, tests: list[str] | None = None, only: str | None = None
) -> dict[str, list[str]]:
    """Apply every survivor (and "no tests" mutant) of target ``name``'s last run to a clean copy
    of the working tree, one at a time, and run the target's test files on it: ``{"killed":
    [...], "survived": [...], "not applied": [...]}`` (a diff ``patch`` cannot place is "not
    applied"). ``tests`` replaces the target's test files (e.g. the ones written for the
    survivors); ``only``, a regular expression, keeps the survivors whose names it matches."""
    module, target_tests = TARGETS[name]
    tests = tests or target_tests
    runs = WORK / name
    if not (runs / "mutants").is_dir():
        raise SystemExit(f"no run of target {name!r} to verify: run scripts/mutate.py {name} first")
    # "no tests": mutmut found no test of the target reaching the mutant; the whole files may
    found = results(runs)
    survivors = [*found.get("survived", []), *found.get("no tests", [])]
    if only is not None:
        survivors = [mutant for mutant in survivors if re.search(only, mutant)]
    dest = scratch_copy(f"{name}-verify")
    original = (dest / module).read_bytes()
    # workers and subprocesses import the copy too. No bytecode cache: Python reuses a module's
    # .pyc while the source keeps its size and its modification time to the second, and two
    # mutants of the same length are often applied within one second
    env = {**_env(), "PYTHONPATH": str(dest), "PYTHONDONTWRITEBYTECODE": "1"}
    verdicts: dict[str, list[str]] = {"killed": [], "survived": [], "not applied": []}
    start = time.perf_counter()
    for mutant in survivors:
        diff = mutmut(runs, "show", mutant).stdout
        diff = diff[diff.index("---") :] if "---" in diff else ""
        # a method's diff is shown dedented: placed as it is, else indented by one class level.
        # Its line numbers count from the function, so a hunk with less context after the change
        # than before reads to patch as the end of the file; where the removed lines occur once in
        # the module, patch may place it by them alone (fuzz)
        for indent, fuzz in product(("", "    "), (0, 3)):
            hunk = _indented(diff, indent)
            removed = _removed(hunk)
            if fuzz and not (removed and original.decode().count(removed) == 1):
                continue
            if _apply(dest, hunk, fuzz) and (dest / module).read_bytes() != original:
                break
            (dest / module).write_bytes(original)
        if (dest / module).read_bytes() == original:  # no diff, or none that patch placed
            verdicts["not applied"].append(mutant)
        else:
            tested = subprocess.run(
                [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
                cwd=dest,
                env=env,
                capture_output=True,
                text=True,
            )
            verdicts["killed" if tested.returncode != 0 else "survived"].append(mutant)
        (dest / module).write_bytes(original)
    seconds = time.perf_counter() - start
    counts = {verdict: len(names) for verdict, names in verdicts.items()}
    print(
        f"\n== {name}: {len(survivors)} survivors applied to the source ({seconds:.0f} s): {counts}"
    )
    for verdict in ("survived", "not applied"):
        for mutant in verdicts[verdict]:
            print(f"  {verdict}: {mutant}")
    return verdicts


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="*", help=f"targets (default all): {', '.join(TARGETS)}")
    parser.add_argument("--list", action="store_true", help="list the targets and exit")
    parser.add_argument(
        "--max-children", type=int, default=2, help="mutants tested in parallel (default 2)"
    )
    parser.add_argument(
        "--time-limit",
        type=float,
        default=None,
        help="stop a target's run after this many seconds (its unreached mutants: not checked)",
    )
    parser.add_argument(
        "--verify",
        action="store_true",
        help="apply each survivor of the targets' last runs to the source and run their tests "
        "without mutmut (catches what mutmut cannot see: code in processes the tests start)",
    )
    parser.add_argument(
        "--tests",
        nargs="+",
        metavar="FILE",
        help="with --verify: run these test files instead of the target's",
    )
    parser.add_argument(
        "--only",
        metavar="REGEX",
        help="with --verify: only the survivors whose names match this regular expression",
    )
    args = parser.parse_args(argv)
    if (args.tests or args.only) and not args.verify:
        parser.error("--tests and --only go with --verify")
    if args.list:
        for name, (module, tests) in TARGETS.items():
            print(f"{name:22} {module:40} {' '.join(tests)}")
        return
    unknown = [t for t in args.targets if t not in TARGETS]
    if unknown:
        raise SystemExit(f"unknown target(s) {unknown}; choose from {list(TARGETS)}")
    for name in args.targets or list(TARGETS):
        if args.verify:
            verify_survivors(name, args.tests, args.only)
        else:
            run_target(name, args.max_children, args.time_limit)


if __name__ == "__main__":
    main()

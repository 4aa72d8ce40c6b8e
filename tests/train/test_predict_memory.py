"""`meshop predict` on large meshes: the memory estimate against the measured peak, the error
before any work when the mesh cannot fit, and the progress bar fed by the chunk loops."""

import io
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import meshop.train.inference as inference
from meshop.cli import main
from meshop.data import write_mesh
from meshop.data.batching import node_chunks, reporting_chunks
from meshop.errors import ConfigError
from meshop.models import Transolver
from meshop.train import load_model
from meshop.train.inference import (
    check_memory,
    memory_estimate,
    predict_file,
    predict_in_chunks,
    vtu_points,
)
from tests.helpers import MEMORY_PRELUDE, predict_case, square_mesh

MB = 2**20


#: a fresh process predicts and prints the high-water mark of the resident set during the
#: prediction above the resident set before it (in one process, memory freed by an earlier
#: prediction would be reused unseen)
MEASURE = (
    MEMORY_PRELUDE
    + """
import sys
from meshop.train.inference import predict_file

run, mesh, out, chunk = sys.argv[1:]
reset_peak()
before = status("VmRSS")
predict_file(run, mesh, out, chunk_nodes=int(chunk))
print(status("VmHWM") - before)
"""
)


@pytest.fixture
def big_mesh(trained):
    root, run = trained
    data, a, _ = predict_case(200, 3.0)  # 40,000 nodes
    path = root / "big.vtu"
    write_mesh(path, data, {"a": a}, overwrite=True)
    return run, path


@pytest.mark.parametrize("chunk", [0, 4096])
def test_the_estimate_is_within_a_factor_of_two_of_the_measured_peak(big_mesh, tmp_path, chunk):
    run, path = big_mesh
    out = tmp_path / "out.vtu"
    argv = [sys.executable, "-c", MEASURE, str(run), str(path), str(out), str(chunk)]
    peak = int(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)
    model, ckpt = load_model(run)
    estimate = memory_estimate(model, ckpt, 40_000, chunk).total
    assert peak / 2 < estimate < 2 * peak, (peak / MB, estimate / MB)


def test_the_estimate_grows_with_the_mesh_the_chunk_and_the_state_of_the_family(trained):
    model, ckpt = load_model(trained[1])
    small, large = (memory_estimate(model, ckpt, n, 1024) for n in (10**6, 10**7))
    assert large.file == 10 * small.file and large.chunk == small.chunk
    assert small.state == 0  # PiT: only the input and the output, counted with the file
    assert memory_estimate(model, ckpt, 10**6, 4096).chunk == 4 * small.chunk
    whole = memory_estimate(model, ckpt, 10**6, 0)
    assert whole.chunk_nodes is None and whole.chunk * 1024 == 10**6 * small.chunk
    transolver = Transolver(3, 1, 2, width=32, layers=1, heads=2, slices=4)
    state = memory_estimate(transolver, ckpt, 10**6, 1024).state
    assert state == 4 * 1.25 * 32 * 10**6  # its features (and a little more): float32 [N, 32]


def test_a_mesh_that_cannot_fit_is_refused_before_it_is_read(big_mesh, monkeypatch, capsys):
    run, path = big_mesh
    model, ckpt = load_model(run)
    assert vtu_points(path) == 40_000
    need = memory_estimate(model, ckpt, 40_000, 0)
    smallest = memory_estimate(model, ckpt, 40_000, 1024)
    monkeypatch.setattr(inference, "available_memory", lambda: (need.total + smallest.total) // 2)

    def no_reading(*args, **kwargs):
        raise AssertionError("the mesh must not be read")

    monkeypatch.setattr(inference, "read_meshio", no_reading)
    out = path.parent / "refused.vtu"
    argv = ["predict", "--checkpoint", str(run), "--mesh", str(path), "--out", str(out)]
    assert main([*argv, "--chunk-nodes", "0"]) == 2
    err = capsys.readouterr().err
    assert f"predicting on '{path}' (40,000 nodes) needs about {need.total / 2**30:.1f} GB" in err
    assert "the whole pass at once" in err and not out.exists()
    chunk = int(err.split("--chunk-nodes ")[1].split()[0])
    assert 1024 <= chunk < 40_000 and chunk & (chunk - 1) == 0  # a power of two
    check_memory(model, ckpt, 40_000, chunk)  # the suggested chunk fits
    with pytest.raises(ConfigError):
        check_memory(model, ckpt, 40_000, 2 * chunk)  # the largest power of two that fits
    monkeypatch.setattr(inference, "available_memory", lambda: smallest.file // 2)
    assert main([*argv, "--chunk-nodes", "0"]) == 2
    assert "no --chunk-nodes fits: the mesh and the model's state of size N alone" in (
        capsys.readouterr().err
    )


def test_a_mesh_without_a_header_is_checked_once_read(trained, monkeypatch, tmp_path):
    _, run = trained
    data, a, _ = predict_case(12, 3.0)
    path = tmp_path / "mesh.msh"
    write_mesh(path, data, {"a": a})
    assert vtu_points(path) is None
    monkeypatch.setattr(inference, "available_memory", lambda: 1000)
    with pytest.raises(ConfigError, match=r"'.*mesh.msh' \(144 nodes\) needs about"):
        predict_file(run, path, tmp_path / "out.vtu")
    monkeypatch.setattr(inference, "available_memory", lambda: None)  # unknown: not checked
    predict_file(run, path, tmp_path / "out.vtu")


def test_chunks_report_their_nodes_once_each_is_done_inside_reporting_chunks():
    assert type(node_chunks(7, 3)) is list  # nothing to report to
    outer, inner, seen = [], [], []
    with reporting_chunks(outer.append):
        with reporting_chunks(inner.append):
            for _ in node_chunks(7, 3):
                seen.append(list(outer))
        assert node_chunks(0, 3) == [] and not node_chunks(0, 3)
        list(node_chunks(2, 3))
    assert seen == [[], [3], [3, 3]] and inner == [3, 3, 1] and outer == [3, 3, 1, 2]
    list(node_chunks(7, 3))
    assert outer == [3, 3, 1, 2]


def test_every_node_loop_of_a_chunked_model_reports_to_the_progress_bar():
    torch.manual_seed(0)
    data = square_mesh(10)
    data.x = torch.rand(100, 1)
    model = Transolver(3, 1, 2, width=8, layers=2, heads=2, slices=4)
    done = []
    with reporting_chunks(done.append):
        predict_in_chunks(model, data, chunk_nodes=30)
    assert max(done) == 30 and sum(done) % 100 == 0 and sum(done) >= 4 * 100  # a pass per layer


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_meshop_predict_shows_the_nodes_done_on_a_terminal_unless_told_not_to(
    big_mesh, monkeypatch, capsys
):
    run, path = big_mesh
    out = path.parent / "progress.vtu"
    argv = ["predict", "--checkpoint", str(run), "--mesh", str(path), "--out", str(out)]
    argv += ["--chunk-nodes", "8192", "--overwrite"]
    for flags, shown in (([], True), (["--no-progress"], False)):
        terminal = Terminal()
        monkeypatch.setattr("sys.stderr", terminal)
        assert main([*argv, *flags]) == 0
        assert ("predicting: " in terminal.getvalue()) is shown
        assert ("node/s" in terminal.getvalue()) is shown
    monkeypatch.undo()
    assert main(argv) == 0  # not a terminal: no bar
    assert "predicting" not in capsys.readouterr().err
    assert np.isfinite(float(vtu_points(out)))


#: frees 125 MB of 64 kB blocks below a block still held (the allocator keeps them resident),
#: then gives them back; prints the resident set before and after
TRIM = """
from meshop.train.memory import release_freed_memory

def resident():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) * 1024

blocks = [bytearray(b"\\x01") * (64 * 1024) for _ in range(2000)]  # written, so resident
held = bytearray(64 * 1024)
del blocks
before = resident()
release_freed_memory()
print(before, resident())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_freed_memory_is_given_back_to_the_system():
    # glibc's own settings: a MALLOC_MMAP_THRESHOLD_ of 64 kB (the benchmarks' fork server sets
    # it in the environment of the process that runs them) would return the blocks at once
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    done = subprocess.run(
        [sys.executable, "-c", TRIM], capture_output=True, text=True, check=True, env=env
    )
    before, after = map(int, done.stdout.split())
    assert before - after > 100 * MB

"""Logs of batch jobs (no progress bars when output is not a terminal), error messages of bad
query files and unreadable meshes, and the default data root."""

import sys
from pathlib import Path

import numpy as np
import pytest

from meshop.cli import main
from meshop.data import from_points
from meshop.datasets import base
from meshop.errors import MeshReadError
from meshop.models.registry import build_model
from meshop.train import prepare_data
from meshop.train.config import TrainConfig
from meshop.train.inference import read_points
from meshop.train.trainer import train


def tiny_train(epochs: int = 3, out_dir=None, progress: bool = True) -> None:
    rng = np.random.default_rng(0)
    samples = []
    for _ in range(4):
        pos = rng.random((20, 2))
        samples.append(from_points(pos, x=pos[:, :1], y=pos[:, 1:]))
    model = build_model("mlp", in_channels=3, out_channels=1, pos_dim=2, width=4)
    config = TrainConfig(epochs=epochs, batch_size=2, progress=progress)
    train(model, prepare_data(samples, samples, config), out_dir=out_dir)


def test_no_progress_bars_when_output_is_not_a_terminal(capsys):
    tiny_train(epochs=3)
    out, err = capsys.readouterr()
    assert "\r" not in err and "batch/s" not in err and "it/s" not in err
    lines = out.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith("epoch ") for line in lines)


@pytest.mark.parametrize("stdout_tty, stderr_tty", [(True, True), (False, True), (True, False)])
def test_progress_bars_only_when_both_streams_are_terminals(
    stdout_tty, stderr_tty, capsys, monkeypatch
):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: stdout_tty, raising=False)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: stderr_tty, raising=False)
    tiny_train(epochs=1)
    _, err = capsys.readouterr()
    assert ("epoch 1/1" in err and "batch" in err) == (stdout_tty and stderr_tty)


def test_csv_query_with_a_non_number_names_the_line_and_value(tmp_path, capsys):
    path = tmp_path / "points.csv"
    path.write_text("x,y\n0.1,0.2\n\n0.3,abc\n")
    with pytest.raises(MeshReadError, match=r"line 4, column 2: 'abc' is not a number"):
        read_points(path, 2)
    path.write_text("0.1,0.2\n0.3,0.4,0.5\n")
    with pytest.raises(MeshReadError, match=r"line 2: 3 values, but the lines before have 2"):
        read_points(path, 2)
    path.write_text("x,y\n")
    with pytest.raises(MeshReadError, match="holds no points"):
        read_points(path, 2)
    path.write_text("# x,y\nx,y\n1,2\n3,4\n")
    assert read_points(path, 2).tolist() == [[1, 2], [3, 4]]


def test_unreadable_mesh_on_the_command_line_is_one_line_with_meshios_reason(tmp_path, capsys):
    tiny_train(epochs=1, out_dir=tmp_path / "run", progress=False)
    bad = tmp_path / "broken.vtu"
    bad.write_text("<VTKFile> truncated")
    argv = ["predict", "--checkpoint", tmp_path / "run", "--mesh", bad, "--out", tmp_path / "p.vtu"]
    capsys.readouterr()
    assert main([str(a) for a in argv]) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and err.startswith("meshop: error: cannot read mesh file")
    assert "broken.vtu" in err and "meshio said: " in err and "SystemExit" not in err
    assert "Couldn't read file" in err and out == ""


def test_default_data_root_is_the_checkouts_datasets_folder_else_a_user_cache(
    tmp_path, monkeypatch
):
    monkeypatch.delenv("MESHOP_DATA", raising=False)
    repo = Path(__file__).resolve().parents[2]
    assert base.data_root() == repo / "datasets"
    installed = tmp_path / "site-packages" / "datasets"  # no pyproject.toml beside it
    monkeypatch.setattr(base, "REPO_DATA_ROOT", installed)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert base.data_root() == tmp_path / "cache" / "meshop"
    monkeypatch.setenv("MESHOP_DATA", str(tmp_path / "mine"))
    assert base.data_root() == tmp_path / "mine"

"""The ``meshop`` command: the train -> evaluate -> predict -> plot journey, the demo, and errors
that are one line with exit status 2."""

import csv
import json

import meshio
import numpy as np
import pytest

from meshop.cli import main
from meshop.data import read_mesh, write_mesh
from meshop.train import checkpoint
from tests.helpers import run_ok, square_mesh


def run_error(argv, capsys) -> str:
    status = main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert status == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("meshop: error: "), err
    return lines[0]


def train_folder(mesh_folder, out, capsys, *extra):
    argv = ["train", "--dataset", "folder", "--data-dir", mesh_folder, "--model", "mlp"]
    argv += ["--dataset-arg", 'inputs="a"', "--dataset-arg", 'targets=["u"]', "--epochs", 2]
    argv += ["--batch-size", 4, "--model-arg", "width=8", "--out", out, "--no-progress"]
    return run_ok([*argv, *extra], capsys)


def test_train_evaluate_predict_plot_journey_on_a_folder_of_meshes(mesh_folder, tmp_path, capsys):
    run = tmp_path / "run"
    metrics = json.loads(train_folder(mesh_folder, run, capsys).strip().splitlines()[-1])
    assert metrics["epoch"] == 2 and metrics["test_rel_l2"] > 0
    assert {"checkpoint.pt", "metrics.jsonl", "figures", "run.json"} <= {
        p.name for p in run.iterdir()
    }
    assert (run / "figures" / "loss.png").stat().st_size > 0
    assert (run / "figures" / "test_000.png").stat().st_size > 0

    evaluated = json.loads(run_ok(["evaluate", "--checkpoint", run], capsys))
    assert evaluated["test_rel_l2"] == pytest.approx(metrics["test_rel_l2"], rel=1e-5)
    assert evaluated["samples"] == 2 and "test_rel_l2_median" in evaluated

    # predictions at the nodes of a new mesh, written back as point data beside the input
    new_mesh = square_mesh(7)
    write_mesh(tmp_path / "new.vtu", new_mesh, {"a": np.cos(new_mesh.pos[:, 1].numpy())})
    run_ok(
        [
            "predict",
            "--checkpoint",
            run / "checkpoint.pt",
            "--mesh",
            tmp_path / "new.vtu",
            "--out",
            tmp_path / "pred.vtu",
        ],
        capsys,
    )
    written = meshio.read(tmp_path / "pred.vtu")
    assert written.point_data["u"].shape == (49,) and "a" in written.point_data

    # at arbitrary query points, some outside the training domain: CSV in, CSV out
    points = np.array([[0.1, 0.2], [0.5, 0.5], [1.5, -0.3]])
    np.savetxt(tmp_path / "points.csv", points, delimiter=",", header="x,y", comments="")
    run_ok(
        [
            "predict",
            "--checkpoint",
            run,
            "--mesh",
            tmp_path / "new.vtu",
            "--query",
            tmp_path / "points.csv",
            "--out",
            tmp_path / "points_pred.csv",
        ],
        capsys,
    )
    table = np.loadtxt(tmp_path / "points_pred.csv", delimiter=",", skiprows=1)
    assert (tmp_path / "points_pred.csv").read_text().splitlines()[0] == "x,y,u"
    assert table.shape == (3, 3) and np.allclose(table[:, :2], points)

    # query points given as a mesh: predictions written on that mesh
    write_mesh(tmp_path / "query.vtu", square_mesh(4, shift=0.25))
    run_ok(
        [
            "predict",
            "--checkpoint",
            run,
            "--mesh",
            tmp_path / "new.vtu",
            "--query",
            tmp_path / "query.vtu",
            "--out",
            tmp_path / "query_pred.vtu",
        ],
        capsys,
    )
    assert read_mesh(tmp_path / "query_pred.vtu", targets="u").y.shape == (16, 1)

    run_ok(["plot", "--checkpoint", run, "--samples", 1, "--out", tmp_path / "figs"], capsys)
    assert sorted(p.name for p in (tmp_path / "figs").iterdir()) == ["loss.png", "test_000.png"]


def test_train_reads_a_toml_config_and_resumes(mesh_folder, tmp_path, capsys):
    config = tmp_path / "run.toml"
    config.write_text(
        f'[run]\ndataset = "folder"\nmodel = "mlp"\ndata_dir = "{mesh_folder}"\n'
        f'out = "{tmp_path / "run"}"\n[train]\nepochs = 1\nbatch_size = 4\nprogress = false\n'
        '[model]\nwidth = 8\n[dataset]\ninputs = ["a"]\ntargets = ["u"]\n'
    )
    run_ok(["train", "--config", config, "--no-figures"], capsys)
    assert checkpoint.load(tmp_path / "run")["epoch"] == 1
    run_ok(["train", "--config", config, "--epochs", 2, "--resume", "--no-figures"], capsys)
    ckpt = checkpoint.load(tmp_path / "run")
    assert ckpt["epoch"] == 2 and [r["epoch"] for r in ckpt["history"]] == [1, 2]


def test_demo_quick_writes_checkpoints_meshes_figures_and_new_point_predictions(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("MESHOP_DATA", str(tmp_path / "data"))
    out = run_ok(["demo", "--quick", "--out", tmp_path / "demo", "--no-progress"], capsys)
    assert "pit" in out and "mlp" in out and "test rel. L2" in out
    demo = tmp_path / "demo"
    summary = json.loads((demo / "summary.json").read_text())
    assert set(summary["results"]) == {"pit", "mlp"}
    for name in ("pit", "mlp"):
        assert checkpoint.load(demo / name)["model_name"] == name
    sample = meshio.read(demo / "test_samples" / "sample_000.vtu")
    assert {"von_mises", "pit_prediction", "pit_error", "mlp_prediction"} <= set(sample.point_data)
    assert (demo / "figures" / "test_000_pit.png").is_file()
    assert (demo / "figures" / "loss_pit.png").is_file()
    table = np.loadtxt(demo / "new_points.csv", delimiter=",", skiprows=1)
    assert table.shape[1] == 3 and np.isfinite(table).all()
    mesh_nodes = {tuple(p) for p in np.round(sample.points[:, :2], 6)}
    assert not any(tuple(p) in mesh_nodes for p in np.round(table[:, :2], 6))


def test_bad_arguments_and_unknown_names_are_one_line_errors(tmp_path, capsys):
    assert "did you mean 'elasticity'" in run_error(
        ["train", "--dataset", "elastisity", "--model", "pit"], capsys
    )
    assert "unknown model 'pt'" in run_error(
        ["train", "--dataset", "elasticity", "--model", "pt"], capsys
    )
    assert "--epochs" in run_error(["train", "--epochs", "ten"], capsys)
    assert "schedule must be one of" in run_error(
        ["train", "--dataset", "elasticity", "--model", "pit", "--schedule", "linear"], capsys
    )
    assert "unrecognized arguments" in run_error(
        ["evaluate", "--checkpoint", "x", "--bogus"], capsys
    )
    assert "does not exist" in run_error(["evaluate", "--checkpoint", tmp_path / "none.pt"], capsys)
    assert "needs a folder" in run_error(["train", "--dataset", "folder", "--model", "mlp"], capsys)
    bad = tmp_path / "bad.toml"
    bad.write_text("[train]\nepoch = 3\n")
    assert "did you mean 'epochs'" in run_error(["train", "--config", bad], capsys)
    assert "KEY=VALUE" in run_error(["train", "--model-arg", "width"], capsys)


def test_incompatible_checkpoint_and_data_are_one_line_errors(mesh_folder, tmp_path, capsys):
    run = tmp_path / "run"
    train_folder(mesh_folder, run, capsys, "--no-figures")
    plain = square_mesh(5)
    write_mesh(tmp_path / "no_a.vtu", plain, {"b": np.zeros(25)})
    line = run_error(
        [
            "predict",
            "--checkpoint",
            run,
            "--mesh",
            tmp_path / "no_a.vtu",
            "--out",
            tmp_path / "p.vtu",
        ],
        capsys,
    )
    assert "no point field 'a'" in line and "'b'" in line
    np.savetxt(tmp_path / "q3.csv", np.ones((2, 3)), delimiter=",")
    write_mesh(tmp_path / "ok.vtu", plain, {"a": np.zeros(25)})
    line = run_error(
        [
            "predict",
            "--checkpoint",
            run,
            "--mesh",
            tmp_path / "ok.vtu",
            "--query",
            tmp_path / "q3.csv",
            "--out",
            tmp_path / "p.csv",
        ],
        capsys,
    )
    assert "3 coordinates" in line and "2D" in line
    line = run_error(
        [
            "predict",
            "--checkpoint",
            run,
            "--mesh",
            tmp_path / "ok.vtu",
            "--params",
            "1,2",
            "--out",
            tmp_path / "p.vtu",
        ],
        capsys,
    )
    assert "without per-sample parameters" in line
    write_mesh(tmp_path / "exists.vtu", plain)
    line = run_error(
        [
            "predict",
            "--checkpoint",
            run,
            "--mesh",
            tmp_path / "ok.vtu",
            "--out",
            tmp_path / "exists.vtu",
        ],
        capsys,
    )
    assert "already exists" in line


def test_debug_shows_the_traceback(tmp_path):
    with pytest.raises(Exception, match="does not exist"):
        main(["evaluate", "--checkpoint", str(tmp_path / "none.pt"), "--debug"])


def test_python_dash_m_meshop_runs_the_command():
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "meshop", "models"], capture_output=True, text=True, check=True
    )
    assert "pit" in out.stdout and "galerkin" in out.stdout


def test_evaluate_scores_every_file_of_a_finer_folder_and_writes_per_sample_errors(
    mesh_folder, tmp_path, capsys
):
    run = tmp_path / "run"
    train_folder(mesh_folder, run, capsys, "--no-figures")
    finer = tmp_path / "finer"  # the same kind of cases on 12 x 12 instead of 5 to 7 nodes a side
    finer.mkdir()
    for k in range(3):
        data = square_mesh(12)
        a = np.sin((1 + k) * data.pos[:, 1].numpy())
        write_mesh(finer / f"case_{k}.vtu", data, {"a": a, "u": 2 * a + data.pos[:, 0].numpy()})
    evaluate = ["evaluate", "--checkpoint", run, "--data-dir", finer]
    out = tmp_path / "finer-eval"
    printed = json.loads(run_ok([*evaluate, "--all-files", "--out", out], capsys))
    assert printed["samples"] == 3 and printed["mean_nodes"] == 144
    assert json.loads((out / "summary.json").read_text()) == printed
    with open(out / "per_sample.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["sample"], r["source"], r["nodes"]) for r in rows] == [
        (str(k), str(finer / f"case_{k}.vtu"), "144") for k in range(3)
    ]
    errors = [float(r["rel_l2"]) for r in rows]
    assert printed["test_rel_l2"] == pytest.approx(np.mean(errors))
    assert printed["test_rel_l2_median"] == pytest.approx(np.median(errors))

    as_option = json.loads(run_ok([*evaluate, "--dataset-arg", 'split="all"'], capsys))
    assert as_option == printed
    test_split = json.loads(run_ok(evaluate, capsys))  # without: the test split of the folder
    assert test_split["samples"] == 1

    never = tmp_path / "never"
    line = run_error([*evaluate, "--all-files", "--dataset-arg", 'split="test"'], capsys)
    assert line == "meshop: error: give --all-files or --dataset-arg split=..., not both"
    line = run_error([*evaluate, "--dataset-arg", 'test_fraction="x"', "--out", never], capsys)
    assert line == (
        "meshop: error: 'test_fraction' of dataset 'folder' expects a number, got 'x' "
        "(default: 0.2)"
    )
    line = run_error([*evaluate, "--dataset-arg", "splt=1", "--out", never], capsys)
    assert "has no option 'splt'; did you mean 'split'?" in line
    assert not never.exists()


def test_train_prints_the_settings_it_resolved_once_before_training(mesh_folder, tmp_path, capsys):
    data = ["train", "--dataset", "folder", "--data-dir", mesh_folder, "--no-progress"]
    data += ["--dataset-arg", 'inputs="a"', "--dataset-arg", 'targets=["u"]', "--epochs", 1]
    argv = [*data, "--model", "pit", "--model-arg", "width=8", "--model-arg", "layers=1"]
    argv += ["--model-arg", "encoder_k=4", "--train-arg", "pct_start=0.2"]
    argv += ["--out", tmp_path / "run", "--no-figures"]
    out = run_ok(argv, capsys)
    settings = (
        "settings:\n"
        "  model             pit: width=8, heads=2, layers=1, decoder_layers=0,\n"
        "                    lambda_param='tan', periodic=none, weighted=true, pointwise=false,\n"
        "                    latent_positions=false\n"
        # the folder's defaults scaled to its meshes (presets.folder_rules): 36 nodes (the
        # median of 25, 36 and 49), so every node is latent, 20 sources of 36 in the encoder
        # and 12 latent nodes of 36 in the decoder, batch 2, lr 5e-3 and clipping 1
        "  receptive fields  encoder_quantile=0.56, decoder_quantile=0.33, encoder_k=4\n"
        "  latent mesh       36 nodes of each sample (fps)\n"
        "  optimiser         adam, lr 0.005, weight decay 0, gradient clipping 1.0\n"
        "  schedule          cosine\n"
        "  training          epochs 1, batch 2, seed 0\n"
        "  dataset           folder: inputs='a', targets=['u']\n"
        "  data              8 training samples of about 36 nodes in 2D (the defaults above are\n"
        "                    scaled to it)\n"
        "training pit ("
    )
    assert out.startswith(settings) and out.count("settings:") == 1
    recorded = json.loads((tmp_path / "run" / "run.json").read_text())
    assert recorded["train"]["latent_points"] == 36 and recorded["train"]["pct_start"] == 0.2
    assert recorded["train"]["batch_size"] == 2 and recorded["train"]["lr"] == 5e-3
    assert recorded["train"]["latent_resample"] is False  # meshes of their own
    assert recorded["model_args"] == {
        "width": 8,
        "encoder_quantile": 0.56,
        "decoder_quantile": 0.33,
        "layers": 1,
        "encoder_k": 4,
    }

    # a one-cycle schedule and no latent mesh
    gt = ["--model", "galerkin", "--model-arg", "width=8", "--out", tmp_path / "gt"]
    out = run_ok([*data, *gt, "--no-figures"], capsys)
    assert "  latent mesh       not used by galerkin\n" in out
    schedule = "onecycle: lr / 10000 -> lr at 30% of the steps -> lr / 10000"
    assert f"  schedule          {schedule}\n" in out


def test_latent_resample_on_the_command_line_takes_the_folder_rules_latent_mesh(
    mesh_folder, tmp_path, capsys
):
    """The option is checked against the settings after the folder rules gave latent_points."""
    argv = ["train", "--dataset", "folder", "--data-dir", mesh_folder, "--no-progress"]
    argv += ["--dataset-arg", 'inputs="a"', "--dataset-arg", 'targets=["u"]', "--epochs", 1]
    argv += ["--model", "pit", "--model-arg", "width=8", "--model-arg", "layers=1"]
    argv += ["--train-arg", "latent_resample=true", "--out", tmp_path / "run", "--no-figures"]
    out = run_ok(argv, capsys)
    assert "36 nodes of each sample (fps), a new one every epoch in training" in out
    recorded = json.loads((tmp_path / "run" / "run.json").read_text())
    assert recorded["train"]["latent_resample"] is True

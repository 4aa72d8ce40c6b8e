"""Distributed data parallel: two CPU processes under torchrun train the same model as one process
with the same global batch, and `meshop train` runs under torchrun."""

import json
import textwrap

import torch

from meshop.train import Trainer, checkpoint, prepare_data
from tests.helpers import quiet, tiny_model, torchrun, toy_samples

SCRIPT = textwrap.dedent(
    """
    import sys
    from meshop.train import Trainer, prepare_data
    from tests.helpers import quiet, tiny_model, toy_samples

    config = quiet(epochs=2, batch_size=4, schedule="onecycle", clip=0.5, device="cpu")
    data = prepare_data(toy_samples(16), toy_samples(5, 1), config)
    Trainer(tiny_model(), data, out_dir=sys.argv[1]).fit()
    """
)


def test_two_processes_under_torchrun_train_the_same_model_as_one(tmp_path):
    script = tmp_path / "train_ddp.py"
    script.write_text(SCRIPT)
    result = torchrun(script, tmp_path / "ddp")
    assert result.returncode == 0, result.stderr[-3000:]

    config = quiet(epochs=2, batch_size=4, schedule="onecycle", clip=0.5, device="cpu")
    Trainer(
        tiny_model(),
        prepare_data(toy_samples(16), toy_samples(5, 1), config),
        out_dir=tmp_path / "single",
    ).fit()

    ddp, single = checkpoint.load(tmp_path / "ddp"), checkpoint.load(tmp_path / "single")
    for key, value in single["state_dict"].items():
        assert torch.allclose(ddp["state_dict"][key], value, atol=1e-6), key
    for row_ddp, row_single in zip(ddp["history"], single["history"], strict=True):
        for key in ("train_loss", "test_rel_l2", "test_rel_l2_median"):
            assert abs(row_ddp[key] - row_single[key]) <= 1e-6 * abs(row_single[key]), key
    assert len(ddp["rng"]) == 2  # one RNG state per process: a resumed DDP run continues exactly
    written = sorted(p.name for p in (tmp_path / "ddp").iterdir())
    assert written == ["checkpoint.pt", "metrics.jsonl"]


def test_meshop_train_runs_under_torchrun(mesh_folder, tmp_path):
    run = tmp_path / "run"
    result = torchrun(
        "-m", "meshop.cli", "train", "--dataset", "folder", "--data-dir", mesh_folder,
        "--dataset-arg", 'inputs=["a"]', "--dataset-arg", 'targets=["u"]', "--model", "mlp",
        "--epochs", 2, "--batch-size", 4, "--out", run, "--no-progress",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1])["epoch"] == 2
    assert checkpoint.load(run)["epoch"] == 2 and (run / "figures" / "loss.png").is_file()


UNUSED = textwrap.dedent(
    """
    import sys
    import torch
    from meshop.train import Trainer, prepare_data
    from tests.helpers import quiet, tiny_model, toy_samples

    model = tiny_model()
    model.unused = torch.nn.Linear(2, 2)  # parameters that no step uses
    config = quiet(epochs=2, batch_size=4, device="cpu", find_unused_parameters={find})
    Trainer(model, prepare_data(toy_samples(8), config=config), out_dir=sys.argv[1]).fit()
    """
)


def test_a_model_with_unused_parameters_trains_under_torchrun_when_told(tmp_path):
    script = tmp_path / "unused.py"
    script.write_text(UNUSED.format(find=True))
    result = torchrun(script, tmp_path / "run")
    assert result.returncode == 0, result.stderr[-3000:]

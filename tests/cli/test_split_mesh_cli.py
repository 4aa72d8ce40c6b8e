"""`meshop train --split-mesh` under torchrun against the same command on one process, in float64:
every model that splits takes the same first step from the command line (the loss, the gradient,
the parameters after it, the test errors); a model that cannot split is refused before any step,
saying why and what to do."""

import textwrap

import pytest
import torch

from meshop.cli import main
from meshop.train import checkpoint
from tests.helpers import torchrun
from tests.train.test_split import samples

#: every registered model, at a tiny size; PiT's quantile fields search the whole mesh's radius
MODEL_ARGS = {
    "pit": ["width=8", "heads=2", "layers=1", "encoder_quantile=0.2", "decoder_k=4"],
    "galerkin": ["width=8", "heads=2", "layers=1", 'path="mesh"'],
    "fourier": ["width=8", "heads=2", "layers=1", 'path="mesh"'],
    "ono": ["width=8", "heads=2", "layers=1", "k=4"],
    "transolver": ["width=8", "heads=2", "layers=1", "slices=4"],
    "mlp": ["width=8", "layers=2"],
}
#: a model that cannot split: PiT's decoder layers attend among all of a sample's query points
UNSPLITTABLE = ("pit", ["width=8", "layers=1", "decoder_layers=1", "encoder_k=4", "decoder_k=4"])
DATASET = f"{__name__}:Samples64"


class Samples64(list):
    """The float64 point clouds of tests.train.test_split as a dataset of ``meshop train``
    (``--dataset tests.cli.test_split_mesh_cli:Samples64``): 5 training and 2 test samples."""

    def __init__(self, split: str = "train"):
        super().__init__(samples(5) if split == "train" else samples(2, seed=1))


def train_argv(model, args, run, *extra):
    """One step (a batch of every training sample), no gradient clipping: Adam's first moment
    in the checkpoint is then a tenth of the gradient."""
    argv = ["train", "--dataset", DATASET, "--model", model, "--epochs", "1", "--batch-size", "5"]
    argv += ["--clip", "0", "--latent-points", "12", "--out", str(run)]
    for arg in args:
        argv += ["--model-arg", arg]
    return [*argv, "--no-progress", "--no-figures", "--threads", "1", *extra]


#: ``meshop train --split-mesh`` of every model and of the unsplittable one, in float64, on each
#: process of torchrun; the exit statuses in ``OUT/status.txt``
SCRIPT = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    import torch
    import meshop.train.distributed
    from meshop.cli import main
    from tests.cli.test_split_mesh_cli import MODEL_ARGS, UNSPLITTABLE, train_argv

    torch.set_default_dtype(torch.float64)
    # one process group for every run of this process (meshop leaves it at the end of a command,
    # and torchrun's store serves one group per worker)
    meshop.train.distributed.teardown = lambda: None
    out = Path(sys.argv[1])
    cases = [*MODEL_ARGS.items(), UNSPLITTABLE]
    names = [*MODEL_ARGS, "unsplittable"]
    status = [main(train_argv(m, a, out / n, "--split-mesh")) for n, (m, a) in zip(names, cases)]
    if torch.distributed.get_rank() == 0:
        (out / "status.txt").write_text(" ".join(map(str, status)))
    """
)


def first_step(run):
    """The loss, the gradient and the parameters after the first step, and the test errors."""
    ckpt = checkpoint.load(run)
    moments = [s["exp_avg"].flatten() for s in ckpt["optimizer"]["state"].values()]
    row = ckpt["history"][0]
    errors = [row["train_loss"], row["test_rel_l2"], row["test_rel_l2_median"]]
    return errors, torch.cat(moments) / 0.1, ckpt["state_dict"]


@pytest.fixture
def float64():
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(torch.float32)


def test_meshop_train_split_mesh_takes_one_process_step_in_float64_for_every_model(
    tmp_path, float64
):
    script = tmp_path / "split.py"
    script.write_text(SCRIPT)
    result = torchrun(script, tmp_path / "split")
    assert result.returncode == 0, result.stderr[-3000:]
    statuses = (tmp_path / "split" / "status.txt").read_text().split()
    assert statuses == ["0"] * len(MODEL_ARGS) + ["2"], result.stderr[-3000:]
    said, refusal = " ".join(result.stdout.split()), " ".join(result.stderr.split())
    assert said.count("every sample's nodes split over 2 processes") == len(MODEL_ARGS) + 1
    assert "split_mesh cannot train PiT: PiT with decoder_layers=1 attends among all" in refusal
    assert "evaluate it with each sample whole on a process" in refusal
    assert not (tmp_path / "split" / "unsplittable" / "checkpoint.pt").exists()

    for model, args in MODEL_ARGS.items():
        assert main(train_argv(model, args, tmp_path / "single" / model)) == 0
        one, two = first_step(tmp_path / "single" / model), first_step(tmp_path / "split" / model)
        assert two[0] == pytest.approx(one[0], rel=1e-10), model
        assert torch.allclose(two[1], one[1], rtol=1e-8, atol=1e-12), model
        assert one[1].dtype == torch.float64 and one[1].abs().max() > 0, model
        for key, value in one[2].items():
            if isinstance(value, torch.Tensor):
                assert torch.allclose(two[2][key], value, rtol=1e-10, atol=1e-12), (model, key)

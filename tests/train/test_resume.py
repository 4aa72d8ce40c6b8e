"""Exact resume of a model that draws random numbers from every generator (torch dropout, numpy,
Python's random) on a shuffled loader: a run killed mid-epoch and resumed ends with the parameters
and metrics of an uninterrupted run, in one process and under torchrun with two processes."""

import random
import textwrap

import numpy as np
import pytest
import torch

from meshop.train import Trainer, checkpoint, prepare_data, seed_everything
from meshop.train.metrics import read_metrics
from tests.helpers import noisy_model, parameters, quiet, torchrun, toy_samples


def kill_at_step(monkeypatch, step: int) -> None:
    """Make ``Trainer.step`` raise KeyboardInterrupt on its ``step``-th call."""
    calls = {"n": 0}
    original = Trainer.step

    def dying_step(self, batch):
        calls["n"] += 1
        if calls["n"] == step:
            raise KeyboardInterrupt("killed")
        return original(self, batch)

    monkeypatch.setattr(Trainer, "step", dying_step)


def test_a_random_model_killed_mid_epoch_and_resumed_ends_like_an_uninterrupted_run(
    tmp_path, monkeypatch
):
    train_set, test_set = toy_samples(12), toy_samples(4, 1)
    config = quiet(epochs=4, schedule="onecycle", clip=0.5)
    full = Trainer(
        noisy_model(), prepare_data(train_set, test_set, config), out_dir=tmp_path / "full"
    )
    full_metrics = full.fit()

    # the randomness matters: another seed for the same start trains another model
    seed_everything(7)
    other = Trainer(noisy_model(), prepare_data(train_set, test_set, config))
    seed_everything(7)
    other.fit()
    assert not torch.allclose(parameters(other.model), parameters(full.model), atol=1e-4)

    kill_at_step(monkeypatch, 8)  # 3 steps per epoch: killed in the third epoch
    with pytest.raises(KeyboardInterrupt):
        Trainer(
            noisy_model(), prepare_data(train_set, test_set, config), out_dir=tmp_path / "killed"
        ).fit()
    monkeypatch.undo()
    assert checkpoint.load(tmp_path / "killed")["epoch"] == 2

    seed_everything(123)  # the resumed process starts from other generator states
    random.seed(5)
    np.random.seed(5)  # noqa: NPY002
    resumed = Trainer(
        noisy_model(seed=5), prepare_data(train_set, test_set, config), out_dir=tmp_path / "killed"
    )
    resumed_metrics = resumed.fit(resume=True)
    assert torch.allclose(parameters(resumed.model), parameters(full.model), atol=1e-6)
    for key in ("train_loss", "test_rel_l2", "test_rel_l2_median"):
        assert resumed_metrics[key] == pytest.approx(full_metrics[key], rel=1e-5)
    rows = read_metrics(tmp_path / "killed" / "metrics.jsonl")
    full_rows = read_metrics(tmp_path / "full" / "metrics.jsonl")
    assert [r["train_loss"] for r in rows] == pytest.approx([r["train_loss"] for r in full_rows])


DDP_SCRIPT = textwrap.dedent(
    """
    import random, sys
    import numpy as np
    from meshop.train import Trainer, prepare_data, seed_everything
    from meshop.train.distributed import setup
    from tests.helpers import noisy_model, quiet, toy_samples

    out, mode = sys.argv[1], sys.argv[2]
    config = quiet(epochs=3, batch_size=4, schedule="onecycle", clip=0.5, device="cpu")
    data = prepare_data(toy_samples(12), toy_samples(4, 1), config)
    if mode == "first":
        Trainer(noisy_model(), data, out_dir=out + "/full").fit()
        calls = {"n": 0}
        original = Trainer.step

        def dying_step(self, batch):
            calls["n"] += 1
            if calls["n"] == 5:  # 3 steps per epoch: killed in the second epoch
                raise KeyboardInterrupt("killed")
            return original(self, batch)

        Trainer.step = dying_step
        try:
            Trainer(noisy_model(), data, out_dir=out + "/killed").fit()
        except KeyboardInterrupt:
            pass
    else:  # a new launch, every generator elsewhere
        rank = setup().rank
        seed_everything(100 + rank)
        random.seed(rank)
        np.random.seed(rank)
        Trainer(noisy_model(seed=9), data, out_dir=out + "/killed").fit(resume=True)
    """
)


def test_a_random_model_resumed_under_torchrun_ends_like_an_uninterrupted_run(tmp_path):
    script = tmp_path / "resume_ddp.py"
    script.write_text(DDP_SCRIPT)
    first = torchrun(script, tmp_path, "first")
    assert first.returncode == 0, first.stderr[-3000:]
    killed = checkpoint.load(tmp_path / "killed")
    assert killed["epoch"] == 1
    # the two processes saw samples of other sizes, so their generators differ
    assert killed["rng"][0]["torch"] != killed["rng"][1]["torch"]
    second = torchrun(script, tmp_path, "resume")
    assert second.returncode == 0, second.stderr[-3000:]

    full, resumed = checkpoint.load(tmp_path / "full"), checkpoint.load(tmp_path / "killed")
    assert resumed["epoch"] == full["epoch"] == 3
    for key, value in full["state_dict"].items():
        assert torch.allclose(resumed["state_dict"][key], value, atol=1e-6), key
    for row_full, row_resumed in zip(full["history"], resumed["history"], strict=True):
        for key in ("train_loss", "test_rel_l2", "test_rel_l2_median"):
            assert row_resumed[key] == pytest.approx(row_full[key], rel=1e-5), key

"""The training-loop profile (``benchmarks/speed/profile_training_loop.py``) splits every epoch of a
real ``meshop train`` run into parts that add up to the epoch, and undoes its timers."""

import json

import pytest
import torch

from benchmarks.speed import profile_training_loop


def test_parts_add_up_to_every_epoch_and_the_timers_are_undone(tmp_path):
    backward, clip = torch.Tensor.backward, torch.nn.utils.clip_grad_norm_
    profile_training_loop.main(["--quick", "--models", "pit,transolver", "--out", str(tmp_path)])
    assert torch.Tensor.backward is backward and torch.nn.utils.clip_grad_norm_ is clip
    records = json.loads((tmp_path / "training_loop_profile.json").read_text())["records"]
    assert [r["model"] for r in records] == ["pit", "transolver"]
    for record in records:
        assert len(record["epochs"]) == 2
        for epoch in record["epochs"]:
            parts = epoch["parts_s"]
            assert list(parts) == list(profile_training_loop.PARTS)
            assert sum(parts.values()) == pytest.approx(epoch["epoch_s"])
            assert min(parts["forward"], parts["backward"], parts["data loading"]) > 0
            assert parts["evaluation"] > 0 and parts["checkpoint"] > 0
    # PiT searches neighbours (and fills its cache) in its first epoch; the Transolver never
    first = {r["model"]: r["epochs"][0]["parts_s"] for r in records}
    assert first["pit"]["neighbour search and latent sampling"] > 0
    assert first["transolver"]["neighbour search and latent sampling"] == 0
    text = (tmp_path / "training_loop_profile.md").read_text()
    assert "### Epoch 2 (every later epoch)" in text and "| forward + backward |" in text

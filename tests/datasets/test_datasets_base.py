import numpy as np
import pytest
import torch

from meshop import from_points
from meshop.datasets import GeneratedDataset, data_root
from meshop.errors import ConfigError


class Counting(GeneratedDataset):
    name = "counting"
    calls = 0

    def generate(self, index, rng):
        Counting.calls += 1
        return from_points(torch.as_tensor(rng.random((5, 2))), y=torch.full((5, 1), float(index)))


def test_samples_depend_only_on_seed_and_index_and_splits_follow_each_other(tmp_path):
    train = Counting(tmp_path, "train", num_train=3, num_test=2, seed=4, progress=False)
    test = Counting(tmp_path, "test", num_train=3, num_test=2, seed=4, progress=False)
    assert [int(d.sample_id) for d in train] == [0, 1, 2]
    assert [int(d.sample_id) for d in test] == [3, 4]
    other = Counting(tmp_path, "train", num_train=5, num_test=1, seed=4, progress=False)
    assert torch.equal(other[1].pos, train[1].pos)  # same (seed, index), other split sizes
    expected = np.random.default_rng([4, 1]).random((5, 2))
    assert torch.allclose(train[1].pos, torch.as_tensor(expected, dtype=torch.float32))


def test_each_split_is_generated_once_when_first_asked_for(tmp_path):
    before = Counting.calls
    Counting(tmp_path, "test", num_train=50, num_test=1, progress=False)
    assert Counting.calls == before + 1  # the test split alone: not the 50 training samples
    Counting(tmp_path, num_train=50, num_test=1, progress=False)
    assert Counting.calls == before + 51
    again = Counting(tmp_path, "test", num_train=50, num_test=1, progress=False)
    Counting(tmp_path, num_train=50, num_test=1, progress=False)
    assert Counting.calls == before + 51 and len(again) == 1


def test_a_new_generator_version_does_not_reuse_older_caches(tmp_path):
    old = Counting(tmp_path, num_train=2, num_test=1, progress=False)

    class Newer(Counting):
        version = Counting.version + 1

    before = Counting.calls
    new = Newer(tmp_path, num_train=2, num_test=1, progress=False)
    assert Counting.calls == before + 2  # generated again
    assert new.processed_dir != old.processed_dir


def test_root_defaults_to_the_environment_then_the_repository(tmp_path, monkeypatch):
    monkeypatch.setenv("MESHOP_DATA", str(tmp_path))
    assert data_root() == tmp_path
    assert data_root("elsewhere").name == "elsewhere"
    monkeypatch.delenv("MESHOP_DATA")
    assert data_root().name == "datasets"


def test_bad_split_and_sizes_are_rejected(tmp_path):
    with pytest.raises(ConfigError, match="split must be one of"):
        Counting(tmp_path, "valid")
    with pytest.raises(ConfigError, match="at least 1"):
        Counting(tmp_path, num_test=0)


def test_sample_ids_survive_batching_unshifted(tmp_path):
    from meshop import make_loader

    train = Counting(tmp_path, num_train=3, num_test=1, progress=False)
    batch = next(iter(make_loader(train, batch_size=3)))
    assert batch.sample_id.tolist() == [0, 1, 2]

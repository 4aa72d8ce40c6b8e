"""Training on a folder read lazily: streamed normalisers, the in-memory run, bounded reads."""

import meshio
import numpy as np
import pytest
import torch

from meshop.data import GaussianNormalizer
from meshop.data.normalizers import RunningMoments
from meshop.datasets import MeshFolder
from meshop.errors import ConfigError
from meshop.models import PiT
from meshop.train import (
    TrainConfig,
    Trainer,
    fit_normalizers,
    load_model,
    prepare_data,
    seed_everything,
)
from meshop.train.data import PreparedSamples, prepare
from tests.helpers import CountingReads


def plate(n: int, rng: np.random.Generator) -> meshio.Mesh:
    """A triangulated n x n-node square with a scalar load 'a', a vector 'u' [N, 2] and 'vm'."""
    t = np.linspace(0.0, 1.0, n)
    x, y = np.meshgrid(t, t, indexing="ij")
    points = np.column_stack([x.ravel(), y.ravel(), np.zeros(n * n)])
    points[:, :2] += rng.uniform(-0.02, 0.02, (n * n, 2))
    node = np.arange(n * n).reshape(n, n)
    a, b, c, d = node[:-1, :-1], node[1:, :-1], node[1:, 1:], node[:-1, 1:]
    tri = np.concatenate(
        [np.stack([a, b, c], -1).reshape(-1, 3), np.stack([a, c, d], -1).reshape(-1, 3)]
    )
    load = rng.uniform(0.5, 2.0) * np.sin(3 * points[:, 0]) + points[:, 1]
    u = np.column_stack([load * points[:, 1], -2 * load])
    fields = {"a": load, "u": u, "vm": load**2 + points[:, 0]}
    return meshio.Mesh(points, [("triangle", tri)], point_data=fields)


@pytest.fixture
def folder(tmp_path):
    rng = np.random.default_rng(3)
    for i in range(10):
        meshio.write(tmp_path / f"case_{i:02d}.vtu", plate(5 + i % 3, rng))
    return tmp_path


def small_pit() -> PiT:
    seed_everything(0)
    return PiT(3, 3, pos_dim=2, width=8, layers=1, heads=1, encoder_k=4, decoder_k=4)


CONFIG = dict(epochs=1, batch_size=3, lr=1e-2, latent_points=8, progress=False)


def test_running_moments_give_the_statistics_of_all_rows_at_once():
    g = torch.Generator().manual_seed(0)
    chunks = [3.0 + 2.0 * torch.randn(n, 4, generator=g) for n in (5, 17, 1, 40)]
    whole = torch.cat(chunks).double()
    streamed = GaussianNormalizer(4).fit(iter(chunks))  # a one-shot generator: read once
    torch.testing.assert_close(streamed.mean.double(), whole.mean(0), rtol=0, atol=1e-6)
    torch.testing.assert_close(
        streamed.std.double(), whole.std(0, unbiased=False), rtol=1e-6, atol=0
    )
    at_once = GaussianNormalizer(4).fit(whole.float())
    torch.testing.assert_close(streamed.mean, at_once.mean)
    torch.testing.assert_close(streamed.std, at_once.std)
    with pytest.raises(ConfigError, match="no data"):
        GaussianNormalizer(4).fit(iter([]))
    moments = RunningMoments(4)
    with pytest.raises(ConfigError, match="4 channels, data has 2"):
        moments.update(torch.zeros(3, 2))


def test_normalisers_streamed_over_a_folder_equal_the_in_memory_fit(folder):
    names = dict(inputs="a", targets=["u", "vm"], split="all", progress=False)
    lazy = MeshFolder(folder, **names)
    in_memory = [lazy[i] for i in range(len(lazy))]
    streamed = fit_normalizers(lazy, pos=True)
    held = fit_normalizers(in_memory, pos=True)
    assert sorted(streamed) == sorted(held) == ["pos", "x", "y"]
    for key in streamed:
        assert torch.equal(streamed[key].mean, held[key].mean)
        assert torch.equal(streamed[key].std, held[key].std)
    y = torch.cat([d.y for d in in_memory]).double()
    torch.testing.assert_close(streamed["y"].mean.double(), y.mean(0), rtol=0, atol=1e-6)
    torch.testing.assert_close(
        streamed["y"].std.double(), y.std(0, unbiased=False), rtol=1e-5, atol=0
    )


def test_training_on_a_folder_matches_training_on_the_samples_in_memory(folder, tmp_path):
    names = dict(inputs="a", targets=["u", "vm"], test_fraction=0.3, progress=False)
    train, test = MeshFolder(folder, **names), MeshFolder(folder, split="test", **names)
    config = TrainConfig(**CONFIG)
    held = Trainer(
        small_pit(), prepare_data([train[i] for i in range(len(train))], list(test), config)
    )
    lazy = Trainer(small_pit(), prepare_data(train, test, config), out_dir=tmp_path / "run")
    assert isinstance(lazy.train_set, PreparedSamples) and isinstance(held.train_set, list)
    for key in ("pos", "x", "y"):
        assert torch.equal(lazy.model.normalizers[key].mean, held.model.normalizers[key].mean)
        assert torch.equal(lazy.model.normalizers[key].std, held.model.normalizers[key].std)
    first_lazy, first_held = lazy.fit(), held.fit()
    assert first_lazy["train_loss"] == pytest.approx(first_held["train_loss"], rel=1e-6)
    assert first_lazy["test_rel_l2"] == pytest.approx(first_held["test_rel_l2"], rel=1e-6)
    model, ckpt = load_model(tmp_path / "run")  # the checkpoint keeps the vector field's layout
    assert ckpt["data"]["target_fields"] == [["u", 2], ["vm", 1]]
    with torch.no_grad():
        assert model(test[0]).shape == (test[0].num_nodes, 3)


def test_each_epoch_reads_the_training_files_instead_of_holding_them(folder, monkeypatch):
    reads = CountingReads(monkeypatch)
    train = MeshFolder(folder, inputs="a", targets="vm", test_fraction=0.3, progress=False)
    files = {f.name for i, f in enumerate(train.files) if i in train.indices()}
    seed_everything(0)
    model = PiT(3, 1, pos_dim=2, width=8, layers=1, heads=1, encoder_k=4, decoder_k=4)
    trainer = Trainer(model, prepare_data(train, config=TrainConfig(**{**CONFIG, "epochs": 2})))
    built = len(reads.files)
    # built: the first file (layout), sample 0 twice (field names, shapes) and one streaming pass
    assert built <= len(files) + 3 and files <= set(reads.files)
    trainer.fit()
    per_epoch = reads.files[built:]
    assert len(per_epoch) == 2 * len(files) and set(per_epoch) == files


def test_dataloader_workers_train_on_a_folder(folder):
    names = dict(inputs="a", targets=["u", "vm"], test_fraction=0.3, progress=False)
    train = MeshFolder(folder, **names)
    serial = Trainer(small_pit(), prepare_data(train, config=TrainConfig(**CONFIG))).fit()
    workers = Trainer(
        small_pit(), prepare_data(train, config=TrainConfig(**CONFIG, num_workers=2))
    ).fit()
    assert workers["train_loss"] == pytest.approx(serial["train_loss"], rel=1e-6)


def test_prepare_keeps_lists_in_memory_and_datasets_lazy(folder):
    train = MeshFolder(folder, targets="vm", progress=False)
    view = prepare(train)
    assert isinstance(view, PreparedSamples) and len(view) == len(train)
    assert view.target_fields == [("vm", 1)]  # the dataset's attributes show through
    assert isinstance(prepare([train[0], train[1]]), list)
    with pytest.raises(IndexError):
        view[len(train)]


def test_fit_normalizers_keeps_no_sample_alive(folder):
    """Each sample is released before the next is read: the set is never held."""
    import gc
    import weakref

    dataset = MeshFolder(folder, inputs="a", targets="vm", split="all", progress=False)
    alive = []

    def one_at_a_time():
        for i in range(len(dataset)):
            gc.collect()
            assert all(ref() is None for ref in alive), "an earlier sample is still held"
            sample = dataset[i]
            alive.append(weakref.ref(sample))
            yield sample
            del sample

    fitted = fit_normalizers(one_at_a_time())
    assert len(alive) == len(dataset) and sorted(fitted) == ["x", "y"]


def test_meshop_train_on_a_folder_with_workers_and_a_cache(folder, tmp_path, capsys):
    from meshop.cli import main

    argv = ["train", "--dataset", "folder", "--data-dir", folder, "--model", "mlp", "--epochs", 1]
    argv += ["--dataset-arg", 'inputs="a"', "--dataset-arg", 'targets=["u", "vm"]']
    argv += ["--dataset-arg", "cache_size=4", "--num-workers", 2, "--batch-size", 3]
    argv += ["--model-arg", "width=8", "--out", tmp_path / "run", "--no-figures"]
    assert main([str(a) for a in argv]) == 0, capsys.readouterr().err
    _, ckpt = load_model(tmp_path / "run")
    assert ckpt["train_config"]["num_workers"] == 2
    assert ckpt["data"]["dataset_args"]["cache_size"] == 4
    assert ckpt["data"]["target_fields"] == [["u", 2], ["vm", 1]]

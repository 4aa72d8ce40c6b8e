"""A new latent mesh of every training sample each epoch (TrainConfig.latent_resample,
meshop.train.augment.LatentResamples): seeded by (seed, epoch, sample), the sample's own nodes
and fields untouched, the latent weights found again, the test split never resampled, refused
without latent_points."""

import pytest
import torch

from meshop.data import from_points
from meshop.data.batching import node_set_weights
from meshop.errors import ConfigError
from meshop.models import PiT
from meshop.train import TrainConfig, Trainer
from meshop.train.augment import LatentResamples
from meshop.train.data import LatentMesh, prepare_data
from tests.helpers import quiet, toy_samples


def weighted_samples(count: int, nodes: int = 80):
    """Point clouds of ``nodes`` nodes with random quadrature weights (toy_samples' fields)."""
    g = torch.Generator().manual_seed(count)
    samples = []
    for data in toy_samples(count):
        pos = torch.rand(nodes, 2, generator=g)
        x = data.params * torch.sin(3 * pos[:, :1])
        samples.append(from_points(pos, x, 2 * x + pos[:, 1:] ** 2, params=data.params))
        samples[-1].weight = torch.rand(nodes, generator=g) + 0.1
    return samples


def test_the_latent_meshes_follow_the_seed_the_epoch_and_the_sample():
    samples = weighted_samples(3)
    latent = LatentMesh(6)
    view = LatentResamples([latent(s) for s in samples], latent, seed=0)
    first = [view[i] for i in range(3)]
    assert [view[i].latent_pos.tolist() for i in range(3)] == [d.latent_pos.tolist() for d in first]
    view.set_epoch(1)
    second = [view[i] for i in range(3)]
    other_seed = LatentResamples(view.dataset, latent, seed=1)
    for i, (a, b) in enumerate(zip(first, second, strict=True)):
        seeded = latent(samples[i])  # what evaluation and prediction use
        assert a.latent_pos.shape == (6, 2) and b.latent_pos.shape == (6, 2)
        # farthest point sampling from other first nodes: other latent meshes
        assert not torch.equal(a.latent_pos, b.latent_pos)
        # latent nodes are nodes of the sample, the nodes and fields are the sample's own
        assert all((samples[i].pos == row).all(-1).any() for row in b.latent_pos)
        for key in ("pos", "x", "y", "weight"):
            assert b[key] is samples[i][key] or torch.equal(b[key], samples[i][key])
        # the weights found again for the new mesh: the input weights, lumped to it
        assert torch.allclose(b.latent_weight, node_set_weights(b)[1])
        assert torch.isclose(b.latent_weight.sum(), samples[i].weight.sum())
        # the dataset's own sample keeps its seeded latent mesh
        assert torch.equal(view.dataset[i].latent_pos, seeded.latent_pos)
    assert other_seed.seed_of(0) != view.seed_of(0)


def test_equal_seeds_resample_alike_and_the_test_split_keeps_its_latent_mesh(monkeypatch):
    def run(resample: bool, seed: int = 0):
        seen = {"train": [], "test": []}
        config = quiet(epochs=2, batch_size=2, latent_points=5, latent_resample=resample, seed=seed)
        data = prepare_data(weighted_samples(4), weighted_samples(2), config=config)
        torch.manual_seed(0)
        model = PiT(4, 1, 2, width=8, heads=1, layers=1, encoder_k=3, decoder_k=3)
        forward = model.forward

        def recording(batch, *args, **kwargs):
            seen["train" if model.training else "test"].append(batch.latent_pos.clone())
            return forward(batch, *args, **kwargs)

        monkeypatch.setattr(model, "forward", recording)
        Trainer(model, data, config).fit()
        return seen

    first, again, plain = run(True), run(True), run(False)
    assert len(first["train"]) == 4  # 2 batches an epoch, 2 epochs
    assert all(torch.equal(a, b) for a, b in zip(first["train"], again["train"], strict=True))

    def latent_nodes(seen, epoch):  # the latent nodes of the 4 samples read in an epoch
        return {tuple(r) for r in torch.cat(seen["train"][2 * epoch : 2 * epoch + 2]).tolist()}

    # without resampling both epochs read the same latent meshes (in another order); with it,
    # other ones
    assert latent_nodes(plain, 0) == latent_nodes(plain, 1)
    assert latent_nodes(first, 0) != latent_nodes(first, 1)
    # evaluated after each epoch on the test split's seeded latent meshes, with or without
    assert len(first["test"]) == 2
    for a in first["test"] + plain["test"]:
        assert torch.equal(a, first["test"][0])
    other = run(True, seed=1)
    assert not all(torch.equal(a, b) for a, b in zip(first["train"], other["train"], strict=True))


def test_the_option_needs_a_latent_mesh_of_points():
    with pytest.raises(ConfigError, match="latent_resample must be true or false"):
        TrainConfig(latent_resample="yes")
    # checked where the latent mesh is known: the folder rules may give latent_points later
    TrainConfig(latent_resample=True)
    message = (
        r"^latent_resample draws a new latent mesh of latent_points nodes each epoch, but "
        r"latent_points is None \(latent_grid: {}\): give latent_points, or "
        r"latent_resample = false$"
    )
    with pytest.raises(ConfigError, match=message.format(r"\(4, 4\)")):
        LatentResamples([], LatentMesh(grid_shape=(4, 4)))
    config = quiet(latent_resample=True)
    with pytest.raises(ConfigError, match=message.format("None")):
        model = PiT(4, 1, 2, width=8, heads=1, layers=1, encoder_k=3, decoder_k=3)
        Trainer(model, prepare_data(weighted_samples(2), config=config), config)

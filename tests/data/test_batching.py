"""The node sets of a batch and their quadrature weights (meshop.data.batching)."""

import torch

from meshop.data import add_latent_mesh, from_points
from meshop.data.batching import node_set_weights


def test_weights_of_the_three_node_sets():
    torch.manual_seed(0)
    data = from_points(torch.rand(30, 2), x=torch.rand(30), y=torch.rand(30))
    data.weight = torch.rand(30) + 0.5
    weight, latent, query = node_set_weights(data)
    assert weight is data.weight and latent is data.weight and query is data.weight
    add_latent_mesh(data, 8)
    data.query_pos = torch.rand(5, 2)
    weight, latent, query = node_set_weights(data)
    assert query is None and latent.shape == (8,)
    torch.testing.assert_close(latent.sum(), data.weight.sum())  # lumped, nothing lost
    del data.weight
    assert node_set_weights(data) == (None, None, None)


def test_latent_weights_stored_with_the_latent_mesh_are_read_not_searched_again():
    from meshop.train import LatentMesh

    torch.manual_seed(0)
    data = from_points(torch.rand(40, 2), x=torch.rand(40), y=torch.rand(40))
    data.weight = torch.rand(40) + 0.5
    for latent in (LatentMesh(num_points=9), LatentMesh(num_points=9, sampling="random")):
        prepared = latent(data)
        assert "latent_weight" not in data  # the sample itself is not modified
        stored = prepared.latent_weight
        del prepared.latent_weight
        searched = node_set_weights(prepared)[1]
        torch.testing.assert_close(stored, searched)  # the same lumped weights
        prepared.latent_weight = torch.arange(9.0)  # read as stored when the sizes agree
        torch.testing.assert_close(node_set_weights(prepared)[1], torch.arange(9.0))
        prepared.latent_weight = torch.arange(4.0)  # a stale size: searched again
        torch.testing.assert_close(node_set_weights(prepared)[1], searched)
        add_latent_mesh(prepared, 9, seed=5)  # a new latent mesh drops the stored weights
        assert "latent_weight" not in prepared
    del data.weight
    assert "latent_weight" not in LatentMesh(num_points=9)(data)  # no weights, none stored


def test_latent_weights_ride_through_a_batch_of_prepared_samples():
    from meshop.data import make_loader
    from meshop.train import LatentMesh

    torch.manual_seed(1)
    samples = []
    for n in (30, 50):
        data = from_points(torch.rand(n, 2), x=torch.rand(n), y=torch.rand(n))
        data.weight = torch.rand(n) + 0.5
        samples.append(LatentMesh(num_points=6)(data))
    batch = next(iter(make_loader(samples, batch_size=2)))
    expected = torch.cat([node_set_weights(s)[1] for s in samples])
    torch.testing.assert_close(node_set_weights(batch)[1], expected)
    del batch.latent_weight
    torch.testing.assert_close(node_set_weights(batch)[1], expected)

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

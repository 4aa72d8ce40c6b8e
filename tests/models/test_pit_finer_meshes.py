"""PiT with the coordinates at the latent nodes (``latent_positions``), and the Darcy preset that
uses it: what the encoder reads of the coordinates does not depend on the input grid."""

import pytest
import torch

from meshop.data import add_latent_mesh, uniform_grid
from meshop.errors import ConfigError
from meshop.models import PiT
from meshop.nn.chunking import Walk
from meshop.train.presets import preset


def grid_sample(n, query=None):
    """A uniform permeability on an n x n grid, the 16 x 16 latent grid of the Darcy preset, and
    outputs asked for at ``query`` (a sample's nodes)."""
    data = add_latent_mesh(uniform_grid((n, n), x=torch.full((n * n,), 3.0)), grid_shape=(16, 16))
    if query is not None:
        data.query_pos = query.pos
    return data


def outputs_on_two_grids(**model_args):
    """The outputs at the 22 x 22 grid's nodes of a PiT with a kernel far narrower than that
    grid's spacing, from the input on that grid and on the 4x finer one."""
    torch.manual_seed(0)
    args = dict(layers=0, encoder_quantile=0.02, weighted=False)
    model = PiT(3, 1, 2, **args, **model_args).eval()
    coarse = grid_sample(22)
    with torch.no_grad():
        model.encoder.theta.fill_(1.55)  # tan(...) ~ 6e3: a kernel length of 0.013
        return model(coarse), model(grid_sample(85, query=coarse))


def test_latent_positions_encode_a_uniform_field_alike_on_every_grid():
    """With the coordinates among the input features, a latent node at the boundary reads the
    boundary nodes on the coarse grid and an average reaching inside on the fine one; at the
    latent nodes, the coordinates are the same on every grid."""
    coarse, fine = outputs_on_two_grids(latent_positions=True)
    torch.testing.assert_close(coarse, fine, rtol=0, atol=1e-6)
    coarse, fine = outputs_on_two_grids()
    assert (coarse - fine).abs().max() > 2e-5  # 50x the tolerance above


def test_latent_positions_lift_the_fields_without_the_coordinates():
    torch.manual_seed(0)
    model = PiT(3, 1, 2, width=16, layers=1, latent_positions=True)
    assert model.lift.in_features == 1 and model.latent_lift.in_features == 2
    assert PiT(3, 1, 2).latent_lift is None  # the paper's form by default
    rebuilt = PiT(**model.config)
    rebuilt.load_state_dict(model.state_dict())
    data = grid_sample(12)
    with torch.no_grad():
        torch.testing.assert_close(rebuilt(data), model(data))
        torch.testing.assert_close(model.compute(data, Walk(40)), model(data))  # in chunks
    with pytest.raises(ConfigError, match="only the 2 coordinates"):
        PiT(2, 1, 2, latent_positions=True)


def test_darcy_preset_gives_pit_the_coordinates_at_the_latent_nodes():
    assert preset("darcy", "pit")["model"]["latent_positions"] is True

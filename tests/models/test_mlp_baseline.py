"""MLPBaseline: its defaults, its layers and its forward pass written out densely."""

import torch
import torch.nn.functional as F

from meshop.data import from_points, set_query_points
from meshop.models.mlp_baseline import MLPBaseline


def test_defaults_layer_widths_and_config():
    model = MLPBaseline(3, 2, 2)
    assert model.config == dict(
        in_channels=3, out_channels=2, pos_dim=2, width=128, layers=4, act="gelu"
    )
    widths = [(lin.in_features, lin.out_features) for lin in model.mlp.lins]
    assert widths == [(3, 128), (128, 128), (128, 128), (128, 2)]
    assert model.mlp.act_name == "gelu"
    assert repr(model).startswith("MLPBaseline(\n  in_channels=3, out_channels=2, pos_dim=2\n")
    small = MLPBaseline(**{**model.config, "width": 5, "layers": 2, "act": "relu"})
    assert [lin.out_features for lin in small.mlp.lins] == [5, 2]
    assert small.mlp.act_name == "relu" and small.pos_dim == 2 and small.out_channels == 2


def test_forward_is_the_mlp_of_each_query_points_features_and_reset_redraws_it():
    torch.manual_seed(0)
    model = MLPBaseline(3, 1, 2, width=6, layers=3, act="silu")
    pos, x = torch.rand(7, 2), torch.randn(7, 1)
    data = from_points(pos, x=x)
    h = torch.cat([x, pos], dim=-1)
    lins = model.mlp.lins
    expected = lins[2](F.silu(lins[1](F.silu(lins[0](h)))))
    torch.testing.assert_close(model(data), expected)
    set_query_points(data, pos[[4, 1]] + 1e-3)  # input field from the nearest node
    torch.testing.assert_close(
        model(data)[:, 0], model.mlp(torch.cat([x[[4, 1]], pos[[4, 1]] + 1e-3], -1))[:, 0]
    )
    before = [p.clone() for p in model.parameters()]
    model.reset_parameters()
    assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters()))

"""Fields on uniform grids as tensors (meshop.data.grid): grid views of node features in the node
order of grid_points, interpolation between grids that reproduces linear fields, point sampling per
sample, without a batch vector and outside the box."""

import pytest
import torch

from meshop.data import grid_points, make_loader, uniform_grid
from meshop.data.grid import grid_tensor, interpolate_grid, node_tensor, sample_grid
from tests.helpers import unit_grid


@pytest.mark.parametrize("shape", [(7,), (4, 5, 6)])
def test_interpolation_reproduces_linear_fields_on_1d_and_3d_grids(shape):
    pos = unit_grid(*shape)
    field = 1 + pos.sum(1, keepdim=True) + 2 * pos[:, :1]
    size = tuple(2 * n - 1 for n in shape)
    finer = unit_grid(*size)
    assert torch.allclose(interpolate_grid(field, size), 1 + finer.sum(1, keepdim=True)
                          + 2 * finer[:, :1], atol=1e-5)  # fmt: skip


def test_sample_grid_one_sample_without_a_batch_vector_and_outside_the_box():
    pos = unit_grid(5, 4)
    field = torch.cat([3 * pos[:, :1] - pos[:, 1:], pos[:, :1] * pos[:, 1:]], dim=1)
    query = torch.tensor([[0.3, 0.6], [0.5, 0.5], [1.5, 0.25], [-1.0, 2.0]])
    got = sample_grid(field, pos, query)
    inside = query.clamp(0, 1)  # outside the box: the border value
    expected = torch.stack([3 * inside[:, 0] - inside[:, 1], inside[:, 0] * inside[:, 1]], -1)
    assert torch.allclose(got, expected, atol=1e-6)
    assert torch.equal(got, sample_grid(field, pos, query, torch.zeros(4, dtype=torch.long)))


def test_sample_grid_on_a_batch_whose_last_sample_has_no_points():
    pos = unit_grid(5, 4).expand(2, -1, -1, -1)
    field = torch.stack([pos[0, 0], 2 * pos[1, 1]])[:, None]
    query = torch.tensor([[0.25, 0.5], [0.75, 0.0]])
    got = sample_grid(field, pos, query, torch.zeros(2, dtype=torch.long))
    assert torch.allclose(got[:, 0], query[:, 0], atol=1e-6)


def test_interpolation_between_grids_reproduces_linear_fields_exactly():
    """align_corners=True matches grid_points, which include the box corners."""
    fine, coarse = (29, 17), (9, 6)
    f = lambda p: 1.0 + 2.0 * p[:, 0] - 3.0 * p[:, 1]  # noqa: E731
    values = f(grid_points(fine)).view(1, 1, *fine)
    torch.testing.assert_close(
        interpolate_grid(values, coarse).flatten(), f(grid_points(coarse)), atol=1e-6, rtol=0
    )


def test_grid_tensor_round_trip_follows_grid_node_order():
    data = [uniform_grid((3, 4), x=torch.randn(12, 2)) for _ in range(2)]
    batch = next(iter(make_loader(data, batch_size=2)))
    g = grid_tensor(batch.x, batch)
    assert g.shape == (2, 2, 3, 4)
    torch.testing.assert_close(g[1, :, 2, 1], data[1].x[2 * 4 + 1])
    torch.testing.assert_close(node_tensor(g), batch.x)


@pytest.mark.parametrize("dim", [1, 2])
def test_sample_grid_is_exact_for_multilinear_fields_per_sample(dim):
    shapes, boxes = [(9,) * dim, (9,) * dim], [[(0.0, 1.0)] * dim, [(-1.0, 3.0)] * dim]
    f = lambda p, s: s + p.sum(-1) + (p.prod(-1) if dim == 2 else 0)  # noqa: E731
    pos = torch.stack([grid_points(sh, bx).T.reshape(dim, *sh) for sh, bx in zip(shapes, boxes)])
    field = torch.stack([f(pos[b].flatten(1).T, b).view(1, *shapes[b]) for b in range(2)])
    g = torch.Generator().manual_seed(0)
    q = [
        torch.rand(5 + b, dim, generator=g) * (hi - lo) + lo
        for b, ((lo, hi), *_) in enumerate(boxes)
    ]
    query_batch = torch.tensor([0] * 5 + [1] * 6)
    out = sample_grid(field, pos, torch.cat(q), query_batch)
    expected = torch.cat([f(q[b], b) for b in range(2)])[:, None]
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)

"""The quadrature reductions every attention layer integrates with (meshop.nn.quadrature): weights
normalised per sample, weighted moments, and log-weights that turn a softmax into the
quadrature-weighted normalisation exactly."""

import pytest
import torch

from meshop.errors import ConfigError
from meshop.nn.quadrature import (
    add_log_weight,
    chunk_weight,
    equal_weight,
    log_weight,
    log_weight_mask,
    normalised_equal_weight,
    normalised_weight,
    weighted_count,
    weighted_moment,
)


def test_normalised_weights_sum_to_one_in_every_sample():
    batch = torch.tensor([0, 0, 0, 1, 1, 2])
    weight = torch.tensor([1.0, 2.0, 1.0, 5.0, 0.0, 3.0])
    w = normalised_weight(weight, batch, 3, weight)
    torch.testing.assert_close(w, torch.tensor([0.25, 0.5, 0.25, 1.0, 0.0, 1.0]))
    torch.testing.assert_close(
        normalised_weight(None, batch, 3, weight)[:3], torch.full((3,), 1 / 3)
    )
    assert weighted_count(w, batch, 3).tolist() == [3.0, 1.0, 1.0]


def test_equal_size_weights_match_the_general_normalisation():
    torch.manual_seed(0)
    weight = torch.rand(12, dtype=torch.float64) + 0.1
    batch = torch.arange(3).repeat_interleave(4)
    expected = normalised_weight(weight, batch, 3, weight).view(3, 4)
    torch.testing.assert_close(normalised_equal_weight(weight, 3, 4, weight), expected)
    torch.testing.assert_close(equal_weight(weight, 3, 4, weight), expected)
    assert normalised_equal_weight(None, 3, 4, weight).dtype == torch.float32  # at least float32


def test_equal_weights_collapse_to_one_column_per_sample():
    like = torch.zeros(1, dtype=torch.float64)
    uniform = torch.full((8,), 0.37, dtype=torch.float64)
    torch.testing.assert_close(
        equal_weight(uniform, 2, 4, like), torch.full((2, 1), 0.25, dtype=like.dtype)
    )
    torch.testing.assert_close(
        equal_weight(None, 2, 4, like), torch.full((2, 1), 0.25, dtype=like.dtype)
    )


def test_weighted_moment_with_equal_weights_scales_the_product_instead_of_the_keys():
    torch.manual_seed(0)
    k, v = (
        torch.randn(2, 3, 5, 4, dtype=torch.float64),
        torch.randn(2, 3, 5, 4, dtype=torch.float64),
    )
    weight = torch.rand(2, 5, dtype=torch.float64)
    expected = torch.einsum("bn,bhni,bhnj->bhij", weight, k, v)
    torch.testing.assert_close(weighted_moment(k, v, weight), expected)
    column = weight[:, :1]
    torch.testing.assert_close(
        weighted_moment(k, v, column), weighted_moment(k, v, column.expand(2, 5))
    )


def test_log_weight_mask_makes_the_softmax_quadrature_weighted_and_ignores_padding():
    scores = torch.randn(2, 4, dtype=torch.float64)
    weight = torch.tensor([[0.5, 1.0, 2.0, 0.0], [1.0, 3.0, 0.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True, True, True], [True, True, False, False]])
    p = (scores + log_weight_mask(weight, mask, torch.float64)).softmax(-1)
    expected = weight * scores.exp() * mask
    torch.testing.assert_close(p, expected / expected.sum(-1, keepdim=True))


def test_log_weight_added_to_the_keys_adds_log_w_to_every_logit():
    torch.manual_seed(0)
    q = torch.cat([torch.randn(6, 2), torch.ones(6, 1)], dim=1)  # queries end in 1
    k = torch.randn(5, 3)
    weight = torch.rand(5) + 0.1
    logits = q @ add_log_weight(k, log_weight(weight, k)).T
    torch.testing.assert_close(logits, q @ k.T + weight.log())
    assert add_log_weight(k, log_weight(None, k)) is k


def test_log_weight_of_a_zero_weight_is_finite_and_bad_weights_are_refused():
    assert torch.isfinite(log_weight(torch.tensor([0.0, 1.0]), torch.zeros(1))).all()
    for bad in (torch.tensor([1.0, -0.5]), torch.tensor([1.0, float("nan")])):
        with pytest.raises(ConfigError, match="finite and >= 0"):
            log_weight(bad, torch.zeros(1))


def test_a_chunks_weights_are_ones_without_weights_and_take_the_asked_dtype():
    x = torch.zeros(3, 2, dtype=torch.float32)
    assert torch.equal(chunk_weight(None, x), torch.ones(3))
    weight = torch.tensor([0.5, 0.25, 2.0])
    assert torch.equal(chunk_weight(weight, x, torch.float64), weight.double())
    assert chunk_weight(weight.double(), x).dtype == torch.float32

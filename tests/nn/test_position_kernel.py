"""What every position-attention layer shares (meshop.nn.position_kernel): the positive
bandwidth of each head and its parameterizations (PiT App. C.1)."""

import math

import torch

from meshop.nn import PositionAttention
from meshop.nn.position_kernel import positive_lambda


def test_lambda_parameterizations_are_non_negative_and_start_alike():
    theta = torch.linspace(-10, 10, 101)
    for param in ("tan", "softplus", "square"):
        lam = positive_lambda(theta, param)
        assert torch.isfinite(lam).all() and (lam >= 0).all()
    expected = torch.tan(0.25 * math.pi * (1 - 1e-7) * (1 + torch.sin(theta)))
    torch.testing.assert_close(positive_lambda(theta, "tan"), expected)
    start = []
    for param in ("tan", "softplus", "square"):
        torch.manual_seed(3)
        start.append(PositionAttention(4, 8, heads=8, lambda_param=param).lam.detach())
    torch.testing.assert_close(start[1], start[0])
    torch.testing.assert_close(start[2], start[0])
    assert ((start[0] >= 1.0) & (start[0] <= 11.0)).all()  # the authors' U(0, 1) init of theta

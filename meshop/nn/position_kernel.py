"""What every position-attention layer shares (PiT App. C.1, C.2): the value projection, one
positive bandwidth per head and its parameterizations, and the optional periodic box."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from meshop.errors import ConfigError
from meshop.nn.integral import Integral, SoftmaxSums

#: ways to keep each head's lambda positive (PiT App. C.1), see :func:`positive_lambda`
LAMBDA_PARAMS = ("tan", "softplus", "square")

_TAN_SCALE = 0.25 * math.pi * (1.0 - 1e-7)


def positive_lambda(theta: Tensor, param: str) -> Tensor:
    r"""The positive bandwidth :math:`\lambda` of each head from its free parameter :math:`\theta`.

    - ``"tan"`` (PiT App. C.1 and the authors' code):
      :math:`\lambda = \tan\big(\tfrac{\pi}{4}(1 - 10^{-7})(1 + \sin\theta)\big)`; the
      argument stays in :math:`[0, \pi/2)`, so :math:`\lambda \in [0, \infty)` without
      constrained optimisation.
    - ``"softplus"``: :math:`\lambda = \log(1 + e^{\theta})`.
    - ``"square"``: :math:`\lambda = \theta^2` (the paper's first option, Table 3).
    """
    if param == "tan":
        return torch.tan(_TAN_SCALE * (1.0 + torch.sin(theta)))
    if param == "softplus":
        return F.softplus(theta)
    return theta.square()


def init_lambda_theta(theta: Tensor, param: str) -> None:
    r"""Initialise ``theta`` in place so that every parameterization starts from the same
    :math:`\lambda` distribution: the authors' ``theta ~ U(0, 1)`` pushed through the ``"tan"``
    form, i.e. :math:`\lambda \in [1, 10.9]` (attention mostly within distance
    :math:`1/\sqrt{\lambda}` of a target, App. D)."""
    with torch.no_grad():
        theta.uniform_(0.0, 1.0)
        if param == "tan":
            return
        lam = positive_lambda(theta, "tan")
        theta.copy_(torch.log(torch.expm1(lam)) if param == "softplus" else lam.sqrt())


def check_lambda_param(param: str) -> str:
    if param not in LAMBDA_PARAMS:
        raise ConfigError(
            f"unknown lambda parameterization {param!r}; choose one of {list(LAMBDA_PARAMS)}"
        )
    return param


def check_periodic(periodic) -> float | tuple[float | None, ...] | None:
    """Validate a ``periodic`` argument: ``None``, one box length for every axis, or one entry per
    axis (``None`` for an open axis)."""
    if periodic is None:
        return None
    lengths = [periodic] if not isinstance(periodic, Sequence) else list(periodic)
    for length in lengths:
        if length is not None and not (float(length) > 0 and math.isfinite(float(length))):
            raise ConfigError(
                f"periodic box lengths must be positive and finite (None for an open axis), "
                f"got {periodic!r}"
            )
    if not isinstance(periodic, Sequence):
        return float(periodic)
    return tuple(None if length is None else float(length) for length in periodic)


class PositionKernel(Integral):
    r"""What every position-attention layer shares: the value projection :math:`W^V` (no bias,
    ``heads`` blocks of ``out_channels / heads``), one bandwidth :math:`\lambda^h > 0` per head
    kept positive by ``lambda_param``, the optional periodic box, and the end of the integral
    protocol (:mod:`meshop.nn.integral`): its sums are per target (softmax sums,
    :class:`~meshop.nn.integral.SoftmaxSums` ``[N_dst, H, C_h]``), so the drivers cut the
    targets into chunks and each chunk's :meth:`partial` reads every source."""

    cuts = "targets"

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        heads: int = 2,
        lambda_param: str = "tan",
        periodic: float | Sequence[float | None] | None = None,
    ):
        super().__init__()
        if heads < 1 or out_channels % heads != 0:
            raise ConfigError(
                f"out_channels ({out_channels}) must be a positive multiple of heads ({heads})"
            )
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.heads = heads
        self.head_channels = out_channels // heads
        self.lambda_param = check_lambda_param(lambda_param)
        self.periodic = check_periodic(periodic)
        self.lin_v = nn.Linear(in_channels, out_channels, bias=False)
        self.theta = nn.Parameter(torch.empty(heads))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.lin_v.reset_parameters()
        init_lambda_theta(self.theta, self.lambda_param)

    @property
    def lam(self) -> Tensor:
        """The positive bandwidth of each head, [H]."""
        return positive_lambda(self.theta, self.lambda_param)

    def target_chunk(self, chunk_nodes: int, batch: Tensor) -> int:
        """How many targets a driver gives one :meth:`partial` (``chunk_nodes``)."""
        return chunk_nodes

    def finish(self, sums: SoftmaxSums, state=None) -> Tensor:
        """The attention at every target of the sums, ``[N_dst, C_out]`` (zeros for a target
        without sources)."""
        return sums.quotient().reshape(len(sums.num), self.out_channels)

    def apply(self, state, x, pos, batch, **extra) -> Tensor:
        """:meth:`finish` is already the output at the targets."""
        return state


__all__ = [
    "LAMBDA_PARAMS",
    "PositionKernel",
    "check_lambda_param",
    "check_periodic",
    "init_lambda_theta",
    "positive_lambda",
]

"""Per-channel Gaussian normalisation of fields, fitted on training data only."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from meshop.errors import ConfigError


class RunningMoments:
    r"""Per-channel sums :math:`\sum (u - s)`, :math:`\sum (u - s)^2` and the row count,
    accumulated in float64 chunk by chunk, so that a normaliser is fitted on data that never sit in
    memory at once (one sample after the other). The result is exact, not an approximation: the
    same sums as over all rows at once, so the same mean and std. The shift :math:`s` is the first
    row seen: data far from zero (coordinates of a site at 5e6 m, 100 m across) would otherwise
    lose the digits of their variance to the square of their mean.

    Args:
        channels: number of channels C.
    """

    def __init__(self, channels: int):
        self.channels = channels
        self.total = torch.zeros(channels, dtype=torch.float64)
        self.total_sq = torch.zeros(channels, dtype=torch.float64)
        self.shift = torch.zeros(channels, dtype=torch.float64)
        self.count = 0

    def update(self, chunk: torch.Tensor) -> None:
        """Add the rows of ``chunk`` [..., C]."""
        chunk = chunk.detach().reshape(-1, chunk.shape[-1]).to(torch.float64).cpu()
        if chunk.shape[1] != self.channels:
            raise ConfigError(f"normaliser has {self.channels} channels, data has {chunk.shape[1]}")
        if self.count == 0 and len(chunk):
            self.shift = chunk[0].clone()
        chunk = chunk - self.shift
        self.total += chunk.sum(0)
        self.total_sq += chunk.pow(2).sum(0)
        self.count += len(chunk)

    def mean_var(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and (population) variance per channel, float64."""
        mean = self.total / self.count  # of u - shift
        return self.shift + mean, (self.total_sq / self.count - mean.pow(2)).clamp(min=0.0)


class GaussianNormalizer(nn.Module):
    r"""Per-channel standardisation :math:`\hat u = (u - \mu) / (\sigma + \epsilon)`.

    Statistics are accumulated in float64 over every node of every sample passed to :meth:`fit`
    (call it on the training split only). They are buffers, so they are saved and loaded with the
    model's ``state_dict``.

    Args:
        channels: number of channels C.
        eps: added to the standard deviation (constant channels stay finite).

    Shapes:
        input/output: [N, C]
    """

    def __init__(self, channels: int, eps: float = 1e-6):
        super().__init__()
        self.channels = channels
        self.eps = eps
        self.register_buffer("mean", torch.zeros(channels))
        self.register_buffer("std", torch.ones(channels))
        self.register_buffer("fitted", torch.tensor(False))

    def fit(self, fields: torch.Tensor | Iterable[torch.Tensor]) -> GaussianNormalizer:
        """Fit mean and std over all rows of a tensor [N, C] or of an iterable of such tensors
        (streamed: a generator of chunks is read once and no chunk is kept)."""
        moments = RunningMoments(self.channels)
        for chunk in [fields] if torch.is_tensor(fields) else fields:
            moments.update(chunk)
        return self.fit_moments(moments)

    def fit_moments(self, moments: RunningMoments) -> GaussianNormalizer:
        """Set mean and std from accumulated sums (:class:`RunningMoments`)."""
        if moments.count == 0:
            raise ConfigError("cannot fit a normaliser on no data")
        if moments.channels != self.channels:
            raise ConfigError(
                f"normaliser has {self.channels} channels, the moments {moments.channels}"
            )
        mean, var = moments.mean_var()
        self.mean.copy_(mean.to(self.mean.dtype))
        self.std.copy_(var.sqrt().to(self.std.dtype))
        self.fitted.fill_(True)
        return self

    def encode(self, u: torch.Tensor) -> torch.Tensor:
        return (u - self.mean) / (self.std + self.eps)

    def decode(self, u: torch.Tensor) -> torch.Tensor:
        return u * (self.std + self.eps) + self.mean

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        return self.encode(u)

    def extra_repr(self) -> str:
        return f"channels={self.channels}, eps={self.eps}"

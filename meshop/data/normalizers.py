"""Per-channel Gaussian normalisation of fields, fitted on training data only."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from meshop.errors import ConfigError


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
        """Fit mean and std over all rows of a tensor [N, C] or of an iterable of such tensors."""
        chunks = [fields] if torch.is_tensor(fields) else list(fields)
        if not chunks:
            raise ConfigError("cannot fit a normaliser on no data")
        total = torch.zeros(self.channels, dtype=torch.float64)
        total_sq = torch.zeros(self.channels, dtype=torch.float64)
        count = 0
        for chunk in chunks:
            chunk = chunk.detach().reshape(-1, chunk.shape[-1]).to(torch.float64).cpu()
            if chunk.shape[1] != self.channels:
                raise ConfigError(
                    f"normaliser has {self.channels} channels, data has {chunk.shape[1]}"
                )
            total += chunk.sum(0)
            total_sq += chunk.pow(2).sum(0)
            count += len(chunk)
        mean = total / count
        var = (total_sq / count - mean.pow(2)).clamp(min=0.0)
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

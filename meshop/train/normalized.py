"""A model wrapped with the normalisers fitted on its training split."""

from __future__ import annotations

import copy
from collections.abc import Iterable

import torch
from torch import nn

from meshop._pyg import Data
from meshop.data import GaussianNormalizer

#: node sets whose coordinates the position normaliser maps (all with the same map)
POSITION_KEYS = ("pos", "latent_pos", "query_pos")


class PositionNormalizer(GaussianNormalizer):
    r"""Centre coordinates and divide them by one length for all axes:
    :math:`\hat x = (x - \mu) / \sigma`, with :math:`\sigma^2` the mean over the axes of the
    per-axis variances. The scaling is isotropic, so distances, nearest neighbours, quantile
    receptive fields and farthest point samples keep their meaning; only the unit of length
    changes, to one in which the domain has size about one standard deviation.

    Shapes:
        input/output: [N, dim]
    """

    def fit(self, fields) -> PositionNormalizer:
        super().fit(fields)
        self.std.fill_(float(self.std.pow(2).mean().sqrt()))
        return self


def make_normalizer(key: str, channels: int) -> GaussianNormalizer:
    """An unfitted normaliser of field ``key`` (``"pos"`` gets a :class:`PositionNormalizer`)."""
    return PositionNormalizer(channels) if key == "pos" else GaussianNormalizer(channels)


def fit_normalizers(
    samples: Iterable[Data],
    x: bool = True,
    y: bool = True,
    params: bool = True,
    pos: bool = False,
) -> dict[str, GaussianNormalizer]:
    """Normalisers of ``x``, ``y``, ``params`` (per channel) and ``pos`` (isotropic) fitted on
    ``samples`` (the train split).

    A field is skipped when it is absent from the samples or its flag is False.
    """
    samples = list(samples)
    normalizers = {}
    for key, wanted in (("x", x), ("y", y), ("params", params), ("pos", pos)):
        fields = [getattr(s, key) for s in samples if getattr(s, key, None) is not None]
        if wanted and fields:
            normalizers[key] = make_normalizer(key, fields[0].shape[-1]).fit(fields)
    return normalizers


class NormalizedModel(nn.Module):
    r"""``model`` seen through normalisers: inputs are encoded, predictions decoded.

    .. math::
        \hat y = \mathcal N_y^{-1}\big(\mathcal G(\mathcal N_x(x), \mathcal N_{pos}(\mathrm{pos}),
        \mathcal N_p(\mathrm{params}))\big)

    The normalisers are buffers of this module, so the model's ``state_dict`` (and a checkpoint)
    carries them. With a ``"pos"`` normaliser every node set (``pos``, ``latent_pos``,
    ``query_pos``) is mapped by the same isotropic :class:`PositionNormalizer`: the model sees
    coordinates in which the training domains have size about one, whatever the units of the data
    (position-attention's length scales :math:`1/\sqrt{\lambda}` start at that size).

    Args:
        model: any meshop model, ``model(batch) -> [N_query, C_out]``.
        normalizers: ``{"x": ..., "y": ..., "params": ...}``, each optional.

    Shapes:
        input: a ``Data`` or a batch; output: [N_query, C_out] in physical units.
    """

    def __init__(self, model: nn.Module, normalizers: dict[str, GaussianNormalizer] | None = None):
        super().__init__()
        self.model = model
        self.normalizers = nn.ModuleDict(normalizers or {})

    def encode_inputs(self, data: Data) -> Data:
        """A shallow copy of ``data`` with ``x``, ``params`` and coordinates normalised."""
        out = copy.copy(data)
        for key in ("x", "params"):
            if key in self.normalizers and getattr(data, key, None) is not None:
                out[key] = self.normalizers[key].encode(data[key])
        if "pos" in self.normalizers:
            for key in POSITION_KEYS:
                if getattr(data, key, None) is not None:
                    out[key] = self.normalizers["pos"].encode(data[key])
        return out

    def forward(self, data: Data) -> torch.Tensor:
        pred = self.model(self.encode_inputs(data))
        if "y" in self.normalizers:
            pred = self.normalizers["y"].decode(pred)
        return pred

    @property
    def config(self) -> dict:
        return self.model.config

    def extra_repr(self) -> str:
        return f"normalized={sorted(self.normalizers)}"

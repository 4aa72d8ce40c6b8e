"""A model wrapped with the normalisers fitted on its training split."""

from __future__ import annotations

import copy
from collections.abc import Iterable

import torch
from torch import nn

from meshop._pyg import Data
from meshop.data import GaussianNormalizer


def fit_normalizers(
    samples: Iterable[Data], x: bool = True, y: bool = True, params: bool = True
) -> dict[str, GaussianNormalizer]:
    """Gaussian normalisers of ``x``, ``y`` and ``params`` fitted on ``samples`` (the train split).

    A field is skipped when it is absent from the samples or its flag is False.
    """
    samples = list(samples)
    normalizers = {}
    for key, wanted in (("x", x), ("y", y), ("params", params)):
        fields = [getattr(s, key) for s in samples if getattr(s, key, None) is not None]
        if wanted and fields:
            normalizers[key] = GaussianNormalizer(fields[0].shape[-1]).fit(fields)
    return normalizers


class NormalizedModel(nn.Module):
    r"""``model`` seen through normalisers: inputs are encoded, predictions decoded.

    .. math::
        \hat y = \mathcal N_y^{-1}\big(\mathcal G(\mathcal N_x(x), \mathrm{pos},
        \mathcal N_p(\mathrm{params}))\big)

    The normalisers are buffers of this module, so the model's ``state_dict`` (and a checkpoint)
    carries them. Positions are not normalised (latent meshes, neighbourhoods and the
    position-attention length scales are in the coordinates of the data).

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
        """A shallow copy of ``data`` with ``x`` and ``params`` normalised."""
        out = copy.copy(data)
        for key in ("x", "params"):
            if key in self.normalizers and getattr(data, key, None) is not None:
                out[key] = self.normalizers[key].encode(data[key])
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

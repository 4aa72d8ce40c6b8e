"""A model wrapped with the normalisers fitted on its training split."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator

import torch
from torch import nn

from meshop._pyg import Data
from meshop.data import GaussianNormalizer
from meshop.data.normalizers import RunningMoments
from meshop.nn.chunking import Walk
from meshop.train.memory import chunked, default_chunk_nodes, total_nodes

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

    def fit_moments(self, moments: RunningMoments) -> PositionNormalizer:
        super().fit_moments(moments)
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

    The samples are streamed: each is visited once (a dataset by index, in order) and only the
    per-channel sums of the fields are kept (:class:`~meshop.data.RunningMoments`), so a
    dataset that reads its samples from files on access (:class:`~meshop.datasets.MeshFolder`) is
    never held in memory; the statistics are those of all the samples at once. A field is skipped
    when it is absent from the samples or its flag is False.
    """
    wanted = [key for key, flag in (("x", x), ("y", y), ("params", params), ("pos", pos)) if flag]
    moments: dict[str, RunningMoments] = {}
    for sample in _each(samples):
        field = None
        for key in wanted:
            field = getattr(sample, key, None)
            if field is None:
                continue
            if key not in moments:
                moments[key] = RunningMoments(field.shape[-1])
            moments[key].update(field)
        del sample, field  # released before the next sample is read
    return {
        key: make_normalizer(key, moments[key].channels).fit_moments(moments[key])
        for key in wanted
        if key in moments
    }


def _each(samples: Iterable[Data]) -> Iterator[Data]:
    """The samples one at a time: by index when ``samples`` has a length (a dataset), else by
    iteration."""
    if hasattr(samples, "__len__") and hasattr(samples, "__getitem__"):
        for i in range(len(samples)):
            yield samples[i]
    else:
        yield from samples


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

    def __init__(
        self,
        model: nn.Module,
        normalizers: dict[str, GaussianNormalizer] | None = None,
        chunk_nodes: int | None = None,
    ):
        super().__init__()
        self.model = model
        self.normalizers = nn.ModuleDict(normalizers or {})
        self.chunk_nodes = chunk_nodes

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
        return self.compute(data, Walk(self.chunk_for(data)))

    def chunk_for(self, data: Data) -> int | None:
        """The chunk :meth:`forward` evaluates ``data`` in (None: whole), from ``chunk_nodes``:
        None chunks batches of more than :data:`~meshop.train.memory.CHUNK_FROM` nodes when the
        model is walked in chunks (a meshop model:
        :func:`~meshop.train.memory.default_chunk_nodes`); 0 never chunks; a number chunks every
        batch larger than it."""
        if self.chunk_nodes == 0:
            return None
        nodes = total_nodes(data)
        if self.chunk_nodes is None:
            if not hasattr(self.model, "compute"):
                return None
            return default_chunk_nodes(nodes)
        return self.chunk_nodes if nodes > self.chunk_nodes else None

    def compute(self, data: Data, walk: Walk) -> torch.Tensor:
        """The model's pass on the normalised inputs, walked whole or in chunks
        (:mod:`meshop.nn.chunking`; the normalisers act on each node alone, so they need no
        chunking), decoded to physical units."""
        encoded = self.encode_inputs(data)
        pred = (
            self.model(encoded) if walk.chunk_nodes is None else chunked(self.model, walk)(encoded)
        )
        if "y" in self.normalizers:
            pred = self.normalizers["y"].decode(pred)
        return pred

    @property
    def config(self) -> dict:
        return self.model.config

    def extra_repr(self) -> str:
        return f"normalized={sorted(self.normalizers)}"

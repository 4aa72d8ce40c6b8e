"""Data augmentation of the training loop: random periodic shifts (``TrainConfig.periodic_shift``)
and new latent meshes (``TrainConfig.latent_resample``).

A problem that is periodic along every axis of its uniform grid and invariant under translations
(Burgers on the periodic unit interval) maps a shifted input to the shifted output, so every
circular shift of a training sample is a training sample. :class:`PeriodicShifts` reads every
training sample through a new random shift on every epoch; a model that is not
translation-equivariant by construction (ONO, the Transolver) then sees the map at every position
instead of learning it at each position from the samples it has.

A latent mesh chosen by farthest point sampling depends on the input mesh: on a finer mesh of the
same domain the same number of latent nodes lands elsewhere, and their lumped weights differ. A
model trained with one latent mesh per sample (the same one every epoch) learns that mesh;
:class:`LatentResamples` gives every training sample a new one every epoch, so that the model
learns the map for any latent mesh of that size.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from meshop._pyg import Data
from meshop.data.grid import roll_grid
from meshop.errors import ConfigError


def check_periodic_grid(data: Data, index: int) -> None:
    """Raise :class:`ConfigError` unless training sample ``index`` can be shifted: a uniform grid
    (``grid_shape``) with its fields at the grid nodes."""
    shape = getattr(data, "grid_shape", None)
    if shape is None:
        raise ConfigError(
            f"periodic_shift rolls the fields of samples on uniform grids, but training sample "
            f"{index} is a mesh without grid_shape: train with periodic_shift = false, or give "
            "samples on a periodic uniform grid (meshop.data.uniform_grid)"
        )
    nodes = int(np.prod(shape))
    for key in ("x", "y"):
        values = getattr(data, key, None)
        if values is not None and len(values) != nodes:
            raise ConfigError(
                f"periodic_shift rolls the fields over the grid nodes, but training sample {index} "
                f"has {len(values)} rows of '{key}' for its {nodes} grid nodes (query points?): "
                "train with periodic_shift = false, or give the fields at the grid nodes"
            )


def coordinate_channels(meta: dict) -> tuple[int, ...]:
    """The channels of ``x`` that hold functions of the coordinates rather than fields: those of
    the inputs a dataset names in ``coordinate_inputs`` (e.g. the Fourier modes of Burgers'
    ``coordinate_modes``), located by the ``input_fields`` layout of the run's ``meta``."""
    names = set(meta.get("coordinate_inputs") or ())
    channels: list[int] = []
    start = 0
    for name, components in meta.get("input_fields") or ():
        if name in names:
            channels.extend(range(start, start + int(components)))
        start += int(components)
    return tuple(channels)


class EpochDraws(Sequence):
    """A view of training samples whose random draws for sample ``i`` in epoch ``e`` come from
    ``numpy.random.default_rng([seed, e, i])`` (:meth:`rng`): runs with equal seeds, resumed runs
    and runs with DataLoader workers or several processes all draw alike. Call :meth:`set_epoch`
    before each epoch, as for a distributed sampler."""

    def __init__(self, dataset: Sequence[Data], seed: int = 0):
        self.dataset = dataset
        self.seed = int(seed) % 2**64  # SeedSequence entropy is non-negative
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.dataset)

    def rng(self, index: int) -> np.random.Generator:
        """The generator of sample ``index``'s draws in the current epoch."""
        return np.random.default_rng([self.seed, self.epoch, int(index) % len(self)])


class PeriodicShifts(EpochDraws):
    """A view of training samples whose every access rolls the sample's ``x`` and ``y`` by the same
    random number of nodes along each axis of its grid (:func:`meshop.data.grid.roll_grid`); the
    coordinates, latent mesh and weights stay, and so do the ``keep_x`` channels of ``x``.

    The shifts of sample ``i`` in epoch ``e`` are drawn uniformly in ``0 .. n - 1`` per axis of
    ``n`` nodes, from :meth:`~EpochDraws.rng`.
    """

    def __init__(self, dataset: Sequence[Data], seed: int = 0, keep_x: Sequence[int] = ()):
        super().__init__(dataset, seed)
        self.keep_x = tuple(int(c) for c in keep_x)

    def shifts(self, index: int, shape: Sequence[int]) -> tuple[int, ...]:
        """The shift of sample ``index`` in the current epoch, one number of nodes per axis."""
        rng = self.rng(index)
        return tuple(int(rng.integers(int(n))) for n in shape)

    def __getitem__(self, index: int) -> Data:
        data = self.dataset[index]
        check_periodic_grid(data, index)
        return roll_grid(data, self.shifts(index, data.grid_shape), self.keep_x)


class LatentResamples(EpochDraws):
    """A view of training samples whose every access gives the sample a new latent mesh: the
    ``latent`` transform (:class:`meshop.train.data.LatentMesh`) with another seed, so another
    first node of farthest point sampling (or another random subset), and the latent weights found
    again for it. The seed of sample ``i`` in epoch ``e`` comes from :meth:`~EpochDraws.rng`, so
    the processes of a split mesh (which read the whole sample before taking their part) draw
    alike too."""

    def __init__(self, dataset: Sequence[Data], latent, seed: int = 0):
        if latent is None or latent.num_points is None:
            grid = None if latent is None else latent.grid_shape
            raise ConfigError(
                "latent_resample draws a new latent mesh of latent_points nodes each epoch, but "
                f"latent_points is None (latent_grid: {grid}): give latent_points, or "
                "latent_resample = false"
            )
        super().__init__(dataset, seed)
        self.latent = latent

    def seed_of(self, index: int) -> int:
        """The latent mesh's seed for sample ``index`` in the current epoch."""
        return int(self.rng(index).integers(2**31 - 1))

    def __getitem__(self, index: int) -> Data:
        latent = dataclasses.replace(self.latent, seed=self.seed_of(index))
        return latent(self.dataset[index])


__all__ = ["LatentResamples", "PeriodicShifts", "check_periodic_grid", "coordinate_channels"]

"""Preparing samples for training and inference: latent meshes, shapes the model is built for,
and :func:`prepare_data`, the one call that readies a training run's data."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
from torch.utils.data import Dataset as TorchDataset

from meshop._pyg import Data
from meshop.data import GaussianNormalizer, add_latent_mesh, node_features
from meshop.data.batching import node_set_weights
from meshop.errors import ConfigError, FieldError, MeshError
from meshop.train.config import TrainConfig
from meshop.train.normalized import fit_normalizers

try:
    from torch_geometric.data import InMemoryDataset
except ImportError:  # pragma: no cover
    raise


@dataclass(frozen=True)
class LatentMesh:
    """Transform giving a sample its latent mesh (PiT Sec. 2.3: "sampling or farthest point
    sampling").

    ``num_points`` nodes of the sample chosen by farthest point sampling (``sampling="fps"``,
    :func:`meshop.data.add_latent_mesh`: evenly spread in space) or uniformly at random
    (``"random"``: they follow the node density, so graded meshes keep their refinement, e.g.
    at an airfoil's surface); or a ``grid_shape`` grid over the bounding box. The sample is
    never modified: the result is a shallow copy (its own attributes, the sample's tensors, so a
    huge mesh is not held twice). Seeded, so a sample always gets the same latent mesh.
    """

    num_points: int | None = None
    grid_shape: tuple[int, ...] | None = None
    seed: int = 0
    sampling: str = "fps"

    @property
    def active(self) -> bool:
        """Whether it gives a sample a latent mesh of its own (else the input mesh serves)."""
        return self.num_points is not None or self.grid_shape is not None

    def __call__(self, data: Data) -> Data:
        if not self.active:
            return data
        data = copy.copy(data)
        if self.sampling == "random" and self.num_points is not None:
            generator = torch.Generator().manual_seed(self.seed)
            keep = torch.randperm(len(data.pos), generator=generator)[: self.num_points]
            data.latent_pos = data.pos[keep.sort().values.to(data.pos.device)]
        else:
            add_latent_mesh(
                data, num_points=self.num_points, grid_shape=self.grid_shape, seed=self.seed
            )
        return with_latent_weight(data)


def with_latent_weight(data: Data) -> Data:
    """``data`` (modified in place) with ``latent_weight``, its latent nodes' quadrature weights
    (:func:`meshop.data.batching.node_set_weights`: the summed weights of the input nodes nearest
    to each), stored beside the latent mesh so that they are searched once per sample rather than
    in every forward pass; nothing when the data has no weights."""
    if "latent_weight" in data:  # a former latent mesh's
        del data.latent_weight
    if getattr(data, "weight", None) is not None:
        data.latent_weight = node_set_weights(data)[1]
    return data


def prepare(samples: Iterable[Data], latent: LatentMesh | None = None) -> Sequence[Data]:
    """The samples with their latent meshes, for training or evaluation.

    Samples held in memory (a list, a PyG ``InMemoryDataset``) become a list, each with its latent
    mesh computed once (not on every epoch). A dataset that reads its samples on access (a PyG
    ``Dataset`` such as :class:`~meshop.datasets.MeshFolder`, any ``torch.utils.data.Dataset``)
    stays lazy: a :class:`PreparedSamples` view that reads sample ``i`` and gives it its latent mesh
    (seeded, so always the same one) when it is asked for, so memory holds the samples in use, not
    the dataset.
    """
    if is_lazy(samples):
        return PreparedSamples(samples, latent)
    return [latent(s) if latent is not None else s for s in samples]


def is_lazy(samples) -> bool:
    """Whether ``samples`` is a dataset that reads its samples on access (not held in memory)."""
    return isinstance(samples, TorchDataset) and not isinstance(samples, InMemoryDataset)


class PreparedSamples(Sequence):
    """A lazy dataset seen through a :class:`LatentMesh`: ``view[i] = latent(dataset[i])``, made
    when asked for. Picklable (DataLoader workers get a copy) if the dataset is."""

    def __init__(self, dataset, latent: LatentMesh | None = None):
        self.dataset = dataset
        self.latent = latent

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Data:
        if not -len(self) <= index < len(self):
            raise IndexError(f"sample {index} of {len(self)}")
        data = self.dataset[int(index) % len(self)]  # a dataset need not take negative indices
        return self.latent(data) if self.latent is not None else data

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __getattr__(self, name: str):
        # field layouts and names (input_fields, target_names, ...) are the dataset's
        if name in ("dataset", "latent"):
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def __repr__(self) -> str:
        return f"PreparedSamples({self.dataset!r}, {self.latent!r})"


def describe(sample: Data) -> dict:
    """Widths and dimension a model for this data is built with (stored in checkpoints)."""
    if getattr(sample, "y", None) is None:
        raise FieldError(
            "the training samples have no targets y; a dataset for training needs them (a folder "
            "of meshes: name the target fields, e.g. --dataset-arg 'targets=[\"stress\"]')"
        )
    return {
        "in_channels": int(node_features(sample).shape[-1]),
        "out_channels": int(sample.y.shape[-1]),
        "pos_dim": int(sample.pos.shape[-1]),
        "x_channels": int(sample.x.shape[-1]) if getattr(sample, "x", None) is not None else 0,
        "params_channels": (
            int(sample.params.shape[-1]) if getattr(sample, "params", None) is not None else 0
        ),
    }


def check_compatible(sample: Data, expected: dict, what: str = "the data") -> None:
    """Raise a clear error if ``sample`` does not have the shapes the model was trained on."""
    pos_dim = int(sample.pos.shape[-1])
    if pos_dim != expected["pos_dim"]:
        raise MeshError(
            f"{what} is {pos_dim}D but the model was trained on {expected['pos_dim']}D domains"
        )
    for key, label in (("x_channels", "input field channels"), ("params_channels", "parameters")):
        attr = "x" if key == "x_channels" else "params"
        have = (
            int(getattr(sample, attr).shape[-1]) if getattr(sample, attr, None) is not None else 0
        )
        if have != expected[key]:
            raise FieldError(
                f"{what} has {have} {label} but the model was trained with {expected[key]}; "
                "give the same fields (and parameters) as in training"
            )


def field_layout_of(dataset, key: str, count: int) -> list[tuple[str, int]]:
    """``[(name, components), ...]`` of a dataset's ``"input"`` or ``"target"`` fields, which
    stack into ``count`` channels of ``x`` or ``y``.

    From the dataset's ``input_fields`` / ``target_fields`` when it has them (e.g.
    :class:`~meshop.datasets.MeshFolder`), else its ``input_names`` / ``target_names`` (one
    channel per name, or one name for all channels: a vector field), else ``x0, x1, ...`` /
    ``y0, ...`` (``x`` / ``y`` for one channel).
    """
    fields = getattr(dataset, f"{key}_fields", None)
    if fields and sum(int(k) for _, k in fields) == count:
        return [(str(n), int(k)) for n, k in fields]
    names = getattr(dataset, f"{key}_names", None)
    names = [names] if isinstance(names, str) else list(names or [])
    if names and len(names) == count:
        return [(str(n), 1) for n in names]
    if len(names) == 1:
        return [(str(names[0]), count)]
    prefix = "x" if key == "input" else "y"
    return [(prefix, 1)] if count == 1 else [(f"{prefix}{i}", 1) for i in range(count)]


def field_meta(dataset, info: dict) -> dict:
    """The field names and layouts a checkpoint stores (``describe(sample)`` gives ``info``):
    ``input_fields`` / ``target_fields`` as ``[[name, components], ...]`` and ``input_names`` /
    ``target_names`` as the field names; ``coordinate_inputs`` too when the dataset names inputs
    that are functions of the coordinates (random periodic shifts leave them in place)."""
    inputs = field_layout_of(dataset, "input", info["x_channels"]) if info["x_channels"] else []
    targets = field_layout_of(dataset, "target", info["out_channels"])
    meta = {
        "input_fields": [[n, k] for n, k in inputs],
        "target_fields": [[n, k] for n, k in targets],
        "input_names": [n for n, _ in inputs],
        "target_names": [n for n, _ in targets],
    }
    coordinates = [str(n) for n in getattr(dataset, "coordinate_inputs", None) or ()]
    if coordinates:
        meta["coordinate_inputs"] = coordinates
    return meta


#: the :class:`~meshop.train.config.TrainConfig` fields that decide how data is prepared
PREPARATION_FIELDS = (
    "latent_points",
    "latent_grid",
    "latent_sampling",
    "normalize_x",
    "normalize_y",
    "normalize_params",
    "normalize_pos",
)


@dataclass
class PreparedData:
    """The data of a training run, ready for the loop: made by :func:`prepare_data`, given to
    :class:`~meshop.train.Trainer`.

    Attributes:
        train_set: the training samples with their latent meshes (:func:`prepare`: a list, or a
            lazy :class:`PreparedSamples` view of a dataset that reads its samples on access).
        test_set: the test samples likewise, or None.
        latent: the latent mesh every sample gets.
        normalizers: the normalisers fitted on the training split, by field (``"x"``, ``"y"``,
            ``"params"``, ``"pos"``).
        info: the widths and dimension a model for this data is built with (:func:`describe`).
        meta: what a checkpoint stores about the data: the caller's ``meta`` (dataset name and
            arguments) and the field names and components (:func:`field_meta`).
        config: the configuration the data was prepared with.
    """

    train_set: Sequence[Data]
    test_set: Sequence[Data] | None
    latent: LatentMesh
    normalizers: dict[str, GaussianNormalizer]
    info: dict
    meta: dict
    config: TrainConfig

    def check_config(self, config: TrainConfig) -> None:
        """Raise :class:`ConfigError` if ``config`` prepares data otherwise than :attr:`config`
        (its latent mesh or normalisers differ)."""
        differ = [f for f in PREPARATION_FIELDS if getattr(config, f) != getattr(self.config, f)]
        if differ:
            given = ", ".join(f"{f}={getattr(self.config, f)!r}" for f in differ)
            raise ConfigError(
                f"the data was prepared with {given}, which this configuration changes; "
                "prepare it with the configuration the run trains with"
            )


def prepare_data(
    train_set: Sequence[Data],
    test_set: Sequence[Data] | None = None,
    config: TrainConfig | None = None,
    meta: dict | None = None,
) -> PreparedData:
    """Everything a training run needs from its data, in one call: the shapes a model for it is
    built with, the field names a checkpoint keeps, every sample's latent mesh and the normalisers
    fitted on the training split.

    A dataset that reads its samples on access (:class:`~meshop.datasets.MeshFolder`, any PyG
    ``Dataset`` that is not an ``InMemoryDataset``) is never held whole: the normalisers are
    fitted by streaming over it once and the prepared splits stay lazy (:func:`prepare`). Lists
    and in-memory datasets become lists with their latent meshes computed once.

    Args:
        train_set: a sequence of ``Data`` with targets ``y``.
        test_set: a sequence of ``Data`` with targets ``y``, or None.
        config: the :class:`~meshop.train.config.TrainConfig` (its latent mesh and normaliser
            fields are used here).
        meta: extra information for the checkpoint (dataset name and arguments); the field names
            and components come from ``train_set`` unless given.

    Raises:
        ConfigError: the training split is empty.
        FieldError: its samples have no targets.
    """
    config = config or TrainConfig()
    if len(train_set) == 0:
        raise ConfigError("the training split is empty")
    info = describe(train_set[0])
    meta = dict(meta or {})
    for key, value in field_meta(train_set, info).items():
        meta.setdefault(key, value)
    latent = LatentMesh(config.latent_points, config.latent_grid, sampling=config.latent_sampling)
    prepared = prepare(train_set, latent)
    # streamed over the training samples, one at a time: a lazy dataset is read once, without
    # computing latent meshes that the statistics do not need
    normalizers = fit_normalizers(
        train_set if is_lazy(train_set) else prepared,
        config.normalize_x,
        config.normalize_y,
        config.normalize_params,
        config.normalize_pos,
    )
    return PreparedData(
        train_set=prepared,
        test_set=prepare(test_set, latent) if test_set is not None else None,
        latent=latent,
        normalizers=normalizers,
        info=info,
        meta=meta,
        config=config,
    )

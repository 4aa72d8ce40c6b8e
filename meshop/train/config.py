"""Training configuration: a plain dataclass, loadable from TOML, with unknown keys rejected."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from meshop._registry import unknown_name
from meshop.errors import ConfigError

OPTIMIZERS = ("adam", "adamw")
SCHEDULES = ("onecycle", "cosine", "constant")
LOSSES = ("rel_l2", "rel_l1")
METRICS_FORMATS = ("jsonl", "csv")
LATENT_SAMPLINGS = ("fps", "random")
#: why ``split_mesh`` refuses other settings
SPLIT_CLASH = {
    "node_fraction": "it subsamples the meshes that split_mesh spreads over the processes",
    "h1_weight": "the H1 penalty needs the cells of the whole mesh on one process",
    "compile": "its steps run the model's chunked pass, which compile does not wrap",
}


@dataclass
class TrainConfig:
    """Everything the training loop needs besides the model and the data.

    The defaults are the Galerkin Transformer paper's (Adam, one-cycle schedule that starts and ends
    at ``lr / div_factor`` and peaks after ``pct_start`` of the steps, gradient clipping 1, relative
    L2); PiT uses ``schedule="cosine"`` and ``clip=None``; ONO ``optimizer="adamw"``,
    ``weight_decay=1e-5``, ``clip=0.1``.

    Attributes:
        epochs: passes over the training split.
        batch_size: global batch (split evenly over the processes of a distributed run; with
            ``split_mesh`` every process holds a part of the nodes of each of its samples).
        lr: peak (one-cycle) or initial (cosine, constant) learning rate.
        optimizer: ``"adam"`` or ``"adamw"``.
        weight_decay: L2 (adam) or decoupled (adamw) weight decay.
        schedule: ``"onecycle"``, ``"cosine"`` (annealed to 0 over all steps) or ``"constant"``;
            the schedule is stepped once per optimisation step.
        pct_start: one-cycle fraction of the steps spent increasing the rate (0.3: epoch 30 of 100).
        div_factor: one-cycle initial rate is ``lr / div_factor``.
        final_div_factor: one-cycle final rate is ``lr / div_factor / final_div_factor``.
        clip: maximal gradient norm (None or 0: no clipping).
        loss: ``"rel_l2"`` or ``"rel_l1"`` per-sample relative error of decoded (physical) values.
        h1_weight: weight of the relative H1-seminorm penalty (uniform grids and triangle meshes).
        normalize_x, normalize_y, normalize_params: fit Gaussian normalisers on the training split.
        normalize_pos: centre the coordinates and scale them isotropically to unit standard
            deviation (fitted on the training split); off for models with periodic boxes.
        seed: seeds parameters, shuffling and dropout; equal seeds give equal runs.
        eval_every: evaluate on the test split every this many epochs (and after the last).
        latent_points: give every sample a latent mesh of this many farthest-point-sampled nodes
            (models without latent meshes ignore it; PiT uses the input mesh when it is None).
        latent_grid: or a uniform latent grid of this shape over the sample's bounding box.
        latent_sampling: how ``latent_points`` are chosen: ``"fps"`` (farthest point sampling,
            evenly spread) or ``"random"`` (a seeded random subset of the nodes, which follows
            the mesh's refinement).
        num_workers: DataLoader worker processes.
        device: ``"auto"`` (CUDA if available), ``"cpu"``, ``"cuda"``.
        metrics_format: ``"jsonl"`` (metrics.jsonl) or ``"csv"`` (metrics.csv).
        progress: show tqdm progress bars (on a terminal; in logs one line per epoch).
        find_unused_parameters: passed to DistributedDataParallel.
        compile: run the training steps through ``torch.compile`` (TorchInductor; needs a C++
            compiler on CPU). The first steps pay the compilation (over a minute on CPU); on CPU
            we measured no gain for ONO (264 ms per step either way, width 64, 4 layers, batch 8
            of 256 nodes, one thread), so it is off by default.
        chunk_nodes: evaluate the model (training steps and test errors) in chunks of this many
            nodes (:mod:`meshop.nn.chunking`): the same outputs and gradients, with memory bounded
            by the chunk, for samples of millions of nodes. None: only batches of more than
            131,072 nodes are chunked (16,384 nodes a chunk); 0: never.
        node_fraction: train every step on a random subset of this fraction of each sample's
            nodes, with the quadrature weights rescaled so that every integral stays unbiased
            (:func:`meshop.data.subsample.subsample_nodes`); a new subset every epoch. None or
            1: the whole meshes. Test errors are computed on the whole meshes.
        periodic_shift: data augmentation for problems that are periodic along every axis of a
            uniform grid and translation-invariant (Burgers): every epoch reads each training
            sample with its input and target fields rolled by the same random number of nodes
            along each grid axis (:class:`meshop.train.augment.PeriodicShifts`), the coordinates
            and the input channels a dataset names as functions of them (``coordinate_inputs``,
            Burgers' ``coordinate_modes``) staying in place. The shifts follow ``(seed, epoch,
            sample)``, so runs and resumed runs repeat them; test errors are computed on unshifted
            samples. Training samples without ``grid_shape`` are refused before the first epoch
            (and so is ``node_fraction``, which subsamples meshes).
        latent_resample: data augmentation for models with a latent mesh of ``latent_points``
            nodes: every epoch reads each training sample with a new latent mesh, chosen as
            ``latent_sampling`` says from another random first node (farthest point sampling) or
            another random subset, its weights found again
            (:class:`meshop.train.augment.LatentResamples`), so that the model does not learn one
            latent mesh per sample: on a finer mesh of the same domain, whose farthest point
            sample differs, such a model loses accuracy (PiT on the Darcy grid,
            ``benchmarks.accuracy.folder_zero_shot``). The draws follow ``(seed, epoch,
            sample)``; test errors and predictions use the seeded latent mesh.
        split_mesh: under torchrun, every process trains on the same batches, each holding its
            own part of every sample's nodes (:mod:`meshop.train.split`: one mesh over the
            processes, :func:`meshop.nn.splitting.split_mesh`), instead of other samples (data
            parallel); the loss and the gradients are the whole meshes'. Needs a model that
            splits (a latent mesh for PiT and the Galerkin and Fourier Transformers:
            ``latent_points``) and samples without query points; not with ``node_fraction``,
            ``h1_weight`` or ``compile``.
    """

    epochs: int = 100
    batch_size: int = 8
    lr: float = 1e-3
    optimizer: str = "adam"
    weight_decay: float = 0.0
    schedule: str = "onecycle"
    pct_start: float = 0.3
    div_factor: float = 1e4
    final_div_factor: float = 1.0
    clip: float | None = 1.0
    loss: str = "rel_l2"
    h1_weight: float = 0.0
    normalize_x: bool = True
    normalize_y: bool = True
    normalize_params: bool = True
    normalize_pos: bool = True
    seed: int = 0
    eval_every: int = 1
    latent_points: int | None = None
    latent_grid: tuple[int, ...] | None = None
    latent_sampling: str = "fps"
    num_workers: int = 0
    device: str = "auto"
    metrics_format: str = "jsonl"
    progress: bool = True
    find_unused_parameters: bool = False
    compile: bool = False
    chunk_nodes: int | None = None
    node_fraction: float | None = None
    periodic_shift: bool = False
    latent_resample: bool = False
    split_mesh: bool = False

    def __post_init__(self) -> None:
        if self.latent_grid is not None:
            self.latent_grid = tuple(int(n) for n in self.latent_grid)
        self.validate()

    def validate(self) -> None:
        """Raise :class:`ConfigError` on values the loop cannot use."""
        choices = {
            "optimizer": OPTIMIZERS,
            "schedule": SCHEDULES,
            "loss": LOSSES,
            "metrics_format": METRICS_FORMATS,
            "latent_sampling": LATENT_SAMPLINGS,
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ConfigError(
                    f"{name} must be one of {list(allowed)}, got {getattr(self, name)!r}"
                )
        for name in ("epochs", "batch_size", "eval_every"):
            if int(getattr(self, name)) < 1:
                raise ConfigError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        if not self.lr > 0:
            raise ConfigError(f"lr must be positive, got {self.lr!r}")
        if not 0 < self.pct_start < 1:
            raise ConfigError(f"pct_start must be in (0, 1), got {self.pct_start!r}")
        if self.latent_points is not None and self.latent_grid is not None:
            raise ConfigError(
                "give latent_points (farthest point sampling) or latent_grid, not both"
            )
        if self.latent_points is not None and int(self.latent_points) < 1:
            raise ConfigError(f"latent_points must be positive, got {self.latent_points!r}")
        if self.device not in ("auto", "cpu") and not self.device.startswith("cuda"):
            raise ConfigError(f"device must be 'auto', 'cpu' or 'cuda[:i]', got {self.device!r}")
        if self.node_fraction is not None and not 0 < self.node_fraction <= 1:
            raise ConfigError(
                f"node_fraction must be in (0, 1] (0.25: a quarter of each sample's nodes), got "
                f"{self.node_fraction!r}"
            )
        if self.node_fraction is not None and self.node_fraction < 1 and self.h1_weight:
            raise ConfigError(
                "node_fraction trains on subsets of the nodes, which have no cells for the H1 "
                "penalty: give h1_weight = 0 or node_fraction = None"
            )
        if not isinstance(self.periodic_shift, bool):
            raise ConfigError(
                f"periodic_shift must be true or false (random periodic shifts of the training "
                f"samples), got {self.periodic_shift!r}"
            )
        if self.periodic_shift and self.node_fraction is not None and self.node_fraction < 1:
            raise ConfigError(
                "periodic_shift rolls the fields of uniform grids, whose nodes node_fraction "
                "cannot subsample (a grid keeps its shape): give node_fraction = None or "
                "periodic_shift = false"
            )
        if not isinstance(self.latent_resample, bool):
            raise ConfigError(
                f"latent_resample must be true or false (a new latent mesh of every training "
                f"sample each epoch), got {self.latent_resample!r}"
            )
        if not isinstance(self.split_mesh, bool):
            raise ConfigError(
                f"split_mesh must be true or false (each sample's nodes split over the processes "
                f"of torchrun), got {self.split_mesh!r}"
            )
        if self.split_mesh:
            clash = {
                "node_fraction": self.node_fraction is not None and self.node_fraction < 1,
                "h1_weight": bool(self.h1_weight),
                "compile": bool(self.compile),
            }
            for name, given in clash.items():
                if given:
                    raise ConfigError(
                        f"split_mesh cannot train with {name} = {getattr(self, name)!r} "
                        f"({SPLIT_CLASH[name]}): give one of them"
                    )
        if self.chunk_nodes is not None and int(self.chunk_nodes) < 0:
            raise ConfigError(
                f"chunk_nodes must be a number of nodes >= 0 (0: never chunk), got "
                f"{self.chunk_nodes!r}"
            )

    def replace(self, **changes: Any) -> TrainConfig:
        """A copy with some fields changed (unknown names rejected)."""
        return from_dict({**dataclasses.asdict(self), **changes})

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        if out["latent_grid"] is not None:
            out["latent_grid"] = list(out["latent_grid"])
        return out


def check_keys(given: dict[str, Any], allowed: list[str], where: str) -> None:
    """Reject keys not in ``allowed`` with the closest valid names in the message."""
    for key in given:
        if key not in allowed:
            raise unknown_name("key", key, allowed, where, listed_as="valid keys")


def from_dict(values: dict[str, Any], where: str = "the training configuration") -> TrainConfig:
    """A :class:`TrainConfig` from a mapping; unknown keys and wrong types raise ConfigError."""
    names = [f.name for f in dataclasses.fields(TrainConfig)]
    check_keys(values, names, where)
    try:
        return TrainConfig(**values)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"invalid value in {where}: {exc}") from exc


@dataclass
class RunConfig:
    """A whole ``meshop train`` run: which data, which model, and how to train.

    A TOML file has the same shape::

        [run]
        dataset = "elasticity"
        model = "pit"
        out = "runs/elasticity-pit"

        [train]      # TrainConfig fields
        epochs = 50

        [model]      # keyword arguments of the model class
        width = 64

        [dataset]    # keyword arguments of the dataset class
        num_train = 200
    """

    dataset: str | None = None
    model: str | None = None
    out: str | None = None
    data_dir: str | None = None
    #: TrainConfig fields given explicitly (they override the dataset/model preset)
    train: dict[str, Any] = field(default_factory=dict)
    model_args: dict[str, Any] = field(default_factory=dict)
    dataset_args: dict[str, Any] = field(default_factory=dict)

    def train_config(self, defaults: dict[str, Any] | None = None) -> TrainConfig:
        """The :class:`TrainConfig` of ``defaults`` (a preset) overridden by the explicit values."""
        return from_dict({**(defaults or {}), **self.train})


RUN_KEYS = ["dataset", "model", "out", "data_dir"]
SECTIONS = ["run", "train", "model", "dataset"]


def _read_toml(path: str | os.PathLike) -> dict[str, Any]:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        try:
            import tomli as tomllib
        except ImportError as exc:
            raise ConfigError(
                "reading TOML configs needs Python >= 3.11 or `pip install tomli`"
            ) from exc
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file '{path}' does not exist")
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file '{path}' is not valid TOML: {exc}") from exc


def load_config(path: str | os.PathLike) -> RunConfig:
    """Read a :class:`RunConfig` from a TOML file (sections ``run``, ``train``, ``model``,
    ``dataset``); unknown sections and keys raise :class:`ConfigError` naming the file."""
    raw = _read_toml(path)
    check_keys(raw, SECTIONS, f"'{path}' (top-level sections)")
    for name in SECTIONS:
        if name in raw and not isinstance(raw[name], dict):
            raise ConfigError(f"'{path}': '{name}' must be a table ([{name}]), got {raw[name]!r}")
    run = raw.get("run", {})
    check_keys(run, RUN_KEYS, f"'{path}' [run]")
    train = dict(raw.get("train", {}))
    from_dict(train, f"'{path}' [train]")  # validates names and values now, with the file named
    return RunConfig(
        **run,
        train=train,
        model_args=dict(raw.get("model", {})),
        dataset_args=dict(raw.get("dataset", {})),
    )

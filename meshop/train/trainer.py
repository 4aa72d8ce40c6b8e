"""The training loop: any meshop model on any meshop dataset, on one process or under torchrun."""

from __future__ import annotations

import contextlib
import copy
import importlib
import os
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data.distributed import DistributedSampler
from tqdm.auto import tqdm

import meshop
from meshop.data import make_loader, num_samples, query_nodes
from meshop.data.subsample import NodeSubsets
from meshop.errors import ConfigError
from meshop.nn.edge_cache import no_edge_cache
from meshop.train import checkpoint as ckpt_io
from meshop.train.augment import (
    LatentResamples,
    PeriodicShifts,
    check_periodic_grid,
    coordinate_channels,
)
from meshop.train.config import TrainConfig
from meshop.train.data import PreparedData
from meshop.train.distributed import DistContext, all_gather_objects, all_reduce_sum, barrier, setup
from meshop.train.losses import relative_h1, relative_lp
from meshop.train.metrics import MetricsLog, per_sample_errors, summarize
from meshop.train.normalized import NormalizedModel
from meshop.train.optim import build_optimizer, build_scheduler
from meshop.train.split import (
    MeshParts,
    broadcast_state,
    check_launch,
    check_model,
    split_forward,
    sum_gradients,
)


def seed_everything(seed: int) -> None:
    """Seed torch (CPU and CUDA), numpy and random: call it before building the model."""
    random.seed(seed)
    np.random.seed(seed % 2**32)  # noqa: NPY002 (the global generator that user code may use)
    torch.manual_seed(seed)


def training_loss(pred: torch.Tensor, batch, config: TrainConfig, group=None) -> torch.Tensor:
    """Mean per-sample relative L2 (or L1) error, plus ``h1_weight`` times the relative H1 seminorm
    (Galerkin Transformer, Sec. 4), on physical values. ``group``: the processes of a split mesh
    (``split_mesh``), whose parts of the samples' errors are summed (the whole meshes' loss)."""
    _, query_batch = query_nodes(batch)
    p = 1 if config.loss == "rel_l1" else 2
    loss = relative_lp(pred, batch.y, query_batch, p, num_samples(batch), group=group)
    if config.h1_weight:
        loss = loss + config.h1_weight * relative_h1(pred, batch.y, batch)
    return loss


def compile_model(net: torch.nn.Module) -> torch.nn.Module:
    """``torch.compile(net)`` (TorchInductor), or a clear error where it cannot run here."""
    if not hasattr(torch, "compile"):
        raise ConfigError(
            f"compile=True needs torch.compile (torch >= 2.0); torch {torch.__version__}"
        )
    try:
        importlib.import_module("torch._inductor")  # the backend torch.compile uses
    except ImportError as exc:
        raise ConfigError(
            f"compile=True: TorchInductor cannot be imported ({exc}); train with compile=False"
        ) from exc
    return torch.compile(net)


def model_spec(model: torch.nn.Module) -> str:
    """The name a checkpoint rebuilds ``model`` from: its registry name or ``module:Class``."""
    from meshop.models.registry import name_of

    return name_of(type(model))


class Trainer:
    """Train ``model`` on prepared data, evaluate on its test split, checkpoint into ``out_dir``.

    Per epoch: shuffle with a generator seeded by ``(seed, epoch)`` (a distributed sampler shares
    the order between processes), optimise the relative error of the decoded predictions with the
    configured optimiser, schedule and clipping, evaluate the per-sample relative L2 on the test
    split (mean and median, reduced across processes), append a row to the metrics log and write
    ``checkpoint.pt`` atomically (rank 0 only) with the model, normalisers, optimiser, scheduler,
    RNG states and history. ``fit(resume=True)`` continues from that checkpoint; a run killed at any
    point and resumed ends with the same parameters and metrics as an uninterrupted one.

    With ``split_mesh`` (under torchrun) every process reads the same batches and trains on its
    own part of each sample's nodes, and the processes take the step of the whole meshes' loss
    (:mod:`meshop.train.split`) instead of averaging the gradients of other samples; a model that
    cannot split is refused here, before the first step. Test errors are computed as in data
    parallel training, each sample whole on one process.

    The data comes from :func:`~meshop.train.data.prepare_data` (latent meshes, the normalisers
    fitted on the training split, which are stored with the model as a
    :class:`~meshop.train.normalized.NormalizedModel`, and the field names); raw splits are
    refused. A lazy dataset (:class:`~meshop.datasets.MeshFolder`) stays lazy: each epoch reads
    the samples of its batches (with ``num_workers`` DataLoader workers reading ahead), so memory
    holds a few batches, not the folder.

    Args:
        model: a meshop model, ``model(batch) -> [N_query, C_out]``, with a ``config`` dict.
        data: the :class:`~meshop.train.data.PreparedData` of the run.
        config: the :class:`TrainConfig` (default: the one the data was prepared with; another
            must prepare data the same way, :meth:`~meshop.train.data.PreparedData.check_config`).
        out_dir: where checkpoints and metrics go (None: nothing is written, no resume).

    Raises:
        TypeError: ``data`` is not prepared (raw splits), or ``config`` is not a TrainConfig.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        data: PreparedData,
        config: TrainConfig | None = None,
        out_dir: str | os.PathLike | None = None,
    ):
        if not isinstance(data, PreparedData) or not isinstance(config, (TrainConfig, type(None))):
            raise TypeError(
                f"Trainer(model, data, config, out_dir) takes prepared data and a TrainConfig, got "
                f"{type(data).__name__} and {type(config).__name__}: prepare the splits first, "
                "data = meshop.train.prepare_data(train_set, test_set, config, meta)"
            )
        self.config = c = config or data.config
        data.check_config(c)
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.ctx: DistContext = setup(c.device)
        #: every process holds a part of the nodes of the same samples (split_mesh)
        self.split = c.split_mesh
        if self.split:
            check_launch(self.ctx)
            check_model(model, data.train_set[0])
        if c.batch_size % self.ctx.world_size and not self.split:
            raise ConfigError(
                f"batch_size {c.batch_size} is the global batch and must be divisible by "
                f"the number of processes ({self.ctx.world_size})"
            )
        if c.normalize_pos and (getattr(model, "config", None) or {}).get("periodic") is not None:
            raise ConfigError(
                "the model has a periodic box in data units, which normalize_pos would rescale; "
                "train it with normalize_pos = false"
            )
        self.train_set, self.test_set, self.latent = data.train_set, data.test_set, data.latent
        self.data_info, self.meta = data.info, data.meta
        # a copy: models trained on the same prepared data do not share normaliser buffers
        normalizers = copy.deepcopy(data.normalizers)
        self.model = NormalizedModel(model, normalizers, c.chunk_nodes).to(self.ctx.device)
        self.history: list[dict[str, Any]] = []
        self.epoch = 0  # completed epochs
        self.local_batch = c.batch_size // self.replicas
        self.sampler = DistributedSampler(
            self.train_set,
            num_replicas=self.replicas,
            rank=self.ctx.rank % self.replicas,
            shuffle=True,
            seed=c.seed,
        )
        steps_on = self.train_set
        # every epoch on new random periodic shifts (periodic_shift), checked before any epoch
        self.shifts: PeriodicShifts | None = None
        if c.periodic_shift:
            self.check_periodic_shift()
            steps_on = self.shifts = PeriodicShifts(
                steps_on, c.seed, coordinate_channels(self.meta)
            )
        # every epoch a new latent mesh of every sample (latent_resample)
        self.resamples: LatentResamples | None = None
        if c.latent_resample:
            steps_on = self.resamples = LatentResamples(steps_on, self.latent, c.seed)
        # every epoch on new random node subsets with node_fraction (of the shifted samples)
        if c.node_fraction is not None and c.node_fraction < 1:
            steps_on = NodeSubsets(steps_on, c.node_fraction)
        if self.split:  # each process's part of every sample, after any augmentation
            steps_on = MeshParts(steps_on, self.ctx.rank, self.ctx.world_size)
        self.loader = make_loader(
            steps_on,
            batch_size=self.local_batch,
            sampler=self.sampler,
            num_workers=c.num_workers,
        )
        self.steps_per_epoch = len(self.loader)
        self.optimizer = build_optimizer(self.model, c)
        self.scheduler = build_scheduler(self.optimizer, c, c.epochs * self.steps_per_epoch)
        self.net = self.model
        if self.split:  # the same start on every process; gradients summed by the step
            broadcast_state(self.model)
        elif self.ctx.distributed:
            device_ids = [self.ctx.device] if self.ctx.device.type == "cuda" else None
            self.net = DistributedDataParallel(
                self.model, device_ids=device_ids, find_unused_parameters=c.find_unused_parameters
            )
        if c.compile:
            self.net = compile_model(self.net)
        self.metrics_log = (
            MetricsLog(self.out_dir, c.metrics_format) if self.out_dir is not None else None
        )

    def check_periodic_shift(self) -> None:
        """Raise :class:`ConfigError` if a training sample is not a uniform grid with its fields at
        the grid nodes (all samples held in memory; the first of a lazy dataset, whose later samples
        are checked as they are read)."""
        samples = self.train_set
        count = len(samples) if isinstance(samples, list) else min(len(samples), 1)
        for index in range(count):
            check_periodic_grid(samples[index], index)

    @property
    def replicas(self) -> int:
        """The processes that share out the samples: all of them, or one with ``split_mesh``
        (every process reads every batch, its own parts of the samples)."""
        return 1 if self.split else self.ctx.world_size

    @property
    def checkpoint_path(self) -> Path | None:
        return self.out_dir / ckpt_io.CHECKPOINT_NAME if self.out_dir is not None else None

    # -- checkpoints -------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """Everything needed to resume the run or rebuild its model."""
        return {
            "format": ckpt_io.FORMAT,
            "version": ckpt_io.VERSION,
            "meshop_version": meshop.__version__,
            "model_name": model_spec(self.model.model),
            "model_config": dict(self.model.model.config),
            "normalizers": {k: n.channels for k, n in self.model.normalizers.items()},
            "state_dict": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "epoch": self.epoch,
            "train_config": self.config.to_dict(),
            "data": {**self.data_info, **self.meta},
            "history": list(self.history),
        }

    def save_checkpoint(self) -> None:
        rng = all_gather_objects(ckpt_io.rng_state(), self.ctx)  # one state per process
        if self.ctx.is_main and self.checkpoint_path is not None:
            ckpt_io.save_atomic({**self.state(), "rng": rng}, self.checkpoint_path)
            self.metrics_log.rewrite(self.history)
        barrier(self.ctx)

    def load_checkpoint(self, path: str | os.PathLike) -> None:
        ckpt = ckpt_io.load(path, map_location=self.ctx.device)
        if ckpt["model_name"] != model_spec(self.model.model):
            raise ConfigError(
                f"cannot resume: the checkpoint holds a '{ckpt['model_name']}' model, this run "
                f"trains '{model_spec(self.model.model)}'"
            )
        try:
            self.model.load_state_dict(ckpt["state_dict"])
        except RuntimeError as exc:
            raise ConfigError(
                f"cannot resume from '{path}': the model differs from the checkpoint's "
                f"({str(exc).splitlines()[0]})"
            ) from exc
        self.optimizer.load_state_dict(ckpt["optimizer"])
        self.scheduler.load_state_dict(ckpt["scheduler"])
        self.epoch = int(ckpt["epoch"])
        self.history = list(ckpt["history"])
        rng = ckpt["rng"]
        ckpt_io.set_rng_state(rng[self.ctx.rank] if self.ctx.rank < len(rng) else rng[0])

    # -- loop ----------------------------------------------------------------------------------
    def step(self, batch) -> float:
        """One optimisation step on a batch; returns the loss. With ``split_mesh``: on this
        process's part of the batch, the whole batch's loss and gradient."""
        group = torch.distributed.group.WORLD if self.split else None
        pred = split_forward(self.model, batch, group) if self.split else self.net(batch)
        loss = training_loss(pred, batch, self.config, group)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.split:
            sum_gradients(self.model.parameters(), group)
        if self.config.clip:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.clip)
        self.optimizer.step()
        self.scheduler.step()
        return float(loss.detach())

    def train_epoch(self) -> dict[str, float]:
        c = self.config
        self.net.train()
        self.sampler.set_epoch(self.epoch)
        for view in (self.shifts, self.resamples):
            if view is not None:
                view.set_epoch(self.epoch)
        total, count, start = 0.0, 0, time.perf_counter()
        bar = tqdm(
            self.loader,
            desc=f"epoch {self.epoch + 1}/{c.epochs}",
            unit="batch",
            leave=False,
            # a bar only on a terminal: logs of batch jobs get the one line per epoch of fit()
            disable=not (c.progress and self.ctx.is_main and sys.stdout.isatty()) or None,
        )
        # random node subsets (node_fraction) never come back: no neighbour lists kept for them
        subsets = c.node_fraction is not None and c.node_fraction < 1
        for batch in bar:
            batch = batch.to(self.ctx.device)
            n = num_samples(batch)
            with no_edge_cache() if subsets else contextlib.nullcontext():
                loss = self.step(batch)
            total += loss * n
            count += n
            if not bar.disable:  # a bar on a terminal: its figures
                elapsed = time.perf_counter() - start
                bar.set_postfix(
                    loss=f"{total / count:.4g}",
                    samples_s=f"{count * self.replicas / elapsed:.1f}",
                )
        if not self.split:  # split_mesh: every process has every sample's loss
            total, count = all_reduce_sum([total, count], self.ctx)
        seconds = time.perf_counter() - start
        return {
            "train_loss": total / count,
            "lr": self.optimizer.param_groups[0]["lr"],
            "epoch_seconds": seconds,
            "samples_per_second": count / seconds,
        }

    def evaluate(self, dataset: Sequence | None = None) -> dict[str, float]:
        """Mean and median per-sample relative L2 of decoded predictions on ``dataset`` (the test
        split by default)."""
        dataset = self.test_set if dataset is None else dataset
        errors = per_sample_errors(self.model, dataset, self.local_batch, self.ctx)
        return summarize(errors)

    def fit(self, resume: bool = False) -> dict[str, Any]:
        """Train for the remaining epochs; returns the last epoch's metrics.

        Args:
            resume: continue from ``out_dir/checkpoint.pt`` if it exists (else start afresh).
        """
        c = self.config
        if resume and self.checkpoint_path is not None and self.checkpoint_path.is_file():
            self.load_checkpoint(self.checkpoint_path)
        if self.epoch == 0:
            self.history = []
        log = tqdm.write if (c.progress and self.ctx.is_main) else (lambda *_: None)
        while self.epoch < c.epochs:
            row: dict[str, Any] = {"epoch": self.epoch + 1, **self.train_epoch()}
            self.epoch += 1
            last = self.epoch == c.epochs
            if self.test_set is not None and (self.epoch % c.eval_every == 0 or last):
                row.update(self.evaluate())
            self.history.append(row)
            log(
                "  ".join(
                    f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                    for k, v in row.items()
                    if k in ("epoch", "train_loss", "test_rel_l2", "samples_per_second")
                )
            )
            self.save_checkpoint()
        return self.history[-1] if self.history else {}


def train(
    model: torch.nn.Module,
    data: PreparedData,
    config: TrainConfig | None = None,
    out_dir: str | os.PathLike | None = None,
    resume: bool = False,
) -> tuple[NormalizedModel, dict[str, Any]]:
    """Train ``model`` on the run's :class:`~meshop.train.data.PreparedData` (see
    :class:`Trainer`); returns ``(model with its normalisers, last metrics)``."""
    trainer = Trainer(model, data, config, out_dir)
    metrics = trainer.fit(resume=resume)
    return trainer.model.eval(), metrics

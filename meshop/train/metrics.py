"""Metrics of a run: per-sample test errors and the per-epoch log (JSON lines or CSV)."""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Subset

from meshop.data import make_loader, num_samples, query_nodes
from meshop.train.distributed import DistContext, all_gather_objects
from meshop.train.losses import relative_lp


@torch.no_grad()
def per_sample_errors(
    model: torch.nn.Module,
    dataset: Sequence,
    batch_size: int = 8,
    ctx: DistContext | None = None,
    p: int = 2,
) -> np.ndarray:
    """Relative Lp error of every sample of ``dataset``, in dataset order.

    In a distributed run each process evaluates every ``world_size``-th sample and the errors are
    gathered, so every process returns all of them (no sample is counted twice).
    """
    ctx = ctx or DistContext()
    was_training = model.training
    model.eval()
    indices = list(range(ctx.rank, len(dataset), ctx.world_size))
    errors = []
    for batch in make_loader(Subset(dataset, indices), batch_size=batch_size):
        batch = batch.to(ctx.device)
        pred = model(batch)
        _, query_batch = query_nodes(batch)
        errors.append(relative_lp(pred, batch.y, query_batch, p, num_samples(batch), "none").cpu())
    model.train(was_training)
    local = torch.cat(errors).tolist() if errors else []
    gathered = all_gather_objects(list(zip(indices, local)), ctx)
    out = np.empty(len(dataset))
    for part in gathered:
        for i, err in part:
            out[i] = err
    return out


def summarize(errors: np.ndarray, prefix: str = "test_rel_l2") -> dict[str, float]:
    """Mean and median of per-sample errors."""
    return {prefix: float(np.mean(errors)), f"{prefix}_median": float(np.median(errors))}


def per_sample_table(dataset: Sequence, errors: np.ndarray) -> list[dict[str, Any]]:
    """One row per sample of ``dataset`` (in its order) with its error ``errors[i]``: ``sample``
    (the index), ``source`` (the file it was read from, for samples that have one, such as those
    of a :class:`~meshop.datasets.MeshFolder`), ``nodes`` and ``rel_l2``."""
    rows = []
    for i, error in enumerate(errors):
        data = dataset[i]
        source = {"source": str(data.source)} if "source" in data else {}
        rows.append(
            {"sample": i, **source, "nodes": int(data.pos.shape[0]), "rel_l2": float(error)}
        )
    return rows


def write_table(path: str | os.PathLike, rows: list[dict[str, Any]]) -> Path:
    """Write ``rows`` (dicts with the same keys) as a CSV table with a header line; makes the
    folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else [])
        writer.writeheader()
        writer.writerows(rows)
    return path


class MetricsLog:
    """The per-epoch metrics of a run, one row per epoch, in ``metrics.jsonl`` or ``metrics.csv``.

    :meth:`rewrite` writes a whole history at once (used on resume, so that an epoch logged by a
    killed run is not logged twice).
    """

    def __init__(self, out_dir: str | os.PathLike, fmt: str = "jsonl"):
        self.fmt = fmt
        self.path = Path(out_dir) / f"metrics.{fmt}"

    def rewrite(self, history: list[dict]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        with open(tmp, "w", newline="") as f:
            if self.fmt == "jsonl":
                for row in history:
                    f.write(json.dumps(row) + "\n")
            else:
                keys = list(dict.fromkeys(k for row in history for k in row))
                writer = csv.DictWriter(f, fieldnames=keys)
                writer.writeheader()
                writer.writerows(history)
        os.replace(tmp, self.path)


def read_metrics(path: str | os.PathLike) -> list[dict]:
    """Rows of a ``metrics.jsonl`` or ``metrics.csv`` file (CSV values parsed as floats)."""
    path = Path(path)
    if path.suffix == ".jsonl":
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    with open(path, newline="") as f:
        return [
            {k: float(v) if v not in ("", None) else None for k, v in row.items()}
            for row in csv.DictReader(f)
        ]

"""Figures: fields on meshes (triangles, point clouds, 1D lines) and loss curves, as PNG files."""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.tri import Triangulation

from meshop._pyg import Data


def _numpy(t) -> np.ndarray:
    return t.detach().cpu().numpy() if torch.is_tensor(t) else np.asarray(t)


def _draw(ax, points: np.ndarray, values: np.ndarray, triangles: np.ndarray | None, cmap: str):
    """One field on one axis: tripcolor on triangles, a coloured scatter on bare points."""
    if triangles is not None:
        artist = ax.tripcolor(
            Triangulation(points[:, 0], points[:, 1], triangles),
            values,
            shading="gouraud",
            cmap=cmap,
        )
    else:
        artist = ax.scatter(points[:, 0], points[:, 1], c=values, s=6, cmap=cmap, linewidths=0)
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
    return artist


def plot_sample(
    data: Data,
    prediction: torch.Tensor,
    path: str | os.PathLike,
    channel: int = 0,
    title: str | None = None,
) -> Path:
    """Input, target, prediction and error of one sample, one channel, in one PNG.

    2D samples are drawn with ``tripcolor`` on their triangles (``face``) or as a coloured scatter
    (point clouds, query points); 1D samples as lines over the coordinate. The input panel shows the
    first input channel, or is left out when the sample has no input field.
    """
    pos = _numpy(data.pos)
    query_pos = getattr(data, "query_pos", None)
    out_pos = _numpy(query_pos) if query_pos is not None else pos
    pred = _numpy(prediction).reshape(len(out_pos), -1)[:, channel]
    target = (
        _numpy(data.y).reshape(len(out_pos), -1)[:, channel]
        if getattr(data, "y", None) is not None
        else None
    )
    x = _numpy(data.x)[:, 0] if getattr(data, "x", None) is not None else None
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)

    if pos.shape[1] == 1:
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
        order, q_order = np.argsort(pos[:, 0]), np.argsort(out_pos[:, 0])
        if x is not None:
            axes[0].plot(pos[order, 0], x[order], color="0.6", label="input")
        if target is not None:
            axes[0].plot(out_pos[q_order, 0], target[q_order], label="target")
        axes[0].plot(out_pos[q_order, 0], pred[q_order], "--", label="prediction")
        axes[0].legend()
        if target is not None:
            axes[1].plot(out_pos[q_order, 0], (pred - target)[q_order], color="C3")
        axes[1].set_title("prediction - target")
    else:
        faces = getattr(data, "face", None)
        tri_in = _numpy(faces).T if faces is not None and pos.shape[1] == 2 else None
        tri_out = tri_in if query_pos is None else None
        panels = []
        if x is not None:
            panels.append(("input", pos, x, tri_in, "viridis"))
        if target is not None:
            panels.append(("target", out_pos, target, tri_out, "viridis"))
        panels.append(("prediction", out_pos, pred, tri_out, "viridis"))
        if target is not None:
            panels.append(
                ("|prediction - target|", out_pos, np.abs(pred - target), tri_out, "magma")
            )
        fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.6), squeeze=False)
        axes = axes[0]
        shared = None
        if target is not None:
            lo, hi = min(target.min(), pred.min()), max(target.max(), pred.max())
            shared = (lo, hi)
        for ax, (name, pts, values, tri, cmap) in zip(axes, panels):
            artist = _draw(ax, pts, values, tri, cmap)
            if shared is not None and name in ("target", "prediction"):
                artist.set_clim(*shared)
            fig.colorbar(artist, ax=ax, shrink=0.8)
            ax.set_title(name)
    if title:
        fig.suptitle(title)
    fig.tight_layout(rect=(0, 0, 1, 0.93) if title else None)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_loss_curve(history: list[dict], path: str | os.PathLike, title: str | None = None) -> Path:
    """Training loss and test relative L2 per epoch (log scale) in one PNG."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 4))
    for key, label in (("train_loss", "train loss"), ("test_rel_l2", "test relative L2")):
        rows = [r for r in history if r.get(key) is not None]
        if rows:
            ax.plot(
                [r["epoch"] for r in rows],
                [r[key] for r in rows],
                marker="." if len(rows) < 50 else None,
                label=label,
            )
    ax.set_xlabel("epoch")
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    if title:
        ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

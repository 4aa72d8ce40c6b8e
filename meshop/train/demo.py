"""``meshop demo``: Elasticity with PiT against an MLP baseline, on the CPU, in minutes.

The demo generates (or loads the cached) Elasticity dataset, trains PiT and a pointwise MLP with
the same optimiser, schedule and epochs, prints both test relative L2 errors, and writes into
``out``. Both models see the cavity only through the mesh: each node's input is its coordinates,
so the MLP can learn only the stress field averaged over cavities, while PiT's attention reads the
whole mesh. Files written:

- ``pit/`` and ``mlp/``: checkpoint and metrics log of each model;
- ``test_samples/sample_XXX.vtu``: target, predictions and errors on test meshes (ParaView);
- ``figures/``: PNGs of test predictions and the loss curves;
- ``new_points.csv`` / ``new_points.vtu``: PiT predictions at random points of a test cell that are
  not nodes of any mesh;
- ``summary.json``: the figures printed at the end.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from meshop._pyg import Data
from meshop.data import make_loader, set_query_points, write_mesh
from meshop.models.registry import build_model
from meshop.train.config import TrainConfig
from meshop.train.data import prepare_data
from meshop.train.inference import write_points_csv
from meshop.train.plots import plot_loss_curve, plot_sample
from meshop.train.trainer import Trainer, seed_everything


@dataclass
class DemoSettings:
    """Sizes and settings of the demo (see docs/training.md for measured results)."""

    num_train: int = 500
    num_test: int = 100
    max_area: float = 8e-4
    epochs: int = 40
    batch_size: int = 2
    lr: float = 5e-3
    eval_every: int = 4
    latent_points: int = 256
    # the papers' unweighted position attention (the Elasticity meshes are near-uniform, where
    # weighting changes little) and the paper's encoder field, a 2 % quantile of the input nodes
    # (the same area on a finer mesh, where k nearest nodes would cover less; docs/pit.md)
    pit: dict[str, Any] = field(
        default_factory=lambda: dict(
            width=64, heads=2, layers=4, encoder_quantile=0.02, decoder_k=8, weighted=False
        )
    )
    mlp: dict[str, Any] = field(default_factory=lambda: dict(width=128, layers=4))
    vtu_samples: int = 4
    new_points: int = 2000


QUICK = DemoSettings(
    num_train=8,
    num_test=4,
    max_area=8e-3,
    epochs=2,
    batch_size=4,
    eval_every=1,
    latent_points=32,
    pit=dict(width=16, heads=2, layers=1, encoder_k=8, decoder_k=4),
    mlp=dict(width=16, layers=3),
    vtu_samples=2,
    new_points=50,
)


def points_in_mesh(sample: Data, count: int, seed: int = 0) -> np.ndarray:
    """``count`` uniform random points [count, 2] of a triangle mesh's domain (``sample.face``):
    a triangle drawn with probability proportional to its area, then a uniform point in it."""
    corners = sample.pos[sample.face.T].double().numpy()  # [F, 3, 2]
    edges = corners[:, 1:] - corners[:, :1]
    area = 0.5 * np.abs(edges[:, 0, 0] * edges[:, 1, 1] - edges[:, 0, 1] * edges[:, 1, 0])
    rng = np.random.default_rng(seed)
    which = rng.choice(len(area), size=count, p=area / area.sum())
    s, t = rng.uniform(size=(2, count))
    flip = s + t > 1  # fold the unit square's upper half onto the triangle
    s, t = np.where(flip, 1 - s, s), np.where(flip, 1 - t, t)
    return corners[which, 0] + s[:, None] * edges[which, 0] + t[:, None] * edges[which, 1]


def run_demo(
    out: str = "runs/demo",
    quick: bool = False,
    data_dir: str | None = None,
    epochs: int | None = None,
    progress: bool = True,
    log=print,
    settings: DemoSettings | None = None,
) -> dict[str, Any]:
    """Run the demo (see the module docstring); returns the summary it writes.

    ``settings`` replaces the sizes of the full demo (``quick`` picks the tiny ones)."""
    from meshop.datasets.elasticity import Elasticity

    s = settings or (QUICK if quick else DemoSettings())
    epochs = epochs or s.epochs
    out = Path(out)
    start = time.perf_counter()
    log(
        f"Elasticity: {s.num_train} train / {s.num_test} test samples (generated once, then cached)"
    )
    splits = {
        split: Elasticity(
            data_dir, split, s.num_train, s.num_test, max_area=s.max_area, progress=progress
        )
        for split in ("train", "test")
    }
    data_seconds = time.perf_counter() - start
    config = TrainConfig(
        epochs=epochs,
        batch_size=s.batch_size,
        lr=s.lr,
        schedule="cosine",
        clip=1.0,
        eval_every=s.eval_every,
        progress=progress,
    )
    meta = {"dataset": "elasticity", "input_names": [], "target_names": ["von_mises"]}
    meta["dataset_args"] = {
        "num_train": s.num_train,
        "num_test": s.num_test,
        "max_area": s.max_area,
    }
    meta["data_dir"] = data_dir
    results, models = {}, {}
    for name, kwargs, latent in (("pit", s.pit, s.latent_points), ("mlp", s.mlp, None)):
        t0 = time.perf_counter()  # the training time counts the latent meshes and normalisers
        data = prepare_data(
            splits["train"], splits["test"], config.replace(latent_points=latent), meta
        )
        seed_everything(config.seed)
        model = build_model(
            name, in_channels=data.info["in_channels"], out_channels=1, pos_dim=2, **kwargs
        )
        count = sum(p.numel() for p in model.parameters())
        log(f"training {name} ({count:,} parameters) for {epochs} epochs")
        trainer = Trainer(model, data, out_dir=out / name)
        metrics = trainer.fit()
        results[name] = {
            "parameters": count,
            "test_rel_l2": metrics["test_rel_l2"],
            "test_rel_l2_median": metrics["test_rel_l2_median"],
            "train_seconds": time.perf_counter() - t0,
        }
        models[name] = trainer
        plot_loss_curve(trainer.history, out / "figures" / f"loss_{name}.png", title=name)

    _write_test_samples(models, out, s.vtu_samples)
    _write_new_points(models["pit"], splits["test"][0], out, s.new_points)
    summary = {
        "settings": {"num_train": s.num_train, "num_test": s.num_test, "epochs": epochs},
        "data_seconds": data_seconds,
        "results": results,
        "total_seconds": time.perf_counter() - start,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    log("")
    log(f"{'model':<6} {'parameters':>10} {'test rel. L2':>13} {'median':>8} {'train time':>11}")
    for name, r in results.items():
        log(
            f"{name:<6} {r['parameters']:>10,} {r['test_rel_l2']:>13.2%} "
            f"{r['test_rel_l2_median']:>8.2%} {r['train_seconds']:>10.0f}s"
        )
    log(f"total {summary['total_seconds']:.0f}s; results in {out}/")
    return summary


@torch.no_grad()
def _write_test_samples(trainers: dict[str, Trainer], out: Path, count: int) -> None:
    """``.vtu`` files with target, predictions and errors of the first test samples, and PNGs."""
    folder = out / "test_samples"
    folder.mkdir(parents=True, exist_ok=True)
    test_sets = {name: t.test_set[:count] for name, t in trainers.items()}
    preds = {
        name: [t.model.eval()(batch) for batch in make_loader(test_sets[name], 1)]
        for name, t in trainers.items()
    }
    for i, data in enumerate(test_sets["pit"]):
        fields = {"von_mises": data.y[:, 0]}
        for name in trainers:
            fields[f"{name}_prediction"] = preds[name][i][:, 0]
            fields[f"{name}_error"] = preds[name][i][:, 0] - data.y[:, 0]
        write_mesh(folder / f"sample_{i:03d}.vtu", data, fields, overwrite=True)
        err = float(
            torch.linalg.vector_norm(preds["pit"][i] - data.y) / torch.linalg.vector_norm(data.y)
        )
        plot_sample(
            data,
            preds["pit"][i],
            out / "figures" / f"test_{i:03d}_pit.png",
            title=f"PiT, test sample {i}: relative L2 {err:.2%}",
        )


@torch.no_grad()
def _write_new_points(trainer: Trainer, sample: Data, out: Path, count: int) -> None:
    """PiT predictions at random points of a test cell (none of them a mesh node)."""
    points = points_in_mesh(sample, count)
    data = sample.clone()
    del data.y
    set_query_points(data, points)
    pred = trainer.model.eval()(trainer.latent(data))[:, 0]
    write_points_csv(out / "new_points.csv", points, {"von_mises": pred.numpy()}, overwrite=True)
    write_mesh(
        out / "new_points.vtu", Data(pos=data.query_pos), {"von_mises": pred}, overwrite=True
    )

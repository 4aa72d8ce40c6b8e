"""Burgers 1D with the Galerkin and the Fourier Transformer, trained the same way.

The Burgers dataset (:class:`meshop.datasets.Burgers`) maps an initial condition ``u0`` on a
periodic 1D grid to the viscous Burgers solution at t = 1. Both models are the paper's 1D
pipeline (:meth:`GalerkinTransformer.burgers`, scaled down for a CPU): a pointwise lift,
softmax-free attention on the grid with the coordinates appended to every head, and the spectral
regressor.
They differ only in the attention: Galerkin (``Q (K^T V) / n``, linear in the grid size) and
Fourier (``(Q K^T) V / n``, quadratic). Training follows the paper: Adam, one-cycle schedule,
gradient clipping 1, relative L2 plus an H1-seminorm penalty.

Run ``python examples/burgers_galerkin_fourier.py`` (a few minutes on 2 CPU cores) or with
``--smoke``. From the shell: ``meshop train --dataset burgers --model galerkin`` (or ``fourier``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from meshop.data import node_features
from meshop.datasets.burgers import Burgers
from meshop.models import GalerkinTransformer
from meshop.train import TrainConfig, Trainer, prepare_data, seed_everything


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/examples/burgers_galerkin_fourier")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (run by the test suite)")
    parser.add_argument("--epochs", type=int, default=20)
    args = parser.parse_args(argv)
    sizes = dict(num_train=8, num_test=2) if args.smoke else dict(num_train=256, num_test=64)
    data = dict(resolution=256, fine_resolution=1024, progress=not args.smoke, **sizes)
    train_set, test_set = Burgers(split="train", **data), Burgers(split="test", **data)
    size = dict(width=16, spectral_width=8, modes=4, layers=1) if args.smoke else {}
    size = {"width": 48, "spectral_width": 24, "modes": 12, "layers": 2, **size}
    config = TrainConfig(
        epochs=1 if args.smoke else args.epochs,
        batch_size=8,
        lr=1e-3,
        schedule="onecycle",
        clip=1.0,
        h1_weight=0.1 / 256,  # the paper's gamma = 0.1 h
        normalize_x=False,  # as in the paper: Burgers data are not normalised
        normalize_y=False,
        progress=not args.smoke,
    )
    results = {}
    for attention in ("galerkin", "fourier"):
        seed_everything(0)
        model = GalerkinTransformer.burgers(
            in_channels=node_features(train_set[0]).shape[1], attention=attention, **size
        )
        start = time.perf_counter()
        out = Path(args.out) / attention
        metrics = Trainer(model, prepare_data(train_set, test_set, config), out_dir=out).fit()
        results[attention] = metrics["test_rel_l2"]
        print(
            f"{attention:>8} attention: test relative L2 {metrics['test_rel_l2']:.2%} "
            f"({time.perf_counter() - start:.0f} s)"
        )
    return results


if __name__ == "__main__":
    main()

"""Elasticity with PiT, through the Python API: data -> model -> training -> new points.

The Elasticity dataset (:class:`meshop.datasets.Elasticity`) maps the triangle mesh of an elastic
unit cell with a random cavity to the von Mises stress at the nodes. The cavity's shape reaches the
model only through the mesh: PiT reads the coordinates of every node, moves them onto a latent
mesh of farthest-point-sampled nodes, mixes them there with global position-attention (which sees
where the mesh has nodes and where the cavity leaves a gap) and decodes at any query points: here
the mesh nodes during training, and afterwards random points of a test cell that belong to no
mesh.

Run ``python examples/elasticity_pit.py`` (a few minutes on 2 CPU cores: 200 training samples,
20 epochs) or with ``--smoke``. ``meshop demo`` is the longer version of the same (500 samples,
an MLP baseline, figures).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from meshop.data import node_features, set_query_points, write_mesh
from meshop.datasets.elasticity import Elasticity
from meshop.models import PiT
from meshop.train import TrainConfig, Trainer, prepare_data, seed_everything
from meshop.train.demo import points_in_mesh
from meshop.train.inference import write_points_csv


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/examples/elasticity_pit")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (run by the test suite)")
    parser.add_argument("--num-train", type=int, default=200)
    parser.add_argument("--epochs", type=int, default=20)
    args = parser.parse_args(argv)
    out = Path(args.out)
    sizes = dict(num_train=8, num_test=2, max_area=1e-2) if args.smoke else {}
    sizes = {"num_train": args.num_train, "num_test": 50, **sizes}
    train_set = Elasticity(split="train", progress=not args.smoke, **sizes)
    test_set = Elasticity(split="test", progress=not args.smoke, **sizes)

    seed_everything(0)
    model = PiT(
        in_channels=node_features(train_set[0]).shape[1],  # the coordinates x, y
        out_channels=1,
        pos_dim=2,
        width=16 if args.smoke else 64,
        encoder_quantile=0.02,  # the paper's: ~20 of ~1000 nodes, the same area on finer meshes
        decoder_k=8,
    )
    config = TrainConfig(
        epochs=1 if args.smoke else args.epochs,
        batch_size=2,
        lr=5e-3,
        schedule="cosine",  # PiT's schedule
        clip=1.0,
        latent_points=32 if args.smoke else 256,
        progress=not args.smoke,
    )
    trainer = Trainer(model, prepare_data(train_set, test_set, config), out_dir=out / "run")
    metrics = trainer.fit()
    print(f"PiT test relative L2: {metrics['test_rel_l2']:.2%}")

    # von Mises stress at 1000 random points of the first test cell: none of them is a mesh node
    sample = test_set[0]
    points = points_in_mesh(sample, 100 if args.smoke else 1000)
    query = set_query_points(sample.clone(), points)
    del query.y
    model = trainer.model.eval()
    with torch.no_grad():
        stress = model(trainer.latent(query))[:, 0]
        at_nodes = model(trainer.latent(sample))[:, 0]
    write_points_csv(out / "new_points.csv", points, {"von_mises": stress.numpy()}, overwrite=True)
    write_mesh(
        out / "test_sample.vtu",
        sample,
        {"von_mises": sample.y[:, 0], "prediction": at_nodes, "error": at_nodes - sample.y[:, 0]},
        overwrite=True,
    )
    print(
        f"stress at new points: {np.round(stress[:3].numpy(), 3)} ... -> {out / 'new_points.csv'}"
    )
    return metrics


if __name__ == "__main__":
    main()

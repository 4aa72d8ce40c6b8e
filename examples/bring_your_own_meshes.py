"""Bring your own meshes: a folder of .vtu files -> train -> predict at arbitrary points -> .vtu.

Stand-in for your own FEM/CFD outputs, the script first writes a folder of simulation files: the
Poisson problem -Laplace(u) = f on unit cells with random cavities (Triangle meshes, P1 finite
elements from scikit-fem, u = 0 on the outer square, no flux through the cavity), one .vtu file per
case with the point fields ``f`` (input) and ``u`` (target). Then it

1. loads the folder as a dataset (:class:`meshop.datasets.MeshFolder`, any meshio format works),
2. trains PiT on it (checkpoint in ``OUT/run``),
3. predicts for a new simulation file at its nodes and on a regular grid of query points that
   covers the cavity and reaches outside the cell (extrapolation: no accuracy promised there); the
   new case is the same Poisson problem on the committed sample mesh
   ``datasets/meshes/elasticity_2d.msh`` (a unit cell with a cavity, meshed by meshop's elasticity
   generator),
4. writes ``OUT/prediction_nodes.vtu`` and ``OUT/prediction_grid.vtu`` for ParaView.

Run ``python examples/bring_your_own_meshes.py`` (about two minutes on 2 CPU cores) or with
``--smoke`` for a seconds-long check. The same steps from the shell::

    meshop train --dataset folder --data-dir OUT/meshes --dataset-arg 'inputs=["f"]' \\
        --dataset-arg 'targets=["u"]' --model pit --out OUT/run
    meshop predict --checkpoint OUT/run --mesh new_case.vtu --query grid.vtu --out pred.vtu
"""

from __future__ import annotations

import argparse
from pathlib import Path

import meshio
import numpy as np
import skfem
from skfem.helpers import dot, grad

from meshop.data import node_features
from meshop.datasets.elasticity import random_cavity
from meshop.datasets.fem import cell_mesh
from meshop.datasets.mesh_folder import MeshFolder
from meshop.models import PiT
from meshop.train import TrainConfig, Trainer, predict_file, prepare_data, seed_everything

SAMPLE = Path(__file__).resolve().parents[1] / "datasets" / "meshes" / "elasticity_2d.msh"


def simulate(path: Path, rng: np.random.Generator, max_area: float, mesh=None) -> None:
    """One 'simulation output': -Laplace(u) = f on a cell with a random cavity (or on the cell of
    ``mesh``, a meshio mesh), as a .vtu file."""
    if mesh is None:
        points, triangles = cell_mesh(random_cavity(rng), max_area=max_area)
    else:
        points, triangles = mesh.points[:, :2].copy(), mesh.get_cells_type("triangle")
    centres, widths = rng.uniform(0.1, 0.9, (3, 2)), rng.uniform(0.05, 0.2, 3)
    amplitudes = rng.normal(0.0, 10.0, 3)

    def source(x, y):
        r2 = (x[..., None] - centres[:, 0]) ** 2 + (y[..., None] - centres[:, 1]) ** 2
        return (amplitudes * np.exp(-r2 / (2 * widths**2))).sum(-1)

    basis = skfem.Basis(skfem.MeshTri(points.T, triangles.T), skfem.ElementTriP1())
    laplace = skfem.BilinearForm(lambda u, v, w: dot(grad(u), grad(v)))
    load = skfem.LinearForm(lambda v, w: source(w.x[0], w.x[1]) * v)
    on_square = np.isclose(points, 0.0).any(1) | np.isclose(points, 1.0).any(1)
    A, b = laplace.assemble(basis), load.assemble(basis)
    u = skfem.solve(*skfem.condense(A, b, D=np.flatnonzero(on_square)))
    points3d = np.column_stack([points, np.zeros(len(points))])
    meshio.Mesh(
        points3d, [("triangle", triangles)], point_data={"f": source(*points.T), "u": u}
    ).write(path)


def query_grid(n: int, low: float = -0.1, high: float = 1.1) -> meshio.Mesh:
    """A triangulated n x n grid over [low, high]^2 (query points, written as a mesh)."""
    t = np.linspace(low, high, n)
    x, y = np.meshgrid(t, t, indexing="ij")
    points = np.column_stack([x.ravel(), y.ravel(), np.zeros(n * n)])
    corner = (np.arange(n - 1)[:, None] * n + np.arange(n - 1)[None, :]).ravel()
    triangles = np.concatenate(
        [
            np.stack([corner, corner + n, corner + n + 1], 1),
            np.stack([corner, corner + n + 1, corner + 1], 1),
        ]
    )
    return meshio.Mesh(points, [("triangle", triangles)])


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/examples/bring_your_own_meshes")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (run by the test suite)")
    parser.add_argument("--cases", type=int, default=200, help="simulation files to write")
    parser.add_argument("--epochs", type=int, default=40)
    args = parser.parse_args(argv)
    cases, epochs, max_area = (12, 1, 1e-2) if args.smoke else (args.cases, args.epochs, 2e-3)
    out = Path(args.out)

    # 0. your simulation outputs: one mesh file per case (here generated)
    folder = out / "meshes"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(cases):
        simulate(folder / f"case_{i:03d}.vtu", rng, max_area)
    # the new case: the cell of a sample mesh shipped with meshop, with its own source field
    simulate(out / "new_case.vtu", rng, max_area, mesh=meshio.read(SAMPLE))

    # 1. the folder as a dataset: 80 % train, 20 % test, fields picked by name
    train_set = MeshFolder(folder, inputs=["f"], targets=["u"], split="train", progress=False)
    test_set = MeshFolder(folder, inputs=["f"], targets=["u"], split="test", progress=False)

    # 2. train PiT (latent mesh: 128 farthest points of each input mesh)
    seed_everything(0)
    width = 16 if args.smoke else 64
    model = PiT(
        node_features(train_set[0]).shape[1], 1, pos_dim=2, width=width, encoder_k=16, decoder_k=8
    )
    config = TrainConfig(
        epochs=epochs,
        batch_size=4,
        lr=3e-3,
        schedule="cosine",
        latent_points=128,
        progress=not args.smoke,
    )
    meta = {"input_names": ["f"], "target_names": ["u"]}
    data = prepare_data(train_set, test_set, config, meta)
    metrics = Trainer(model, data, out_dir=out / "run").fit()
    median = metrics["test_rel_l2_median"]
    print(f"test relative L2: {metrics['test_rel_l2']:.2%} (median {median:.2%})")

    # 3-4. a new case: predictions at its nodes, and on a grid that also covers the cavity
    checkpoint = out / "run" / "checkpoint.pt"
    nodes, _ = predict_file(
        checkpoint, out / "new_case.vtu", out / "prediction_nodes.vtu", overwrite=True
    )
    query_grid(11 if args.smoke else 61).write(out / "grid.vtu")
    grid, pred = predict_file(
        checkpoint,
        out / "new_case.vtu",
        out / "prediction_grid.vtu",
        query=out / "grid.vtu",
        overwrite=True,
    )
    print(f"wrote {nodes} and {grid} ({len(pred)} query points); open them in ParaView")
    return metrics


if __name__ == "__main__":
    main()

"""3D surfaces with vector fields: a folder of surface meshes -> train -> predict -> integrals.

Stand-in for your own CFD surface results (a car body, a wing), the script first writes a folder of
.vtu files: unit spheres, each triangulated through a different random set of points, in
potential flow from a random direction ``U``, with the closed-form surface solution. Each file has
the input fields ``normals`` [N, 3] and ``inflow`` [N, 3] (``U`` at every node) and the targets
``pressure`` (the pressure coefficient ``1 - 9/4 (1 - (U.n)^2)``) and ``velocity`` [N, 3]
(``3/2 (U - (U.n) n)``). Then it

1. loads the folder (:class:`meshop.datasets.MeshFolder`: each field keeps its name and its
   3 components; the weights are the triangles' areas),
2. trains a model on it (checkpoint in ``OUT/run``): the MLP baseline by default, since these
   targets are pointwise functions of the inputs, or PiT with ``--model pit``,
3. predicts on the sample mesh ``datasets/meshes/sphere_surface.vtu`` (given an ``inflow``
   field) and writes ``OUT/prediction_surface.vtu``: ``pressure`` and a vector ``velocity`` for
   ParaView's glyphs,
4. predicts at query points on a sphere of radius 1.05 around the surface
   (``OUT/prediction_shell.csv``, columns ``velocity_0, velocity_1, velocity_2``),
5. integrates the predicted pressure over the surface with the mesh's quadrature and compares it
   with the exact value ``-2 pi``.

Run ``python examples/surface_meshes_3d.py`` or with ``--smoke`` for a seconds-long check. The
same steps from the shell::

    meshop train --dataset folder --data-dir OUT/meshes --model mlp \\
        --dataset-arg 'inputs=["normals", "inflow"]' \\
        --dataset-arg 'targets=["pressure", "velocity"]' --out OUT/run
    meshop predict --checkpoint OUT/run --mesh sphere.vtu --out pred.vtu --integrate
"""

from __future__ import annotations

import argparse
from pathlib import Path

import meshio
import numpy as np
from scipy.spatial import ConvexHull

from meshop.data import mesh_integrals, node_features
from meshop.datasets.mesh_folder import MeshFolder
from meshop.models import PiT
from meshop.models.registry import build_model
from meshop.train import TrainConfig, Trainer, predict_file, prepare_data, seed_everything
from meshop.train.inference import prediction_integrals

SAMPLE = Path(__file__).resolve().parents[1] / "datasets" / "meshes" / "sphere_surface.vtu"


def flow_fields(normals: np.ndarray, inflow: np.ndarray) -> dict[str, np.ndarray]:
    """Potential flow past a unit sphere: surface pressure coefficient and velocity."""
    along = normals @ inflow
    return {
        "normals": normals,
        "inflow": np.broadcast_to(inflow, normals.shape).copy(),
        "pressure": 1.0 - 2.25 * (1.0 - along**2),
        "velocity": 1.5 * (inflow - along[:, None] * normals),
    }


def simulate(path: Path, rng: np.random.Generator, num_points: int) -> None:
    """One 'simulation output': a randomly triangulated sphere in flow from a random direction."""
    points = rng.normal(size=(num_points, 3))
    points /= np.linalg.norm(points, axis=1, keepdims=True)
    inflow = rng.normal(size=3)
    inflow /= np.linalg.norm(inflow)
    fields = flow_fields(points, inflow)
    meshio.Mesh(points, [("triangle", ConvexHull(points).simplices)], point_data=fields).write(path)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/examples/surface_meshes_3d")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (run by the test suite)")
    parser.add_argument("--cases", type=int, default=100, help="simulation files to write")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--model", choices=["mlp", "pit"], default="mlp")
    parser.add_argument(
        "--pointwise",
        action="store_true",
        help="PiT's decoder also reads each node's own inputs (PiT(pointwise=True))",
    )
    args = parser.parse_args(argv)
    cases, epochs, num_points = (8, 1, 150) if args.smoke else (args.cases, args.epochs, 600)
    out = Path(args.out)

    # 0. your simulation outputs: one surface mesh per case (here generated)
    folder = out / "meshes"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(cases):
        simulate(folder / f"case_{i:03d}.vtu", rng, num_points)

    # 1. the folder as a dataset: vector fields keep their names and 3 components
    fields = {"inputs": ["normals", "inflow"], "targets": ["pressure", "velocity"]}
    train_set = MeshFolder(folder, split="train", progress=False, **fields)
    test_set = MeshFolder(folder, split="test", progress=False, **fields)
    print(f"fields: inputs {train_set.input_fields}, targets {train_set.target_fields}")

    # 2. train a model; its input width counts the fields' components, coordinates included
    seed_everything(0)
    width = 16 if args.smoke else 64
    in_channels = node_features(train_set[0]).shape[1]  # normals 3 + inflow 3 + coordinates 3
    if args.model == "pit":  # latent mesh: 64 farthest points of each surface
        model = PiT(
            in_channels,
            4,
            pos_dim=3,
            width=width,
            encoder_k=16,
            decoder_k=8,
            pointwise=args.pointwise,
        )
    else:
        model = build_model("mlp", in_channels=in_channels, out_channels=4, pos_dim=3)
    config = TrainConfig(
        epochs=epochs,
        batch_size=4,
        lr=3e-3,
        schedule="cosine",
        latent_points=64 if args.model == "pit" else None,
        progress=not args.smoke,
    )
    data = prepare_data(train_set, test_set, config)
    metrics = Trainer(model, data, out_dir=out / "run").fit()
    print(f"test relative L2: {metrics['test_rel_l2']:.2%}")

    # 3. a new surface: the sample sphere, in flow along x
    sample = meshio.read(SAMPLE)
    case = out / "new_case.vtu"
    new_fields = flow_fields(sample.points, np.array([1.0, 0.0, 0.0]))
    meshio.Mesh(sample.points, sample.cells, point_data=new_fields).write(case)
    checkpoint = out / "run" / "checkpoint.pt"
    surface, pred = predict_file(checkpoint, case, out / "prediction_surface.vtu", overwrite=True)

    # 4. query points around the surface
    shell = 1.05 * sample.points[::4]
    np.savetxt(out / "shell.csv", shell, delimiter=",", header="x,y,z", comments="")
    predict_file(
        checkpoint, case, out / "prediction_shell.csv", query=out / "shell.csv", overwrite=True
    )

    # 5. the integral of the predicted pressure over the surface (exact: -2 pi)
    predicted = prediction_integrals(checkpoint, pred, case)["domain"]["pressure"]
    exact_on_mesh = mesh_integrals(case, {"pressure": new_fields["pressure"]})["domain"]
    print(
        f"integral of the pressure over the surface: predicted {predicted:.3f}, "
        f"target on this mesh {exact_on_mesh['pressure']:.3f}, exact {-2 * np.pi:.3f}"
    )
    print(f"wrote {surface} and {out / 'prediction_shell.csv'}; open them in ParaView")
    return {**metrics, "pressure_integral": predicted}


if __name__ == "__main__":
    main()

"""Defaults of ``meshop train`` for each model and dataset: the papers' optimisation settings, with
model sizes and epoch counts scaled down so that a run finishes on a laptop CPU.

A preset is ``{"train": TrainConfig fields, "model": model keyword arguments, "dataset": dataset
keyword arguments}``; values given on the command line or in a TOML file override it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: optimisation settings of each model's paper
MODEL_TRAINING: dict[str, dict[str, Any]] = {
    # PiT (App. D): Adam, lr 1e-3, cosine annealing, no clipping
    "pit": {"optimizer": "adam", "lr": 1e-3, "schedule": "cosine", "clip": None},
    # Galerkin Transformer (Sec. 4): Adam, one-cycle from and to 1e-4 lr_max peaking at 30 %, clip 1
    "galerkin": {"optimizer": "adam", "lr": 1e-3, "schedule": "onecycle", "clip": 1.0},
    "fourier": {"optimizer": "adam", "lr": 5e-4, "schedule": "onecycle", "clip": 1.0},
    # ONO (App.): AdamW (weight decay 1e-5), one-cycle with PyTorch's defaults, grad-norm clip 0.1
    "ono": {
        "optimizer": "adamw",
        "weight_decay": 1e-5,
        "lr": 1e-3,
        "schedule": "onecycle",
        "div_factor": 25.0,
        "final_div_factor": 1e4,
        "clip": 0.1,
    },
    # Transolver (authors' scripts): AdamW (weight decay 1e-5), lr 1e-3, one-cycle with PyTorch's
    # defaults, grad-norm clip 0.1
    "transolver": {
        "optimizer": "adamw",
        "weight_decay": 1e-5,
        "lr": 1e-3,
        "schedule": "onecycle",
        "div_factor": 25.0,
        "final_div_factor": 1e4,
        "clip": 0.1,
    },
    "mlp": {"optimizer": "adam", "lr": 1e-3, "schedule": "cosine", "clip": None},
}

#: per dataset: training, model and dataset settings sized for a CPU
DATASET_PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "elasticity": {
        "train": {"epochs": 100, "batch_size": 8},
        "dataset": {"num_train": 1000, "num_test": 200},
    },
    # coordinates in chords already; the far field at 15 chords would shrink the airfoil if scaled
    "airfoil": {"train": {"epochs": 100, "batch_size": 8, "normalize_pos": False}},
    # solved on a 211 x 211 grid, trained at 43 x 43: evaluate at resolution=106 or 211 zero-shot
    "darcy": {
        "train": {"epochs": 100, "batch_size": 4},
        "dataset": {"resolution": 43, "fine_resolution": 211},
    },
    "burgers": {"train": {"epochs": 100, "batch_size": 8}, "dataset": {"resolution": 512}},
    # trained on the coarse meshes; evaluate at refinement=1 or 2 zero-shot. Batch 2: with 200
    # samples, 10 epochs of batch 8 left PiT at 45 %, 25 of batch 2 reached 11 % (results in
    # benchmarks/results/mesh_datasets_tuning.md)
    "darcy-mesh": {
        "train": {"epochs": 100, "batch_size": 2},
        "dataset": {"num_train": 1000, "num_test": 200},
    },
    "folder": {"train": {"epochs": 100, "batch_size": 4}},
}

#: the generated datasets on irregular meshes
MESH_DATASETS = ("elasticity", "airfoil", "darcy-mesh")

#: the Transolver's CPU size: the paper's 8 layers of width 128 with 8 heads and 64 slices, halved
TRANSOLVER_CPU = {"width": 64, "layers": 4, "heads": 4, "slices": 32}
#: ONO's CPU size (the paper's width 128 with 8 layers, halved)
ONO_CPU = {"width": 64, "layers": 4, "heads": 4, "k": 16}
#: the Galerkin and Fourier Transformers' CPU size on meshes (see PAIR_PRESETS)
GALERKIN_MESH_CPU = {"width": 64, "layers": 4, "path": "mesh"}
#: the Galerkin and Fourier Transformers' latent mesh on the generated mesh datasets: PiT's
GALERKIN_LATENT_MESH = {
    "elasticity": {"latent_points": 256},
    "airfoil": {"latent_points": 512, "latent_sampling": "random"},
    "darcy-mesh": {"latent_points": 256},
}

#: model settings for a dataset (PiT: latent mesh and receptive fields of the paper's Table 9)
PAIR_PRESETS: dict[tuple[str, str], dict[str, dict[str, Any]]] = {
    # the encoder's field the paper's 2 % quantile of the input nodes (~20 of ~1000), the same area
    # on a finer mesh; the k = 20 nearest nodes cover a smaller one, which a longer run learnt to
    # rely on (500 samples, 66 epochs, seed 0: 0.0509, 1.57x / 3.05x on the 2x / 4x finer meshes
    # with k = 20; 0.0518, 1.01x / 1.02x with the quantile), at no more time per epoch (1,000
    # samples: 16.01 s; 18.28 s with k = 20 at 941eba3: benchmarks/results/epoch_seconds.md now and
    # at 53f7452). The decoder's k = 8 nearest latent nodes: their number does not change with the
    # mesh. Batch 2, lr 5e-3, clip 1 (the demo's): 0.157 after 20 epochs of 200 samples, against
    # 0.290 after 30 epochs of the batch 8, lr 1e-3 defaults, both with k = 20 (tuning.md)
    ("elasticity", "pit"): {
        "train": {"latent_points": 256, "batch_size": 2, "lr": 5e-3, "clip": 1.0},
        "model": {"width": 64, "heads": 2, "encoder_quantile": 0.02, "decoder_k": 8},
    },
    # random latent nodes follow the O-mesh's refinement at the body (FPS would spread them evenly)
    ("airfoil", "pit"): {
        "train": {
            "latent_points": 512,
            "latent_sampling": "random",
            "batch_size": 2,
            "lr": 5e-3,
            "clip": 1.0,
        },
        "model": {"width": 64, "encoder_quantile": 0.005, "decoder_quantile": 0.02},
    },
    # unweighted: the 16 x 16 latent grid's weights, lumped from the nearest nodes of a 22 x 22
    # input grid, alias (one or two input nodes per latent node) and change with the input grid;
    # weighted, the zero-shot error at 43 x 43 was 2.2x the training grid's (0.0444 -> 0.0992).
    # The coordinates at the latent nodes: among the input features, the encoder's one-sided
    # fields at the boundary average them otherwise on finer grids; zero-shot at 43 x 43 and
    # 85 x 85 1.03x / 1.03x the 22 x 22 error (0.0238), against 1.43x / 1.80x (0.0253)
    # (115 epochs, seed 0: benchmarks/results/zero_shot_causes.md)
    ("darcy", "pit"): {
        "train": {"latent_grid": [16, 16]},
        "model": {
            "width": 64,
            "encoder_quantile": 0.02,
            "decoder_quantile": 0.05,
            "weighted": False,
            "latent_positions": True,
        },
    },
    # periodic distances in data units: the coordinates must not be rescaled. u0's derivative as a
    # second input: position-attention's kernels depend on distances only, so with u0 alone PiT
    # maps a mirrored u0 to the mirrored output and cannot learn which way u0 moves its mass
    # (10 epochs: 0.414 with u0, 0.414 with |u0_x|, 0.372 with u0_x; 30 epochs with u0_x:
    # 0.095; 67 epochs with u0_x: 0.0505 with lr 1e-3, 0.0270 with lr 2e-3;
    # benchmarks/results/burgers_features.md)
    ("burgers", "pit"): {
        "train": {"loss": "rel_l1", "normalize_pos": False, "lr": 2e-3},
        "model": {"width": 64, "encoder_quantile": 0.01, "decoder_quantile": 0.08, "periodic": 1.0},
        "dataset": {"gradient": True},
    },
    # quantile receptive fields cover the same area on the finer meshes (k nearest would shrink);
    # 25 epochs: 0.096 with lr 5e-3 and clip 1, 0.107 with lr 3e-3 (benchmarks/results/tuning.md)
    ("darcy-mesh", "pit"): {
        "train": {"latent_points": 256, "lr": 5e-3, "clip": 1.0},
        "model": {"width": 64, "encoder_quantile": 0.02, "decoder_quantile": 0.05},
    },
    ("folder", "pit"): {"train": {"latent_points": 256}},
    **{
        (dataset, "transolver"): {"model": dict(TRANSOLVER_CPU)}
        for dataset in ("elasticity", "airfoil", "darcy", "darcy-mesh", "burgers")
    },
    # ONO and the Transolver on Darcy: every node weighted by its cells within the square (halves
    # on the edges, quarters at the corners), not 1/N: with equal weights the boundary nodes carry
    # whole cells, half outside the domain, a strip that thins on finer grids and changes the
    # slice means and ONO's moments. Trained at 22 x 22, zero-shot at 43 x 43 and 85 x 85 (the
    # accuracy table's runs, seed 0): the Transolver (76 epochs) 0.0727 -> 0.0792 / 0.0790
    # (1.09x / 1.09x) with these weights, 0.0737 -> 0.0950 / 0.1092 (1.29x / 1.48x) with equal
    # ones; ONO (13 epochs) 0.0719 -> 0.0742 / 0.0747 (1.03x / 1.04x), against 0.0743 -> 0.0898 /
    # 0.1030 (1.21x / 1.39x) (benchmarks/results/accuracy.md; the causes in zero_shot_causes.md
    # and zero_shot_causes_ono.md)
    ("darcy", "transolver"): {
        "model": dict(TRANSOLVER_CPU),
        "dataset": {"grid_weights": "cells"},
    },
    ("darcy", "ono"): {"dataset": {"grid_weights": "cells"}},
    # Transolver on Airfoil: batch 2 and lr 3e-3 (4x the steps per epoch; 8 epochs: 0.424 with
    # batch 8 and lr 1e-3, 0.353 with batch 2, 0.331 with batch 2 and lr 3e-3;
    # benchmarks/results/tuning.md)
    ("airfoil", "transolver"): {
        "train": {"batch_size": 2, "lr": 3e-3},
        "model": dict(TRANSOLVER_CPU),
    },
    # Transolver on Burgers: u0's derivative and the coordinate's Fourier modes, as ONO (176
    # epochs, the accuracy table's: 0.1341 with u0 and x, 0.0710 with both, 0.0786 with lr 2e-3;
    # 125 epochs of batch 4: 0.0680). No random periodic shifts: with them its slice weights
    # stayed uniform and its error near the MLP's for all 176 epochs (0.658 with u0 and x,
    # 0.534 with both; benchmarks/results/tuning.md)
    ("burgers", "transolver"): {
        "model": dict(TRANSOLVER_CPU),
        "dataset": {"gradient": True, "coordinate_modes": 8},
    },
    # on meshes, the Galerkin and Fourier Transformers' 2D networks (Table 5: width 128, 6
    # layers, 2.2M parameters with the unused grid path) and ONO's (width 128, 8 layers) get one
    # or two epochs in a CPU table's minutes; halved they train 10 times as many (Elasticity,
    # 20 epochs: Galerkin 0.244 with 153k parameters, ONO 0.271; benchmarks/results/tuning.md).
    # Their cross attention goes to PiT's latent mesh of each dataset, not to the input mesh:
    # linear in the mesh size (global attention from every node to every node is quadratic,
    # refused by meshop predict on large meshes), and 4 times the epochs at equal time on Airfoil
    **{
        (dataset, model): {
            "train": dict(GALERKIN_LATENT_MESH[dataset]),
            "model": dict(GALERKIN_MESH_CPU),
        }
        for dataset in MESH_DATASETS
        for model in ("galerkin", "fourier")
    },
    # on Elasticity and Airfoil their cross attentions are local (the 16 nearest nodes) and they
    # take PiT's and the Transolver's small batches (seed 0, 200 samples; the MLP at equal time:
    # 0.342 and 0.292): on Airfoil 15 epochs gave the Galerkin Transformer 0.475 with global
    # cross attention, batch 8 and lr 1e-3, 0.357 with k=16, 0.177 with k=16, batch 2 and lr
    # 3e-3; on Elasticity 45 epochs 0.211 global, batch 8, and 0.129 with k=16, batch 2, lr 3e-3
    **{
        (dataset, model): {
            "train": {**GALERKIN_LATENT_MESH[dataset], "batch_size": 2, "lr": 3e-3},
            "model": {**GALERKIN_MESH_CPU, "k": 16},
        }
        for dataset in ("elasticity", "airfoil")
        for model in ("galerkin", "fourier")
    },
    # the Fourier Transformer on Airfoil at lr 1e-3: at 3e-3 both seeds' training collapsed to a
    # constant prediction as the one-cycle rate passed 2.5e-3 (epochs 30 and 40 of 133; test
    # error 0.27-0.32 before, 0.68 after, never recovered), where the Galerkin Transformer's did not
    ("airfoil", "fourier"): {
        "train": {**GALERKIN_LATENT_MESH["airfoil"], "batch_size": 2, "lr": 1e-3},
        "model": {**GALERKIN_MESH_CPU, "k": 16},
    },
    # on Elasticity the encoder's field is a quantile of the input nodes (1.6 %: the 16 nearest
    # of ~1000) and the decoder's the 16 nearest latent nodes: k nearest input nodes cover a
    # smaller area on a finer mesh, which the models learnt to rely on when trained longer (600 s
    # epochs, seed 0: the Galerkin Transformer 0.0760 with k=16, 1.41x / 1.95x on the 2x / 4x
    # finer meshes; 0.0961, 1.02x / 1.04x with quantile fields both ways, whose decoder then
    # reads ~4 latent nodes; 0.0755, 1.17x / 1.32x with these, the lowest error on every mesh;
    # the Fourier Transformer 0.0884, 1.07x / 1.12x with these; benchmarks/results/tuning.md).
    # Weighted (every attention weighs its source nodes by their cells, as PiT's): the encoder's
    # unweighted softmax over a field's nodes learnt its average at the ~15 nodes of a training
    # mesh's field, 60 and 230 on the finer meshes (the Galerkin Transformer's 600 s checkpoint:
    # 0.0737 -> 0.0878 / 0.0958, 0.0841 / 0.0899 with the training meshes' latent nodes, so the
    # latent sample is a third of the loss at most); 203 epochs, seed 0, weighted: the Galerkin
    # Transformer 0.0643, 0.99x / 0.97x (0.0737, 1.19x / 1.30x unweighted), the Fourier
    # Transformer 0.0846, 0.95x / 0.91x (0.0881, 1.04x / 1.11x)
    **{
        ("elasticity", model): {
            "train": {**GALERKIN_LATENT_MESH["elasticity"], "batch_size": 2, "lr": 3e-3},
            "model": {**GALERKIN_MESH_CPU, "quantile": 0.016, "decoder_k": 16, "weighted": True},
        }
        for model in ("galerkin", "fourier")
    },
    **{(dataset, "ono"): {"model": dict(ONO_CPU)} for dataset in MESH_DATASETS},
    # ONO on Burgers: the mesh datasets' size, u0's derivative and the coordinate's Fourier modes
    # (10 epochs: 0.638 with u0 and x, 0.468 with u0_x, 0.414 with 8 modes, 0.359 with both;
    # benchmarks/results/burgers_features.md): its kernels come from the node features, and raw x
    # gives them no periodic basis in which to be convolutions. ONO is not translation-equivariant:
    # it trains on a new random periodic shift of every sample each epoch (periodic_shift), lr
    # 2e-3 (the accuracy table's 121 epochs: 0.0991 without shifts, 0.0494 with, 0.0478 with lr
    # 2e-3; benchmarks/results/tuning.md)
    ("burgers", "ono"): {
        "train": {"periodic_shift": True, "lr": 2e-3},
        "model": dict(ONO_CPU),
        "dataset": {"gradient": True, "coordinate_modes": 8},
    },
}


def preset(dataset: str, model: str, data: DataSummary | None = None) -> dict[str, dict[str, Any]]:
    """The merged defaults for training ``model`` on ``dataset`` (empty parts when none); for a
    folder of the user's meshes, with ``data`` its summary, the defaults scaled to the data
    (:func:`folder_rules`)."""
    out: dict[str, dict[str, Any]] = {"train": {}, "model": {}, "dataset": {}}
    rules = folder_rules(model, data) if dataset == "folder" and data is not None else {}
    for part in (
        {"train": MODEL_TRAINING.get(model, {})},
        DATASET_PRESETS.get(dataset, {}),
        PAIR_PRESETS.get((dataset, model), {}),
        rules,
    ):
        for key, values in part.items():
            out[key].update(values)
    return out


@dataclass(frozen=True)
class DataSummary:
    """What the folder defaults are chosen from: the median number of nodes of a sample, the
    spatial dimension, the number of training samples, and whether the samples read share one
    mesh (the same nodes, as on a uniform grid)."""

    nodes: int
    dim: int
    samples: int
    shared_mesh: bool = False

    def __str__(self) -> str:
        shared = ", all on one mesh" if self.shared_mesh else ""
        return (
            f"{self.samples} training samples of about {self.nodes:,} nodes in {self.dim}D{shared}"
        )


#: samples read to find the typical mesh size of a folder
SUMMARY_SAMPLES = 5


def summarize_data(samples) -> DataSummary:
    """The :class:`DataSummary` of a training split (the median size of its first
    :data:`SUMMARY_SAMPLES` samples: a folder's files are read, not the whole folder)."""
    sizes, dim, meshes = [], 0, []
    for index in range(min(len(samples), SUMMARY_SAMPLES)):
        pos = samples[index].pos
        sizes.append(int(pos.shape[0]))
        dim = int(pos.shape[1])
        meshes.append(pos)
    nodes = sorted(sizes)[len(sizes) // 2] if sizes else 0
    shared = len(meshes) > 1 and all(m.equal(meshes[0]) for m in meshes[1:])
    return DataSummary(nodes=nodes, dim=dim, samples=len(samples), shared_mesh=shared)


#: the models' CPU sizes on the generated mesh datasets (PAIR_PRESETS), for a folder of meshes
FOLDER_MODEL_SIZES: dict[str, dict[str, Any]] = {
    "galerkin": dict(GALERKIN_MESH_CPU),
    "fourier": dict(GALERKIN_MESH_CPU),
    "ono": dict(ONO_CPU),
    "transolver": dict(TRANSOLVER_CPU),
    "pit": {"width": 64},
}
#: PiT's latent mesh: a quarter of the nodes (Elasticity: 256 of 995 on average), between these
#: bounds (Airfoil: 512 of 11,271)
PIT_LATENT = (64, 512)
#: sources in a PiT encoder's receptive field: at least this many (Elasticity's 2 % quantile of
#: 972 nodes), and at least twice the input nodes per latent node, so the fields overlap
PIT_ENCODER_SOURCES = 20
#: latent nodes in a PiT decoder's receptive field (DarcyMesh: 5 % of 256, Airfoil: 2 % of 512)
PIT_DECODER_SOURCES = 12
#: nodes in a batch for the models without a latent mesh (Airfoil: 8 samples of 11,271 nodes)
BATCH_NODES = 2**16
#: the Galerkin and Fourier Transformers' latent mesh on a folder: a quarter of the nodes, between
#: these bounds (their cross attention's cost is n x latent nodes; to the input mesh it would be
#: n x n, which meshop predict refuses on large meshes)
GALERKIN_LATENT = (64, 2048)


#: optimisation steps of a folder's run at least (up to 1000 epochs): PiT on Elasticity reached
#: 15.7 % after 2,000 steps and 6.4 % after 15,000 (benchmarks/results/tuning.md, accuracy.md)
MIN_STEPS = 5000


def folder_rules(model: str, data: DataSummary) -> dict[str, dict[str, Any]]:
    """Defaults for training ``model`` on a folder of meshes like ``data``, scaled from the
    settings measured on the generated mesh datasets (Elasticity, Airfoil, DarcyMesh; see
    :data:`PAIR_PRESETS` and ``benchmarks/results/tuning.md``):

    - every model at its CPU size on those datasets (:data:`FOLDER_MODEL_SIZES`);
    - PiT: a latent mesh of a quarter of the nodes (:data:`PIT_LATENT`), quantile receptive
      fields holding about ``max(20, 2 n / latent)`` sources in the encoder and 12 latent nodes in
      the decoder (so they cover the same area on finer meshes of the same domains), batch 2,
      lr 5e-3 and clipping 1 (the mesh datasets' PiT settings); when the samples share one
      mesh (a uniform grid), a new latent mesh of every sample each epoch (``latent_resample``:
      trained on the one latent mesh of such a folder, PiT loses accuracy on a finer grid, whose
      farthest point sample differs; on folders of meshes of their own it does not, and
      resampling raised its error at the training resolution on Elasticity, lowered it on
      DarcyMesh;
      ``benchmarks.accuracy.folder_zero_shot``);
    - the other models: batches of about :data:`BATCH_NODES` nodes (1 to 8 samples); the
      Galerkin and Fourier Transformers a latent mesh of a quarter of the nodes
      (:data:`GALERKIN_LATENT`), so that their cost is linear in the mesh size, resampled each
      epoch as PiT's when the samples share one mesh (on the Darcy grid they lost 1.5-1.8x on
      finer grids without);
    - at least :data:`MIN_STEPS` optimisation steps (more epochs for a folder of few samples),
      100 epochs at least and 1000 at most;
    - samples of more than 131,072 nodes are trained in checkpointed chunks (the default of
      ``chunk_nodes``, :mod:`meshop.nn.chunking`), so nothing here depends on memory.
    """
    n = max(data.nodes, 1)
    train: dict[str, Any] = {}
    model_args = dict(FOLDER_MODEL_SIZES.get(model, {}))
    if model == "pit":
        lo, hi = PIT_LATENT
        latent = min(max(n // 4, lo), hi, n)
        encoder = min(max(PIT_ENCODER_SOURCES / n, 2 / latent), 1.0)
        decoder = min(PIT_DECODER_SOURCES / latent, 1.0)
        train.update(latent_points=latent, batch_size=2, lr=5e-3, clip=1.0)
        model_args.update(
            encoder_quantile=float(f"{encoder:.2g}"), decoder_quantile=float(f"{decoder:.2g}")
        )
    else:
        train["batch_size"] = min(max(BATCH_NODES // n, 1), 8)
        if model in ("galerkin", "fourier"):
            lo, hi = GALERKIN_LATENT
            train["latent_points"] = min(max(n // 4, lo), hi, n)
    if data.shared_mesh and "latent_points" in train:  # one latent mesh to learn otherwise
        train["latent_resample"] = True
    steps = max(-(-data.samples // train["batch_size"]), 1)  # per epoch
    train["epochs"] = min(
        max(DATASET_PRESETS["folder"]["train"]["epochs"], -(-MIN_STEPS // steps)), 1000
    )
    return {"train": train, "model": model_args, "dataset": {}}

"""One mesh split over processes: each trains and predicts on its part of the nodes.

A mesh too large for one process's memory or time can be spread over several processes,
on one machine or on several: every process holds a part of the nodes, and inside
:func:`meshop.nn.splitting.split_mesh` every integral of the model's layers is summed
over the processes. Each process gets the whole mesh's outputs at its own nodes, and the
sum of the processes' parameter gradients is the gradient of the whole mesh's loss:
every process takes the step of one process on the whole mesh. The script

1. reads a mesh file (``--mesh``, any format meshio reads, with the point fields
   ``--inputs`` and ``--targets``) or generates one of ``--nodes`` nodes: a triangulated
   unit square with a source ``f`` and the solution ``u`` of -Laplace(u) = f, u = 0 on
   the boundary (sums of sine modes, exact);
2. gives each process its part: the nodes ``rank::size``, with their fields and
   quadrature weights (:func:`meshop.train.split.part_of`);
3. builds ``--model`` with the settings that ``meshop train --dataset folder`` chooses
   for a mesh of this size (:func:`meshop.train.presets.folder_rules`). PiT and the
   Galerkin and Fourier Transformers get a latent mesh that every process holds whole, a
   farthest-point sample of the coordinates of all the parts
   (:func:`meshop.nn.splitting.split_latent_mesh`);
4. takes ``--steps`` training steps: the chunked pass (``forward_chunked``) inside
   ``split_mesh()``, the relative L2 error of the whole mesh (its sums added over the
   processes before the division), the gradients summed over the processes
   (:func:`meshop.train.split.sum_gradients`); process 0 prints the loss. The default
   five steps from random weights show how, not what a trained model reaches;
5. predicts at every process's nodes and writes, from process 0, ``OUT/prediction.vtu``
   (the mesh, its fields and the predicted ``<target>_predicted``) and
   ``OUT/checkpoint.pt`` (the model's name, configuration and weights with its
   normalisers, which ``meshop.train.checkpoint.build_from_checkpoint`` rebuilds, and
   the loss of every step).

Run it with one process per part (torchrun's ``--nnodes``, ``--node_rank`` and
``--rdzv_endpoint`` spread them over machines)::

    torchrun --standalone --nproc_per_node 2 examples/split_one_mesh.py
    torchrun --standalone --nproc_per_node 2 examples/split_one_mesh.py \\
        --mesh part.vtu --inputs load --targets sigma_vm --model transolver

Without torchrun it runs as one process on the whole mesh. The Transolver, ONO and the
MLP take the same steps on any number of processes (to the last digits with
``--dtype float64``). The latent mesh of PiT and the Galerkin and Fourier Transformers
starts at a node that depends on the order in which the processes gather their nodes, so
that on another number of processes they train on another latent mesh of the same nodes.
Every process reads the whole file and keeps its part: with parts from elsewhere (a
solver's partitions), give each process its own nodes in step 2 and fit the normalisers
of step 3 on the moments of the whole mesh. ``--smoke`` runs tiny sizes in seconds.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path

import meshio
import numpy as np
import torch
import torch.distributed as dist

from meshop.data import (
    field_layout,
    from_meshio,
    node_features,
    read_meshio,
    split_fields,
)
from meshop.models.registry import build_model, name_of
from meshop.nn.splitting import split_latent_mesh, split_mesh
from meshop.train import NormalizedModel, fit_normalizers, relative_lp, seed_everything
from meshop.train.presets import DataSummary, preset
from meshop.train.split import broadcast_state, part_of, sum_gradients

#: the models that split (PiT, the Galerkin and Fourier Transformers on a latent mesh)
MODELS = ("pit", "galerkin", "fourier", "transolver", "ono", "mlp")
#: the model sizes of ``--smoke``
SMOKE_SIZES = {
    "pit": dict(width=8, heads=1, layers=1),
    "galerkin": dict(width=8, heads=2, layers=1),
    "fourier": dict(width=8, heads=2, layers=1),
    "transolver": dict(width=8, heads=2, layers=1, slices=4),
    "ono": dict(width=8, heads=2, layers=1, k=4),
    "mlp": dict(width=8, layers=2),
}


def generated_mesh(nodes: int, modes: int = 8, seed: int = 0) -> meshio.Mesh:
    """A triangulated unit square of about ``nodes`` nodes (a grid whose nodes are moved
    at random by up to a quarter of the spacing, along the boundary on the boundary)
    with the point fields ``f``, a sum of ``modes`` sine modes, and ``u``, the solution
    of -Laplace(u) = f with u = 0 on the boundary."""
    rng = np.random.default_rng(seed)
    m = max(round(math.sqrt(nodes)), 3)
    t = np.linspace(0.0, 1.0, m)
    x, y = (a.ravel() for a in np.meshgrid(t, t, indexing="ij"))
    shift = rng.uniform(-0.25, 0.25, (2, m * m)) / (m - 1)
    x = np.where((x == 0) | (x == 1), x, x + shift[0])
    y = np.where((y == 0) | (y == 1), y, y + shift[1])
    corner = (np.arange(m - 1)[:, None] * m + np.arange(m - 1)[None, :]).ravel()
    lower = np.stack([corner, corner + m, corner + m + 1], 1)
    upper = np.stack([corner, corner + m + 1, corner + 1], 1)
    f, u = np.zeros_like(x), np.zeros_like(x)
    waves = rng.integers(1, 5, (modes, 2))
    for (kx, ky), amplitude in zip(waves, rng.normal(size=modes)):
        mode = amplitude * np.sin(kx * np.pi * x) * np.sin(ky * np.pi * y)
        f += mode
        u += mode / (np.pi**2 * (kx**2 + ky**2))
    points = np.column_stack([x, y, np.zeros_like(x)])
    cells = [("triangle", np.concatenate([lower, upper]))]
    return meshio.Mesh(points, cells, point_data={"f": f, "u": u})


def start_processes() -> bool:
    """Join torchrun's process group, or make this process a group of its own when it
    was started without torchrun. True when this call started the group."""
    if dist.is_initialized():
        return False
    if "WORLD_SIZE" in os.environ:  # set by torchrun
        dist.init_process_group("gloo")  # "nccl" for tensors on GPUs
    else:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    return True


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mesh", help="a mesh file (default: a generated square)")
    parser.add_argument("--inputs", default="f", help="input point fields: a,b,...")
    parser.add_argument("--targets", default="u", help="target point fields: a,b,...")
    parser.add_argument("--nodes", type=int, default=1_000_000, help="generated mesh")
    parser.add_argument("--model", choices=MODELS, default="pit")
    parser.add_argument("--steps", type=int, default=5, help="training steps")
    parser.add_argument("--chunk-nodes", type=int, default=65_536)
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    parser.add_argument("--threads", type=int, help="CPU threads per process")
    parser.add_argument("--out", default="runs/examples/split_one_mesh")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (for tests)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.nodes, args.steps, args.chunk_nodes = 1_600, 3, 500
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    started = start_processes()
    try:
        return run(args)
    finally:
        if started:
            dist.destroy_process_group()


def run(args) -> dict:
    rank, size = dist.get_rank(), dist.get_world_size()
    say = print if rank == 0 else lambda *_: None
    dtype = getattr(torch, args.dtype)

    # 1. the whole mesh (every process reads it), its fields and quadrature weights
    mesh = read_meshio(args.mesh) if args.mesh else generated_mesh(args.nodes)
    targets = args.targets.split(",")
    source = args.mesh or "the generated mesh"
    whole = from_meshio(mesh, args.inputs.split(","), targets, source=source)
    for key in ("pos", "x", "y", "weight"):
        whole[key] = whole[key].to(dtype)

    # 2. this process's part: the nodes rank::size
    part = part_of(whole, rank, size)

    # 3. the model with the folder defaults for a mesh of this size, normalisers of the
    # whole mesh, the same parameters and latent mesh on every process
    summary = DataSummary(nodes=len(whole.pos), dim=whole.pos.shape[1], samples=1)
    settings = preset("folder", args.model, summary)
    seed_everything(0)
    model = build_model(
        args.model,
        in_channels=node_features(whole).shape[1],
        out_channels=whole.y.shape[1],
        pos_dim=whole.pos.shape[1],
        **{**settings["model"], **(SMOKE_SIZES[args.model] if args.smoke else {})},
    )
    normalized = NormalizedModel(model, fit_normalizers([whole], pos=True)).to(dtype)
    broadcast_state(normalized)  # process 0's parameters on every process
    latent_points = settings["train"].get("latent_points")
    if latent_points is not None:
        split_latent_mesh(part, latent_points)  # from the coordinates of all the parts
    encoded = normalized.encode_inputs(part)  # fields and coordinates normalised
    decode = normalized.normalizers["y"].decode
    latent = f" on a latent mesh of {latent_points:,} nodes" if latent_points else ""
    say(f"{model.title}{latent}: {len(whole.pos):,} nodes on {size} process(es)")

    # 4. training steps: each process its own nodes, the whole mesh's loss and gradient
    optimizer = torch.optim.Adam(normalized.parameters(), lr=settings["train"]["lr"])
    clip = settings["train"].get("clip")
    losses = []
    for step in range(1, args.steps + 1):
        start = time.perf_counter()
        with split_mesh():
            out = model.forward_chunked(encoded, args.chunk_nodes)  # at its own nodes
        loss = relative_lp(decode(out), part.y, num_samples=1, group=dist.group.WORLD)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        sum_gradients(normalized.parameters())  # the whole mesh's gradient
        if clip:
            torch.nn.utils.clip_grad_norm_(normalized.parameters(), clip)
        optimizer.step()
        losses.append(loss.item())
        seconds = time.perf_counter() - start
        say(f"step {step}/{args.steps}: relative L2 {losses[-1]:.6f} ({seconds:.1f} s)")

    # 5. predictions at each process's nodes, gathered by process 0 into one file
    model.eval()
    with torch.no_grad(), split_mesh():
        pred = decode(model.forward_chunked(encoded, args.chunk_nodes))
    error = float(relative_lp(pred, part.y, num_samples=1, group=dist.group.WORLD))
    say(f"relative L2 of the prediction on the whole mesh: {error:.6f}")
    parts = [None] * size if rank == 0 else None
    dist.gather_object(pred.cpu(), parts, dst=0)
    if rank == 0:
        values = torch.empty(len(whole.pos), pred.shape[1], dtype=pred.dtype)
        for r, piece in enumerate(parts):
            values[r::size] = piece
        predicted = split_fields(values.numpy(), field_layout(mesh, targets))
        fields = {f"{name}_predicted": value for name, value in predicted.items()}
        out_dir = Path(args.out)
        out_dir.mkdir(parents=True, exist_ok=True)
        point_data = {**mesh.point_data, **fields}
        meshio.Mesh(mesh.points, mesh.cells, point_data=point_data).write(
            out_dir / "prediction.vtu"
        )
        checkpoint = {
            "model_name": name_of(type(model)),
            "model_config": dict(model.config),
            "normalizers": {k: n.channels for k, n in normalized.normalizers.items()},
            "state_dict": normalized.state_dict(),
            "losses": losses,
        }
        torch.save(checkpoint, out_dir / "checkpoint.pt")
        say(f"wrote {out_dir / 'prediction.vtu'} and {out_dir / 'checkpoint.pt'}")
    return {"test_rel_l2": error, "losses": losses}


if __name__ == "__main__":
    main()

"""What makes a checkpoint's error grow on finer grids of its Darcy problem: its test fields at
the training grid and 2x and 4x finer, evaluated as trained and with one part of the model or of
the data held at the training grid per row (a PiT's encoder and decoder rows only for a PiT).

    python -m benchmarks.accuracy.zero_shot_causes runs/zero_shot/darcy-pit \
        runs/zero_shot/darcy-pit-latentpos runs/zero_shot/darcy-transolver \
        runs/zero_shot/darcy-transolver-cells
    python -m benchmarks.accuracy.zero_shot_causes runs/zero_shot/darcy-ono --samples 5 \
        --name zero_shot_causes_ono    # ONO at its Darcy size is slow to evaluate on a CPU

The runs are the accuracy table's Darcy rows (its split and seed 0, 150 s over each pair's
frozen time per epoch: PiT 115 epochs, the Transolver 76, ONO 13), e.g. ``python -m
benchmarks.accuracy.tune darcy pit --epochs 115 --set model.latent_positions=false`` (the paper's
form) and the same without ``--set`` (the preset). ``darcy-transolver-cells`` is the
Transolver trained with every node weighted by its cells in the domain, as its Darcy preset now
does (``grid_weights="cells"``: ``python -m benchmarks.accuracy.tune darcy transolver --epochs
76``), ``darcy-transolver`` the same with ``--set 'dataset.grid_weights="equal"'`` (the grids'
equal weights); the cells run's own row is "every grid's nodes weighted by their cells". The finer
grids hold the training grid's nodes (every 2nd, every 4th node: the same fine solution
subsampled), so every row compares the same fields:

- the input on the training grid, the outputs at the finer grid's nodes (the decoder at query
  points it was not trained at), and the converse (the encoder's sums over more nodes);
- the encoder's output at the latent nodes near the boundary (or at the others) taken from the
  training grid's nodes;
- the input at as many farthest points of the finer grid as the training grid has; the
  training grid's field on the finer grid (nearest node, bilinear);
- the finer grid's nodes weighted as the training grid's equal weights integrate (its boundary
  nodes' cells reach half a training cell outside the domain), or by their own cells;
- the training grid's prediction, and the exact solution there, interpolated bilinearly;
- the receptive fields of the encoder and decoder as radius fields of the training grid's mean
  radius.

Beside the errors: where the error is (near the boundary or not), the encoder's and decoder's
receptive fields (nodes, radius, offset of the attention's centroid from its target), the
kernel lengths, and the spread of the lumped latent weights that ``weighted=True`` would use.
"""

from __future__ import annotations

import argparse
import copy
import math
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from benchmarks.lib.common import RESULTS, markdown_table, write_results
from meshop._pyg import Data, scatter
from meshop.data.batching import node_features, node_set_weights
from meshop.data.grid import interpolate_grid
from meshop.data.latent import farthest_point_sampling
from meshop.models import PiT
from meshop.nn.edge_cache import EdgeCache
from meshop.train import load_model
from meshop.train.inference import latent_of
from meshop.train.run import _test_split

#: a variant: (the model as trained, a finer-grid test sample, its stride to the training grid)
#: -> (prediction, target) at the nodes where it is measured
Variant = Callable[[torch.nn.Module, Data, int], tuple[Tensor, Tensor]]


def subgrid(data: Data, stride: int) -> Data:
    """Every ``stride``-th node of a grid sample along each axis (the coarser grid's sample),
    with the sample's latent mesh (its latent nodes' weights found again from these nodes)."""
    shape = tuple(data.grid_shape)
    keep = torch.arange(math.prod(shape)).view(*shape)[(slice(None, None, stride),) * len(shape)]
    out = Data(pos=data.pos[keep.flatten()], weight=data.weight[keep.flatten()])
    out.weight = out.weight * (len(data.pos) / len(out.pos))  # the same domain's measure
    out.grid_shape = tuple(keep.shape)
    for key in ("x", "y"):
        if getattr(data, key, None) is not None:
            out[key] = data[key][keep.flatten()]
    if getattr(data, "latent_pos", None) is not None:  # the same latent mesh
        out.latent_pos = data.latent_pos
    return out


def with_queries(data: Data, points: Data) -> Data:
    """``data`` asked for its outputs at ``points``' nodes, with ``points``' targets."""
    out = data.clone()
    out.query_pos, out.y = points.pos, points.y
    return out


def as_trained(model, fine, stride):
    return model(fine), fine.y


def coarse_input(model, fine, stride):
    return model(with_queries(subgrid(fine, stride), fine)), fine.y


def coarse_output(model, fine, stride):
    coarse = subgrid(fine, stride)
    return model(with_queries(fine, coarse)), coarse.y


def upsample(values: Tensor, coarse: Data, fine: Data) -> Tensor:
    """Node values on ``coarse``'s grid, bilinear on ``fine``'s nodes."""
    grid = values.T.reshape(1, -1, *coarse.grid_shape)
    return interpolate_grid(grid, fine.grid_shape).reshape(values.shape[1], -1).T


def nearest_node(fine: Data, stride: int) -> Tensor:
    """Each fine node's nearest node of the grid ``stride`` times coarser (a tie: the later)."""
    shape = tuple(fine.grid_shape)
    axes = [torch.div(torch.arange(n) + stride // 2, stride, rounding_mode="floor") for n in shape]
    coarse = [(n - 1) // stride + 1 for n in shape]
    grids = torch.meshgrid(*axes, indexing="ij")
    index = torch.zeros(shape, dtype=torch.long)
    for axis, grid in enumerate(grids):
        index = index * coarse[axis] + grid
    return index.flatten()


def farthest_input(model, fine, stride):
    """The input read at as many nodes as the training grid has, chosen by farthest point
    sampling of the finer grid (not the training grid's nodes); the outputs at every node."""
    n = (fine.grid_shape[0] - 1) // stride + 1
    keep = farthest_point_sampling(fine.pos, n ** len(fine.grid_shape))
    sparse = Data(pos=fine.pos[keep], x=fine.x[keep], weight=fine.weight[keep] * stride**2)
    if getattr(fine, "latent_pos", None) is not None:
        sparse.latent_pos = fine.latent_pos
    return model(with_queries(sparse, fine)), fine.y


def grid_weights(grid: Data, overhang: float) -> Tensor:
    """Quadrature weights of a grid sample: the step ``h`` of each axis, the end nodes ``h / 2``
    plus ``overhang / 2`` (0: the cells within the domain, halves on the edges and quarters at
    the corners; a training grid's step: what that grid's equal weights integrate, its end nodes
    carrying whole cells, half outside the domain), scaled to the sample's measure."""
    axes = []
    for n in grid.grid_shape:
        h = 1.0 / (n - 1)
        w = torch.full((n,), h)
        w[[0, -1]] = (h + overhang) / 2
        axes.append(w)
    weight = axes[0]
    for w in axes[1:]:
        weight = torch.outer(weight, w).flatten()
    return weight * (grid.weight.sum() / weight.sum())


def training_weights(model, fine, stride):
    held = fine.clone()
    held.weight = grid_weights(fine, stride / (fine.grid_shape[0] - 1))
    return model(held), fine.y


def own_cells(model, fine, stride):
    held = fine.clone()
    held.weight = grid_weights(fine, 0.0)
    return model(held), fine.y


def coarse_field(model, fine, stride):
    held = fine.clone()
    held.x = subgrid(fine, stride).x[nearest_node(fine, stride)]
    return model(held), fine.y


def smooth_field(model, fine, stride):
    smooth = fine.clone()
    smooth.x = upsample(subgrid(fine, stride).x, subgrid(fine, stride), fine)
    return model(smooth), fine.y


def interpolated_prediction(model, fine, stride):
    coarse = subgrid(fine, stride)
    return upsample(model(coarse), coarse, fine), fine.y


def interpolated_solution(model, fine, stride):
    coarse = subgrid(fine, stride)
    return upsample(coarse.y, coarse, fine), fine.y


#: latent nodes closer than this to the domain's boundary make its boundary band
BAND = 0.1


def mixed_encoding(model, fine: Data, stride: int, band_from_training_grid: bool) -> Tensor:
    """PiT on ``fine`` with the encoder's output at the latent nodes of the boundary band
    (``band_from_training_grid``) or at the others taken from the training grid's nodes."""
    pit = pit_of(model)
    encoded = [model.encode_inputs(d) for d in (fine, subgrid(fine, stride))]
    latent = []
    for d in encoded:
        own = pit.latent_lift is not None  # the coordinates enter at the latent nodes
        lifted = F.gelu(pit.lift(node_features(d, use_pos=not own)))
        u = pit.encoder(lifted, d.pos, pos_dst=d.latent_pos)
        latent.append(F.gelu(u + pit.latent_lift(d.latent_pos) if own else u))
    lo, hi = fine.pos.min(0).values, fine.pos.max(0).values
    gap = torch.minimum(fine.latent_pos - lo, hi - fine.latent_pos).min(1).values
    take = (gap < BAND) == band_from_training_grid
    u = torch.where(take[:, None], latent[1], latent[0])
    pos = encoded[0].latent_pos
    for block in pit.processor:
        u = block(u, pos)
    out = pit.head(F.gelu(pit.decoder(u, pos, pos_dst=encoded[0].pos)))
    return model.normalizers["y"].decode(out) if "y" in model.normalizers else out


def band_from_training_grid(model, fine, stride):
    return mixed_encoding(model, fine, stride, True), fine.y


def interior_from_training_grid(model, fine, stride):
    return mixed_encoding(model, fine, stride, False), fine.y


def pit_of(model) -> PiT:
    return model.model


def rebuilt(model, change: Callable[[PiT], None]):
    """A copy of a wrapped PiT with ``change`` applied, its neighbour caches emptied."""
    model = copy.deepcopy(model)
    change(pit_of(model))
    for layer in (pit_of(model).encoder, pit_of(model).decoder):
        layer.edge_cache = EdgeCache(layer.edge_cache.max_bytes)
    return model


def fields(model, data: Data) -> dict[str, dict[str, float]]:
    """Mean nodes in a receptive field, mean field radius, and mean distance from a target to
    the centroid of its attention's weights (its heads' mean; in the data's units) of the
    encoder (latent nodes over the input grid) and decoder (output nodes over the latent mesh).
    The centroid is where the attention reads its sources: off the target, it reads the input
    beside it, by an offset that is a fixed pattern of the training grid, unlike a finer
    grid's."""
    pit, encoded = pit_of(model), model.encode_inputs(data)
    scale = float(model.normalizers["pos"].std[0]) if "pos" in model.normalizers else 1.0
    out = {}
    for name, layer, src, dst in (
        ("encoder", pit.encoder, encoded.pos, encoded.latent_pos),
        ("decoder", pit.decoder, encoded.latent_pos, encoded.pos),
    ):
        index, dist = layer.neighbors(src, dst, use_cache=False)
        count = torch.bincount(index[0], minlength=len(dst)).float()
        radius2 = torch.zeros(len(dst)).scatter_reduce(0, index[0], dist, "amax")
        p = torch.exp(
            -dist[:, None] * layer.lam.detach()[None, :]
        )  # the attention's weights (unnormalised) [E, H]
        p = p / scatter(p, index[0], dim=0, dim_size=len(dst), reduce="sum")[index[0]]
        centroid = scatter(p[:, :, None] * src[index[1], None], index[0], dim=0, dim_size=len(dst))
        offset = (centroid - dst[:, None]).norm(dim=-1)  # [N_dst, H]
        out[name] = {
            "nodes": float(count.mean()),
            "radius": float(radius2.sqrt().mean()) * scale,
            "offset": float(offset.mean()) * scale,
        }
    return out


def length_scales(model) -> dict[str, list[float]]:
    """Each head's kernel length :math:`1/\\sqrt{\\lambda}` in the data's units."""
    pit = pit_of(model)
    scale = float(model.normalizers["pos"].std[0]) if "pos" in model.normalizers else 1.0
    layers = {"encoder": pit.encoder, "decoder": pit.decoder}
    layers.update({f"processor {i}": b.attn for i, b in enumerate(pit.processor)})
    return {
        name: [scale / math.sqrt(float(lam)) for lam in layer.lam.detach()]
        for name, layer in layers.items()
    }


def latent_weight_spread(data: Data) -> dict[str, float]:
    """The latent nodes' quadrature weights (lumped from their nearest input nodes, what
    ``weighted=True`` attends with) relative to their mean: smallest, largest, and their
    coefficient of variation over all latent nodes."""
    w = node_set_weights(data)[1]
    w = w / w.mean()
    return {"min": float(w.min()), "max": float(w.max()), "cv": float(w.std())}


def fixed_field(where: str, size: float, kind: str) -> Callable[[PiT], None]:
    """Set the encoder's or decoder's receptive field to ``{kind: size}`` (the model's units)."""

    def change(pit: PiT) -> None:
        getattr(pit, where).field = {kind: size}

    return change


def variants(model, fields_of_training: dict | None) -> dict[str, tuple]:
    """The rows of the table: name -> (model, variant); those of a PiT's encoder and decoder
    with ``fields_of_training`` (its receptive fields on the training grid), else none."""
    rows: dict[str, tuple] = {
        "as trained (every grid its own)": (model, as_trained),
        "input on the training grid, outputs at the finer nodes": (model, coarse_input),
        "input on the finer grid, outputs at the training nodes": (model, coarse_output),
    }
    if fields_of_training is not None:
        rows[f"latent nodes within {BAND} of the boundary encoded from the training grid"] = (
            model,
            band_from_training_grid,
        )
        rows["the other latent nodes encoded from the training grid"] = (
            model,
            interior_from_training_grid,
        )
    rows |= {
        "input at as many farthest points of the finer grid as the training grid has": (
            model,
            farthest_input,
        ),
        "input on the finer grid, its field the training grid's nearest node's": (
            model,
            coarse_field,
        ),
        "input on the finer grid, its field bilinear from the training grid's": (
            model,
            smooth_field,
        ),
        "input on the finer grid, its boundary nodes weighted as the training grid's": (
            model,
            training_weights,
        ),
        "every grid's nodes weighted by their cells in the domain": (model, own_cells),
        "training-grid prediction, interpolated": (model, interpolated_prediction),
        "exact training-grid solution, interpolated (no model)": (model, interpolated_solution),
    }
    scale = float(model.normalizers["pos"].std[0]) if "pos" in model.normalizers else 1.0
    for where in ("encoder", "decoder") if fields_of_training is not None else ():
        radius = fields_of_training[where]["radius"] / scale
        rows[f"{where}: the training grid's mean radius as a radius field"] = (
            rebuilt(model, fixed_field(where, radius, "radius")),
            as_trained,
        )
    return rows


def evaluate(model, samples: list[Data], stride: int, variant: Variant, latent) -> float:
    """Mean relative L2 of ``variant`` over the finer grid's test ``samples``."""
    errors = []
    with torch.no_grad():
        for fine in samples:
            pred, target = variant(model, latent(fine), stride)
            errors.append(float((pred - target).norm() / target.norm()))
    return sum(errors) / len(errors)


def band_errors(model, samples: list[Data], latent) -> dict[str, float]:
    """The error's norm at the nodes within :data:`BAND` of the boundary and at the others,
    each over the whole target's norm (their squares add up to the squared relative L2), mean
    over ``samples``."""
    out = {"band": 0.0, "interior": 0.0}
    with torch.no_grad():
        for data in samples:
            data = latent(data)
            error = (model(data) - data.y).norm(dim=1)
            lo, hi = data.pos.min(0).values, data.pos.max(0).values
            near = torch.minimum(data.pos - lo, hi - data.pos).min(1).values < BAND
            for key, nodes in (("band", near), ("interior", ~near)):
                out[key] += float(error[nodes].norm() / data.y.norm()) / len(samples)
    return out


def pit_tables(model, grid_fields: dict, n: int, record: dict) -> dict[str, str]:
    """A PiT's receptive fields on every grid and kernel lengths (also put in ``record``)."""
    resolutions = list(grid_fields)
    grids = [f"{r}x{r}" for r in resolutions]
    field_rows = [
        [where, *(f"{grid_fields[r][where]['nodes']:.1f}" for r in resolutions)]
        + [f"{grid_fields[r][where][key]:.4f}" for key in ("radius", "offset") for r in resolutions]
        for where in ("encoder", "decoder")
    ]
    field_head = ["receptive field", *(f"nodes {g}" for g in grids)]
    field_head += [f"{key} {g}" for key in ("radius", "offset") for g in grids]
    scales = length_scales(model)
    scale_rows = [[layer, *(f"{s:.4f}" for s in values)] for layer, values in scales.items()]
    heads = max(len(v) for v in scales.values())
    record.update(fields={str(r): f for r, f in grid_fields.items()}, lengths=scales)
    return {
        "receptive fields (mean over the targets of a test sample)": markdown_table(
            field_head, field_rows
        ),
        f"kernel length 1/sqrt(lambda) of each head (the training grid's step: "
        f"{1 / (n - 1):.4f})": markdown_table(
            ["layer", *(f"head {h}" for h in range(heads))], scale_rows
        ),
    }


def measure(checkpoint: str, args) -> tuple[dict[str, str], list[dict]]:
    """The tables and records of one checkpoint."""
    model, ckpt = load_model(checkpoint)
    model.eval()
    latent = latent_of(ckpt)
    n = int(ckpt["data"]["dataset_args"]["resolution"])
    resolutions = [n, 2 * (n - 1) + 1, 4 * (n - 1) + 1]
    grids = [f"{r}x{r}" for r in resolutions]
    tests = {}
    for r in resolutions:
        split = _test_split(ckpt, args.data_dir, {"resolution": r})
        tests[r] = [split[i] for i in range(min(len(split), args.samples or len(split)))]
    is_pit = isinstance(pit_of(model), PiT)
    grid_fields = {r: fields(model, latent(tests[r][0])) for r in resolutions} if is_pit else {}
    rows, records = [], []
    for name, (variant_model, variant) in variants(model, grid_fields.get(n)).items():
        errors = [
            evaluate(variant_model, tests[r], (r - 1) // (n - 1), variant, latent)
            for r in resolutions
        ]
        ratios = f"{errors[1] / errors[0]:.2f} / {errors[2] / errors[0]:.2f}" if errors[0] else "-"
        rows.append([name, *(f"{e:.4f}" for e in errors), ratios])
        records.append({"variant": name, "errors": dict(zip(map(str, resolutions), errors))})
    bands = {r: band_errors(model, tests[r], latent) for r in resolutions}
    band_rows = [
        [where, *(f"{bands[r][key]:.4f}" for r in resolutions)]
        for key, where in (("band", f"nodes within {BAND} of the boundary"), ("interior", "others"))
    ]
    name = Path(checkpoint).name
    tables = {
        f"{name}: test rel. L2 on the training grid and finer grids": markdown_table(
            ["evaluated", *grids, "2x / 4x ratio"], rows
        ),
        f"{name}: where the error is (as trained; error norm over the whole target's norm)": (
            markdown_table(["nodes", *grids], band_rows)
        ),
    }
    records.append({"band_errors": {str(r): b for r, b in bands.items()}})
    if is_pit:
        pit = pit_tables(model, grid_fields, n, records[-1])
        tables.update({f"{name}: {caption}": table for caption, table in pit.items()})
        spread = {r: latent_weight_spread(latent(tests[r][0])) for r in resolutions}
        spread_rows = [
            [k, *(f"{spread[r][k]:.3f}" for r in resolutions)] for k in ("min", "max", "cv")
        ]
        tables["latent nodes' lumped quadrature weights over their mean (weighted=True only)"] = (
            markdown_table(["", *grids], spread_rows)
        )
        records[-1]["latent_weights"] = {str(r): w for r, w in spread.items()}
    for record in records:
        record["run"] = name
    return tables, records


def main(argv=None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "checkpoint", nargs="+", help="run folders or checkpoints of PiTs trained on Darcy"
    )
    parser.add_argument("--data-dir", default=None, help="data root (default: the run's)")
    parser.add_argument("--samples", type=int, default=None, help="test samples (default: all)")
    parser.add_argument("--name", default="zero_shot_causes", help="name of the result files")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder of the result files")
    args = parser.parse_args(argv)
    args.quick = False
    torch.set_num_threads(args.threads)
    tables, records = {}, []
    for checkpoint in args.checkpoint:
        more_tables, more_records = measure(checkpoint, args)
        tables.update(more_tables)  # the data's latent weights: the last run's (the same data)
        records += more_records
    return write_results(
        args.name,
        "Zero-shot on finer grids: what changes with the grid",
        args,
        tables,
        records,
    )


if __name__ == "__main__":
    main()

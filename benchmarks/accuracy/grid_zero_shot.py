"""Zero-shot super-resolution of the Galerkin / Fourier Transformer's 2D grid path, stage by stage:
a checkpoint (several: their mean) on its test fields at the training grid and 2x and 4x finer,
with one more of :data:`STAGES` taken on the training grid per row (the last row: the model).

    python -m benchmarks.accuracy.grid_zero_shot runs/accuracy/darcy-galerkin-seed{0,1}
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor, nn

from benchmarks.lib.common import RESULTS, markdown_table, write_results
from meshop._pyg import scatter
from meshop.data import coarse_shape, grid_shape_of, node_batch, node_features, num_samples
from meshop.data.grid import grid_tensor, interpolate_grid, node_tensor
from meshop.nn.cinn import middle_shape
from meshop.train import load_model
from meshop.train.metrics import per_sample_errors
from meshop.train.normalized import NormalizedModel
from meshop.train.run import _test_split

STAGES = ("coarse", "middle", "stencil", "spectral")


class StagedGridPath(nn.Module):
    """The 2D grid path of a :class:`~meshop.models.GalerkinTransformer` (spectral decoder) with
    the ``fixed`` stages taken on the training grid ``grid`` and the others on the input grid."""

    def __init__(self, model: nn.Module, grid: Sequence[int], fixed: Sequence[str]):
        super().__init__()
        unknown = set(fixed) - set(STAGES)
        if unknown:
            raise ValueError(f"unknown stages {sorted(unknown)}; choose from {STAGES}")
        if model.pos_dim != 2 or model.decoder != "spectral" or model.down is None:
            raise ValueError("the staged grid path covers 2D grid models with the spectral decoder")
        self.model, self.grid, self.fixed = model, tuple(grid), set(fixed)

    def forward(self, data) -> Tensor:
        m, fixed = self.model, self.fixed
        shape, b = grid_shape_of(data), num_samples(data)
        pos = grid_tensor(data.pos, data)
        coarse = m.coarse_shape or coarse_shape(self.grid if "coarse" in fixed else shape, 3)
        x = grid_tensor(node_features(data), data)
        if "stencil" in fixed:
            x = interpolate_grid(x, self.grid)
        fine = tuple(x.shape[2:])
        # CiNNDown with its middle grid from the training grid or from the grid it convolves
        u0 = m.down.lift(x)
        u0 = interpolate_grid(u0, middle_shape(self.grid if "middle" in fixed else fine, coarse))
        stack, u = [], u0
        for conv in m.down.convs:
            u = conv(u)
            stack.append(u)
        h = interpolate_grid(torch.cat(stack, dim=1) + u0, coarse)
        coarse_pos = interpolate_grid(pos, coarse)
        n_c = math.prod(coarse)
        batch = torch.arange(b, device=h.device).repeat_interleave(n_c)
        measure = scatter(data.weight, node_batch(data), dim=0, dim_size=b, reduce="sum")
        h = m._encode(node_tensor(h), node_tensor(coarse_pos), batch, (measure / n_c)[batch])
        h = h.view(b, *coarse, -1).movedim(-1, 1)
        h = m.up(h, shape, self.grid if "middle" in fixed else None)
        out = m.regressor(h, pos, self.grid if "spectral" in fixed else None)
        return node_tensor(out)


def names(checkpoints: Sequence[str]) -> str:
    """The run folders' names, and "mean of" when there are several."""
    listed = " and ".join(Path(c).name for c in checkpoints)
    return f"mean of {listed}" if len(checkpoints) > 1 else listed


def training_grid(ckpt: dict, model: nn.Module) -> tuple[int, ...]:
    """The recorded training grid, else the checkpoint dataset's ``resolution`` per axis."""
    recorded = model.grid_shape
    if recorded is not None:
        return tuple(recorded)
    resolution = ckpt["data"].get("dataset_args", {}).get("resolution")
    if resolution is None:
        raise SystemExit("the checkpoint records no training grid: give it with --grid")
    return (int(resolution),) * model.pos_dim


def main(argv=None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "checkpoint",
        nargs="+",
        help="run folder or checkpoint of a grid-path model (several: their mean errors)",
    )
    parser.add_argument("--data-dir", default=None, help="data root (default: the run's)")
    parser.add_argument("--grid", type=int, default=None, help="training grid nodes per axis")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder of the result files")
    args = parser.parse_args(argv)
    args.quick = False
    torch.set_num_threads(args.threads)

    runs = [load_model(path) for path in args.checkpoint]
    model, ckpt = runs[0][0].model, runs[0][1]
    grid = (args.grid,) * model.pos_dim if args.grid else training_grid(ckpt, model)
    n = grid[0]
    resolutions = [n, 2 * (n - 1) + 1, 4 * (n - 1) + 1]
    tests = {r: _test_split(ckpt, args.data_dir, {"resolution": r}) for r in resolutions}
    head = ["grid path on the training grid", *(f"{r}x{r}" for r in resolutions), "2x / 4x ratio"]
    rows, records = [], []
    for k in range(len(STAGES) + 1):
        errors = [0.0] * len(resolutions)
        for wrapped, _ in runs:  # the same test fields for every run (one dataset)
            grid_path = StagedGridPath(wrapped.model, grid, STAGES[:k])
            staged = NormalizedModel(grid_path, wrapped.normalizers)
            with torch.no_grad():
                for i, r in enumerate(resolutions):
                    errors[i] += float(per_sample_errors(staged, tests[r], 10).mean()) / len(runs)
        name = " + ".join(STAGES[:k]) or "nothing (every grid its own)"
        ratios = f"{errors[1] / errors[0]:.2f} / {errors[2] / errors[0]:.2f}"
        rows.append([name, *(f"{e:.4f}" for e in errors), ratios])
        records.append(
            {"stages": list(STAGES[:k]), "errors": dict(zip(map(str, resolutions), errors))}
        )
    table = markdown_table(head, rows)
    return write_results(
        "grid_zero_shot",
        "Zero-shot super-resolution of the grid path, stage by stage",
        args,
        {f"{names(args.checkpoint)}: test rel. L2 on the training grid and finer grids": table},
        records,
    )


if __name__ == "__main__":
    main()

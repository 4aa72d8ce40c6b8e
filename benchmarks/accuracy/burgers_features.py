"""Burgers: which input features each model needs, measured with short trainings on the
accuracy table's split (200 train / 50 test samples at resolution 256, seed 0, one thread) with
other inputs or one change inside a model, each appended to ``results/burgers_features.jsonl``.

    python -m benchmarks.accuracy.burgers_features pit --epochs 10 --inputs grad
    python -m benchmarks.accuracy.burgers_features ono --epochs 10 --inputs grad+modes8 \\
        --set model.width=64 --set model.layers=4 --set model.heads=4 --set model.k=16
    python -m benchmarks.accuracy.burgers_features transolver --epochs 20 --slices-report
    python -m benchmarks.accuracy.burgers_features --floor    # a mirror-symmetric model's floor
    python -m benchmarks.accuracy.burgers_features --table    # every trial as Markdown

``--inputs`` appends to ``u0`` (joined by ``+``): ``grad`` (its periodic central difference),
``absgrad`` (its absolute value), ``shift`` (u0 at the next node), ``modesK`` (cos and sin of
2 pi k x, k <= K); ``raw`` is u0 alone. The settings are the pair's preset with ``--set`` over
them. ``--target smooth``: u0's Fourier modes 0-4; ``--target mean``: a mean plus 0.1 u0. Model
changes: ``--drift`` (PiT's processor attends from its nodes shifted by a learned length),
``--slice-init ortho`` and ``--temperature T`` (Transolver's slice projection and temperature at
initialisation), ``--local-slices`` (slice weights and features from a 3-node circular convolution,
as the authors' structured-mesh Transolver); ``--roll``: a random circular shift per access.
"""

from __future__ import annotations

import argparse
import json
import math
import time
import types
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from benchmarks.lib.common import RESULTS, append_line, markdown_table
from benchmarks.lib.training_runs import parse_settings
from meshop.data import make_loader
from meshop.datasets.burgers import periodic_derivative, periodic_modes, solve_burgers
from meshop.datasets.grf import gaussian_random_field
from meshop.datasets.registry import build_dataset
from meshop.models.registry import build_model
from meshop.train.config import TrainConfig
from meshop.train.data import prepare_data
from meshop.train.presets import preset
from meshop.train.trainer import Trainer, seed_everything

LOG = RESULTS / "burgers_features.jsonl"
SPLIT = dict(num_train=200, num_test=50, resolution=256, seed=0, progress=False)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--inputs", default="raw")
    parser.add_argument("--set", action="append", default=[], metavar="PART.KEY=VALUE")
    parser.add_argument("--target", default="burgers", choices=("burgers", "smooth", "mean"))
    parser.add_argument("--slice-init", default=None, choices=("ortho",))
    parser.add_argument("--temperature", type=float, default=None)
    parser.add_argument("--log", type=Path, default=LOG)
    for flag in ("--drift", "--local-slices", "--roll", "--slices-report", "--floor", "--table"):
        parser.add_argument(flag, action="store_true")
    return parser.parse_args(argv)


def with_inputs(data, inputs: str, target: str):
    """A copy of a Burgers sample with the inputs ``inputs`` and the target ``target``."""
    data = data.clone()
    parts = [data.x]
    for item in inputs.split("+"):
        if item == "grad":
            parts.append(periodic_derivative(data.x))
        elif item == "absgrad":
            parts.append(periodic_derivative(data.x).abs())
        elif item == "shift":
            parts.append(torch.roll(data.x, -1, 0))
        elif item.startswith("modes"):
            parts.append(periodic_modes(data.pos, int(item[5:])))
        elif item != "raw":
            raise SystemExit(f"unknown input {item!r}: raw, grad, absgrad, shift or modesK")
    if target == "smooth":
        data.y = torch.fft.irfft(torch.fft.rfft(data.x[:, 0])[:5], len(data.x))[:, None]
    elif target == "mean":
        data.y = data.x.mean() + 0.1 * data.x
    data.x = torch.cat(parts, dim=-1)
    return data


def settings(args) -> tuple[dict, dict]:
    """The pair's preset's training and model settings, ``--set`` over them."""
    defaults, chosen = preset("burgers", args.model), parse_settings(args.set)
    train = {**defaults["train"], **chosen["train"]}
    train.update(epochs=args.epochs, progress=False, device="cpu", seed=0)
    return train, {**defaults["model"], **chosen["model"]}


class Rolled(Dataset):
    """Training samples read through a random circular shift of their fields (a new shift on
    every access, seeded): the periodic problem is translation-equivariant, so every shift of a
    sample is a sample."""

    def __init__(self, samples, inputs: str, target: str):
        self.samples, self.inputs, self.target = samples, inputs, target
        self.rng = np.random.default_rng(0)

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, index):
        data = self.samples[index].clone()
        shift = int(self.rng.integers(len(data.pos)))
        data.x, data.y = torch.roll(data.x, shift, 0), torch.roll(data.y, shift, 0)
        return with_inputs(data, self.inputs, self.target)


def add_drift(net) -> None:
    """PiT's processor blocks attend from their nodes shifted by a learned length (zero at first):
    the kernel exp(-lambda |x + b - y|^2) is no longer even."""

    def forward(self, u, pos, batch=None, weight=None):
        h = F.gelu(self.attn(u, pos, batch, weight, pos_dst=pos + self.drift, batch_dst=batch))
        return F.gelu(self.mlp(h) + self.skip(u))

    for block in net.processor:
        block.drift = torch.nn.Parameter(torch.zeros(1))
        block.forward = types.MethodType(forward, block)


def add_local_slices(net, n: int) -> None:
    """Transolver's slice assignment and slice features from a 3-node circular convolution over
    the grid instead of a linear map of each node alone (the authors' structured-mesh form)."""

    def on_grid(conv, x):
        b = len(x) // n
        return conv(x.view(b, n, -1).transpose(1, 2)).transpose(1, 2).reshape(len(x), -1)

    class GridConv(nn.Conv1d):
        def forward(self, x):
            return on_grid(super().forward, x)

    def slice_weights(self, x):
        inv_t = 1.0 / self.temperature
        scale = inv_t.repeat_interleave(self.head_channels)
        xs = (on_grid(self.conv_x, x) * scale).view(len(x), self.heads, self.head_channels)
        logits = torch.bmm(xs.transpose(0, 1), self.lin_slice.weight.T.expand(self.heads, -1, -1))
        return torch.softmax(logits + (self.lin_slice.bias * inv_t[:, None])[:, None], -1)

    for block in net.blocks:
        attn = block.attn
        inner = attn.heads * attn.head_channels
        options = dict(padding=1, padding_mode="circular")
        attn.conv_x = nn.Conv1d(attn.channels, inner, 3, **options)
        attn.lin_fx = GridConv(attn.channels, inner, 3, **options)
        attn._slice_weights = types.MethodType(slice_weights, attn)


def slices_report(net, trainer) -> list[dict]:
    """Per Transolver block on 8 test samples: the mean largest slice weight (1/M: uniform) and
    the spread of the slice weights over the nodes."""
    batch = next(iter(make_loader(list(trainer.test_set)[:8], 8)))
    inputs = []
    hooks = [
        b.attn.register_forward_hook(lambda mod, inp, out: inputs.append((mod, inp[0])))
        for b in net.blocks
    ]
    with torch.no_grad():
        trainer.model.eval()
        trainer.model(batch)
        weights = [(mod, mod.slice_weights(x)) for mod, x in inputs]
        report = []
        for mod, s in weights:
            report.append({"max_slice_weight": round(float(s.max(-1).values.mean()), 4)})
            report[-1]["node_std"] = round(float(s.std(0).mean()), 5)
            report[-1]["temperature"] = [round(t, 3) for t in mod.temperature.tolist()]
    for hook in hooks:
        hook.remove()
    return report


def trial(args) -> dict:
    torch.set_num_threads(1)
    train_args, model_args = settings(args)
    raw = {s: list(build_dataset("burgers", s, None, **SPLIT)) for s in ("train", "test")}
    splits = {s: [with_inputs(d, args.inputs, args.target) for d in raw[s]] for s in raw}
    if args.roll:
        splits["train"] = Rolled(raw["train"], args.inputs, args.target)
    config = TrainConfig(**train_args)
    data = prepare_data(splits["train"], splits["test"], config)
    seed_everything(0)
    net = build_model(
        args.model, in_channels=data.info["in_channels"], out_channels=1, pos_dim=1, **model_args
    )
    if args.temperature is not None or args.slice_init:
        for block in net.blocks:
            if args.temperature is not None:
                torch.nn.init.constant_(block.attn.temperature, args.temperature)
            if args.slice_init == "ortho":
                torch.nn.init.orthogonal_(block.attn.lin_slice.weight)
    if args.drift:
        add_drift(net)
    if args.local_slices:
        add_local_slices(net, SPLIT["resolution"])
    start = time.perf_counter()
    trainer = Trainer(net, data, config=config)
    metrics = trainer.fit()
    changes = {"drift": args.drift, "local slices": args.local_slices, "random shifts": args.roll}
    changes[f"slice-init {args.slice_init}"] = args.slice_init
    changes[f"temperature {args.temperature}"] = args.temperature is not None
    record = {"model": args.model, "inputs": args.inputs, "target": args.target}
    record.update(change=" ".join(c for c, on in changes.items() if on), settings=args.set)
    record["epochs"] = args.epochs
    record["parameters"] = sum(p.numel() for p in net.parameters())
    record.update(test_rel_l2=metrics["test_rel_l2"], train_loss=metrics["train_loss"])
    record["seconds"] = round(time.perf_counter() - start, 1)
    if args.drift:
        record["drifts"] = [round(float(b.drift), 5) for b in net.processor]
    if args.slices_report:
        record["slices"] = slices_report(net, trainer)
    return record


def floor() -> dict:
    """The error floor of a model that maps a mirrored u0 to the mirrored output, on the table's
    test split: the part of the Burgers map S that is even in u0, |S(u0) + S(-u0)| / 2 / |S(u0)|
    (S(-R u0) = -R S(u0), so such a model's best answer is the odd part of S)."""
    errors = []
    n, keep = 8192, 8192 // SPLIT["resolution"]
    for i in range(SPLIT["num_train"], SPLIT["num_train"] + SPLIT["num_test"]):
        rng = np.random.default_rng([SPLIT["seed"], i])
        u0 = gaussian_random_field(rng, n, alpha=2.0, tau=5.0, sigma=25.0, boundary="periodic")
        nu = 0.1 / (2 * math.pi)
        plus, minus = solve_burgers(u0, nu)[::keep], solve_burgers(-u0, nu)[::keep]
        errors.append(np.linalg.norm(plus + minus) / 2 / np.linalg.norm(plus))
    mean, median = float(np.mean(errors)), float(np.median(errors))
    return {"floor_mean": mean, "floor_median": median, **best_linear()}


def best_linear() -> dict:
    """The test error of the best translation-invariant linear map u0 -> u (a Fourier multiplier
    fitted by least squares on the training split), and the share of the target's energy in its
    lowest modes."""

    def fields(split):
        data = build_dataset("burgers", split, None, **SPLIT)
        return [torch.stack([d[key][:, 0] for d in data]).double() for key in ("x", "y")]

    (x, y), (x_test, y_test) = fields("train"), fields("test")
    fx, fy = torch.fft.rfft(x), torch.fft.rfft(y)
    multiplier = (fy * fx.conj()).sum(0) / (fx.abs() ** 2).sum(0).clamp_min(1e-30)
    pred = torch.fft.irfft(multiplier * torch.fft.rfft(x_test), x.shape[1])
    energy = (fy.abs() ** 2).mean(0).cumsum(0)
    return {
        "best_linear_rel_l2": float(((pred - y_test).norm(dim=1) / y_test.norm(dim=1)).mean()),
        "target_energy_modes_le_2": float(energy[2] / energy[-1]),
        "target_energy_modes_le_4": float(energy[4] / energy[-1]),
    }


def table(path: Path) -> str:
    trials = [json.loads(line) for line in path.read_text().splitlines()]
    rows = [
        [
            *(t["model"], t["inputs"], t["target"], t["change"] or "-"),
            *(", ".join(t["settings"]) or "preset", t["epochs"], f"{t['test_rel_l2']:.4f}"),
            *(f"{t['train_loss']:.4f}", f"{t['seconds']:.0f} s"),
        ]
        for t in trials
        if "floor_mean" not in t
    ]
    headers = "model|inputs|target|model change|settings over the preset|epochs|test rel. L2|"
    return markdown_table(headers + "train loss|wall", rows)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.table:
        print(table(args.log))
        return
    if args.floor:
        record = floor()
    elif args.model:
        record = trial(args)
    else:
        raise SystemExit("give a model, --floor or --table")
    append_line(args.log, record)
    print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()

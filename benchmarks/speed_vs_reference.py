"""Training steps of meshop against the papers' reference formulations, side by side in one process.

Each configuration builds meshop's model and the reference formulation of ``reference.py``
(the Galerkin Transformer authors' encoder layer, the PiT authors' model, the ONO authors'
``ONO2``), and for PiT also the dense form of ``models.py`` (meshop's weights on ``[B, N, C]``
tensors), on the same inputs. A training step is forward, loss, backward and an Adam step.
The implementations are timed interleaved (one step of each in turn, ``--repeats`` rounds after
one warm-up step each) at every thread count; the table reports each one's median step time and
the ratio reference / meshop, of wall-clock time and of the process's CPU time (on a loaded
machine the CPU time, which leaves out the time the process waited for a core, is the steadier of
the two). Interleaving spreads the load of a shared machine over all implementations alike;
medians damp the rest. Every step trains on the same batch, as every epoch
after the first does on its samples: meshop's neighbour lists are then kept from the warm-up step
(the reference recomputes its quantile masks in every step, as the authors' code does).
meshop's ONO runs with the options that make it the authors' ``ONO2`` (batch whitening with a
running moment, no value projection, the raw sum as inner product, linear attention without layer
norms or coordinates, a linear last stage; ``ONO_AUTHORS``), once with the authors' whitening but
meshop's blocks (per-head layer norms and coordinates in the linear attention, a two-layer last
FFN: more work by design), and once with meshop's defaults (per-sample orthonormalisation, value
projection).

    python benchmarks/speed_vs_reference.py                 # full table, 1 and 2 threads
    python benchmarks/speed_vs_reference.py --quick         # smoke test at tiny sizes
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from common import (
    RESULTS,
    SECTION_END,
    SECTION_START,
    fmt_time,
    machine,
    markdown_table,
    progress,
)

#: the Galerkin Transformer's 1D encoder (Burgers, Table 5) and the issue's model settings
GT_CHANNELS, GT_HEADS, GT_LAYERS, GT_BATCH = 96, 1, 4, 4


def parse(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke test)")
    parser.add_argument(
        "--threads", default="1,2", help="comma-separated torch thread counts (default: 1,2)"
    )
    parser.add_argument("--repeats", type=int, default=None, help="timed rounds (default 5; 2)")
    parser.add_argument("--only", default=None, help="run only cases whose name contains this")
    parser.add_argument(
        "--note", default="measured under load", help="a note printed under the tables"
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder of the result files")
    args = parser.parse_args(argv)
    args.thread_counts = [int(t) for t in args.threads.split(",")]
    if args.repeats is None:
        args.repeats = 2 if args.quick else 5
    if args.repeats < 1 or min(args.thread_counts) < 1:
        raise SystemExit("--repeats and every --threads entry must be positive")
    return args


def _params(module) -> int:
    return sum(p.numel() for p in module.parameters())


def _trainer(net, forward):
    """A training step: ``forward()`` returns the loss."""
    import torch

    optimizer = torch.optim.Adam(net.parameters(), lr=1e-4)

    def step():
        optimizer.zero_grad(set_to_none=True)
        forward().backward()
        optimizer.step()

    return step


def galerkin_case(attention: str, n: int) -> dict:
    """The encoder of the Galerkin Transformer (4 layers, d = 96, 1 head, 1D, batch 4)."""
    import torch
    from reference import GalerkinReferenceEncoder

    from meshop.nn import GalerkinEncoderLayer

    torch.manual_seed(0)
    b, d = GT_BATCH, GT_CHANNELS
    x = torch.randn(b, n, d)
    pos = torch.linspace(0, 1, n).repeat(b, 1)[..., None]  # [B, n, 1]
    batch = torch.arange(b).repeat_interleave(n)
    ours = torch.nn.ModuleList(
        GalerkinEncoderLayer(d, 1, attention, heads=GT_HEADS) for _ in range(GT_LAYERS)
    )
    ref = GalerkinReferenceEncoder(d, GT_HEADS, 1, GT_LAYERS, attention)

    def meshop_loss():
        h = x.view(b * n, d)
        for layer in ours:
            h = layer(h, pos.view(b * n, 1), batch)
        return h.square().mean()

    def reference_loss():
        return ref(x, pos).square().mean()

    return {
        "meshop": (_trainer(ours, meshop_loss), _params(ours)),
        "reference": (_trainer(ref, reference_loss), _params(ref)),
    }


def pit_case(n: int, latent: int, batch_size: int) -> dict:
    """PiT at the issue's setting: width 64, 2 heads, 4 blocks, 2 % quantile fields."""
    import models
    import torch
    from reference import PiTReference

    from meshop.train import relative_l2

    torch.manual_seed(0)
    data = models.batch_of(models.samples(n, batch_size, latent=latent))
    y = data.y.view(-1, 1)
    ours = models.build_model("PiT")
    ref = PiTReference(2 + models.PARAMS, 1, models.WIDTH, models.HEADS, models.BLOCKS)
    pos, features, latent_pos = models.dense_inputs(data, batch_size)

    def loss(pred):
        return relative_l2(pred.reshape(-1, 1), y, data.batch, batch_size)

    return {
        "meshop": (_trainer(ours, lambda: loss(ours(data))), _params(ours)),
        "reference": (
            _trainer(ref, lambda: loss(ref(features, pos, latent_pos))),
            _params(ref),
        ),
        "dense": (
            _trainer(ours, lambda: loss(models.dense_pit(ours, pos, features, latent_pos))),
            _params(ours),
        ),
    }


#: meshop's ONO options of the authors' orthogonal attention: batch whitening with a running
#: moment, no value projection W_V, the raw sum as inner product
ONO_AUTHORS_WHITENING = dict(orthonormalize="batch", value_projection=False, inner_product="sum")
#: ... and of the authors' blocks: linear attention without per-head layer norms or coordinates,
#: the last stage's FFN a single linear layer: the authors' ``ONO2``
ONO_AUTHORS = dict(
    ONO_AUTHORS_WHITENING, feature_layer_norm=False, feature_coordinates=False, linear_decoder=True
)
#: the options of ``ono_case(authors=...)``
ONO_OPTIONS = {True: ONO_AUTHORS, "whitening": ONO_AUTHORS_WHITENING, False: {}}


def ono_model(authors: bool | str):
    """meshop's ONO at the benchmark's sizes: the authors' model (``True``), the authors'
    whitening in meshop's blocks (``"whitening"``) or meshop's defaults (``False``)."""
    from meshop.models import ONO

    return ONO(
        3,
        1,
        2,
        64,
        layers=4,
        k=16,
        heads=4,
        feature_attention="linear",
        mlp_ratio=1,
        **ONO_OPTIONS[authors],
    )


def ono_case(n: int, batch_size: int, grid: bool, authors: bool | str = True) -> dict:
    """ONO: width 64, 4 layers, 4 heads, k = 16, mlp_ratio 1, linear feature attention, on one
    input field; meshop as the authors' model, with the authors' whitening in meshop's blocks, or
    with its defaults (see :func:`ono_model`)."""
    import torch
    from reference import ONOReference

    from meshop.data import from_points, grid_points, make_loader
    from meshop.train import relative_l2

    torch.manual_seed(0)
    side = round(n**0.5)
    samples = []
    for _ in range(batch_size):
        pos = grid_points((side, side)) if grid else torch.rand(n, 2)
        f = torch.randn(len(pos))
        samples.append(from_points(pos, x=f, y=torch.sin(3 * pos[:, 0]) * f))
    data = next(iter(make_loader(samples, batch_size=batch_size)))
    count = len(samples[0].pos)
    y = data.y.view(-1, 1)
    ours = ono_model(authors)
    ref = ONOReference(3, 1, width=64, layers=4, heads=4, psi_dim=16, mlp_ratio=1)
    features = torch.cat([data.pos, data.x], dim=-1).view(batch_size, count, 3)

    def loss(pred):
        return relative_l2(pred.reshape(-1, 1), y, data.batch, batch_size)

    return {
        "meshop": (_trainer(ours, lambda: loss(ours(data))), _params(ours)),
        "reference": (_trainer(ref, lambda: loss(ref(features))), _params(ref)),
    }


def cases(quick: bool) -> list[tuple[str, callable, dict]]:
    """(name, builder, its arguments)."""
    if quick:
        return [
            ("Galerkin encoder, n=256", galerkin_case, dict(attention="galerkin", n=256)),
            ("Fourier encoder, n=128", galerkin_case, dict(attention="fourier", n=128)),
            ("PiT, 150 / 150 nodes, batch 2", pit_case, dict(n=150, latent=150, batch_size=2)),
            ("PiT, 150 / 40 nodes, batch 2", pit_case, dict(n=150, latent=40, batch_size=2)),
            ("ONO, 8x8 grid, batch 3", ono_case, dict(n=64, batch_size=3, grid=True)),
            (
                "ONO, 8x8 grid, batch 3, meshop defaults",
                ono_case,
                dict(n=64, batch_size=3, grid=True, authors=False),
            ),
        ]
    return [
        ("Galerkin encoder, n=2048", galerkin_case, dict(attention="galerkin", n=2048)),
        ("Galerkin encoder, n=8192", galerkin_case, dict(attention="galerkin", n=8192)),
        ("Fourier encoder, n=2048", galerkin_case, dict(attention="fourier", n=2048)),
        ("PiT, 972 / 972 nodes, batch 8", pit_case, dict(n=972, latent=972, batch_size=8)),
        ("PiT, 972 / 256 nodes, batch 8", pit_case, dict(n=972, latent=256, batch_size=8)),
        ("ONO, 16x16 grid, batch 20", ono_case, dict(n=256, batch_size=20, grid=True)),
        ("ONO, 972 nodes, batch 8", ono_case, dict(n=972, batch_size=8, grid=False)),
        (
            "ONO, 16x16 grid, batch 20, meshop's blocks",
            ono_case,
            dict(n=256, batch_size=20, grid=True, authors="whitening"),
        ),
        (
            "ONO, 16x16 grid, batch 20, meshop defaults",
            ono_case,
            dict(n=256, batch_size=20, grid=True, authors=False),
        ),
    ]


def time_interleaved(impls: dict, repeats: int) -> dict[str, list[tuple[float, float]]]:
    """One warm-up step of each implementation, then ``repeats`` rounds of one step of each;
    (wall-clock, CPU) seconds of every timed step."""
    for step, _ in impls.values():
        step()
    times = {name: [] for name in impls}
    for _ in range(repeats):
        for name, (step, _) in impls.items():
            start, cpu = time.perf_counter(), time.process_time()
            step()
            times[name].append((time.perf_counter() - start, time.process_time() - cpu))
    return times


def run(args, done=None) -> list[dict]:
    """Every case at every thread count; ``done(records)`` after each thread count (so that a
    long run keeps the tables of the thread counts it finished)."""
    import torch

    records = []
    for threads in args.thread_counts:
        torch.set_num_threads(threads)
        for name, build, params in cases(args.quick):
            if args.only and args.only not in name:
                continue
            impls = build(**params)
            times = time_interleaved(impls, args.repeats)
            record = dict(case=name, threads=threads, **params)
            for impl, samples in times.items():
                wall, cpu = [t for t, _ in samples], [c for _, c in samples]
                record[impl] = {
                    "median_s": statistics.median(wall),
                    "min_s": min(wall),
                    "times_s": wall,
                    "median_cpu_s": statistics.median(cpu),
                    "cpu_times_s": cpu,
                    "parameters": impls[impl][1],
                }
            records.append(record)
            progress(
                f"{threads} thread(s), {name}: "
                + ", ".join(
                    f"{k} {fmt_time(v['median_s'])}" for k, v in record.items() if k in impls
                )
            )
        if done is not None:
            done(records)
    return records


def table(records: list[dict], threads: int) -> str:
    rows = []
    for r in records:
        if r["threads"] != threads:
            continue
        ours, ref, dense = r["meshop"], r["reference"], r.get("dense")
        rows.append(
            [
                r["case"],
                f"{ref['parameters']:,}",
                f"{ours['parameters']:,}",
                fmt_time(ref["median_s"]),
                fmt_time(ours["median_s"]),
                f"{ref['median_s'] / ours['median_s']:.2f}x",
                f"{ref['median_cpu_s'] / ours['median_cpu_s']:.2f}x",
                "-" if dense is None else fmt_time(dense["median_s"]),
                "-" if dense is None else f"{dense['median_s'] / ours['median_s']:.2f}x",
            ]
        )
    headers = [
        "configuration",
        "reference parameters",
        "meshop parameters",
        "reference step",
        "meshop step",
        "speed-up",
        "speed-up in CPU time",
        "dense form step",
        "vs dense form",
    ]
    return markdown_table(headers, rows)


def write(args, records: list[dict], echo: bool = True) -> str:
    info = {**machine(), "threads": args.thread_counts, "quick": args.quick, "note": args.note}
    header = (
        f"Measured {info['date']} with `{info['command']}` on {info['cpu']} "
        f"({info['cpu_cores']} cores), torch {info['torch']}, {args.note}: median of "
        f"{args.repeats} interleaved training steps (forward, loss, backward, Adam) per "
        f"implementation after one warm-up step each; speed-up: reference / meshop, of the "
        f"wall-clock medians and of the medians of the process's CPU time."
    )
    parts = ["## Training steps against the reference code", "", SECTION_START, header, ""]
    for threads in args.thread_counts:
        if any(r["threads"] == threads for r in records):
            parts += [f"### {threads} thread(s)", "", table(records, threads), ""]
    parts += [SECTION_END, ""]
    text = "\n".join(parts)
    if echo:
        print(text, flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "speed_vs_reference.md").write_text(text)
    (args.out / "speed_vs_reference.json").write_text(
        json.dumps({"machine": info, "records": records}, indent=1) + "\n"
    )
    return text


def main(argv=None) -> None:
    args = parse(argv)
    write(args, run(args, done=lambda records: write(args, records, echo=False)))


if __name__ == "__main__":
    main()

"""Inference on meshes of up to ten million nodes and training steps on a million: every model at
its CPU preset size, whole and in chunks (checkpointed chunks for the training steps).

    python -m benchmarks.speed.large_meshes            # 1e5, 1e6, 1e7 nodes (about an hour)
    python -m benchmarks.speed.large_meshes --quick    # smoke test
    python -m benchmarks.speed.large_meshes --models pit,ono --out A &   # two runs side by side,
    python -m benchmarks.speed.large_meshes --models galerkin,transolver,mlp --out B   # one core
    python -m benchmarks.speed.large_meshes --tables-from A/large_meshes.json B/large_meshes.json
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from benchmarks.lib import common
from benchmarks.lib.workloads import PRESET_LATENT, PRESET_MODELS, build_preset, unit_square
from meshop.data import add_latent_mesh
from meshop.train.inference import predict_in_chunks


def prepare(model: str, n: int, chunk_nodes: int, device: str, train: bool = False):
    """One forward of ``model`` on ``n`` nodes, whole (``chunk_nodes=0``) or in chunks; with
    ``train`` one training step (forward and backward in training mode). The latent mesh is
    built before the measured call, as ``meshop predict`` builds it before predicting."""
    torch.manual_seed(0)
    module = build_preset(model).to(device).eval()
    data = unit_square(n, device)
    if model in ("pit", "galerkin"):
        data = add_latent_mesh(data, num_points=PRESET_LATENT, seed=0)

    def train_step():
        module.train()
        out = module.forward_chunked(data, chunk_nodes) if chunk_nodes else module(data)
        out.square().mean().backward()
        module.zero_grad(set_to_none=True)

    return train_step if train else lambda: predict_in_chunks(module, data, chunk_nodes)


def sizes(quick: bool) -> list[int]:
    return [2000, 20_000] if quick else [100_000, 1_000_000, 10_000_000]


def options(parser) -> None:
    parser.add_argument("--chunk-nodes", type=int, default=2**16)
    parser.add_argument("--whole-up-to", type=int, default=1_000_000)
    parser.add_argument("--train-up-to", type=int, default=1_000_000)
    parser.add_argument("--models", default=",".join(PRESET_MODELS))
    parser.add_argument("--sizes", default=None, help="comma-separated node counts")
    parser.add_argument(
        "--tables-from",
        type=Path,
        nargs="+",
        default=None,
        help="result files of runs split by --models: one table of their records",
    )


TITLE = "Inference on large meshes: every model whole and in chunks"


def main(argv=None) -> None:
    args = common.parse_args(__doc__.splitlines()[0], argv, options)
    if args.tables_from:
        return merge(args)
    chunk = 1000 if args.quick else args.chunk_nodes
    chosen = [int(float(n)) for n in args.sizes.split(",")] if args.sizes else sizes(args.quick)
    modes = [
        ("whole", 0, False),
        ("chunks", chunk, False),
        ("train, whole", 0, True),
        ("train, chunks", chunk, True),
    ]
    records = []
    for model in args.models.split(","):
        for n in chosen:
            for mode, chunk_nodes, train in modes:
                if n > largest(chunk_nodes, train, args):
                    continue
                common.progress(f"{model} N={n} {mode}")
                record = dict(model=model, n=n, mode=mode, chunk_nodes=chunk_nodes)
                params = dict(model=model, n=n, chunk_nodes=chunk_nodes, train=train)
                record |= common.run_case(
                    prepare,
                    params,
                    device="cpu",
                    threads=args.threads,
                    timeout=args.timeout,
                    min_time=0.0,
                    max_repeats=1,
                )
                records.append(record)
                common.write_results(  # after every case: a cut run keeps what it measured
                    "large_meshes",
                    TITLE,
                    args,
                    {f"CPU, one sample, chunks of {chunk:,} nodes": table(records)},
                    records,
                )


def merge(args) -> None:
    """One table of the records of several result files (runs split by ``--models``, side by
    side); the header names every run's command and the highest of their load averages."""
    found = [json.loads(path.read_text()) for path in args.tables_from]
    chunks = {r["chunk_nodes"] for data in found for r in data["records"] if r["chunk_nodes"]}
    if len(chunks) > 1 or len({data["machine"]["threads"] for data in found}) > 1:
        raise SystemExit("--tables-from: the runs used different --chunk-nodes or --threads")
    records = [r for data in found for r in data["records"]]
    info = dict(found[0]["machine"])
    info["command"] = "` and `".join(data["machine"]["command"] for data in found)
    if all("load" in data["machine"] for data in found):
        info["load"] = [max(x) for x in zip(*(data["machine"]["load"] for data in found))]
    info["commit"] = ", ".join(dict.fromkeys(data["machine"].get("commit", "?") for data in found))
    info["note"] = (
        f"{len(found)} runs split by --models side by side, {info['threads']} thread(s) each"
    )
    args.threads = info["threads"]
    caption = f"CPU, one sample, chunks of {chunks.pop() if chunks else 0:,} nodes"
    common.write_results("large_meshes", TITLE, args, {caption: table(records)}, records, info)


def largest(chunk_nodes: int, train: bool, args) -> float:
    """The largest N of a row: whole passes up to ``--whole-up-to`` nodes (training steps a tenth
    of that: they keep every layer's intermediates), chunked training steps up to
    ``--train-up-to``, chunked inference always."""
    if not chunk_nodes:
        return args.whole_up_to // 10 if train else args.whole_up_to
    return args.train_up_to if train else float("inf")


def table(records: list[dict]) -> str:
    rows = [
        [
            PRESET_MODELS[r["model"]],
            common.fmt_count(r["n"]),
            r["mode"],
            common.fmt_time(r.get("time_s")),
            common.growth_exponent(records, r, same=("model", "mode")),
            common.fmt_mb(r.get("peak_mb")),
            common.fmt_mb(r.get("total_peak_mb")),
            r.get("error", ""),
        ]
        for r in records
    ]
    headers = "model|N|pass|time|time growth exponent|peak memory (forward)|peak memory (total)"
    return common.markdown_table(headers + "|notes", rows)


if __name__ == "__main__":
    main()

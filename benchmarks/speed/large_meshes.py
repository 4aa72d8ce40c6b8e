"""Inference on meshes of up to ten million nodes and training steps on a million: every model,
whole and in chunks.

One sample of N random nodes in the unit square with one input field and quadrature weights
``1/N``; each model at the size ``meshop train`` gives it on the CPU datasets
(:mod:`meshop.train.presets`) and evaluated once (evaluation mode, no gradients):

- PiT: width 64, 2 heads, 4 blocks, 1% quantile receptive fields, 256 farthest-point latent nodes;
- the Galerkin Transformer on meshes: 64 channels, 4 layers, 4 heads, global cross attention to
  256 farthest-point latent nodes (its preset has no latent mesh, so its cross attention would be
  N x N: at scale, train and predict it with ``--latent-points``);
- ONO: width 64, 4 layers, 4 heads, k = 16, Galerkin feature attention;
- the Transolver: width 64, 4 layers, 4 heads, 32 slices;
- the MLP baseline: 4 layers of width 128.

``whole`` is ``model(data)``; ``chunks`` is :func:`meshop.nn.chunked.predict_in_chunks` with
``--chunk-nodes`` nodes per chunk (default 65,536, as ``meshop predict`` chooses). ``train``
rows are one training step (forward, a mean-square loss, backward) in training mode, whole or
with every chunk checkpointed (``model.forward_chunked``, what ``TrainConfig.chunk_nodes`` runs),
at up to ``--train-up-to`` nodes. The latent
mesh (farthest point sampling) is built before the measured call, as ``meshop predict`` does it
before predicting. Peak memory is the resident set of the measuring process: "forward" counts
what the call adds to the inputs, "total" is the process's high-water mark (the interpreter,
torch, the model and the sample included). Whole passes above ``--whole-up-to`` nodes are left
out (they need more memory than the machine has), whole training steps above a tenth of it. The
growth exponent of the time between consecutive N is 1 for linear growth.

    python -m benchmarks.speed.large_meshes            # 1e5, 1e6, 1e7 nodes (about an hour)
    python -m benchmarks.speed.large_meshes --quick    # smoke test
"""

from __future__ import annotations

from benchmarks.lib.common import (
    fmt_count,
    fmt_mb,
    fmt_time,
    growth_exponent,
    markdown_table,
    parse_args,
    progress,
    result_of,
    run_case,
    write_results,
)

#: the models and how they are built, by name
MODELS = {
    "pit": "PiT(width=64, heads=2, blocks=4), 1% quantile fields, 256 latent nodes",
    "galerkin": "GalerkinTransformer(channels=64, layers=4, heads=4), 256 latent nodes",
    "ono": "ONO(width=64, layers=4, heads=4, k=16)",
    "transolver": "Transolver(width=64, layers=4, heads=4, slices=32)",
    "mlp": "MLPBaseline(hidden_channels=128, num_layers=4)",
}
LATENT = 256


def build(name: str):
    from meshop.models import ONO, GalerkinTransformer, MLPBaseline, PiT, Transolver

    if name == "pit":
        return PiT(3, 1, 2, width=64, heads=2, blocks=4)
    if name == "galerkin":
        return GalerkinTransformer(3, 1, 2, channels=64, layers=4, heads=4, path="mesh")
    if name == "ono":
        return ONO(3, 1, 2, width=64, layers=4, heads=4, k=16)
    if name == "transolver":
        return Transolver(3, 1, 2, width=64, layers=4, heads=4, slices=32)
    return MLPBaseline(3, 1, 2)


def prepare(model: str, n: int, chunk_nodes: int, device: str, train: bool = False):
    """One forward of ``model`` on ``n`` nodes, whole (``chunk_nodes=0``) or in chunks; with
    ``train`` one training step (forward and backward in training mode)."""
    import torch

    from meshop.data import add_latent_mesh, from_points
    from meshop.nn.chunked import predict_in_chunks

    torch.manual_seed(0)
    module = build(model).to(device).eval()
    pos = torch.rand(n, 2, device=device)
    data = from_points(pos, torch.sin(6 * pos[:, :1]), weight=torch.full((n,), 1.0 / n))
    if model in ("pit", "galerkin"):
        data = add_latent_mesh(data, num_points=LATENT, seed=0)

    def step():
        predict_in_chunks(module, data, chunk_nodes)

    def train_step():
        module.train()
        out = module.forward_chunked(data, chunk_nodes) if chunk_nodes else module(data)
        out.square().mean().backward()
        module.zero_grad(set_to_none=True)

    return train_step if train else step


def sizes(quick: bool) -> list[int]:
    return [2000, 20_000] if quick else [100_000, 1_000_000, 10_000_000]


def main(argv=None) -> None:
    import argparse

    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--chunk-nodes", type=int, default=2**16)
    extra.add_argument("--whole-up-to", type=int, default=1_000_000)
    extra.add_argument("--train-up-to", type=int, default=1_000_000)
    extra.add_argument("--models", default=",".join(MODELS))
    extra.add_argument("--sizes", default=None, help="comma-separated node counts")
    options, rest = extra.parse_known_args(argv)
    args = parse_args(__doc__.splitlines()[0], rest)
    chunk = 1000 if args.quick else options.chunk_nodes
    chosen = sizes(args.quick)
    if options.sizes:
        chosen = [int(float(n)) for n in options.sizes.split(",")]
    records = []
    modes = [
        ("whole", 0, False),
        ("chunks", chunk, False),
        ("train, whole", 0, True),
        ("train, chunks", chunk, True),
    ]
    for model in options.models.split(","):
        for n in chosen:
            for mode, chunk_nodes, train in modes:
                if n > largest(chunk_nodes, train, options):
                    continue
                progress(f"{model} N={n} {mode}")
                record = dict(model=model, n=n, mode=mode, chunk_nodes=chunk_nodes)
                record |= run_case(
                    prepare,
                    dict(model=model, n=n, chunk_nodes=chunk_nodes, train=train),
                    device="cpu",
                    threads=args.threads,
                    timeout=args.timeout,
                    min_time=0.0,
                    max_repeats=1,
                )
                records.append(record)
                write(records, chunk, args)  # after every case: a cut run keeps what it measured


def write(records: list[dict], chunk: int, args) -> None:
    write_results(
        "large_meshes",
        "Inference on large meshes: every model whole and in chunks",
        args,
        {f"CPU, one sample, chunks of {chunk:,} nodes": table(records)},
        records,
    )


def largest(chunk_nodes: int, train: bool, options) -> float:
    """The largest N of a row: whole passes up to ``--whole-up-to`` nodes (training steps a tenth
    of that: they keep every layer's intermediates), chunked training steps up to
    ``--train-up-to``, chunked inference always."""
    if not chunk_nodes:
        return options.whole_up_to // 10 if train else options.whole_up_to
    return options.train_up_to if train else float("inf")


def table(records: list[dict]) -> str:
    rows = [
        [
            MODELS[r["model"]],
            fmt_count(r["n"]),
            r["mode"],
            fmt_time(result_of(r, "time_s")),
            growth_exponent(records, r, same=("model", "mode")),
            fmt_mb(result_of(r, "peak_mb")),
            fmt_mb(result_of(r, "total_peak_mb")),
            r.get("error", ""),
        ]
        for r in records
    ]
    headers = [
        "model",
        "N",
        "pass",
        "time",
        "time growth exponent",
        "peak memory (forward)",
        "peak memory (total)",
        "notes",
    ]
    return markdown_table(headers, rows)


if __name__ == "__main__":
    main()

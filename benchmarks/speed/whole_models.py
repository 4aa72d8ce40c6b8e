"""Whole models: training-step throughput and memory of PiT, Galerkin Transformer and ONO, PiT
against the same model written densely as the PiT authors' code does, and PiT inference on big
meshes.

The data mimics Elasticity: point clouds of N nodes in the unit square, 42 per-sample parameters,
one output field; the models get the node features ``[pos, params]`` (44 channels). The three
models share the sizes of the issue's PiT setting: width 64, 2 heads, 4 blocks, a 2% quantile
receptive field wherever one is local, and a latent mesh of 972 nodes (the input mesh at the
Elasticity size, farthest point sampling on the finer meshes). A training step is forward, relative
L2 loss, backward and an Adam step on one batch.

The dense PiT ("the paper's code") runs the same weights on [B, N, C] tensors: full distance
matrices, ``torch.quantile`` masks, softmax and einsum; the script checks that it agrees with
meshop's PiT first.

    python -m benchmarks.speed.whole_models            # full tables (several minutes on one core)
    python -m benchmarks.speed.whole_models --quick    # smoke test
"""

from __future__ import annotations

from benchmarks.lib.common import (
    comparison_table,
    dense_estimate,
    devices,
    fmt_count,
    fmt_mb,
    fmt_ratio,
    fmt_time,
    markdown_table,
    parse_args,
    progress,
    result_of,
    run_cli_case,
    skip_note,
    write_results,
)
from benchmarks.lib.settings import (
    ELASTICITY_NODES,
    PIT_BLOCKS,
    PIT_HEADS,
    PIT_KNN,
    PIT_LATENT,
    PIT_QUANTILE,
    PIT_WIDTH,
)
from benchmarks.lib.workloads import batch_of, build_model, samples
from meshop.testing import dense_inputs, dense_pit

MODELS = ("PiT", "Galerkin Transformer", "ONO")
#: dense matrices held at the peak per B * N * N_latent entries, before any dense case measured it
DEFAULT_K = 20.0


def prepare_training(impl: str, model: str, n: int, batch_size: int, device: str):
    """One training step of ``model`` on a batch of ``batch_size`` samples of ``n`` nodes."""
    import torch

    from meshop.train import relative_l2

    torch.manual_seed(0)
    net = build_model(model).to(device).train()
    batch = batch_of(samples(n, batch_size)).to(device)
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    inputs = dense_inputs(batch, batch_size) if impl == "dense" else None

    def step():
        optimizer.zero_grad(set_to_none=True)
        pred = net(batch) if impl == "meshop" else dense_pit(net, *inputs).reshape(-1, 1)
        loss = relative_l2(pred, batch.y.view(len(pred), -1), batch.batch, batch_size)
        loss.backward()
        optimizer.step()

    return step


def prepare_inference(n: int, fields: str, device: str):
    """PiT (eval, no autograd) on one mesh of ``n`` nodes with its 972-node latent mesh."""
    import torch

    torch.manual_seed(0)
    receptive = (
        dict(encoder_k=PIT_KNN, decoder_k=PIT_KNN)
        if fields == "knn"
        else dict(encoder_quantile=PIT_QUANTILE, decoder_quantile=PIT_QUANTILE)
    )
    net = build_model("PiT", **receptive).to(device).eval()
    data = samples(n, 1)[0].to(device)

    def step():
        with torch.no_grad():
            net(data)

    return step


def check_agreement(n: int, batch_size: int) -> float:
    """Largest difference between meshop's PiT and the dense form on one batch."""
    import torch

    torch.manual_seed(0)
    net = build_model("PiT").eval()
    batch = batch_of(samples(n, batch_size, latent=min(PIT_LATENT, n // 2)))
    with torch.no_grad():
        ours = net(batch)
        dense = dense_pit(net, *dense_inputs(batch, batch_size)).reshape(len(ours), -1)
    worst = float((ours - dense).abs().max())
    if worst > 1e-4:
        raise SystemExit(f"meshop's PiT and the dense form disagree by {worst:.2e}")
    return worst


def training_cases(quick: bool) -> list[tuple[int, int]]:
    """(nodes per sample, batch size): the Elasticity size and 10x, 100x (batch 1: eight samples
    of 97,200 nodes do not fit the shared benchmark machine)."""
    if quick:
        return [(200, 2), (400, 2)]
    n = ELASTICITY_NODES
    return [(n, 8), (10 * n, 8), (100 * n, 1)]


def inference_cases(quick: bool) -> list[tuple[int, str]]:
    if quick:
        return [(1000, "quantile"), (2000, "knn"), (4000, "knn")]
    return [
        (10**4, "quantile"),
        (10**5, "quantile"),
        (10**5, "knn"),
        (10**6, "quantile"),
        (10**6, "knn"),
    ]


def main(argv=None) -> None:
    args = parse_args(__doc__.splitlines()[0], argv)
    progress(f"meshop and dense PiT agree to {check_agreement(*training_cases(args.quick)[0]):.1e}")
    records = []
    for device in devices(args):
        for n, batch_size in training_cases(args.quick):
            for model in MODELS:
                for impl in ("meshop", "dense") if model == "PiT" else ("meshop",):
                    latent = min(PIT_LATENT, n)
                    record = dict(
                        device=device,
                        table="training",
                        model=model,
                        impl=impl,
                        n=n,
                        batch=batch_size,
                        elements=batch_size * n * latent,
                    )
                    key = {k: record[k] for k in ("device", "table", "impl")}
                    gb, k = dense_estimate(records, key, record["elements"], DEFAULT_K)
                    if impl == "dense" and device == "cpu" and gb > args.max_gb:
                        record["skipped"] = skip_note(gb, k, args.max_gb).replace(
                            "N_dst*N_src", "B*N*N_latent"
                        )
                        record["estimated_peak_mb"] = gb * 1024
                    else:
                        progress(f"{device} training {model} {impl} N={n} batch={batch_size}")
                        record |= run_cli_case(
                            prepare_training,
                            dict(impl=impl, model=model, n=n, batch_size=batch_size),
                            device,
                            args,
                            warm=True,  # epochs after the first reuse the neighbour lists
                        )
                    if "time_s" in record:
                        record["samples_per_s"] = batch_size / record["time_s"]
                    records.append(record)
        for n, fields in inference_cases(args.quick):
            record = dict(device=device, table="inference", model="PiT", n=n, fields=fields)
            ran = [
                r
                for r in records
                if r["device"] == device and r["table"] == "inference" and "peak_mb" in r
            ]
            largest = max(ran, key=lambda r: r["n"], default=None)
            estimate = largest["peak_mb"] / largest["n"] * n / 1024 if largest else 0.0
            if device == "cpu" and estimate > args.max_gb:
                record["skipped"] = (
                    f"skipped: would need {fmt_mb(estimate * 1024)} > {args.max_gb:g} GB "
                    f"(memory grows linearly: {fmt_mb(largest['peak_mb'])} at "
                    f"{fmt_count(largest['n'])} nodes)"
                )
            else:
                progress(f"{device} PiT inference N={n} fields={fields}")
                record |= run_cli_case(prepare_inference, dict(n=n, fields=fields), device, args)
            records.append(record)
    tables = {}
    for device in devices(args):
        tables[f"{device.upper()}, training step"] = training_table(records, device)
        tables[f"{device.upper()}, PiT training step, meshop vs dense"] = comparison_table(
            records,
            {"device": device, "table": "training", "model": "PiT"},
            ["n", "batch"],
            ["nodes", "batch"],
        )
        tables[f"{device.upper()}, PiT inference (one mesh, no autograd)"] = inference_table(
            records, device
        )
    write_results(
        "models",
        f"Whole models (width {PIT_WIDTH}, {PIT_HEADS} heads, {PIT_BLOCKS} blocks, "
        f"latent mesh {PIT_LATENT} nodes)",
        args,
        tables,
        records,
    )


def training_table(records: list[dict], device: str) -> str:
    rows = []
    for r in records:
        if r["device"] == device and r["table"] == "training" and r["impl"] == "meshop":
            reference = next(
                (
                    s
                    for s in records
                    if s["device"] == device
                    and s.get("table") == "training"
                    and s["model"] == "PiT"
                    and s["impl"] == "meshop"
                    and s["n"] == r["n"]
                ),
                None,
            )
            rows.append(
                [
                    r["model"],
                    fmt_count(r["n"]),
                    r["batch"],
                    fmt_time(result_of(r, "time_s")),
                    f"{r['samples_per_s']:.1f}" if "samples_per_s" in r else "-",
                    fmt_ratio(result_of(r, "samples_per_s"), result_of(reference, "samples_per_s")),
                    fmt_mb(result_of(r, "peak_mb")),
                    r.get("error", ""),
                ]
            )
    headers = ["model", "nodes", "batch", "step", "samples/s", "vs PiT", "peak memory", "notes"]
    return markdown_table(headers, rows)


def inference_table(records: list[dict], device: str) -> str:
    fields = {
        "quantile": f"{PIT_QUANTILE:.0%} quantile (encoder and decoder)",
        "knn": f"{PIT_KNN} nearest neighbours (encoder and decoder)",
    }
    rows = [
        [
            fmt_count(r["n"]),
            fields[r["fields"]],
            fmt_time(result_of(r, "time_s")),
            fmt_mb(result_of(r, "peak_mb")),
            fmt_mb(result_of(r, "total_peak_mb")),
            r.get("skipped") or r.get("error", ""),
        ]
        for r in records
        if r["device"] == device and r["table"] == "inference"
    ]
    headers = ["nodes", "receptive fields", "time", "peak memory", "process peak", "notes"]
    return markdown_table(headers, rows)


if __name__ == "__main__":
    main()

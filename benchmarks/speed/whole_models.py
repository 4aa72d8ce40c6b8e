"""Whole models: training steps of PiT, the Galerkin Transformer and ONO, PiT against its dense form
as the PiT authors' code computes it, and PiT inference on big meshes.

    python -m benchmarks.speed.whole_models            # full tables (several minutes on one core)
    python -m benchmarks.speed.whole_models --quick    # smoke test
"""

from __future__ import annotations

import torch

from benchmarks.lib import common
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
from meshop.train import relative_l2

MODELS = ("PiT", "Galerkin Transformer", "ONO")
#: dense matrices held at the peak per B * N * N_latent entries, before any dense case measured it
DEFAULT_K = 20.0
FIELDS = {
    "quantile": f"{PIT_QUANTILE:.0%} quantile (encoder and decoder)",
    "knn": f"{PIT_KNN} nearest neighbours (encoder and decoder)",
}


def prepare_training(impl: str, model: str, n: int, batch_size: int, device: str):
    """One training step of ``model`` on a batch of ``batch_size`` samples of ``n`` nodes."""
    torch.manual_seed(0)
    net = build_model(model).to(device).train()
    batch = batch_of(samples(n, batch_size)).to(device)
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    inputs = dense_inputs(batch, batch_size) if impl == "dense" else None

    def step():
        optimizer.zero_grad(set_to_none=True)
        pred = net(batch) if impl == "meshop" else dense_pit(net, *inputs).reshape(-1, 1)
        relative_l2(pred, batch.y.view(len(pred), -1), batch.batch, batch_size).backward()
        optimizer.step()

    return step


def prepare_inference(n: int, fields: str, device: str):
    """PiT (eval, no autograd) on one mesh of ``n`` nodes with its 972-node latent mesh."""
    torch.manual_seed(0)
    receptive = (
        dict(encoder_k=PIT_KNN, decoder_k=PIT_KNN)
        if fields == "knn"
        else dict(encoder_quantile=PIT_QUANTILE, decoder_quantile=PIT_QUANTILE)
    )
    net = build_model("PiT", **receptive).to(device).eval()
    data = samples(n, 1)[0].to(device)
    return torch.no_grad()(lambda: net(data))


def check_agreement(n: int, batch_size: int) -> float:
    """Largest difference between meshop's PiT and the dense form on one batch."""
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
    sizes = (10**4, 10**5, 10**6)
    return [(n, f) for n in sizes for f in ("quantile", "knn") if (n, f) != (10**4, "knn")]


def measure_training(args, device: str, records: list[dict]) -> None:
    for n, batch_size in training_cases(args.quick):
        for model in MODELS:
            for impl in ("meshop", "dense") if model == "PiT" else ("meshop",):
                record = dict(device=device, table="training", model=model, impl=impl, n=n)
                record.update(batch=batch_size, elements=batch_size * n * min(PIT_LATENT, n))
                key = ("device", "table", "impl")
                if impl == "meshop" or not common.skip_dense(
                    records, record, key, DEFAULT_K, args, "B*N*N_latent"
                ):
                    common.progress(f"{device} training {model} {impl} N={n} batch={batch_size}")
                    params = dict(impl=impl, model=model, n=n, batch_size=batch_size)
                    # warm: epochs after the first reuse the neighbour lists
                    record |= common.run_cli_case(prepare_training, params, device, args, warm=True)
                if "time_s" in record:
                    record["samples_per_s"] = batch_size / record["time_s"]
                records.append(record)


def measure_inference(args, device: str, records: list[dict]) -> None:
    for n, fields in inference_cases(args.quick):
        record = dict(device=device, table="inference", model="PiT", n=n, fields=fields)
        ran = [r for r in records if r["table"] == "inference" and "peak_mb" in r]
        ran = [r for r in ran if r["device"] == device]
        largest = max(ran, key=lambda r: r["n"], default=None)
        estimate = largest["peak_mb"] / largest["n"] * n / 1024 if largest else 0.0
        if device == "cpu" and estimate > args.max_gb:
            record["skipped"] = (
                f"skipped: would need {common.fmt_mb(estimate * 1024)} > {args.max_gb:g} GB "
                f"(memory grows linearly: {common.fmt_mb(largest['peak_mb'])} at "
                f"{common.fmt_count(largest['n'])} nodes)"
            )
        else:
            common.progress(f"{device} PiT inference N={n} fields={fields}")
            record |= common.run_cli_case(prepare_inference, dict(n=n, fields=fields), device, args)
        records.append(record)


def main(argv=None) -> None:
    args = common.parse_args(__doc__.splitlines()[0], argv)
    common.progress(
        f"meshop and dense PiT agree to {check_agreement(*training_cases(args.quick)[0]):.1e}"
    )
    records, tables = [], {}
    for device in common.devices(args):
        measure_training(args, device, records)
        measure_inference(args, device, records)
    for device in common.devices(args):
        on = device.upper()
        tables[f"{on}, training step"] = training_table(records, device)
        pit = {"device": device, "table": "training", "model": "PiT"}
        comparison = common.comparison_table(records, pit, ["n", "batch"], ["nodes", "batch"])
        tables[f"{on}, PiT training step, meshop vs dense"] = comparison
        tables[f"{on}, PiT inference (one mesh, no autograd)"] = inference_table(records, device)
    title = f"Whole models (width {PIT_WIDTH}, {PIT_HEADS} heads, {PIT_BLOCKS} blocks, "
    common.write_results("models", f"{title}latent mesh {PIT_LATENT} nodes)", args, tables, records)


def training_table(records: list[dict], device: str) -> str:
    def meshop(r: dict) -> bool:
        return r["device"] == device and r["table"] == "training" and r["impl"] == "meshop"

    pit = {r["n"]: r.get("samples_per_s") for r in filter(meshop, records) if r["model"] == "PiT"}
    rows = []
    for r in filter(meshop, records):
        speed = r.get("samples_per_s")
        row = [r["model"], common.fmt_count(r["n"]), r["batch"], common.fmt_time(r.get("time_s"))]
        row += ["-" if speed is None else f"{speed:.1f}", common.fmt_ratio(speed, pit.get(r["n"]))]
        rows.append([*row, common.fmt_mb(r.get("peak_mb")), r.get("error", "")])
    return common.markdown_table("model|nodes|batch|step|samples/s|vs PiT|peak memory|notes", rows)


def inference_table(records: list[dict], device: str) -> str:
    rows = []
    for r in (r for r in records if r["device"] == device and r["table"] == "inference"):
        row = [common.fmt_count(r["n"]), FIELDS[r["fields"]], common.fmt_time(r.get("time_s"))]
        row += [common.fmt_mb(r.get("peak_mb")), common.fmt_mb(r.get("total_peak_mb"))]
        rows.append([*row, common.notes_of(r)])
    return common.markdown_table("nodes|receptive fields|time|peak memory|process peak|notes", rows)


if __name__ == "__main__":
    main()

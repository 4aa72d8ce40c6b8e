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

    python benchmarks/models.py            # full tables (several minutes on one core)
    python benchmarks/models.py --quick    # smoke test
"""

from __future__ import annotations

from common import (
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

ELASTICITY_NODES, PARAMS, LATENT = 972, 42, 972
WIDTH, HEADS, BLOCKS, QUANTILE = 64, 2, 4, 0.02
MODELS = ("PiT", "Galerkin Transformer", "ONO")
#: dense matrices held at the peak per B * N * N_latent entries, before any dense case measured it
DEFAULT_K = 20.0


def build_model(name: str, **fields):
    """One of the three models at the shared sizes; ``fields`` override PiT's receptive fields."""
    from meshop.models import ONO, GalerkinTransformer, PiT

    in_channels = 2 + PARAMS
    if name == "PiT":
        receptive = fields or dict(encoder_quantile=QUANTILE, decoder_quantile=QUANTILE)
        # the paper's unweighted form, which dense_pit below computes
        return PiT(
            in_channels, 1, 2, width=WIDTH, heads=HEADS, blocks=BLOCKS, weighted=False, **receptive
        )
    if name == "Galerkin Transformer":
        return GalerkinTransformer(
            in_channels,
            1,
            2,
            channels=WIDTH,
            heads=HEADS,
            layers=BLOCKS,
            path="mesh",
            cross_heads=HEADS,
            quantile=QUANTILE,
        )
    return ONO(in_channels, 1, 2, width=WIDTH, layers=BLOCKS, heads=HEADS)


def samples(n: int, count: int, latent: int = LATENT, seed: int = 0):
    """``count`` Elasticity-like samples of ``n`` random nodes each (different meshes), with a
    farthest-point latent mesh of ``latent`` nodes when ``latent < n``."""
    import math

    import torch

    from meshop.data import add_latent_mesh, from_points

    generator = torch.Generator().manual_seed(seed)
    out = []
    for i in range(count):
        pos = torch.rand(n, 2, generator=generator)
        params = torch.randn(PARAMS, generator=generator)
        y = torch.sin(2 * math.pi * pos[:, 0]) * params[0] + pos[:, 1] * params[1]
        data = from_points(pos, y=y, params=params)
        if latent < n:
            add_latent_mesh(data, latent, seed=seed + i)
        out.append(data)
    return out


def batch_of(data_list):
    from meshop.data import make_loader

    return next(iter(make_loader(data_list, batch_size=len(data_list))))


def dense_attention(layer, u, pos_src, pos_dst, quantile=None):
    """Position-attention as the PiT authors' code computes it, on [B, N, C] tensors.

    Args:
        layer: a meshop PositionAttention or LocalPositionAttention (its W^V and lambda).
        u: [B, N_src, C] source features; pos_src [B, N_src, D], pos_dst [B, N_dst, D].
        quantile: the local receptive field (None: global attention).
    """
    import torch

    b, n_src = u.shape[:2]
    v = layer.lin_v(u).view(b, n_src, layer.heads, layer.head_channels)
    dist = (pos_dst[:, :, None, :] - pos_src[:, None, :, :]).square().sum(-1)  # [B, Nd, Ns]
    logits = -layer.lam[None, :, None, None] * dist[:, None]  # [B, H, Nd, Ns]
    if quantile is not None:
        radius = torch.quantile(dist, quantile, dim=-1, keepdim=True)  # [B, Nd, 1]
        logits = logits.masked_fill((dist > radius)[:, None], float("-inf"))
    attn = torch.softmax(logits, dim=-1)
    return torch.einsum("bhij,bjhc->bihc", attn, v).reshape(b, pos_dst.shape[1], -1)


def dense_pit(model, pos, features, latent_pos):
    """meshop's PiT (same modules and weights) evaluated densely: [B, N, C] -> [B, N, C_out]."""
    import torch.nn.functional as F

    q_in, q_out = model.encoder.field["quantile"], model.decoder.field["quantile"]
    u = F.gelu(model.lift(features))
    u = F.gelu(dense_attention(model.encoder, u, pos, latent_pos, q_in))
    for block in model.processor:
        h = F.gelu(dense_attention(block.attn, u, latent_pos, latent_pos))
        u = F.gelu(block.mlp(h) + block.skip(u))
    u = F.gelu(dense_attention(model.decoder, u, latent_pos, pos, q_out))
    return model.head(u)


def dense_inputs(batch, size: int):
    """The batch as the dense code takes it: [B, N, D] positions, features, latent positions."""
    from meshop.data import latent_nodes, node_features

    latent_pos, _ = latent_nodes(batch)
    return (
        batch.pos.view(size, -1, 2),
        node_features(batch).view(size, -1, 2 + PARAMS),
        latent_pos.view(size, -1, 2),
    )


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
        dict(encoder_k=KNN_FIELD, decoder_k=KNN_FIELD)
        if fields == "knn"
        else dict(encoder_quantile=QUANTILE, decoder_quantile=QUANTILE)
    )
    net = build_model("PiT", **receptive).to(device).eval()
    data = samples(n, 1)[0].to(device)

    def step():
        with torch.no_grad():
            net(data)

    return step


#: neighbours of the kNN variant: what the 2% quantile gives on the 972-node training mesh
KNN_FIELD = round(QUANTILE * ELASTICITY_NODES)


def check_agreement(n: int, batch_size: int) -> float:
    """Largest difference between meshop's PiT and the dense form on one batch."""
    import torch

    torch.manual_seed(0)
    net = build_model("PiT").eval()
    batch = batch_of(samples(n, batch_size, latent=min(LATENT, n // 2)))
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
                    latent = min(LATENT, n)
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
        f"Whole models (width {WIDTH}, {HEADS} heads, {BLOCKS} blocks, latent mesh {LATENT} nodes)",
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
        "quantile": f"{QUANTILE:.0%} quantile (encoder and decoder)",
        "knn": f"{KNN_FIELD} nearest neighbours (encoder and decoder)",
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

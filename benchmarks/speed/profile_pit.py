"""Where a PiT training step spends its time: torch.profiler over meshop's PiT at the settings of
``training_vs_reference.py``, by operator group, next to the work its global attention needs.

    python -m benchmarks.speed.profile_pit                 # 972 / 972 and 972 / 256 latent nodes
    python -m benchmarks.speed.profile_pit --quick         # smoke test
"""

from __future__ import annotations

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.lib import common
from benchmarks.lib.training_steps import pit_case

OTHER = "other (copies, elementwise, optimizer, autograd)"
#: operator name fragments of each group (first match wins)
GROUPS = {
    "position attention (fused SDPA, forward + backward)": ("scaled_dot_product",),
    "neighbour search and edge bookkeeping": (
        "torch_cluster sort nonzero unique bincount scatter index where floor cumsum searchsorted "
        "quantile aten::lt aten::le aten::gt sampled_addmm sparse _to_sparse"
    ).split(),
    "linear layers and sparse aggregation (mm, addmm, bmm)": (
        "aten::mm",
        "aten::addmm",
        "aten::bmm",
        "_aggregate",
    ),
    "activations (GELU) and their backward": ("gelu",),
}


def attention_flops(n_latent: int, batch: int, heads: int, width: int, blocks: int) -> float:
    """Multiply-adds x 2 of the global attention of the processor, forward and backward, counted
    at the value width: Q K^T and A V forward (2 products), and the backward's recomputed Q K^T,
    dV, dA, dQ/dK (5 products) of [N, N] x [N, width / heads] per head and sample."""
    per_product = 2 * n_latent * n_latent * (width // heads)
    return 7 * per_product * heads * batch * blocks


def profile_case(n: int, latent: int, batch: int, steps: int) -> dict:
    step = pit_case(n, latent, batch)["meshop"][0]
    step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    top = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:12]
    return {
        "n": n,
        "latent": latent,
        "batch": batch,
        "threads": torch.get_num_threads(),
        "step_s": sum(e.self_cpu_time_total for e in events) / steps / 1e6,
        "groups_s": common.operator_groups(events, GROUPS, OTHER, steps),
        "top": [(e.key, e.self_cpu_time_total / steps / 1e6, e.count // steps) for e in top],
        "attention_gflop": attention_flops(latent, batch, 2, 64, 4) / 1e9,
    }


def tables(result: dict) -> str:
    step = result["step_s"]
    rows = [
        [k, f"{v * 1e3:.0f} ms", f"{100 * v / step:.0f} %"] for k, v in result["groups_s"].items()
    ]
    top = [[f"`{k}`", f"{v * 1e3:.1f} ms", str(c)] for k, v, c in result["top"]]
    return "\n\n".join(
        [
            f"Profiled step: {step * 1e3:.0f} ms of operator time; the processor's global "
            f"attention needs {result['attention_gflop']:.1f} GFLOP "
            "(forward and backward, at the value width).",
            common.markdown_table("where|time per step|share", rows),
            common.markdown_table("operator (self time)|per step|calls per step", top),
        ]
    )


def main(argv=None) -> None:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=2, help="profiled steps")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    cases = [(150, 150, 2), (150, 40, 2)] if args.quick else [(972, 972, 8), (972, 256, 8)]
    info = common.machine()
    header = (
        f"Measured {info['date']} with `{info['command']}` on {info['cpu']}, {args.threads} "
        f"thread(s), torch {info['torch']}, measured under load (shares are more telling than "
        "times)."
    )
    sections = {
        f"{n} nodes, {latent} latent nodes, batch {batch}": tables(
            profile_case(n, latent, batch, args.steps)
        )
        for n, latent, batch in cases
    }
    title = "Where a PiT training step spends its time"
    common.write_text(args.out, "pit_profile", common.results_text(title, header, sections))


if __name__ == "__main__":
    main()

"""Where an ONO training step spends its time: torch.profiler over meshop's ONO (as the authors'
model, with meshop's blocks, with meshop's defaults) and the authors' ``ONO2``, by operator group.

    python -m benchmarks.speed.profile_ono                 # 16x16 grid, batch 20
    python -m benchmarks.speed.profile_ono --quick         # smoke test
"""

from __future__ import annotations

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.lib import common
from benchmarks.lib.training_steps import ono_case

OTHER = "other (element-wise, optimizer, autograd)"
#: operator name fragments of each group (first match wins)
GROUPS = {
    "matrix products (mm, addmm, bmm, baddbmm)": (
        "aten::mm",
        "aten::addmm",
        "aten::bmm",
        "aten::baddbmm",
    ),
    "layer norms": ("layer_norm",),
    "softmaxes": ("softmax",),
    "GELU": ("gelu",),
    "whitening (Cholesky, triangular solve, inverse)": ("cholesky", "solve_triangular", "inv"),
    "copies (copy_, cat, clone)": ("aten::copy_", "aten::cat", "aten::clone"),
}
#: the implementations of :func:`benchmarks.lib.training_steps.ono_case` profiled, with their
#: column titles
IMPLEMENTATIONS = {
    "meshop, authors' model": (True, "meshop"),
    "meshop's blocks": ("whitening", "meshop"),
    "reference ONO2": (True, "reference"),
    "meshop defaults": (False, "meshop"),
}


def profile_case(n: int, batch: int, steps: int) -> dict[str, dict]:
    """Grouped self times per step (with their ``total``) and parameter count of every
    implementation. The steps are interleaved (one profiled step of each implementation in
    turn), so that a shared machine's load weighs on all of them alike."""
    impls = {}
    for title, (authors, side) in IMPLEMENTATIONS.items():
        impls[title] = ono_case(n=n, batch_size=batch, grid=True, authors=authors)[side]
        impls[title][0]()  # warm-up
    sums = {title: {} for title in impls}
    for _ in range(steps):
        for title, (step, _) in impls.items():
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                step()
            events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
            groups = common.operator_groups(events, GROUPS, OTHER, steps)
            groups["total"] = sum(groups.values())
            sums[title] = {k: v + sums[title].get(k, 0.0) for k, v in groups.items()}
    return {title: {"parameters": impls[title][1], "groups_s": sums[title]} for title in impls}


def table(result: dict[str, dict]) -> str:
    rows = []
    for group in next(iter(result.values()))["groups_s"]:
        row = [f"**{group}**" if group == "total" else group]
        for r in result.values():
            seconds, share = r["groups_s"][group], r["groups_s"][group] / r["groups_s"]["total"]
            row.append(f"{seconds * 1e3:.1f} ms ({100 * share:.0f} %)")
        rows.append(row)
    rows.append(["parameters", *(f"{r['parameters']:,}" for r in result.values())])
    return common.markdown_table(["operator group (self time per step)", *result], rows)


def main(argv=None) -> None:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=5, help="profiled steps")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    n, batch = (64, 3) if args.quick else (256, 20)
    info = common.machine()
    header = (
        f"Measured {info['date']} with `{info['command']}` on {info['cpu']}, {args.threads} "
        f"thread(s), torch {info['torch']}, measured under load: {args.steps} profiled "
        f"steps of each implementation, interleaved, after a warm-up step (shares are more "
        f"telling than times; the profiler adds its own overhead to every operator)."
    )
    side = round(n**0.5)
    sections = {f"{side}x{side} grid, batch {batch}": table(profile_case(n, batch, args.steps))}
    title = "Where an ONO training step spends its time"
    common.write_text(args.out, "ono_profile", common.results_text(title, header, sections))


if __name__ == "__main__":
    main()

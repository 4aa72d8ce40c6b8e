"""Where an ONO training step spends its time: torch.profiler over meshop's ONO and the ONO
authors' ``ONO2`` (``meshop.testing``) at the settings of ``training_vs_reference.py`` (width 64,
4 layers, 4 heads, k = 16, mlp_ratio 1, linear feature attention), grouped by kind of operator,
side by side: meshop as the authors' model (``ONO_AUTHORS``), meshop with the authors' whitening
in its own blocks (per-head layer norms and coordinates in the linear attention, a two-layer last
FFN), the reference, and meshop's defaults (its blocks, per-sample orthonormalisation, the value
projection).

    python -m benchmarks.speed.profile_ono                 # 16x16 grid, batch 20
    python -m benchmarks.speed.profile_ono --quick         # smoke test
"""

from __future__ import annotations

from benchmarks.lib.common import SECTION_END, SECTION_START, machine, markdown_table, profile_args
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


def group_times(events, steps: int) -> dict[str, float]:
    """Self CPU seconds per step of every group (and the total under ``"total"``)."""
    groups = dict.fromkeys([*GROUPS, OTHER], 0.0)
    for event in events:
        name = event.key.lower()
        for group, fragments in GROUPS.items():
            if any(fragment.lower() in name for fragment in fragments):
                groups[group] += event.self_cpu_time_total
                break
        else:
            groups[OTHER] += event.self_cpu_time_total
    groups["total"] = sum(event.self_cpu_time_total for event in events)
    return {k: v / steps / 1e6 for k, v in groups.items()}


def profile_case(n: int, batch: int, steps: int) -> dict[str, dict]:
    """Grouped self times per step and parameter count of every implementation. The steps are
    interleaved (one profiled step of each implementation in turn), so that a shared machine's
    load weighs on all of them alike."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    impls = {}
    for title, (authors, side) in IMPLEMENTATIONS.items():
        impls[title] = ono_case(n=n, batch_size=batch, grid=True, authors=authors)[side]
        impls[title][0]()  # warm-up
    sums = {title: None for title in impls}
    for _ in range(steps):
        for title, (step, _) in impls.items():
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                step()
            events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
            groups = group_times(events, steps)
            if sums[title] is None:
                sums[title] = groups
            else:
                sums[title] = {k: v + groups[k] for k, v in sums[title].items()}
    return {
        title: {
            "parameters": impls[title][1],
            "groups_s": sums[title],
            "threads": torch.get_num_threads(),
        }
        for title in impls
    }


def table(result: dict[str, dict]) -> str:
    titles = list(result)
    groups = list(next(iter(result.values()))["groups_s"])
    rows = []
    for group in groups:
        row = [f"**{group}**" if group == "total" else group]
        for title in titles:
            seconds = result[title]["groups_s"][group]
            share = seconds / result[title]["groups_s"]["total"]
            row.append(f"{seconds * 1e3:.1f} ms ({100 * share:.0f} %)")
        rows.append(row)
    rows.append(["parameters", *(f"{result[t]['parameters']:,}" for t in titles)])
    return markdown_table(["operator group (self time per step)", *titles], rows)


def main(argv=None) -> None:

    args = profile_args(argv, __doc__.splitlines()[0], steps=5)
    n, batch = (64, 3) if args.quick else (256, 20)
    info = machine()
    result = profile_case(n, batch, args.steps)
    side = round(n**0.5)
    text = "\n".join(
        [
            "## Where an ONO training step spends its time",
            "",
            SECTION_START,
            f"Measured {info['date']} with `{info['command']}` on {info['cpu']}, {args.threads} "
            f"thread(s), torch {info['torch']}, measured under load: {args.steps} profiled "
            f"steps of each implementation, interleaved, after a warm-up step (shares are more "
            f"telling than times; the profiler adds its own overhead to every operator).",
            "",
            f"### {side}x{side} grid, batch {batch}",
            "",
            table(result),
            "",
            SECTION_END,
            "",
        ]
    )
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ono_profile.md").write_text(text)


if __name__ == "__main__":
    main()

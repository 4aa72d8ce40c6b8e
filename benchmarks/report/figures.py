"""The figures of the docs from the speed results: time and peak memory against the number of
nodes, meshop against the dense form, on log-log axes (``benchmarks_*.png``).

    python -m benchmarks.report.figures --out docs/figures
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.lib.common import RESULTS, progress

#: figure name: (result file, x axis and its label, title, {label: fields of the records drawn})
FIGURES = {
    "position_attention": (
        "position_attention",
        "n_src",
        "source nodes N_src",
        "Cross position-attention, forward + backward",
        {
            f"{impl}, {t} targets": dict(kind="cross", impl=impl, n_dst=t, backward=True)
            for impl in ("meshop", "dense")
            for t in (256, 4096)
        },
    ),
    "local_attention": (
        "local_attention",
        "n_src",
        "source nodes N",
        "Local position-attention, forward + backward",
        {
            f"{impl}, {label}": dict(impl=impl, field=field, backward=True)
            for field, label in (("knn", "8 nearest, N targets"), ("quantile", "1%, 1024 targets"))
            for impl in ("meshop", "dense")
        },
    ),
    "attention_cost": (
        "linear_attention",
        "n",
        "nodes n",
        "Attention of the Galerkin Transformer family, forward + backward",
        {a: dict(attention=a) for a in ("galerkin", "linear", "fourier", "softmax")},
    ),
}


def panels(series: dict[str, list[tuple[float, float, float]]], xlabel: str, title: str, path):
    """Two log-log panels (time, memory) of ``{label: [(x, seconds, MB), ...]}``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for label, points in series.items():
        points = sorted(points)
        for ax, column in zip(axes, (1, 2)):
            style = "--" if "dense" in label else "-"
            ax.plot(
                [p[0] for p in points], [p[column] for p in points], style, marker="o", label=label
            )
    for ax, ylabel in zip(axes, ("time (s)", "peak memory (MB)")):
        ax.set(xscale="log", yscale="log", xlabel=xlabel, ylabel=ylabel)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    progress(f"wrote {path}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, (source, x, xlabel, title, curves) in FIGURES.items():
        path = args.results / f"{source}.json"
        if not path.is_file():
            continue
        records = json.loads(path.read_text())["records"]
        series = {
            label: [
                (r[x], r["time_s"], r["peak_mb"])
                for r in records
                if "time_s" in r and r.get("device", "cpu") == "cpu" and r.items() >= match.items()
            ]
            for label, match in curves.items()
        }
        panels(series, xlabel, title, args.out / f"benchmarks_{name}.png")


if __name__ == "__main__":
    main()

"""Figures of the benchmark results: time and peak memory against the number of nodes, meshop
against the dense form, on log-log axes.

    python -m benchmarks.report.figures                   # reads benchmarks/results/*.json
    python -m benchmarks.report.figures --out docs/figures

Writes ``benchmarks_position_attention.png``, ``benchmarks_local_attention.png`` and
``benchmarks_attention_cost.png`` for the results that exist.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.lib.common import RESULTS, progress


def load(results: Path, name: str) -> list[dict] | None:
    path = results / f"{name}.json"
    return json.loads(path.read_text())["records"] if path.is_file() else None


def panels(series: dict[str, list[tuple[float, float, float]]], xlabel: str, title: str, path):
    """Two log-log panels (time, memory) of ``{label: [(x, seconds, MB), ...]}``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for label, points in series.items():
        points = sorted(points)
        style = "--" if "dense" in label else "-"
        for ax, column in zip(axes, (1, 2)):
            ax.plot(
                [p[0] for p in points], [p[column] for p in points], style, marker="o", label=label
            )
    for ax, ylabel in zip(axes, ("time (s)", "peak memory (MB)")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    progress(f"wrote {path}")


def measured(records, **match) -> list[dict]:
    return [
        r
        for r in records
        if "time_s" in r
        and r.get("device", "cpu") == "cpu"
        and all(r.get(k) == v for k, v in match.items())
    ]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    records = load(args.results, "position_attention")
    if records:
        series = {}
        for impl in ("meshop", "dense"):
            for n_dst in (256, 4096):
                points = measured(records, kind="cross", impl=impl, n_dst=n_dst, backward=True)
                series[f"{impl}, {n_dst} targets"] = [
                    (r["n_src"], r["time_s"], r["peak_mb"]) for r in points
                ]
        panels(
            series,
            "source nodes N_src",
            "Cross position-attention, forward + backward",
            args.out / "benchmarks_position_attention.png",
        )
    records = load(args.results, "local_attention")
    if records:
        series = {
            f"{impl}, {label}": [
                (r["n_src"], r["time_s"], r["peak_mb"])
                for r in measured(records, impl=impl, field=field, backward=True)
            ]
            for field, label in (("knn", "8 nearest, N targets"), ("quantile", "1%, 1024 targets"))
            for impl in ("meshop", "dense")
        }
        panels(
            series,
            "source nodes N",
            "Local position-attention, forward + backward",
            args.out / "benchmarks_local_attention.png",
        )
    records = load(args.results, "linear_attention")
    if records:
        series = {
            name: [(r["n"], r["time_s"], r["peak_mb"]) for r in measured(records, attention=name)]
            for name in ("galerkin", "linear", "fourier", "softmax")
        }
        panels(
            series,
            "nodes n",
            "Attention of the Galerkin Transformer family, forward + backward",
            args.out / "benchmarks_attention_cost.png",
        )


if __name__ == "__main__":
    main()

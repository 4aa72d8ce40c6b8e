"""The measured figures that the documentation's prose quotes, generated from the result files.

``python -m benchmarks.report.notes`` writes them to ``benchmarks/results/notes.md``, and
``python -m benchmarks.report.summary`` writes that file too. The pages include its sections with
``--8<-- "benchmarks/results/notes.md:NAME"`` instead of copying a figure by hand, so a rerun of the
benchmarks changes the prose with the tables:

- ``pit_step``: why the PiT training step is as much faster as ``models.json`` says, and not more;
- ``large_mesh``: PiT inference with quantile fields on the largest mesh of ``models.json``;
- ``quantile_field``: the cost of ``meshop.data.quantile_index`` from ``neighbors.json``.

A section whose figures are missing from the results (a quick run) says so instead.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from benchmarks.lib.common import fmt_count, fmt_mb, fmt_time, load_results
from benchmarks.lib.settings import (
    FIELD_LATENT,
    FIELD_QUANTILE,
    PIT_HEADS,
    PIT_KNN,
    PIT_LATENT,
    PIT_QUANTILE,
)
from meshop.data.neighbors import RADIUS_SEARCH_FROM

#: the result files the notes read
SOURCES = ("models", "neighbors")
#: the speed-up the PiT training step aims at (the summary's aim)
PIT_AIM = 20.0
NOT_MEASURED = "(not measured in the result files of this checkout)"
START, END = "<!-- --8<-- [start:{}] -->", "<!-- --8<-- [end:{}] -->"


def load(results: Path) -> dict[str, dict]:
    """``{name: {"machine": ..., "records": [...]}}`` of the result files that exist."""
    return load_results(results, SOURCES)


def records(data: dict, source: str, **match) -> list[dict]:
    """The measured records of ``source`` whose fields equal ``match``."""
    return [
        r
        for r in data.get(source, {}).get("records", [])
        if all(r.get(k) == v for k, v in match.items()) and "time_s" in r
    ]


def fill(text: str) -> str:
    return textwrap.fill(
        " ".join(text.split()), 100, break_long_words=False, break_on_hyphens=False
    )


def pit_step(data: dict) -> str:
    """The paragraph under the summary table on the PiT training step."""
    pairs = {}
    for ours in records(data, "models", table="training", model="PiT", impl="meshop"):
        dense = records(data, "models", table="training", model="PiT", impl="dense", n=ours["n"])
        if dense:
            pairs[ours["n"]] = (ours, dense[0])
    if PIT_LATENT not in pairs:
        return fill(f"**The PiT training step.** {NOT_MEASURED}")
    ours, dense = pairs[PIT_LATENT]
    speed = dense["time_s"] / ours["time_s"]
    n, batch = PIT_LATENT, ours["batch"]
    if speed >= PIT_AIM:
        opening = f"**Why the PiT training step is {speed:.1f}x faster.**"
    else:
        opening = f"**Why the PiT training step is {speed:.1f}x and not {PIT_AIM:g}x faster.**"
    larger = sorted(size for size in pairs if size > n)
    gap = [
        f"{pairs[size][1]['time_s'] / pairs[size][0]['time_s']:.1f}x faster and "
        f"{pairs[size][1]['peak_mb'] / pairs[size][0]['peak_mb']:.1f}x less memory at "
        f"{size:,} nodes"
        for size in larger
    ]
    widens = (
        f", and the gap widens with the mesh: {'; '.join(gap)} (the latent mesh stays at {n:,} "
        "nodes)"
        if gap
        else ""
    )
    return fill(
        f"""{opening} At {n:,} nodes with the latent mesh equal to the input mesh, most of a step
        is the processor's four global attentions: per block, {batch} samples x {PIT_HEADS} heads x
        {n} x {n} kernel values, forward and backward, including the gradient of each head's
        bandwidth. That arithmetic is $O(N^2)$ in either form; meshop runs it in PyTorch's fused
        attention kernel, which saves the {n} x {n} matrices (memory), not the arithmetic (the
        profile at the end of this page shows how much of meshop's step that kernel takes). What
        the dense form adds is the `torch.quantile` sort of every row and the masked softmax over
        full rows in the encoder and decoder; meshop replaces those with neighbour lists{widens}.
        The dense form here follows the authors' code but computes each layer's distance matrix
        once for all heads, so it is, if anything, faster than that code. A {PIT_AIM:g}x gain at
        {n} nodes would need a cheaper processor than exact global attention."""
    )


def large_mesh(data: dict) -> str:
    """The paragraph on quantile receptive fields on the largest mesh of the inference table."""
    inference = records(data, "models", table="inference", model="PiT")
    n = max((r["n"] for r in inference), default=None)
    quantile = next((r for r in inference if r["n"] == n and r["fields"] == "quantile"), None)
    knn = next((r for r in inference if r["n"] == n and r["fields"] == "knn"), None)
    big = 10**6 if n is None else n
    if quantile is None or knn is None:
        measured = NOT_MEASURED
    else:
        measured = (
            f"The inference table therefore runs the paper's {PIT_QUANTILE:.0%} fields at "
            f"{fmt_count(n)} nodes ({fmt_time(quantile['time_s'])}, "
            f"{fmt_mb(quantile['peak_mb'])}), beside kNN fields of the size the "
            f"{PIT_QUANTILE:.0%} quantile has on the {PIT_LATENT}-node training mesh ({PIT_KNN} "
            f"neighbours, {fmt_time(knn['time_s'])}, {fmt_mb(knn['peak_mb'])})."
        )
    return fill(
        f"""**Quantile receptive fields on very large meshes.** A q-quantile field over N source
        nodes is about qN neighbours per target. Up to {RADIUS_SEARCH_FROM:,} of them,
        `meshop.data.quantile_index` finds them with torch-cluster's kNN, whose CPU search slows
        down faster than the field grows (it keeps each target's k best in a sorted list). Wider
        fields, such as PiT's {PIT_QUANTILE:.0%} encoder field from {PIT_LATENT} latent nodes onto a
        {fmt_count(big)}-node mesh (about {round(PIT_QUANTILE * big):,} neighbours each), are found
        by radius searches around thresholds estimated from a subsample, repeated where they come
        back short, with the same exact result. {measured}"""
    )


def quantile_field(data: dict) -> str:
    """The sentence of the Domains page on the cost of ``quantile_index``."""
    found = sorted(
        records(data, "neighbors", operation="quantile"), key=lambda r: r["n"], reverse=True
    )
    if not found:
        return fill(NOT_MEASURED)
    largest = found[0]
    threads = data["neighbors"].get("machine", {}).get("threads", 1)
    return fill(
        f"""On {fmt_count(largest["n"])} random points in the unit square, the
        {FIELD_QUANTILE:.0%} quantile field of {FIELD_LATENT} targets (about
        {round(FIELD_QUANTILE * largest["n"]):,} neighbours each) took
        {fmt_time(largest["time_s"])} and {fmt_mb(largest["peak_mb"])} on
        {"one CPU thread" if threads == 1 else f"{threads} CPU threads"}"""
    )


SECTIONS = {"pit_step": pit_step, "large_mesh": large_mesh, "quantile_field": quantile_field}


def notes_markdown(data: dict[str, dict]) -> str:
    """benchmarks/results/notes.md: one marked section per quoted passage."""
    files = ", ".join(f"`{name}.json`" for name in data) or "no result file"
    parts = [
        "## Figures quoted in the documentation",
        "",
        f"Generated by `python -m benchmarks.report.notes` from {files} in `benchmarks/results/`.",
    ]
    for name, make in SECTIONS.items():
        parts += ["", START.format(name), make(data), END.format(name)]
    return "\n".join(parts) + "\n"

"""The README's headline speed and memory table (which the Benchmarks page includes) from the result
files: each headline case and what was measured ("not measured" when absent).

    python -m benchmarks.report.summary          # rewrite the README's marked `speed` table
    python -m benchmarks.report.summary --check  # exit status 1 if it differs from the results
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
from pathlib import Path

from benchmarks.lib import common
from benchmarks.lib.common import fmt_count, fmt_mb, fmt_ratio, fmt_time
from benchmarks.lib.settings import LOCAL_K, LOCAL_LATENT, LOCAL_QUANTILE, PIT_KNN, PIT_QUANTILE

README = common.ROOT / "README.md"
#: the result files the table reads
SOURCES = ["position_attention", "local_attention", "models", "linear_attention"]
SOURCES += ["large_meshes", "speed_vs_reference"]
NOT_MEASURED = "not measured"
#: the sizes of the headline cases: cross attention at CROSS_SRC sources (against the dense form)
#: and at BIG_SRC; local attention at LOCAL_SRC sources and the PiT training step at PIT_NODES
#: (against theirs); PiT inference at INFERENCE_NODES; every model's inference at HUGE nodes and a
#: training step at TRAIN_NODES
CROSS_SRC, CROSS_DST, BIG_SRC = 10**5, 4096, 10**6
LOCAL_SRC, PIT_NODES, INFERENCE_NODES = 10**4, 972, 10**6
HUGE, TRAIN_NODES = 10**7, 10**6
LARGE_NAMES = dict(
    pit="PiT", galerkin="Galerkin Transformer", ono="ONO", transolver="Transolver", mlp="MLP"
)
#: the training steps against the papers' code: (what, cases of training_vs_reference)
REFERENCE_CASES = (
    ("Galerkin encoder (d = 96, 4 layers, batch 4), n = 2048 / 8192", "Galerkin encoder, n=2048",
     "Galerkin encoder, n=8192"),
    ("Fourier encoder, same, n = 2048", "Fourier encoder, n=2048"),
    ("PiT (batch 8, width 64, 2 heads, 4 blocks), 972 nodes, 972 latent nodes",
     "PiT, 972 / 972 nodes, batch 8"),
    ("PiT, same, 256 latent nodes", "PiT, 972 / 256 nodes, batch 8"),
    ("Transolver (width 64, 4 layers, 4 heads, 32 slices), 972 nodes batch 8 / 8192 nodes batch 4",
     "Transolver, 972 nodes, batch 8", "Transolver, 8192 nodes, batch 4"),
    ("ONO as the authors' ONO2 (width 64, 4 layers, k = 16), 16x16 grid batch 20 / 972 nodes "
     "batch 8", "ONO, 16x16 grid, batch 20", "ONO, 972 nodes, batch 8"),
)  # fmt: skip


def load(results: Path) -> dict[str, dict]:
    """``{name: {"machine": ..., "records": [...]}}`` of the result files that exist."""
    return common.load_results(results, SOURCES)


def measured(data: dict, source: str, **match) -> list[dict]:
    """The measured records of ``source`` whose fields equal ``match``."""
    return [
        r
        for r in data.get(source, {}).get("records", [])
        if all(r.get(k) == v for k, v in match.items()) and "time_s" in r
    ]


def find(data: dict, source: str, **match) -> dict | None:
    """The first measured record of ``source`` whose fields equal ``match`` (None if none)."""
    return next(iter(measured(data, source, **match)), None)


def exponents(records: list[dict], field: str, size: str) -> list[float]:
    """Growth exponents of ``field`` between consecutive sizes: log(f2/f1) / log(n2/n1)."""
    pairs = itertools.pairwise(records)
    return [math.log(b[field] / a[field]) / math.log(b[size] / a[size]) for a, b in pairs]


def span(values: list[float]) -> str:
    """``1.0`` or ``1.7-2.0``."""
    low, high = f"{min(values):.1f}", f"{max(values):.1f}"
    return low if low == high else f"{low}-{high}"


def cross(data: dict) -> list[list[str]]:
    """Cross attention at CROSS_SRC sources (memory against the dense form) and at BIG_SRC."""
    what = f"cross position-attention, {fmt_count(CROSS_SRC)} sources x {CROSS_DST} targets"
    case = dict(kind="cross", n_src=CROSS_SRC, n_dst=CROSS_DST, backward=False)
    ours, dense = (find(data, "position_attention", **case, impl=i) for i in ("meshop", "dense"))
    rows = [[what, NOT_MEASURED]]
    if ours is not None and dense is not None:
        ratio = dense["peak_mb"] / ours["peak_mb"]
        rows[0][1] = (
            f"dense {fmt_mb(dense['peak_mb'])}, meshop {fmt_mb(ours['peak_mb'])} ({ratio:.0f}x "
            f"less), {fmt_ratio(dense['time_s'], ours['time_s'])} faster"
        )
    what = f"cross position-attention, {fmt_count(BIG_SRC)} sources"
    big = measured(data, "position_attention", kind="cross", n_src=BIG_SRC, impl="meshop")
    if not big:
        return [*rows, [what, NOT_MEASURED]]
    n_dst = max(r["n_dst"] for r in big)
    peaks = {r["backward"]: r["peak_mb"] for r in big if r["n_dst"] == n_dst}
    labels = {False: "forward", True: "forward + backward"}
    text = ", ".join(f"{fmt_mb(peak)} {labels[backward]}" for backward, peak in peaks.items())
    return [*rows, [what, text]]


def local(data: dict) -> list[list[str]]:
    """Local attention's speed against the dense quantile mask, and its growth in N."""
    what = f"local position-attention at {fmt_count(LOCAL_SRC)} sources "
    what += f"({LOCAL_QUANTILE:.0%} quantile)"
    case = dict(field="quantile", n_src=LOCAL_SRC, n_dst=LOCAL_LATENT, backward=False)
    ours, dense = (find(data, "local_attention", **case, impl=i) for i in ("meshop", "dense"))
    rows = [[what, NOT_MEASURED]]
    if ours is not None and dense is not None:
        speed = dense["time_s"] / ours["time_s"]
        rows[0][1] = f"{speed:.1f}x faster than the dense quantile mask"
    knn = measured(data, "local_attention", field="knn", impl="meshop", backward=False)
    knn = sorted((r for r in knn if r["n_src"] >= LOCAL_SRC), key=lambda r: r["n_src"])
    what = f"local position-attention, {LOCAL_K} neighbours, N = "
    what += " / ".join(fmt_count(r["n_src"]) for r in knn)
    if len(knn) < 2:
        return [*rows, [what, NOT_MEASURED]]
    memory, times = exponents(knn, "peak_mb", "n_src"), exponents(knn, "time_s", "n_src")
    text = " / ".join(fmt_mb(r["peak_mb"]) for r in knn) + "; "
    text += " / ".join(fmt_time(r["time_s"]) for r in knn) + " (growth exponents: memory "
    text += f"{', '.join(f'{e:.2f}' for e in memory)}; time {', '.join(f'{e:.2f}' for e in times)})"
    return [*rows, [what, text]]


#: the case of training_vs_reference that times PiT's step against its dense form at PIT_NODES
PIT_DENSE_CASE = f"PiT, {PIT_NODES} / {PIT_NODES} nodes, batch 8"


def pit_vs_dense(data: dict) -> float | None:
    """The dense form's median training step over meshop's at PIT_NODES on one thread, as
    training_vs_reference measured it (interleaved steps; None if it did not)."""
    for record in data.get("speed_vs_reference", {}).get("records", []):
        if (record["case"], record["threads"]) == (PIT_DENSE_CASE, 1) and record.get("dense"):
            return record["dense"]["median_s"] / record["meshop"]["median_s"]
    return None


def pit(data: dict) -> list[list[str]]:
    """The PiT training step against its dense form, and PiT inference on a large mesh. The speed
    at PIT_NODES comes from training_vs_reference (the median of interleaved steps) when it
    measured it, the memory and the larger meshes from whole_models (one run, whose own ratio at
    PIT_NODES the larger meshes' row names, since the two runs differ)."""
    steps = {}
    for ours in measured(data, "models", table="training", model="PiT", impl="meshop"):
        dense = find(data, "models", table="training", model="PiT", impl="dense", n=ours["n"])
        if dense is not None:
            ratios = dense["time_s"] / ours["time_s"], dense["peak_mb"] / ours["peak_mb"]
            steps[ours["n"]] = (*ratios, ours["batch"])
    interleaved = pit_vs_dense(data)
    what = f"PiT training step, {PIT_NODES} nodes, batch 8 (latent = input mesh)"
    rows = [[what, NOT_MEASURED]]
    if PIT_NODES in steps:
        speed, memory, batch = steps[PIT_NODES]
        text = f"{speed:.1f}x faster, {memory:.1f}x less memory than dense"
        if interleaved is not None:
            text = (
                f"{interleaved:.2f}x faster than dense (one thread, median of interleaved "
                f"steps), {memory:.1f}x less memory"
            )
        rows[0] = [what.replace("batch 8", f"batch {batch}"), text]
    elif interleaved is not None:
        rows[0] = [what, f"{interleaved:.2f}x faster than dense (one thread)"]
    larger = sorted(n for n in steps if n > PIT_NODES)
    if larger:
        what = f"PiT training step, {' / '.join(f'{n:,}' for n in larger)} nodes"
        text = " / ".join(f"{steps[n][0]:.1f}x" for n in larger) + " faster, "
        text += " / ".join(f"{steps[n][1]:.1f}x" for n in larger) + " less memory"
        if interleaved is not None and PIT_NODES in steps:
            text += (
                f" (an earlier run without interleaving, which gave "
                f"{steps[PIT_NODES][0]:.1f}x at {PIT_NODES} nodes)"
            )
        rows.append([what, text])
    what = f"PiT inference on a {fmt_count(INFERENCE_NODES)}-node mesh"
    fields = {"quantile": f"the paper's {PIT_QUANTILE:.0%} quantile fields"}
    fields["knn"] = f"{PIT_KNN}-neighbour fields"
    case = dict(table="inference", n=INFERENCE_NODES)
    found = {f: find(data, "models", **case, fields=f) for f in fields}
    found = {f: r for f, r in found.items() if r is not None}
    if not found:
        return [*rows, [what, NOT_MEASURED]]
    text = "; ".join(f"{fmt_time(r['time_s'])}, {fmt_mb(r['peak_mb'])} with {fields[f]}"
                     for f, r in found.items())  # fmt: skip
    return [*rows, [what, text]]


def attention_cost(data: dict) -> list[list[str]]:
    """Galerkin, linear and Fourier attention linear in n, softmax quadratic (Galerkin Table 1;
    meshop computes Fourier attention's (Q K^T) V as Q (K^T V))."""
    by_kind = {
        kind: sorted(measured(data, "linear_attention", attention=kind), key=lambda r: r["n"])
        for kind in ("galerkin", "linear", "fourier", "softmax")
    }
    if any(len(found) < 2 for found in by_kind.values()):
        return [["Galerkin / Fourier attention", NOT_MEASURED]]
    grows = {kind: exponents(found, "time_s", "n") for kind, found in by_kind.items()}
    n = by_kind["fourier"][-1]["n"]
    at_n = [next((r for r in by_kind[k] if r["n"] == n), None) for k in ("galerkin", "fourier")]
    memory = " / ".join(fmt_mb(r["peak_mb"]) for r in at_n if r is not None)
    text = f"{memory}; time grows as n^{span(grows['galerkin'])} / n^{span(grows['fourier'])} "
    text += f"(softmax n^{span(grows['softmax'])})"
    return [[f"Galerkin / Fourier attention at n = {n}", text]]


def large_meshes(data: dict) -> list[list[str]]:
    """Inference on HUGE nodes and training steps on TRAIN_NODES, every model in chunks: time and
    process peak of each."""
    cases = (
        (f"inference on a {fmt_count(HUGE)}-node mesh in chunks (time, process peak)", "chunks",
         HUGE),
        (f"training step on a {fmt_count(TRAIN_NODES)}-node sample in chunks", "train, chunks",
         TRAIN_NODES),
    )  # fmt: skip
    rows = []
    for what, mode, n in cases:
        parts, missing = [], []
        for model, name in LARGE_NAMES.items():
            record = find(data, "large_meshes", model=model, n=n, mode=mode)
            if record is None:
                missing.append(name)
                continue
            parts.append(f"{name} {fmt_time(record['time_s'])}, {fmt_mb(record['total_peak_mb'])}")
        if not parts:
            rows.append([what, NOT_MEASURED])
            continue
        if missing:
            parts.append(f"{', '.join(missing)} {NOT_MEASURED}")
        rows.append([what, "; ".join(parts)])
    return rows


def reference(data: dict) -> list[list[str]]:
    """Training steps against the papers' code: the wall-clock speed-ups at each thread count."""
    rows = []
    for setting, *cases in REFERENCE_CASES:
        found = []
        for case in cases:
            speed_ups = {}
            for r in data.get("speed_vs_reference", {}).get("records", []):
                if r["case"] == case:
                    speed_ups[r["threads"]] = r["reference"]["median_s"] / r["meshop"]["median_s"]
            found.append(speed_ups)
        threads = sorted(set.intersection(*(set(f) for f in found)))
        what = f"training step, speed-up over the papers' code: {setting}"
        if not threads:
            rows.append([what, NOT_MEASURED])
            continue
        names = {1: "one thread", 2: "two threads"}
        text = ", ".join(
            f"{' / '.join(f'{f[t]:.2f}x' for f in found)} ({names.get(t, f'{t} threads')})"
            for t in threads
        )
        rows.append([what, text])
    return rows


#: each part of the table and the result files its figures come from
PARTS = (
    (cross, ["position_attention"]),
    (local, ["local_attention"]),
    (pit, ["models", "speed_vs_reference"]),
    (attention_cost, ["linear_attention"]),
    (large_meshes, ["large_meshes"]),
    (reference, ["speed_vs_reference"]),
)


def rows(data: dict[str, dict]) -> list[list[str]]:
    """The rows of the headline table: what, measured, the result files it comes from."""
    return [
        [*row, ", ".join(f"`{name}.md`" for name in names if name in data) or "-"]
        for part, names in PARTS
        for row in part(data)
    ]


def provenance(name: str, machine: dict) -> str:
    """When, at which commit and under which load a result file was measured (what it records)."""
    text = f"`{name}.md` {machine['date']}"
    text += f", commit {machine['commit']}" if "commit" in machine else ""
    if "load" in machine:
        note = f" ({machine['note']})" if machine.get("note") else ""
        return text + common.load_of(machine) + note
    return f"{text}, {machine['note']}" if machine.get("note") else f"{text}, load not recorded"


def table(data: dict[str, dict]) -> str:
    """The README's ``speed`` section: when and where, the headline table, and when, at which
    commit and under which load each of its result files was measured."""
    machines = [d["machine"] for d in data.values() if "machine" in d]
    dates = sorted({m["date"][:10] for m in machines}) or ["an unknown date"]
    cpus = ", ".join(sorted({f"{m['cpu']} ({m['cpu_cores']} cores)" for m in machines}))
    when = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"
    table = common.markdown_table("what|measured|result file", rows(data))
    files = "; ".join(provenance(name, d["machine"]) for name, d in data.items() if "machine" in d)
    return f"Measured {when} on {cpus or 'an unknown machine'}:\n\n{table}\n\nMeasured: {files}."


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=common.RESULTS, help="result files")
    parser.add_argument("--readme", type=Path, default=README, help="the README to update")
    parser.add_argument("--check", action="store_true", help="exit 1 if the README is stale")
    args = parser.parse_args(argv)
    data = load(args.results)
    if not data:
        raise SystemExit(f"no result files ({', '.join(SOURCES)}.json) in {args.results}")
    stale = common.replace_section(args.readme, "speed", table(data), check=args.check)
    if args.check and stale:
        print(f"{args.readme} is stale: run python -m benchmarks.report.summary", file=sys.stderr)
    return int(args.check and stale)


if __name__ == "__main__":
    sys.exit(main())

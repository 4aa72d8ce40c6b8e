"""Training steps of meshop against the papers' formulations (``meshop.testing``) side by side on
the same inputs, timed interleaved at every thread count: the median step of each and the ratio
reference / meshop of wall-clock and of CPU time.

    python -m benchmarks.speed.training_vs_reference                 # full table, 1 and 2 threads
    python -m benchmarks.speed.training_vs_reference --quick         # smoke test at tiny sizes
    python -m benchmarks.speed.training_vs_reference --only Transolver --merge   # rows replaced
"""

from __future__ import annotations

import json
import statistics
import time

import torch

from benchmarks.lib import common
from benchmarks.lib.training_steps import galerkin_case, ono_case, pit_case, transolver_case


def parse(argv=None):
    p = common.parser(__doc__.splitlines()[0], threads=False)
    p.add_argument("--threads", default="1,2", help="comma-separated torch thread counts")
    p.add_argument("--repeats", type=int, default=None, help="timed rounds (default 5; 2)")
    p.add_argument("--only", default=None, help="run only cases whose name contains this")
    p.add_argument("--note", default="measured under load", help="a note under the tables")
    merge = "keep the existing result file's rows that this run does not measure"
    p.add_argument("--merge", action="store_true", help=merge + " (with their measurement line)")
    args = p.parse_args(argv)
    args.thread_counts = [int(t) for t in args.threads.split(",")]
    if args.repeats is None:
        args.repeats = 2 if args.quick else 5
    if args.repeats < 1 or min(args.thread_counts) < 1:
        raise SystemExit("--repeats and every --threads entry must be positive")
    return args


def cases(quick: bool) -> list[tuple[str, callable, dict]]:
    """(name, builder, its arguments)."""
    ono, transolver = (8, 3) if quick else (16, 20), (150, 2) if quick else (972, 8)
    grid = f"ONO, {ono[0]}x{ono[0]} grid, batch {ono[1]}"
    grid_case = dict(n=ono[0] ** 2, batch_size=ono[1], grid=True)
    mesh = f"Transolver, {transolver[0]} nodes, batch {transolver[1]}"
    mesh_case = dict(n=transolver[0], batch_size=transolver[1])
    if quick:
        return [
            ("Galerkin encoder, n=256", galerkin_case, dict(attention="galerkin", n=256)),
            ("Fourier encoder, n=128", galerkin_case, dict(attention="fourier", n=128)),
            ("PiT, 150 / 150 nodes, batch 2", pit_case, dict(n=150, latent=150, batch_size=2)),
            ("PiT, 150 / 40 nodes, batch 2", pit_case, dict(n=150, latent=40, batch_size=2)),
            (grid, ono_case, grid_case),
            (mesh, transolver_case, mesh_case),
            (f"{mesh}, inference", transolver_case, dict(mesh_case, train=False)),
            (f"{grid}, meshop defaults", ono_case, dict(grid_case, authors=False)),
        ]
    big = dict(n=8192, batch_size=4)
    return [
        ("Galerkin encoder, n=2048", galerkin_case, dict(attention="galerkin", n=2048)),
        ("Galerkin encoder, n=8192", galerkin_case, dict(attention="galerkin", n=8192)),
        ("Fourier encoder, n=2048", galerkin_case, dict(attention="fourier", n=2048)),
        ("PiT, 972 / 972 nodes, batch 8", pit_case, dict(n=972, latent=972, batch_size=8)),
        ("PiT, 972 / 256 nodes, batch 8", pit_case, dict(n=972, latent=256, batch_size=8)),
        (grid, ono_case, grid_case),
        ("ONO, 972 nodes, batch 8", ono_case, dict(n=972, batch_size=8, grid=False)),
        (f"{grid}, meshop's blocks", ono_case, dict(grid_case, authors="whitening")),
        (f"{grid}, meshop defaults", ono_case, dict(grid_case, authors=False)),
        (mesh, transolver_case, mesh_case),
        ("Transolver, 8192 nodes, batch 4", transolver_case, big),
        (f"{mesh}, inference", transolver_case, dict(mesh_case, train=False)),
        ("Transolver, 8192 nodes, batch 4, inference", transolver_case, dict(big, train=False)),
    ]


def time_interleaved(impls: dict, repeats: int) -> dict[str, list[tuple[float, float]]]:
    """One warm-up step of each implementation, then ``repeats`` rounds of one step of each;
    (wall-clock, CPU) seconds of every timed step."""
    for step, _ in impls.values():
        step()
    times = {name: [] for name in impls}
    for _ in range(repeats):
        for name, (step, _) in impls.items():
            start, cpu = time.perf_counter(), time.process_time()
            step()
            times[name].append((time.perf_counter() - start, time.process_time() - cpu))
    return times


def run(args, done=None) -> list[dict]:
    """Every case at every thread count; ``done(records)`` after each thread count (so that a
    long run keeps the tables of the thread counts it finished)."""
    records = []
    for threads in args.thread_counts:
        torch.set_num_threads(threads)
        for name, build, params in cases(args.quick):
            if args.only and args.only not in name:
                continue
            impls = build(**params)
            record = dict(case=name, threads=threads, **params)
            for impl, samples in time_interleaved(impls, args.repeats).items():
                wall, cpu = [t for t, _ in samples], [c for _, c in samples]
                record[impl] = dict(median_s=statistics.median(wall), min_s=min(wall), times_s=wall)
                record[impl].update(median_cpu_s=statistics.median(cpu), cpu_times_s=cpu)
                record[impl]["parameters"] = impls[impl][1]
            records.append(record)
            medians = [f"{k} {common.fmt_time(record[k]['median_s'])}" for k in impls]
            common.progress(f"{threads} thread(s), {name}: " + ", ".join(medians))
        if done is not None:
            done(records)
    return records


def table(records: list[dict], threads: int) -> str:
    rows = []
    for r in (r for r in records if r["threads"] == threads):
        ours, ref, dense = r["meshop"], r["reference"], r.get("dense")
        row = [r["case"], f"{ref['parameters']:,}", f"{ours['parameters']:,}"]
        row += [common.fmt_time(ref["median_s"]), common.fmt_time(ours["median_s"])]
        row += [f"{ref['median_s'] / ours['median_s']:.2f}x"]
        row += [f"{ref['median_cpu_s'] / ours['median_cpu_s']:.2f}x"]
        vs = "-" if dense is None else f"{dense['median_s'] / ours['median_s']:.2f}x"
        rows.append([*row, "-" if dense is None else common.fmt_time(dense["median_s"]), vs])
    headers = "configuration|reference parameters|meshop parameters|reference step|meshop step"
    headers += "|speed-up|speed-up in CPU time|dense form step|vs dense form"
    return common.markdown_table(headers, rows)


def merged(args, records: list[dict], info: dict) -> list[dict]:
    """``records``, each with the measurement it came from (``measured``); with ``--merge`` after
    the rows of the existing result file that this run did not measure, which keep theirs."""
    measured = {k: info[k] for k in ("date", "command", "cpu", "cpu_cores", "torch", "note")}
    records = [{**r, "measured": r.get("measured", measured)} for r in records]
    existing = args.out / "speed_vs_reference.json"
    if not args.merge or not existing.is_file():
        return records
    old = json.loads(existing.read_text())
    old_measured = {k: old["machine"].get(k) for k in measured}
    new_keys = {(r["case"], r["threads"]) for r in records}
    kept = [r for r in old["records"] if (r["case"], r["threads"]) not in new_keys]
    return [{**r, "measured": r.get("measured", old_measured)} for r in kept] + records


def measurement_line(measured: dict, cases: list[str] | None, repeats: int) -> str:
    which = "" if cases is None else f" (rows: {'; '.join(dict.fromkeys(cases))})"
    return (
        f"Measured {measured['date']}{which} with `{measured['command']}` on {measured['cpu']} "
        f"({measured['cpu_cores']} cores), torch {measured['torch']}, {measured['note']}: median "
        f"of {repeats} interleaved training steps (forward, loss, backward, Adam) per "
        f"implementation after one warm-up step each; speed-up: reference / meshop, of the "
        f"wall-clock medians and of the medians of the process's CPU time."
    )


def write(args, records: list[dict], echo: bool = True) -> str:
    info = {**common.machine(), "threads": args.thread_counts, "quick": args.quick}
    info["note"] = args.note
    records = merged(args, records, info)
    runs: dict[str, list[dict]] = {}
    for r in records:
        runs.setdefault(json.dumps(r["measured"], sort_keys=True), []).append(r)
    lines = []
    for rows in runs.values():
        cases = None if len(runs) == 1 else [r["case"] for r in rows]
        repeats = len(rows[0]["meshop"]["times_s"])
        lines.append(measurement_line(rows[0]["measured"], cases, repeats))
    thread_counts = sorted({r["threads"] for r in records})
    tables = {f"{t} thread(s)": table(records, t) for t in thread_counts}
    title = "Training steps against the reference code"
    text = common.results_text(title, "\n\n".join(lines), tables)
    data = {"machine": {**info, "threads": thread_counts}, "records": records}
    common.write_text(args.out, "speed_vs_reference", text, data, echo)
    return text


def main(argv=None) -> None:
    args = parse(argv)
    write(args, run(args, done=lambda records: write(args, records, echo=False)))


if __name__ == "__main__":
    main()

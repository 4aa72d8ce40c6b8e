"""What every benchmark shares: one fresh process per case, its time and peak memory, the tables.

Each case runs in a new process (forked from a server that imported torch and meshop once), so
that one case's memory never hides in another's. The process builds its inputs and calls the
case's step; a step faster than ``min_time`` is called once more first (lazy initialisations), and
its memory and time are then measured warm:

- peak memory on CPU is the kernel's resident-set high-water mark (``VmHWM``) during the call
  minus the resident set just before it: the inputs and the imported libraries are not counted.
  The high-water mark is reset before the call by writing ``5`` to ``/proc/self/clear_refs``.
- peak memory on CUDA is ``torch.cuda.max_memory_allocated()`` during the call minus the memory
  allocated before it.
- time is the fastest of the repeated calls (the machine is shared: the minimum is the least
  noisy); a step that takes longer than ``min_time`` is called, measured and timed once, unless
  the case asks for a warm measurement (training steps: the first call searches neighbours that
  every later epoch reuses), which times a second call and reports the larger peak of the two.

Comparisons are measured side by side in one run and reported as ratios.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import math
import multiprocessing as mp
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

#: the repository root, where the entry points run as ``python -m benchmarks.<folder>.<name>``
ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
#: markers around the measured part of a result file, which docs/benchmarks.md includes with
#: pymdownx.snippets (``--8<-- "benchmarks/results/<name>.md:results"``)
SECTION_START = "<!-- --8<-- [start:results] -->"
SECTION_END = "<!-- --8<-- [end:results] -->"
MB = 2**20
GB = 2**30


def parse_args(description: str, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The options every benchmark script takes."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--quick", action="store_true", help="tiny sizes only (a smoke test of a few seconds)"
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads in every case (default: 1)"
    )
    parser.add_argument(
        "--device",
        choices=["auto", "cpu", "cuda"],
        default="auto",
        help="auto: CPU, plus CUDA columns when a GPU is available",
    )
    parser.add_argument(
        "--max-gb",
        type=float,
        default=8.0,
        help="skip a dense reference case whose estimated memory exceeds this (default: 8)",
    )
    parser.add_argument(
        "--timeout", type=float, default=600.0, help="seconds allowed to one case (default: 600)"
    )
    parser.add_argument(
        "--min-time",
        type=float,
        default=None,
        help="repeat a quick case until this many seconds are spent (default: 1, --quick: 0.05)",
    )
    parser.add_argument(
        "--out", type=Path, default=RESULTS, help=f"folder of the result files (default: {RESULTS})"
    )
    args = parser.parse_args(argv)
    if args.min_time is None:
        args.min_time = 0.05 if args.quick else 1.0
    return args


def devices(args: argparse.Namespace) -> list[str]:
    """The devices to measure on: CPU always (unless ``--device cuda``), CUDA when present."""
    import torch

    if args.device == "auto":
        return ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA GPU is available to torch on this machine")
    return [args.device]


def _status_mb(key: str) -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024  # kB
    raise RuntimeError(f"/proc/self/status has no {key}")


def _max_rss_mb() -> float:
    """The process's peak resident set (MB) where /proc is missing (macOS reports bytes)."""
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / MB if sys.platform == "darwin" else peak / 1024


def _reset_peak_rss() -> float:
    """Reset the resident-set high-water mark; return the resident set now (MB).

    Without ``/proc`` (not Linux) the mark cannot be reset: the peak is then measured from the
    process's peak so far, which is exact when the step needs more memory than building its
    inputs did, and an underestimate otherwise."""
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
        return _status_mb("VmRSS")
    except OSError:
        return _max_rss_mb()


def _peak_rss() -> float:
    try:
        return _status_mb("VmHWM")
    except OSError:
        return _max_rss_mb()


def measure(
    step: Callable[[], object], device: str, min_time: float, max_repeats: int, warm: bool = False
) -> dict:
    """Peak memory of one call of ``step`` and its time (see the module docstring); with ``warm``
    every step is timed after a first call, whatever its length, and the peak is the larger of
    the first call's and the timed calls'."""
    import torch

    cuda = device == "cuda"

    def call() -> tuple[float, float]:
        """(seconds, peak MB above the memory before the call) of one call."""
        gc.collect()
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated() / MB
        else:
            base = _reset_peak_rss()
        start = time.perf_counter()
        step()
        if cuda:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        peak = torch.cuda.max_memory_allocated() / MB if cuda else _peak_rss()
        return seconds, peak - base, peak

    # a quick step is called once first (lazy initialisations), then measured warm
    seconds, first_peak, first_total = call()
    times = []
    if warm or seconds < min_time:
        seconds, peak, total = call()
        times.append(seconds)
        while len(times) < max_repeats and sum(times) < min_time:
            times.append(call()[0])
        if warm and first_peak > peak:
            peak, total = first_peak, first_total
    else:
        peak, total = first_peak, first_total
    return {
        "time_s": min(times) if times else seconds,
        "calls_timed": max(len(times), 1),
        "peak_mb": peak,
        "total_peak_mb": total,
    }


def _worker(conn, prepare, params, device, threads, min_time, max_repeats, warm=False):
    import torch

    gc.freeze()  # the imported modules' objects: keeps the collections in measure() quick
    torch.set_num_threads(threads)
    try:
        step = prepare(device=device, **params)
        result = measure(step, device, min_time, max_repeats, warm)
    except (RuntimeError, MemoryError) as exc:  # out of memory, mostly
        result = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
    conn.send(result)
    conn.close()


#: modules imported once by the fork server, so that a case's process starts in a blink
PRELOAD = ["torch", "torch_geometric", "torch_cluster", "meshop", "meshop.nn", "meshop.models"]


def _context():
    """Processes forked from a server that imported torch and meshop once (``forkserver``).

    Freed blocks of 64 kB and more go back to the system at once
    (``MALLOC_MMAP_THRESHOLD_``), so that a warm call's peak is not hidden in memory the
    allocator kept from an earlier call."""
    ctx = mp.get_context("forkserver")
    if not getattr(_context, "started", False):
        os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", "65536")
        ctx.set_forkserver_preload(PRELOAD)
        _context.started = True
    return ctx


def run_cli_case(
    prepare: Callable[..., Callable[[], object]],
    params: dict,
    device: str,
    args,
    warm: bool = False,
) -> dict:
    """:func:`run_case` with the options every script takes from its command line."""
    return run_case(
        prepare,
        params,
        device=device,
        threads=args.threads,
        timeout=args.timeout,
        min_time=args.min_time,
        warm=warm,
    )


def run_case(
    prepare: Callable[..., Callable[[], object]],
    params: dict,
    *,
    device: str,
    threads: int,
    timeout: float,
    min_time: float = 1.0,
    max_repeats: int = 5,
    warm: bool = False,
) -> dict:
    """Measure ``prepare(device=device, **params)()`` in a fresh process (see the module docstring).

    ``prepare`` must be a module-level function; it builds the inputs and returns the step.
    Returns ``time_s``, ``peak_mb`` (peak minus before the call), ``total_peak_mb`` and
    ``calls_timed``, or ``error`` when the case failed, was killed or ran out of time. ``warm``
    times every step after a first call (a training step, whose first call searches the
    neighbours that later epochs reuse).
    """
    ctx = _context()
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(
        target=_worker,
        args=(send, prepare, params, device, threads, min_time, max_repeats, warm),
    )
    proc.start()
    send.close()
    try:
        if recv.poll(timeout):
            result = recv.recv()
        else:
            result = {"error": f"timed out after {timeout:.0f} s"}
    except EOFError:
        result = None
    proc.join(10)
    if proc.is_alive():
        proc.kill()
        proc.join()
    if result is None:
        result = {"error": f"the process died (exit code {proc.exitcode}; out of memory?)"}
    return result


def dense_estimate(
    records: list[dict], key: dict, elements: int, default_k: float
) -> tuple[float, float]:
    """Estimated peak memory (GB) of a dense case with ``elements`` = N_dst * N_src entries in its
    matrix: ``elements * 4 bytes * k``, with ``k`` measured on the largest dense case of the same
    ``key`` that ran (``default_k`` before any ran). Returns ``(GB, k)``."""
    ran = [
        r
        for r in records
        if all(r.get(name) == value for name, value in key.items())
        and "peak_mb" in r
        and r["elements"] >= 2**20
    ]
    k = default_k
    if ran:
        largest = max(ran, key=lambda r: r["elements"])
        k = largest["peak_mb"] * MB / (largest["elements"] * 4)
    return elements * 4 * k / GB, k


def skip_note(gb: float, k: float, limit: float) -> str:
    return f"skipped: would need {gb:.1f} GB > {limit:g} GB (estimated N_dst*N_src*4 bytes*{k:.1f})"


def machine() -> dict:
    """Where and with what the numbers were measured."""
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next(line.split(":", 1)[1].strip() for line in info if "model name" in line)
    except (OSError, StopIteration):
        pass
    info = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": " ".join([Path(sys.executable).name, _script(sys.argv[0]), *rerun_args()]),
        "cpu": cpu,
        "cpu_cores": mp.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def fmt_mb(mb: float | None) -> str:
    if mb is None:
        return "-"
    if mb >= 1024**2:
        return f"{mb / 1024**2:.1f} TB"
    if mb >= 1024:
        return f"{mb / 1024:.2f} GB"
    return f"{max(mb, 0.0):.1f} MB"


def fmt_ratio(numerator: float | None, denominator: float | None) -> str:
    """``numerator / denominator`` as ``12.3x`` (``-`` when either is missing)."""
    if numerator is None or denominator is None or denominator <= 0:
        return "-"
    return f"{numerator / denominator:.1f}x"


def memory_ratio(dense_mb: float | None, ours_mb: float | None) -> str:
    """Like :func:`fmt_ratio`; a meshop peak below 1 MB (the resolution that matters) counts as
    1 MB and the ratio is shown as a lower bound."""
    if dense_mb is None or ours_mb is None:
        return "-"
    if ours_mb < 1.0:
        return f">{dense_mb:.0f}x"
    return fmt_ratio(dense_mb, ours_mb)


def fmt_count(n: int) -> str:
    """1000 -> 1e3, 4096 -> 4096."""
    exponent = len(str(n)) - 1
    return f"1e{exponent}" if n >= 1000 and n == 10**exponent else str(n)


def growth_exponent(
    records: Sequence[dict], record: dict, field: str = "time_s", same: Sequence[str] = ()
) -> str:
    """The growth exponent of ``field`` from the largest smaller ``n`` of the records that agree
    with ``record`` on the keys ``same``: log(f2 / f1) / log(n2 / n1), 1 for linear growth, 2 for
    quadratic; ``-`` without such a record or a positive value."""
    earlier = [
        r
        for r in records
        if all(r.get(key) == record.get(key) for key in same)
        and r["n"] < record["n"]
        and field in r
    ]
    if not earlier or record.get(field, 0) <= 0:
        return "-"
    previous = max(earlier, key=lambda r: r["n"])
    if previous[field] <= 0:
        return "-"
    ratio = math.log(record[field] / previous[field])
    return f"{ratio / math.log(record['n'] / previous['n']):.2f}"


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def result_of(record: dict | None, field: str) -> float | None:
    """A measured field of a record, None when the case was skipped or failed."""
    if record is None:
        return None
    return record.get(field)


def comparison_table(
    records: list[dict], match: dict, size_fields: Sequence[str], size_headers: Sequence[str]
) -> str:
    """One row per size (the ``size_fields`` of the records that ``match``): meshop against the
    dense reference, time, peak memory and their ratios (dense / meshop), and why a case is
    missing."""
    selected = [r for r in records if all(r.get(k) == v for k, v in match.items())]
    sizes = list(dict.fromkeys(tuple(r[f] for f in size_fields) for r in selected))
    rows = []
    for size in sizes:
        found = {r["impl"]: r for r in selected if tuple(r[f] for f in size_fields) == size}
        ours, dense = found.get("meshop"), found.get("dense")
        notes = [
            f"{impl}: {r.get('skipped') or r.get('error')}"
            for impl, r in (("meshop", ours), ("dense", dense))
            if r is not None and (r.get("skipped") or r.get("error"))
        ]
        dense_memory = fmt_mb(result_of(dense, "peak_mb"))
        if dense is not None and "estimated_peak_mb" in dense:
            dense_memory = f"({fmt_mb(dense['estimated_peak_mb'])} est.)"
        rows.append(
            [
                *(
                    fmt_count(v) if isinstance(v, int) and not isinstance(v, bool) else v
                    for v in size
                ),
                fmt_time(result_of(ours, "time_s")),
                fmt_time(result_of(dense, "time_s")),
                fmt_ratio(result_of(dense, "time_s"), result_of(ours, "time_s")),
                fmt_mb(result_of(ours, "peak_mb")),
                dense_memory,
                memory_ratio(result_of(dense, "peak_mb"), result_of(ours, "peak_mb")),
                "; ".join(notes),
            ]
        )
    headers = [
        *size_headers,
        "meshop time",
        "dense time",
        "speed-up",
        "meshop memory",
        "dense memory",
        "memory ratio",
        "notes",
    ]
    return markdown_table(headers, rows)


def write_results(
    name: str,
    title: str,
    args: argparse.Namespace,
    tables: dict[str, str],
    records: list[dict],
    info: dict | None = None,
) -> Path:
    """Print the tables and write ``<out>/<name>.md`` and ``<out>/<name>.json``; ``info``: the
    machine and command of an earlier measurement whose tables are redrawn (default: this one)."""
    info = info or {**machine(), "threads": args.threads, "quick": args.quick}
    header = (
        f"Measured {info['date']} with `{info['command']}` on {info['cpu']} "
        f"({info['cpu_cores']} cores, {args.threads} torch thread(s)), torch {info['torch']}"
        + (f", GPU {info['gpu']}" if "gpu" in info else ", no GPU")
        + "."
    )
    parts = [f"## {title}", "", SECTION_START, header, ""]
    for caption, table in tables.items():
        parts += [f"### {caption}", "", table, ""]
    parts += [SECTION_END, ""]
    text = "\n".join(parts)
    print(text, flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.threads != 1:  # the one-thread tables stay; e.g. models_2threads.md next to them
        name = f"{name}_{args.threads}threads"
    (args.out / f"{name}.md").write_text(text)
    path = args.out / f"{name}.json"
    path.write_text(json.dumps({"machine": info, "records": records}, indent=1) + "\n")
    return path


# options that only say where files go: the recorded command leaves them out, so that it reruns
# on any machine (into the default folders) instead of naming the measuring machine's folders
WHERE_OPTIONS = ("--out", "--runs")


def rerun_args(argv: Sequence[str] | None = None) -> list[str]:
    """The script's arguments (``sys.argv[1:]`` by default) less :data:`WHERE_OPTIONS`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    kept, i = [], 0
    while i < len(argv):
        name = argv[i].split("=", 1)[0]
        if name in WHERE_OPTIONS:
            i += 1 if "=" in argv[i] else 2
            continue
        kept.append(argv[i])
        i += 1
    return kept


def _script(path: str) -> str:
    """How an entry point at ``path`` is run from the repository root: ``-m benchmarks.speed.x``
    for a module of this package, the path itself otherwise."""
    try:
        module = Path(path).resolve().relative_to(ROOT).with_suffix("")
    except ValueError:
        return path
    return f"-m {'.'.join(module.parts)}"


def append_line(log: Path, entry: dict) -> None:
    """Append ``entry`` to the JSON-lines file ``log`` (its folder made if needed)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as f:
        f.write(json.dumps(entry, default=str) + "\n")


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def load_results(results: Path, names: Sequence[str]) -> dict[str, dict]:
    """``{name: {"machine": ..., "records": [...]}}`` of the result files ``<results>/<name>.json``
    among ``names`` that exist."""
    found = {}
    for name in names:
        path = results / f"{name}.json"
        if path.exists():
            data = json.loads(path.read_text())
            if "records" not in data:
                raise SystemExit(f"{path} has no 'records': is it a benchmark result file?")
            found[name] = data
    return found


def profile_args(argv, description: str, steps: int) -> argparse.Namespace:
    """The options of the ``speed/profile_*.py`` scripts (``--quick``, ``--threads``, ``--steps``,
    ``--out``), parsed, with torch set to that many threads."""
    import torch

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=steps)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    return args

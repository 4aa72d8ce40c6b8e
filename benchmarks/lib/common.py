"""What every benchmark shares: one fresh process per case and its time and peak memory (as
docs/benchmarks.md, "How it is measured", describes), the tables and the result files."""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import math
import multiprocessing as mp
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

#: the repository root, where the entry points run as ``python -m benchmarks.<folder>.<name>``
ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
#: markers around the measured part of a result file, which the docs include with
#: pymdownx.snippets (``--8<-- "benchmarks/results/<name>.md:results"``)
SECTION_START = "<!-- --8<-- [start:results] -->"
SECTION_END = "<!-- --8<-- [end:results] -->"
MB = 2**20
GB = 2**30


def parser(description: str, quick="tiny sizes only (a smoke test)", threads=True):
    """A parser with the options of every entry point: ``--quick``, ``--threads``, ``--out``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help=quick)
    if threads:
        parser.add_argument("--threads", type=int, default=1, help="torch threads (default: 1)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder of the result files")
    return parser


def parse_args(description: str, argv=None, more: Callable | None = None) -> argparse.Namespace:
    """The options of the scripts whose cases run in fresh processes (``more(parser)``: more)."""
    p = parser(description)
    add = p.add_argument
    add("--device", choices=["auto", "cpu", "cuda"], default="auto", help="auto: CUDA if present")
    add("--max-gb", type=float, default=8.0, help="skip a dense case estimated above this")
    add("--timeout", type=float, default=600.0, help="seconds allowed to one case")
    add("--min-time", type=float, default=None, help="repeat a quick case this many seconds")
    if more is not None:
        more(p)
    args = p.parse_args(argv)
    if args.min_time is None:
        args.min_time = 0.05 if args.quick else 1.0
    return args


def chosen_models(parser: argparse.ArgumentParser, text: str, allowed) -> list[str]:
    """The comma-separated model names of ``text``, refused through ``parser`` unless they are
    among ``allowed`` (and at least one)."""
    models = [m.strip() for m in text.split(",") if m.strip()]
    unknown = sorted(set(models) - set(allowed))
    if unknown or not models:
        parser.error(f"unknown models {unknown}; choose from {', '.join(allowed)}")
    return models


def devices(args: argparse.Namespace) -> list[str]:
    """The devices to measure on: CPU always (unless ``--device cuda``), CUDA when present."""
    import torch

    if args.device == "auto":
        return ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA GPU is available to torch on this machine")
    return [args.device]


def _rss_mb(key: str, reset: bool = False) -> float:
    """``VmRSS`` or ``VmHWM`` (MB) of this process, after resetting the high-water mark with
    ``reset``; without ``/proc``, the peak so far (macOS reports bytes), which underestimates a
    step that needs less than building its inputs did."""
    try:
        if reset:
            with open("/proc/self/clear_refs", "w") as clear_refs:
                clear_refs.write("5")
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) / 1024 for line in status if line[:6] == key + ":")
    except OSError:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / MB if sys.platform == "darwin" else peak / 1024


def measure(
    step: Callable[[], object], device: str, min_time: float, max_repeats: int, warm: bool = False
) -> dict:
    """Peak memory of one call of ``step`` and its time (see the module docstring); with ``warm``
    every step is timed after a first call, whatever its length, and the peak is the larger of
    the first call's and the timed calls'."""
    import torch

    cuda = device == "cuda"

    def call() -> tuple[float, float, float]:
        """(seconds, peak MB above the memory before the call, peak MB) of one call."""
        gc.collect()
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated() / MB
        else:
            base = _rss_mb("VmRSS", reset=True)
        start = time.perf_counter()
        step()
        if cuda:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        peak = torch.cuda.max_memory_allocated() / MB if cuda else _rss_mb("VmHWM")
        return seconds, peak - base, peak

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
    timed = min(times) if times else seconds
    return {
        "time_s": timed,
        "calls_timed": max(len(times), 1),
        "peak_mb": peak,
        "total_peak_mb": total,
    }


def _worker(conn, prepare, params, device, threads, min_time, max_repeats, warm=False):
    import torch

    gc.freeze()  # the imported modules' objects: keeps the collections in measure() quick
    torch.set_num_threads(threads)
    try:
        result = measure(prepare(device=device, **params), device, min_time, max_repeats, warm)
    except (RuntimeError, MemoryError) as exc:  # out of memory, mostly
        result = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
    conn.send(result)
    conn.close()


#: modules imported once by the fork server, so that a case's process starts in a blink
PRELOAD = ["torch", "torch_geometric", "torch_cluster", "meshop", "meshop.nn", "meshop.models"]


def _context(device: str = "cpu"):
    """Processes forked from a server that imported torch and meshop once; freed blocks of 64 kB
    and more go back to the system at once (``MALLOC_MMAP_THRESHOLD_``), so that a warm call's
    peak is not hidden in memory the allocator kept from an earlier call. CUDA cases get spawned
    processes: a process forked after CUDA was initialised (the server asks torch whether a GPU
    is there) cannot use the GPU."""
    if device != "cpu":
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    if not getattr(_context, "started", False):
        os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", "65536")
        ctx.set_forkserver_preload(PRELOAD)
        _context.started = True
    return ctx


def run_cli_case(prepare: Callable, params: dict, device: str, args, warm: bool = False) -> dict:
    """:func:`run_case` with the options every script takes from its command line."""
    options = dict(threads=args.threads, timeout=args.timeout, min_time=args.min_time, warm=warm)
    return run_case(prepare, params, device=device, **options)


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
    """:func:`measure` of the step that ``prepare(device=device, **params)`` (a module-level
    function) builds, in a fresh process; ``error`` when it failed, died or ran out of time."""
    ctx = _context(device)
    recv, send = ctx.Pipe(duplex=False)
    args = (send, prepare, params, device, threads, min_time, max_repeats, warm)
    proc = ctx.Process(target=_worker, args=args)
    proc.start()
    send.close()
    try:
        result = (
            recv.recv() if recv.poll(timeout) else {"error": f"timed out after {timeout:.0f} s"}
        )
    except EOFError:
        result = None
    proc.join(10)
    if proc.is_alive():
        proc.kill()
        proc.join()
    if result is None:
        result = {"error": f"the process died (exit code {proc.exitcode}; out of memory?)"}
    return result


def run_process(argv: Sequence[str], env=None, timeout=math.inf, sample=None) -> dict:
    """``argv`` run in a new process (killed after ``timeout`` s): its ``exit_code``, ``seconds``,
    ``peak_mb`` (from ``wait4``), ``output`` and the peak of ``sample(pid)`` (bytes, each 0.2 s).

    On Linux ``wait4``'s peak also counts what this process held when it started the child (the
    forked copy before ``exec``), and misses a peak that the child cleared with ``clear_refs``
    (as ``meshop predict``'s estimate does): a script that measures a large child from a large
    parent has the child report its own ``VmHWM``."""
    import subprocess
    import threading

    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    output, sampled, done = [], [0], threading.Event()
    threads = [threading.Thread(target=lambda: output.append(proc.stdout.read()), daemon=True)]

    def watch() -> None:
        while not done.is_set():
            sampled[0] = max(sampled[0], sample(proc.pid))
            done.wait(0.2)

    if sample is not None:
        threads.append(threading.Thread(target=watch, daemon=True))
    for thread in threads:
        thread.start()
    while not (finished := os.wait4(proc.pid, os.WNOHANG))[0]:
        if time.perf_counter() > start + timeout:
            proc.kill()
            finished = os.wait4(proc.pid, 0)
            break
        time.sleep(0.05)
    proc.returncode = os.waitstatus_to_exitcode(finished[1])
    done.set()
    for thread in threads:
        thread.join(10)
    result = {
        "exit_code": proc.returncode,
        "seconds": time.perf_counter() - start,
        "peak_mb": finished[2].ru_maxrss * 1024 / MB,  # Linux: kilobytes
        "output": output[0].decode(errors="replace") if output else "",
    }
    if sample is not None:
        result["sampled_peak_mb"] = sampled[0] / MB
    return result


def run_python(*argv: str) -> dict:
    """``python ARGV`` run in a new process (:func:`run_process`), the benchmark stopped with its
    output when it fails."""
    run = run_process([sys.executable, *argv])
    if run["exit_code"] != 0:
        raise SystemExit(
            f"{' '.join(argv)} failed with status {run['exit_code']}:\n{run['output']}"
        )
    return run


def dense_estimate(
    records: list[dict], key: dict, elements: int, default_k: float
) -> tuple[float, float]:
    """Estimated peak memory (GB) of a dense case with ``elements`` = N_dst * N_src entries in its
    matrix: ``elements * 4 bytes * k``, with ``k`` measured on the largest dense case of the same
    ``key`` that ran (``default_k`` before any ran). Returns ``(GB, k)``."""
    ran = [r for r in records if r.items() >= key.items() and r.get("elements", 0) >= 2**20]
    largest = max((r for r in ran if "peak_mb" in r), key=lambda r: r["elements"], default=None)
    k = default_k if largest is None else largest["peak_mb"] * MB / (largest["elements"] * 4)
    return elements * 4 * k / GB, k


def skip_dense(
    records: list[dict], record: dict, key: Sequence[str], default_k: float, args, size: str
) -> bool:
    """Whether the dense case ``record`` is skipped on CPU, its :func:`dense_estimate` (over the
    records of the same ``key``) above ``--max-gb``; it gets the reason (and, but for B*n^2, the
    estimate)."""
    gb, k = dense_estimate(records, {f: record[f] for f in key}, record["elements"], default_k)
    if record["device"] != "cpu" or gb <= args.max_gb:
        return False
    record["skipped"] = (
        f"skipped: would need {gb:.1f} GB > {args.max_gb:g} GB (estimated {size}*4 bytes*{k:.1f})"
    )
    if size != "B*n^2":
        record["estimated_peak_mb"] = gb * 1024
    return True


def operator_groups(events, groups: dict, other: str, steps: int) -> dict[str, float]:
    """Self CPU seconds per step of the profiler's ``events`` in each of ``groups`` (name:
    operator-name fragments; the first group with a fragment in an operator's lowercase name
    takes it) and in ``other``."""
    seconds = dict.fromkeys([*groups, other], 0.0)
    for event in events:
        name = event.key.lower()
        group = next((g for g, parts in groups.items() if any(p in name for p in parts)), other)
        seconds[group] += event.self_cpu_time_total / steps / 1e6
    return seconds


def commit() -> str:
    """The commit the measured code is at ("unknown" outside a git clone), "+changes" appended when
    the package or the benchmarks differ from it (result files aside)."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        )
        changed = subprocess.run(
            ["git", "status", "--porcelain", "--", "meshop", "benchmarks", ":!benchmarks/results"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
    except OSError:
        return "unknown"
    if head.returncode != 0:
        return "unknown"
    return head.stdout.strip() + ("+changes" if changed.stdout.strip() else "")


def machine() -> dict:
    """Where and with what the numbers were measured: date, command, commit, CPU, load average
    (1, 5 and 15 minutes, when the tables are written), versions."""
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
        "commit": commit(),
        "cpu": cpu,
        "load": [round(x, 2) for x in os.getloadavg()],
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
    return f"{seconds * 1e3:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def fmt_mb(mb: float | None) -> str:
    if mb is None:
        return "-"
    if mb >= 1024**2:
        return f"{mb / 1024**2:.1f} TB"
    return f"{mb / 1024:.2f} GB" if mb >= 1024 else f"{max(mb, 0.0):.1f} MB"


def fmt_ratio(numerator: float | None, denominator: float | None) -> str:
    """``numerator / denominator`` as ``12.3x`` (``-`` when either is missing)."""
    if numerator is None or denominator is None or denominator <= 0:
        return "-"
    return f"{numerator / denominator:.1f}x"


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
        if all(r.get(k) == record.get(k) for k in same) and r["n"] < record["n"] and field in r
    ]
    previous = max(earlier, key=lambda r: r["n"], default=None)
    if previous is None or record.get(field, 0) <= 0 or previous[field] <= 0:
        return "-"
    ratio = math.log(record[field] / previous[field])
    return f"{ratio / math.log(record['n'] / previous['n']):.2f}"


def markdown_table(headers: Sequence[str] | str, rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table; ``headers`` a sequence or one string of headers separated by ``|``."""
    if isinstance(headers, str):
        headers = headers.split("|")
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def result_of(record: dict | None, field: str) -> float | None:
    """A measured field of a record, None when the case was skipped or failed."""
    return None if record is None else record.get(field)


def notes_of(record: dict) -> str:
    """Why a case has no measurement: its skip note or error (empty when measured)."""
    return record.get("skipped") or record.get("error", "")


def comparison_table(
    records: list[dict], match: dict, size_fields: Sequence[str], size_headers: Sequence[str]
) -> str:
    """One row per size (the ``size_fields`` of the records that ``match``): meshop against the
    dense reference, time, peak memory and their ratios (dense / meshop), and why a case is
    missing."""
    selected = [r for r in records if all(r.get(k) == v for k, v in match.items())]
    rows = []
    for size in dict.fromkeys(tuple(r[f] for f in size_fields) for r in selected):
        found = {r["impl"]: r for r in selected if tuple(r[f] for f in size_fields) == size}
        ours, dense = found.get("meshop"), found.get("dense")
        notes = [
            f"{impl}: {notes_of(r)}"
            for impl, r in (("meshop", ours), ("dense", dense))
            if r is not None and notes_of(r)
        ]
        dense_memory = fmt_mb(result_of(dense, "peak_mb"))
        if dense is not None and "estimated_peak_mb" in dense:
            dense_memory = f"({fmt_mb(dense['estimated_peak_mb'])} est.)"
        ours_mb, dense_mb = result_of(ours, "peak_mb"), result_of(dense, "peak_mb")
        memory = fmt_ratio(dense_mb, ours_mb)
        if dense_mb is not None and ours_mb is not None and ours_mb < 1.0:
            memory = f">{dense_mb:.0f}x"  # a peak below 1 MB counts as 1 MB: a lower bound
        times = result_of(ours, "time_s"), result_of(dense, "time_s")
        row = [fmt_count(v) if type(v) is int else v for v in size]
        row += [fmt_time(times[0]), fmt_time(times[1]), fmt_ratio(times[1], times[0])]
        rows.append([*row, fmt_mb(ours_mb), dense_memory, memory, "; ".join(notes)])
    headers = "meshop time|dense time|speed-up|meshop memory|dense memory|memory ratio|notes"
    return markdown_table([*size_headers, *headers.split("|")], rows)


def scaling_table(records: list[dict], device: str, key: str, labels: dict, headers: str) -> str:
    """One row per record of ``device``: what it measured (``labels[record[key]]``), N, time and
    peak memory, and the growth exponents from the same case's next smaller N of the time and,
    where ``headers`` has a column for it, of the memory."""
    same, rows = ("device", key), []
    for r in (r for r in records if r["device"] == device):
        row = [labels[r[key]], fmt_count(r["n"]), fmt_time(r.get("time_s"))]
        row += [growth_exponent(records, r, same=same), fmt_mb(r.get("peak_mb"))]
        if "memory growth" in headers:
            row.append(growth_exponent(records, r, "peak_mb", same))
        rows.append([*row, r.get("error", "")])
    return markdown_table(headers, rows)


def results_text(title: str, header: str, tables: dict[str, str]) -> str:
    """A result file's Markdown: the title, then between the ``results`` markers the header line
    and every table under its caption (none when empty)."""
    parts = [f"## {title}", "", SECTION_START, header, ""]
    for caption, table in tables.items():
        parts += [f"### {caption}", "", table, ""] if caption else [table, ""]
    return "\n".join([*parts, SECTION_END, ""])


def write_text(out: Path, name: str, text: str, data: dict | None = None, echo=True) -> Path:
    """Write ``<out>/<name>.md`` (printed too) and, with ``data``, ``<out>/<name>.json``."""
    if echo:
        print(text, flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.md").write_text(text)
    path = out / f"{name}.json"
    if data is not None:
        path.write_text(json.dumps(data, indent=1, default=str) + "\n")
    return path


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
        f"Measured {info['date']} with `{info['command']}`{at_commit(info)} on {info['cpu']} "
        f"({info['cpu_cores']} cores, {args.threads} torch thread(s){load_of(info)}), "
        f"torch {info['torch']}" + (f", GPU {info['gpu']}" if "gpu" in info else ", no GPU") + "."
    )
    if args.threads != 1:  # the one-thread tables stay; e.g. models_2threads.md next to them
        name = f"{name}_{args.threads}threads"
    text = results_text(title, header, tables)
    return write_text(args.out, name, text, {"machine": info, "records": records})


def at_commit(info: dict) -> str:
    """ " at commit abc1234" for a header, empty for measurements that predate the field."""
    return f" at commit {info['commit']}" if "commit" in info else ""


def load_of(info: dict) -> str:
    """ ", load average 1.02 over 15 minutes" for a header, empty for older measurements."""
    return f", load average {info['load'][2]:.2f} over 15 minutes" if "load" in info else ""


def replace_section(path: Path, name: str, text: str, check: bool = False) -> bool:
    """Put ``text`` between the markers ``<!-- --8<-- [start:NAME] -->`` and ``[end:NAME]`` of
    ``path`` (the README's generated tables, which the docs include as snippets); whether the
    file changed (with ``check``: would change, and nothing is written)."""
    start, end = f"<!-- --8<-- [start:{name}] -->", f"<!-- --8<-- [end:{name}] -->"
    old = path.read_text()
    i, j = old.find(start), old.find(end)
    if i < 0 or j < i:
        raise SystemExit(f"{path} lacks the markers {start} ... {end}: put them around the table")
    new = f"{old[: i + len(start)]}\n{text}\n{old[j:]}"
    if new != old and not check:
        path.write_text(new)
        print(f"wrote the {name} section of {path}")
    return new != old


# options that only say where files go: the recorded command leaves them out, so that it reruns
# on any machine (into the default folders) instead of naming the measuring machine's folders
WHERE_OPTIONS = ("--out", "--runs")


def rerun_args(argv: Sequence[str] | None = None) -> list[str]:
    """The script's arguments (``sys.argv[1:]`` by default) less :data:`WHERE_OPTIONS`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    kept, i = [], 0
    while i < len(argv):
        if argv[i].split("=", 1)[0] in WHERE_OPTIONS:
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
    """Append ``entry`` to the JSON-lines file ``log``."""
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


def mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def spawn_pool(jobs: int):
    """``jobs`` worker processes, each started afresh (spawn: no copy of this process's torch
    threads or state)."""
    from concurrent.futures import ProcessPoolExecutor

    return ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn"))


def in_processes(function: Callable, calls: list[tuple], jobs: int) -> list:
    """``[function(*call) for call in calls]``, ``jobs`` spawned processes at a time."""
    if jobs <= 1 or len(calls) <= 1:
        return [function(*call) for call in calls]
    with spawn_pool(jobs) as pool:
        return list(pool.map(function, *zip(*calls)))

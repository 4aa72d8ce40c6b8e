"""The demo's recorded run and the README's demo table drawn from it.

Runs ``meshop demo`` as a user does, from a cold cache (a new, empty data directory: the data is
generated first), on one thread, records what it wrote in its ``summary.json`` with the machine,
commit and the whole command's wall time into ``<out>/demo.json``, and rewrites the README's marked
``demo`` section from that file (which the Training page includes).

    python -m benchmarks.report.demo                 # the demo (about 8 min on 2 cores)
    python -m benchmarks.report.demo --tables-from benchmarks/results/demo.json  # redraw only
    python -m benchmarks.report.demo --quick --out /tmp/demo --readme /tmp/README.md  # smoke test
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.lib import common

README = common.ROOT / "README.md"
#: what each model of the demo is, as the table names it
MODELS = {
    "pit": "PiT (width {width}, {heads} heads, {layers} blocks, {latent} farthest-point latent "
    "nodes)",
    "mlp": "MLP baseline (coordinates)",
}


def run(out: Path, quick: bool) -> dict:
    """``meshop demo`` in a fresh process and a new data directory; its summary and machine."""
    with tempfile.TemporaryDirectory(prefix="meshop-demo-") as scratch:
        command = [sys.executable, "-m", "meshop", "demo", "--threads", "1", "--no-progress"]
        command += ["--data-dir", str(Path(scratch) / "data"), "--out", str(Path(scratch) / "run")]
        command += ["--quick"] if quick else []
        start = time.perf_counter()
        subprocess.run(command, check=True)
        wall = time.perf_counter() - start
        summary = json.loads((Path(scratch) / "run" / "summary.json").read_text())
    info = common.machine() | {"threads": 1, "quick": quick, "wall_seconds": wall}
    info["command"] = "meshop demo" + (" --quick" if quick else "")
    record = {"machine": info, **summary}
    out.mkdir(parents=True, exist_ok=True)
    (out / "demo.json").write_text(json.dumps(record, indent=1) + "\n")
    return record


def section(record: dict) -> str:
    """The README's demo section: when and how it was measured, and one row per model."""
    from meshop.train.demo import QUICK, DemoSettings

    info = record["machine"]
    settings = QUICK if info.get("quick") else DemoSettings()
    minutes, seconds = divmod(round(record["total_seconds"]), 60)
    load = f", load average {info['load'][2]:.2f}" if "load" in info else ""
    if "load" in info and info["load"][2] > info["cpu_cores"]:
        load += " (other jobs shared the cores: the times are longer than alone)"
    head = (
        f"Measured on {info['date'][:10]} on the 2-core development machine (`{info['command']}`"
        f"{common.at_commit(info)}, one thread, from a cold cache: the data generated first"
        f"{load}; {minutes} min {seconds} s in all; `benchmarks/results/demo.json`):"
    )
    rows = []
    names = {"pit": {**settings.pit, "latent": settings.latent_points}, "mlp": settings.mlp}
    best = min(record["results"], key=lambda name: record["results"][name]["test_rel_l2"])
    for name, result in record["results"].items():
        error = f"{100 * result['test_rel_l2']:.2f} %"
        rows.append(
            [
                MODELS[name].format(**names[name]),
                f"{result['parameters']:,}",
                f"**{error}**" if name == best else error,
                f"{100 * result['test_rel_l2_median']:.2f} %",
                f"{result['train_seconds']:.0f} s",
            ]
        )
    headers = (
        "model|parameters|test relative L2 of the von Mises stress (mean)|median|training time"
    )
    errors = {name: result["test_rel_l2"] for name, result in record["results"].items()}
    ratio = f"PiT's mean error is {errors['mlp'] / errors['pit']:.1f} times smaller than the MLP's."
    return f"{head}\n\n{common.markdown_table(headers, rows)}\n\n{ratio}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=common.RESULTS, help="where demo.json goes")
    parser.add_argument("--readme", type=Path, default=README, help="the README to update")
    parser.add_argument("--quick", action="store_true", help="the demo's tiny version")
    parser.add_argument("--tables-from", type=Path, help="redraw the section from this demo.json")
    args = parser.parse_args(argv)
    if args.tables_from is not None:
        record = json.loads(args.tables_from.read_text())
    else:
        record = run(args.out, args.quick)
    text = section(record)
    common.replace_section(args.readme, "demo", text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

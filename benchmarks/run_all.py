"""Run every speed and memory benchmark, one after the other, and collect their tables.

    python benchmarks/run_all.py            # the full run (9 min 23 s on the 2-core CPU)
    python benchmarks/run_all.py --quick    # smoke test of every script

The options are passed to every benchmark (``--threads``, ``--max-gb``, ``--device``,
``--timeout``, ``--out``). The tables land in ``benchmarks/results/`` (one Markdown and one JSON
file per benchmark), together in ``benchmarks/results/all.md``, and the figures of
``benchmarks/plots.py`` beside them. The accuracy table (an hour) is not part of this run:
``python benchmarks/accuracy.py``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from common import parse_args, progress

HERE = Path(__file__).resolve().parent
SCRIPTS = [
    "position_attention",
    "local_attention",
    "models",
    "linear_attention",
    "neighbors",
    "transolver",
]


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(__doc__.splitlines()[0], argv)
    parts = []
    for name in SCRIPTS:
        start = time.perf_counter()
        progress(f"== {name}")
        subprocess.run([sys.executable, str(HERE / f"{name}.py"), *argv], check=True)
        progress(f"== {name} took {time.perf_counter() - start:.0f} s")
        parts.append((args.out / f"{name}.md").read_text())
    (args.out / "all.md").write_text("\n".join(parts))
    plots = [sys.executable, str(HERE / "plots.py"), "--results", str(args.out)]
    subprocess.run([*plots, "--out", str(args.out)], check=True)


if __name__ == "__main__":
    main()

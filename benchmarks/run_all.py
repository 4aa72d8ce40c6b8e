"""Run every speed and memory benchmark of :data:`SCRIPTS` with the same options, one after the
other, then draw the figures; the tables also go together into ``all.md``.

    python -m benchmarks.run_all            # the full run (9 min 23 s on the 2-core CPU)
    python -m benchmarks.run_all --quick    # smoke test of every script
"""

from __future__ import annotations

import subprocess
import sys
import time

from benchmarks.lib.common import parse_args, progress

#: the entry points run, each with the name of the result files it writes
SCRIPTS = {
    "benchmarks.speed.global_attention": "position_attention",
    "benchmarks.speed.local_attention": "local_attention",
    "benchmarks.speed.whole_models": "models",
    "benchmarks.speed.attention_cost": "linear_attention",
    "benchmarks.speed.neighbor_search": "neighbors",
    "benchmarks.speed.transolver_scaling": "transolver",
}


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(__doc__.splitlines()[0], argv)
    parts = []
    for module, name in SCRIPTS.items():
        start = time.perf_counter()
        progress(f"== {module}")
        subprocess.run([sys.executable, "-m", module, *argv], check=True)
        progress(f"== {module} took {time.perf_counter() - start:.0f} s")
        parts.append((args.out / f"{name}.md").read_text())
    (args.out / "all.md").write_text("\n".join(parts))
    figures = [sys.executable, "-m", "benchmarks.report.figures", "--results", str(args.out)]
    subprocess.run([*figures, "--out", str(args.out)], check=True)


if __name__ == "__main__":
    main()

"""Write the measured figures that the documentation's prose quotes (:mod:`benchmarks.lib.notes`).

    python -m benchmarks.report.notes          # write benchmarks/results/notes.md
    python -m benchmarks.report.notes --check  # exit status 1 if notes.md differs from the results

``python -m benchmarks.report.summary`` writes this file too.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks.lib.common import RESULTS
from benchmarks.lib.notes import load, notes_markdown


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS, help="folder of the result files")
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if notes.md is out of date"
    )
    args = parser.parse_args(argv)
    path = args.results / "notes.md"
    text = notes_markdown(load(args.results))
    if path.exists() and path.read_text() == text:
        return 0
    if args.check:
        print(f"{path} is out of date: run python -m benchmarks.report.notes", file=sys.stderr)
        return 1
    path.write_text(text)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

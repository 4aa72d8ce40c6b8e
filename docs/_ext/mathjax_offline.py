"""MkDocs hook: serve MathJax 3 from the site itself, so that formulas render without any
external host (an HPC login node, an industrial network).

MathJax comes from the PyPI package ``sphinx-mathjax-offline`` (the ``docs`` extra), which ships
MathJax 3.2.2's browser components (``tex-svg-full.js`` and the pieces it loads on demand). The
hook adds its files to the site under ``javascripts/mathjax/`` at build time, without copying
anything into the source tree; ``mkdocs build`` and ``mkdocs serve`` both pick them up.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

PACKAGE = "sphinx-mathjax-offline"
SITE_DIR = "javascripts/mathjax"  # where mkdocs.yml's extra_javascript expects it
ENTRY = "tex-svg-full.js"  # TeX input with every extension, SVG output: no font files to load
# not for a browser page: latest.js would fetch MathJax from a CDN, node-main.js is for Node
SKIP = {"latest.js", "node-main.js"}


def mathjax_root() -> Path:
    """The folder of MathJax's components in the installed ``sphinx-mathjax-offline``."""
    try:
        files = importlib.metadata.files(PACKAGE) or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    for f in files:
        if str(f).endswith(f"static/mathjax/{ENTRY}"):
            return Path(f.locate()).parent
    raise PluginError(
        f"MathJax for the offline docs is missing: the package {PACKAGE!r} is not installed. "
        "Install the docs extra (pip install -e '.[docs]', or bash scripts/install.sh)."
    )


def on_files(files: Files, config, **kwargs) -> Files:
    root = mathjax_root()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        if rel in SKIP:
            continue
        files.append(
            File(
                rel,
                src_dir=str(root),
                dest_dir=config["site_dir"],
                use_directory_urls=config["use_directory_urls"],
                dest_uri=f"{SITE_DIR}/{rel}",
            )
        )
    return files

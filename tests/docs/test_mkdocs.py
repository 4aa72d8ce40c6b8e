"""The documentation site: builds with ``mkdocs build --strict``, and every page is reachable."""

import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def nav_pages(entries) -> list[str]:
    pages = []
    for entry in entries:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += nav_pages(value) if isinstance(value, list) else [value]
    return pages


def test_docs_site_builds_strict_with_the_api_reference(tmp_path):
    site = tmp_path / "site"
    config = str(ROOT / "mkdocs.yml")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-f", config, "-d", str(site)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert (site / "index.html").is_file()
    api = (site / "api" / "nn" / "index.html").read_text()
    assert 'id="meshop.nn.PositionAttention"' in api  # generated from the docstrings
    assert "Shapes" in api


def test_every_docs_page_is_in_the_nav():
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    in_nav = set(nav_pages(config["nav"]))
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").glob("**/*.md")}
    missing = sorted(pages - in_nav)
    assert not missing, f"docs pages missing from the nav of mkdocs.yml: {missing}"
    assert not sorted(in_nav - pages), "the nav names pages that do not exist"


def test_docstring_math_and_roles_become_markdown():
    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    try:
        from griffe_rst import to_markdown
    finally:
        sys.path.pop(0)
    text = (
        "Kernel :math:`\\lambda > 0`, see :class:`~meshop.nn.MLP` and "
        ":func:`meshop.data.knn_index`:"
        "\n\n    .. math::\n        a &= b \\\\\n        c &= d\n\n    Next paragraph."
    )
    out = to_markdown(text)
    assert "$\\lambda > 0$" in out and "`MLP`" in out and "`meshop.data.knn_index`" in out
    block = ["$$", "\\begin{aligned}", "a &= b \\\\", "c &= d", "\\end{aligned}", "$$"]
    assert "\n".join("    " + line for line in block) in out
    assert out.rstrip().endswith("Next paragraph.")
    assert to_markdown(out) == out


#: the pages a user looks for first, each linked from the home page and from getting started
GUIDES = ["own-data.md", "choosing-a-model.md", "large_meshes.md"]


def test_the_guides_are_linked_from_the_home_page_and_getting_started():
    for page in ("index.md", "getting-started.md"):
        text = (ROOT / "docs" / page).read_text()
        missing = [guide for guide in GUIDES if f"]({guide})" not in text]
        assert not missing, f"docs/{page} does not link {missing}"
    for guide in GUIDES:
        assert (ROOT / "docs" / guide).is_file()

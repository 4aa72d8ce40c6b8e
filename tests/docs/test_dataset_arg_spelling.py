"""One spelling of the folder dataset's fields on the command line, in every page and example:
``--dataset-arg 'inputs=["load"]' --dataset-arg 'targets=["stress"]'``, a TOML list of names in
single quotes (the options are lists, and the quotes keep the shell off the brackets). The bare
``inputs=load`` and the single string ``'inputs="load"'`` work too, but a reader who meets three
spellings wonders which one is right."""

import re
import shlex
from pathlib import Path

import pytest

from meshop.cli import parse_value

ROOT = Path(__file__).resolve().parents[2]
FILES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("**/*.md")),
    *sorted((ROOT / "examples").glob("*.py")),
]
# a --dataset-arg and its value as the shell sees it: quoted in '' or "", or up to a space
DATASET_ARG = re.compile(r"--dataset-arg[ =]('[^'\n]*'|\"[^\"\n]*\"|[^\s`]+)")
NAME = r'"[\w:.-]+"'
SPELLING = re.compile(rf"'(?:inputs|targets)=\[{NAME}(?:, {NAME})*\]'")


def other_spellings(text: str) -> list[str]:
    """The ``--dataset-arg`` values of ``text`` that set ``inputs`` or ``targets`` in another
    spelling than ``'inputs=["a", "b"]'``."""
    return [
        match[1]
        for match in DATASET_ARG.finditer(text)
        if shlex.split(match[1])[0].startswith(("inputs=", "targets="))
        and not SPELLING.fullmatch(match[1])
    ]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_fields_have_one_spelling(path):
    found = other_spellings(path.read_text())
    assert not found, (
        f"{path.relative_to(ROOT)} sets the folder's fields as {found}; write "
        """--dataset-arg 'inputs=["load"]' --dataset-arg 'targets=["u", "p"]'"""
    )


@pytest.mark.parametrize(
    "line",
    [
        "meshop train --dataset-arg inputs=load --dataset-arg targets=stress",
        """meshop train --dataset-arg 'inputs="load"' --dataset-arg 'targets="stress"'""",
        """meshop train --dataset-arg "targets=['u']\"""",
        """meshop train --dataset-arg 'targets=["u","p"]'""",
        """--dataset-arg=inputs=["f"]""",
    ],
)
def test_other_spellings_are_found(line):
    assert other_spellings(line), line


def test_the_spelling_passes_and_parses_to_a_list_of_names():
    line = """meshop train --dataset-arg 'inputs=["load"]' \\
    --dataset-arg 'targets=["u", "von_mises"]' --dataset-arg refinement=2"""
    assert other_spellings(line) == []
    values = [shlex.split(m[1])[0].partition("=")[2] for m in DATASET_ARG.finditer(line)]
    assert [parse_value(v) for v in values] == [["load"], ["u", "von_mises"], 2]

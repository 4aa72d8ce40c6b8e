"""Griffe extension of the API reference: the reStructuredText markup in meshop's docstrings as
the Markdown the site renders.

- ``:math:`x``` becomes ``$x$``, and a ``.. math::`` block a ``$$ ... $$`` block (in an
  ``aligned`` environment when it aligns with ``&`` or breaks lines with ``\\\\``), which
  ``pymdownx.arithmatex`` hands to MathJax;
- ``:class:`~meshop.nn.MLP``` and the other cross-reference roles become inline code (``MLP``;
  the full path without the ``~``).
"""

from __future__ import annotations

import re

import griffe

MATH_ROLE = re.compile(r":math:`([^`]+)`")
XREF_ROLE = re.compile(r":(?:class|func|meth|attr|mod|obj|data|exc|const):`(~?)([^`]+)`")


def _math_blocks(text: str) -> str:
    lines, out, i = text.splitlines(), [], 0
    while i < len(lines):
        line = lines[i]
        if line.strip() != ".. math::":
            out.append(line)
            i += 1
            continue
        indent = len(line) - len(line.lstrip())
        i += 1
        body = []
        while i < len(lines) and (
            not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent
        ):
            body.append(lines[i].strip())
            i += 1
        body = [b for b in body if b]
        if any("&" in b or b.endswith("\\\\") for b in body):
            body = ["\\begin{aligned}", *body, "\\end{aligned}"]
        pad = " " * indent
        out += [pad + "$$", *(pad + b for b in body), pad + "$$", ""]
    return "\n".join(out)


def to_markdown(text: str) -> str:
    """A docstring's reStructuredText math and roles as Markdown (idempotent)."""
    text = _math_blocks(text)
    text = MATH_ROLE.sub(lambda m: f"${m.group(1)}$", text)
    return XREF_ROLE.sub(
        lambda m: f"`{m.group(2).split('.')[-1] if m.group(1) else m.group(2)}`", text
    )


class RstMarkup(griffe.Extension):
    """Rewrites every loaded docstring with :func:`to_markdown`."""

    def on_object(self, *, obj: griffe.Object, loader: griffe.GriffeLoader, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = to_markdown(obj.docstring.value)

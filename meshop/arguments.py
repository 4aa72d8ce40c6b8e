"""Checks of the options a user gives a model, a dataset or the training loop (``--model-arg``,
``--dataset-arg``, ``--train-arg``, the tables of a TOML file) against the signature of the class
they go to, before any work starts.

A name must be a parameter of the class (a wrong one gets the closest names); a value must have
the parameter's type, read from its annotation, else from the type of its default. Annotations
understood: ``int``, ``float`` (an int is a number too), ``bool``, ``str``, ``None``, paths
(``os.PathLike``: a string), ``Sequence[X]``, ``list[X]``, ``tuple[X, ...]``, ``tuple[X, Y]``
(values from TOML arrays) and unions of them; any other annotation accepts any value.
"""

from __future__ import annotations

import difflib
import inspect
import json
from collections.abc import Callable, Mapping
from typing import Any

from meshop.errors import ConfigError

#: a type as checked here: ``("int",)``, ``("list", alternatives)``, ``("tuple", [alternatives,
#: ...])`` or ``("any",)``, where ``alternatives`` is a list of types (a union)
Type = tuple

SCALARS = {
    "int": "int",
    "float": "float",
    "bool": "bool",
    "str": "str",
    "None": "none",
    "NoneType": "none",
    "PathLike": "str",
    "Path": "str",
}
SEQUENCES = ("Sequence", "list", "List", "Iterable", "Collection", "tuple", "Tuple")
SINGULAR = {"int": "an int", "float": "a number", "bool": "true or false", "str": "a string"}
PLURAL = {"int": "ints", "float": "numbers", "bool": "booleans", "str": "strings"}


def _split(text: str, sep: str) -> list[str]:
    """``text`` split at the ``sep`` characters outside brackets, each part stripped."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += (char == "[") - (char == "]")
        if char == sep and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    return [*parts, text[start:].strip()]


def parse_annotation(text: str) -> list[Type]:
    """The alternatives of an annotation written as text (``"int | Sequence[int] | None"``)."""
    out: list[Type] = []
    for part in _split(text, "|"):
        head, _, inner = part.partition("[")
        head = head.rpartition(".")[2]
        args = _split(inner[:-1], ",") if inner else []
        if head in ("Optional", "Union"):
            out += [t for arg in args for t in parse_annotation(arg)] + [("none",)] * (
                head == "Optional"
            )
        elif head in SEQUENCES and len(args) == 2 and args[1] == "...":
            out.append(("list", parse_annotation(args[0])))
        elif head in ("tuple", "Tuple") and args:
            out.append(("tuple", [parse_annotation(arg) for arg in args]))
        elif head in SEQUENCES:
            out.append(("list", parse_annotation(args[0]) if args else [("any",)]))
        else:
            out.append((SCALARS.get(head, "any"),))
    return out


def expected_types(parameter: inspect.Parameter) -> list[Type]:
    """The types a parameter accepts: from its annotation, else from its default's type (a
    parameter with neither, or with a default of None and no annotation, accepts anything)."""
    annotation = parameter.annotation
    if annotation is not parameter.empty:
        text = annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
        return parse_annotation(text)
    default = parameter.default
    if isinstance(default, (list, tuple)):
        return [("list", [("any",)])]
    return [(SCALARS.get(type(default).__name__, "any"),)] if default is not None else [("any",)]


def accepts(types: list[Type], value: Any) -> bool:
    """Whether ``value`` has one of ``types``."""
    return any(_accepts(t, value) for t in types)


def _accepts(t: Type, value: Any) -> bool:
    kind = t[0]
    if kind == "any":
        return True
    if kind == "none":
        return value is None
    if kind in ("list", "tuple"):
        if not isinstance(value, (list, tuple)):
            return False
        if kind == "list":
            return all(accepts(t[1], v) for v in value)
        return len(value) == len(t[1]) and all(accepts(a, v) for a, v in zip(t[1], value))
    if isinstance(value, bool):
        return kind == "bool"
    return isinstance(value, {"int": int, "float": (int, float), "bool": bool, "str": str}[kind])


def describe(types: list[Type]) -> str:
    """``[("int",), ("list", [("int",)]), ("none",)]`` -> ``"an int or a list of ints"`` (None
    left out: no command-line value is None)."""
    words = [_describe(t) for t in types if t[0] != "none"] or ["nothing"]
    return " or ".join(dict.fromkeys(words))


def _describe(t: Type) -> str:
    if t[0] == "list":
        return f"a list of {_plural(t[1])}"
    if t[0] == "tuple":
        items = [_plural(a) for a in t[1]]
        if len(set(items)) == 1:
            return f"a list of {len(items)} {items[0]}"
        return f"a list of {len(items)} values ({', '.join(describe(a) for a in t[1])})"
    return SINGULAR.get(t[0], "anything")


def _plural(types: list[Type]) -> str:
    words = [
        PLURAL.get(t[0], "lists" if t[0] in ("list", "tuple") else "values")
        for t in types
        if t[0] != "none"
    ]
    return " or ".join(dict.fromkeys(words))


def show(value: Any) -> str:
    """A value as messages quote it: strings in quotes, None as ``none``, the rest as TOML would
    write it (``true``, ``[16, 16]``, ``{a = 1}``)."""
    if value is None:
        return "none"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return f"[{', '.join(map(show, value))}]"
    if isinstance(value, dict):
        return f"{{{', '.join(f'{k} = {show(v)}' for k, v in value.items())}}}"
    return json.dumps(value, default=str)


def options(
    target: Callable, fixed: Mapping[str, str] | None = None
) -> dict[str, inspect.Parameter]:
    """The parameters of ``target`` that take keyword arguments, except the ``fixed`` ones."""
    return {
        name: p
        for name, p in inspect.signature(target).parameters.items()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and name not in (fixed or {})
    }


def defaults(target: Callable, fixed: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The default values of ``target``'s keyword parameters, except the ``fixed`` ones."""
    parameters = options(target, fixed).items()
    return {name: p.default for name, p in parameters if p.default is not p.empty}


def check_arguments(
    target: Callable, values: Mapping[str, Any], owner: str, fixed: Mapping[str, str] | None = None
) -> None:
    """Raise :class:`ConfigError` unless every item of ``values`` names a parameter of ``target``
    and has its type.

    Args:
        target: the class (or function) the values will be passed to.
        values: the keyword arguments a user gave.
        owner: ``target`` as messages name it: ``"model 'pit'"``.
        fixed: the parameters the caller sets itself, each with what to do instead
            (``{"root": "give the folder with --data-dir"}``).

    Example:
        >>> check_arguments(lambda width=64: None, {"width": "abc"}, "model 'pit'")
        Traceback (most recent call last):
        ...
        meshop.errors.ConfigError: 'width' of model 'pit' expects an int, got 'abc' (default: 64)
    """
    fixed = fixed or {}
    parameters = options(target, fixed)
    open_ended = any(p.kind == p.VAR_KEYWORD for p in inspect.signature(target).parameters.values())
    for key, value in values.items():
        if key in fixed:
            raise ConfigError(f"'{key}' of {owner} is not an option here: {fixed[key]}")
        if key not in parameters:
            if open_ended:
                continue
            close = difflib.get_close_matches(key, list(parameters), n=3)
            hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            raise ConfigError(
                f"{owner} has no option '{key}'{hint} (options: {', '.join(parameters)})"
            )
        types = expected_types(parameters[key])
        if not accepts(types, value):
            default = parameters[key].default
            known = default is not None and default is not parameters[key].empty
            hint = f" (default: {show(default)})" if known else ""
            raise ConfigError(
                f"'{key}' of {owner} expects {describe(types)}, got {show(value)}{hint}"
            )

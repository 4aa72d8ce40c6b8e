"""Names that stand for things: the lazy import of ``"module:Class"`` targets and the error for a
name that is not known, shared by the model and dataset registries and the configuration.

A registry maps a short name to a ``"module:Class"`` target that is imported only when it is used,
so one missing or broken module does not affect the others.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Sequence

from meshop.errors import ConfigError


def import_class(target: str, what: str) -> type:
    """The class named by ``target``, ``"package.module:Class"``.

    Args:
        target: the module's import path, a colon, and the class name (everything after the first
            colon).
        what: what the class is, for the error message (``"model class"``).

    Raises:
        ConfigError: the module cannot be imported, or it has no such class.
    """
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{what} '{target}' cannot be imported: {exc}") from exc
    cls = getattr(module, class_name, None)
    if cls is None:
        raise ConfigError(f"module '{module_name}' has no class '{class_name}'")
    return cls


def unknown_name(
    kind: str, name: str, known: Sequence[str], where: str = "", listed_as: str = "known"
) -> ConfigError:
    """The error for an unknown ``kind`` name, with the closest known name and all of them:
    ``unknown model 'pitt'; did you mean 'pit'? (known: fourier, galerkin, ...)``.

    Args:
        kind: what the name names (``"model"``, ``"key"``).
        name: the name given.
        known: the valid names, in the order they are listed.
        where: where the name was given (``"'run.toml' [train]"``), if anywhere.
        listed_as: the label of the list of valid names.
    """
    place = f" in {where}" if where else ""
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    return ConfigError(f"unknown {kind} '{name}'{place}{hint} ({listed_as}: {', '.join(known)})")

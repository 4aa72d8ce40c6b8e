"""Exceptions raised by meshop at its boundary (files, fields, shapes, configs, CLI arguments).

Every message says what was wrong and what to do about it.
"""


class MeshopError(Exception):
    """Base class of every error meshop raises on bad input."""


class MeshReadError(MeshopError):
    """A mesh file is missing, unreadable, or its content is unusable."""


class FieldError(MeshopError, KeyError):
    """A requested field does not exist, or has the wrong shape."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class MeshError(MeshopError, ValueError):
    """A mesh is empty, degenerate, has non-finite values or mixes dimensions."""


class ConfigError(MeshopError, ValueError):
    """A configuration value or argument is invalid."""


class FileExistsMeshopError(MeshopError, FileExistsError):
    """Refused to overwrite an existing file without ``overwrite=True``."""

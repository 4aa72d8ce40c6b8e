"""The base of every meshop model: its construction arguments, its input checks, its metadata."""

from __future__ import annotations

import functools
import inspect
from typing import Any, ClassVar

from torch import Tensor, nn

from meshop._pyg import Data
from meshop.data.batching import node_features
from meshop.errors import ConfigError, MeshError
from meshop.nn.chunking import Walk
from meshop.nn.integral import split_group


class Operator(nn.Module):
    r"""A neural operator ``model(data) -> [total query nodes, out_channels]`` on a ``Data`` or a
    DataLoader batch (:mod:`meshop.models`).

    A subclass takes ``in_channels``, ``out_channels`` and ``pos_dim`` first, then its
    hyper-parameters, and gets:

    - ``config``: its construction arguments by name, defaults included, recorded when
      ``__init__`` is entered (before its body runs), so that ``type(model)(**model.config)``
      builds the same model and a checkpoint stores it. A body may update the entries whose
      default depends on other arguments with the resolved value (the Galerkin Transformer's
      sizes by dimension);
    - :meth:`features`: the node features, checked against ``pos_dim`` and ``in_channels``;
    - ``extra_repr`` from ``config`` (the three sizes and every argument not at its default);
    - the registry's metadata as class attributes: :attr:`title`, :attr:`uses_latent_mesh`
      and :attr:`uses_weights`.

    When a subclass of a model has its own ``__init__`` that calls the model's, the model's
    ``__init__`` records the ``config`` (it runs last).
    """

    #: the model's name in tables and figures
    title: ClassVar[str] = ""
    #: the model attends through a latent mesh (``data.latent_pos``), which ``meshop train``
    #: prepares for it
    uses_latent_mesh: ClassVar[bool] = False
    #: the model reads the domain's quadrature weights (``data.weight``); ``meshop predict``
    #: computes none for one that does not (see :meth:`reads_weights`)
    uses_weights: ClassVar[bool] = True

    config: dict[str, Any]

    @classmethod
    def reads_weights(cls, config: dict[str, Any], latent_mesh: bool) -> bool:
        """Whether a model of this class built from ``config`` reads the quadrature weights of a
        mesh it predicts on (``latent_mesh``: a latent mesh of its own is added to the mesh, as
        its training did): :attr:`uses_weights` unless the configuration leaves them unread.
        ``meshop predict`` computes a mesh's weights (its cells' measures, lumped to the nodes:
        a few seconds for ten million nodes) only for a model that reads them."""
        return cls.uses_weights

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__init__" in cls.__dict__:
            cls.__init__ = _recording(cls.__init__)

    @property
    def in_channels(self) -> int:
        return self.config["in_channels"]

    @property
    def out_channels(self) -> int:
        return self.config["out_channels"]

    @property
    def pos_dim(self) -> int:
        return self.config["pos_dim"]

    def check(self, data: Data) -> None:
        """Refuse data that the model was not built for: no coordinates ``pos``, coordinates of
        another dimension than ``pos_dim``, node features (:func:`meshop.data.node_features`:
        x, pos, params) of another width than ``in_channels``."""
        name = type(self).__name__
        pos = getattr(data, "pos", None)
        if pos is None:
            raise MeshError(
                f"{name} needs node coordinates: the data has no pos; read meshes with "
                f"meshop.data.read_mesh, or set data.pos = [N, {self.pos_dim}] coordinates"
            )
        if pos.dim() != 2 or pos.shape[1] != self.pos_dim:
            raise ConfigError(
                f"{name} was built for {self.pos_dim}D coordinates but the data's pos has shape "
                f"{list(pos.shape)}; build it with pos_dim={pos.shape[-1]}"
            )
        parts = (getattr(data, "x", None), pos, getattr(data, "params", None))
        width = sum(part.shape[-1] for part in parts if part is not None)
        if width != self.in_channels:
            raise ConfigError(
                f"{name} expects {self.in_channels} input channels (node_features: x, pos, "
                f"params) but the data has {width}; build {name} with in_channels={width}"
            )

    def features(self, data: Data) -> Tensor:
        """:func:`meshop.data.node_features` of ``data`` after :meth:`check`."""
        self.check(data)
        return node_features(data)

    def forward(self, data: Data) -> Tensor:
        if split_group() is not None:
            raise ConfigError(
                f"{type(self).__name__}.forward sees only this process's nodes under split_mesh; "
                f"call model.forward_chunked(data, chunk_nodes) there"
            )
        return self.compute(data, Walk())

    def forward_chunked(self, data: Data, chunk_nodes: int) -> Tensor:
        """:meth:`forward` with at most about ``chunk_nodes`` nodes' (or edges') intermediate
        tensors at a time, in inference and in training (every chunk checkpointed): the same
        :meth:`compute` walked by the chunk driver (:mod:`meshop.nn.chunking`). Inside
        :func:`~meshop.nn.splitting.split_mesh`, on this process's part of the mesh: the
        outputs of the whole mesh at this process's nodes."""
        return self.compute(data, Walk(chunk_nodes))

    def check_split(self, data: Data) -> None:
        """Raise :class:`ConfigError`, saying what to do, when :meth:`forward_chunked` cannot
        split ``data`` over processes (:func:`~meshop.nn.splitting.split_mesh`); ``data`` may
        be a whole sample or a process's part of it. Models that split every layer accept
        anything."""

    def compute(self, data: Data, walk: Walk) -> Tensor:
        """The model's forward pass, written once against ``walk``
        (:class:`~meshop.nn.chunking.Walk`): per-node work through ``walk.map``, every integral
        layer or block through ``walk.layer``."""
        raise NotImplementedError

    def quadratic(self, data: Data) -> str | None:
        """Why the model's cost on ``data`` grows with the square of its nodes (a phrase for
        an error message, and what avoids it), or None when it grows linearly."""
        return None

    def extra_repr(self) -> str:
        defaults = {
            name: p.default
            for name, p in inspect.signature(type(self)).parameters.items()
            if p.default is not p.empty
        }
        return ", ".join(
            f"{name}={value!r}"
            for name, value in self.config.items()
            if name not in defaults or value != defaults[name]
        )


def _recording(init):
    """``init`` that first records its arguments as ``self.config`` (see :class:`Operator`)."""
    signature = inspect.signature(init)

    @functools.wraps(init)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        config = {
            name: value
            for i, (name, value) in enumerate(bound.arguments.items())
            if i and signature.parameters[name].kind in named  # i = 0: self
        }
        # set before nn.Module.__init__ has run: a plain attribute, as Module sets its own
        object.__setattr__(self, "config", config)
        init(self, *args, **kwargs)

    return __init__


__all__ = ["Operator"]

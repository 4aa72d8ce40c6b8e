r"""The one protocol of every integral layer: a chunk's partial sums, merged, finished, applied.

Every attention of meshop integrates over a node set, and an integral is a sum that can be
accumulated over any partition of the nodes exactly. So every integral layer (and every block
around one) is the same computation in four steps:

.. code-block:: text

    partial(x, pos, batch, weight, ...)  -> sums    # the sums over these source nodes
    merge(sums_a, sums_b)                -> sums    # exact: addition, or a softmax's rescaling
    finish(sums, state=None)             -> state   # what every target needs: kernels, tokens
    apply(state, x, pos, batch, ...)     -> out     # the per-node work at these target nodes

and ``forward`` is the protocol over one chunk holding every node. Two drivers reuse it
unchanged, each in its own module, which no layer imports: chunked evaluation
(:mod:`meshop.nn.chunking`: inference that never holds more than a chunk's intermediates, and
training with each chunk checkpointed) and the split of one mesh over processes
(:mod:`meshop.nn.splitting`: every process's sums all-reduced, with gradients).

A layer says how the drivers may cut it (:attr:`Integral.cuts`):

- ``"nodes"``: the sums are per sample (Galerkin-type kernels, orthogonal attention's moments,
  slice tokens), sources and targets are one node set, and the drivers cut it into chunks:
  every chunk's :meth:`~Integral.partial` is merged, the merged sums finished once, and every
  chunk applied. A layer whose second integral needs the first's result (orthogonal attention:
  its inner products need the moments' factors) has :attr:`~Integral.passes` = 2, and its
  :meth:`~Integral.partial` gets the state of the pass before.
- ``"targets"``: the sums are per target (position attention's softmax sums), the drivers cut the
  targets into chunks, and each chunk's :meth:`~Integral.partial` reads every source (features
  given as a function of their rows, so that the ``[N_src, C]`` features need not exist), which
  the layer streams or searches itself.

Sums are tensors, tuples or dicts of tensors (added), or :class:`SoftmaxSums` (merged with their
running maximum).
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass

import torch
from torch import Tensor, nn


@dataclass
class SoftmaxSums:
    r"""The sums of a softmax over a set of sources, shifted by their largest logit :math:`m`
    (detached: any shift gives the same quotient):
    ``num`` :math:`\sum_k e^{s_k - m} v_k` (the dimensions of ``max``, then the values'),
    ``mass`` :math:`\sum_k e^{s_k - m}` (those of ``max``) and ``max`` :math:`m` (-inf where
    there is no source). Sums of disjoint sets of sources merge exactly (:meth:`merge`)."""

    num: Tensor
    mass: Tensor
    max: Tensor

    def __iter__(self):
        return iter((self.num, self.mass, self.max))

    @staticmethod
    def cat(parts: list[SoftmaxSums]) -> SoftmaxSums:
        """The sums of disjoint sets of targets (one after the other), as the sums of all."""
        return SoftmaxSums(*(torch.cat(values) for values in zip(*parts)))

    def rescaled(self, top: Tensor) -> SoftmaxSums:
        """The same sums shifted by ``top`` (>= :attr:`max` everywhere) instead; a set without
        sources stays zero."""
        scale = torch.exp(self.max - top).nan_to_num(0.0)
        factor = scale.view(*scale.shape, *(1,) * (self.num.dim() - scale.dim()))
        return SoftmaxSums(
            self.num * factor.to(self.num.dtype), self.mass * scale.to(self.mass.dtype), top
        )

    def merge(self, other: SoftmaxSums) -> SoftmaxSums:
        """The sums of both sets of sources, each rescaled to the larger of the two maxima."""
        top = torch.maximum(self.max, other.max)
        a, b = self.rescaled(top), other.rescaled(top)
        return SoftmaxSums(a.num + b.num, a.mass + b.mass, top)

    def quotient(self) -> Tensor:
        """``num / mass``: the softmax-weighted mean of the values, zeros where there is no
        source (mass 0)."""
        mass = self.mass.clamp_min(torch.finfo(self.mass.dtype).tiny)
        factor = mass.view(*mass.shape, *(1,) * (self.num.dim() - mass.dim()))
        return self.num / factor.to(self.num.dtype)


def merge_sums(a, b):
    """Two partial sums of the same layer together: :class:`SoftmaxSums` merged, tensors (and
    tuples or dicts of them) added."""
    if isinstance(a, SoftmaxSums):
        return a.merge(b)
    if isinstance(a, dict):
        return {key: merge_sums(a[key], b[key]) for key in a}
    if isinstance(a, tuple):
        return tuple(merge_sums(x, y) for x, y in zip(a, b))
    return a + b


#: the process group whose processes hold parts of the same node sets while the split driver
#: (:func:`meshop.nn.splitting.split_mesh`) runs, else None: what a layer that also reduces over
#: data-parallel processes (ONO's batch moment) reads to not reduce twice
SPLIT_GROUP: ContextVar[object | None] = ContextVar("meshop_split_group", default=None)


def split_group():
    """The process group of the split in force, or None."""
    return SPLIT_GROUP.get()


Source = Tensor | Callable[[Tensor | slice], Tensor]


def rows(x: Source, index: Tensor | slice) -> Tensor:
    """The features of the source rows ``index``: ``x[index]``, or ``x(index)`` for features
    computed on demand."""
    return x[index] if isinstance(x, Tensor) else x(index)


class Integral(nn.Module):
    """Base of every integral layer and block: the protocol of :mod:`meshop.nn.integral`.

    Subclasses implement :meth:`partial`, :meth:`finish` and :meth:`apply` (and :meth:`merge`
    where their sums are not :func:`merge_sums`'). ``forward`` runs the protocol over one
    chunk; a layer may replace it with a faster path that computes the same numbers (the tests
    compare every path with the protocol).
    """

    #: what the drivers cut into chunks: ``"nodes"`` (per-sample sums) or ``"targets"``
    #: (per-target sums over every source)
    cuts: str = "nodes"
    #: integrals computed one after the other, each pass reading the state of the one before
    passes: int = 1
    #: the layer searches receptive fields among the sources (the split driver then searches the
    #: whole mesh's with the layer's ``neighbors`` and gives it those that reach the process's
    #: own sources: ``partial(..., edges=index)``)
    searches: bool = False

    def partial(
        self,
        x: Source,
        pos: Tensor | None,
        batch: Tensor,
        weight: Tensor | None,
        num_samples: int,
        state=None,
        **extra,
    ):
        """The sums over the source nodes given (a chunk, or all of them for ``"targets"``
        layers, which also get the targets as ``pos_dst``, ``batch_dst``); ``state``: the result
        of the pass before (None in the first)."""
        raise NotImplementedError

    def merge(self, a, b):
        """Two chunks' sums together (exact)."""
        return merge_sums(a, b)

    def finish(self, sums, state=None):
        """What every target needs from the merged sums of a pass (``state``: the pass before)."""
        raise NotImplementedError

    def apply(self, state, x: Tensor | None, pos: Tensor | None, batch: Tensor, **extra) -> Tensor:
        """The output at target nodes (a chunk, or all of them) from :meth:`finish`'s state:
        their features ``x`` (None for cross attention without target features), coordinates
        and sorted sample indices."""
        raise NotImplementedError

    def forward(self, x, pos, batch=None, weight=None, **extra) -> Tensor:
        """The protocol over one chunk of every node (self-attention on ``x``)."""
        if batch is None:
            batch = torch.zeros(len(x), dtype=torch.long, device=x.device)
        samples = int(batch[-1]) + 1 if len(batch) else 1
        state = None
        for _ in range(self.passes):
            state = self.finish(self.partial(x, pos, batch, weight, samples, state, **extra), state)
        return self.apply(state, x, pos, batch, **extra)


__all__ = ["SPLIT_GROUP", "Integral", "SoftmaxSums", "merge_sums", "rows", "split_group"]

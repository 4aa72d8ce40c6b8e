r"""The chunk driver: any model's forward pass with at most a chunk of nodes' intermediates.

Every integral layer and block implements one protocol (:mod:`meshop.nn.integral`), so one
driver evaluates any of them in chunks: :class:`Walk` is how a model's forward walks its node
sets, whole (``Walk()``: every layer's own ``forward``) or in chunks (``Walk(chunk_nodes)``):

- :meth:`Walk.map`: per-node work (lifting, heads), chunk by chunk;
- :meth:`Walk.layer`: an integral layer. Layers whose sums are per sample (``cuts = "nodes"``)
  get every chunk's partial sums merged, finished once (per pass), then applied chunk by chunk;
  layers whose sums are per target (``cuts = "targets"``: position attention) get chunks of
  targets, each reading every source.

Without autograd (inference) a chunk's intermediates are freed as soon as it is done, and a
layer may overwrite its input in place. With autograd (training on samples of millions of nodes)
every chunk's computation is checkpointed (:func:`torch.utils.checkpoint.checkpoint`): its
intermediate tensors are freed after the forward pass and recomputed, one chunk at a time, in
the backward pass, so the gradients are exact and the memory is the layers' ``[N, width]``
outputs plus one chunk's intermediates. Inside :func:`meshop.nn.splitting.split_mesh` the merged
sums of every layer on a split node set are reduced over the processes
(:func:`meshop.nn.splitting.reduce_sums`).

The chunked pass equals the whole one up to the order of floating-point sums (tests compare them
for every model on mixed batches whose chunks cut samples).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from meshop.data.batching import node_chunks, part
from meshop.errors import ConfigError
from meshop.nn.integral import SPLIT_GROUP, Integral, SoftmaxSums, Source, rows, split_group
from meshop.nn.splitting import check_shared, gather_nodes, reduce_sums, split_fields


def check_chunk_nodes(chunk_nodes: int) -> int:
    """``chunk_nodes`` if it is a positive number of nodes (:class:`ConfigError` else)."""
    if isinstance(chunk_nodes, bool) or not isinstance(chunk_nodes, int) or chunk_nodes < 1:
        raise ConfigError(
            f"chunk_nodes must be a positive number of nodes (e.g. 65536), got {chunk_nodes!r}"
        )
    return chunk_nodes


def run_chunk(fn: Callable[[slice], object], nodes: slice):
    """``fn(nodes)``, checkpointed when autograd records it (its intermediates are recomputed in
    the backward pass instead of kept, under the split of the forward pass, wherever the
    backward is called)."""
    if not torch.is_grad_enabled():
        return fn(nodes)
    group = split_group()

    def replay(nodes):
        token = SPLIT_GROUP.set(group)
        try:
            return fn(nodes)
        finally:
            SPLIT_GROUP.reset(token)

    return checkpoint(replay, nodes, use_reentrant=False)


def map_over_chunks(
    fn: Callable[[slice], Tensor], n: int, chunk_nodes: int, out: Tensor | None = None
) -> Tensor:
    """``fn(nodes)`` ``[n_chunk, C]`` of every chunk as one ``[n, C]`` tensor. Without autograd
    the chunks are written into ``out`` (new when None or of another width; it may be the
    chunks' own input, which each chunk reads only at its own rows); with autograd each chunk is
    checkpointed and the results concatenated."""
    chunks = node_chunks(n, chunk_nodes) or [slice(0, 0)]
    if torch.is_grad_enabled():
        return torch.cat([run_chunk(fn, nodes) for nodes in chunks])
    for nodes in chunks:
        value = fn(nodes)
        if out is None or out.shape[1:] != value.shape[1:] or out.dtype != value.dtype:
            out = value.new_empty(n, *value.shape[1:])
        out[nodes] = value
    return out


def _at(extra: dict, nodes: slice, n: int) -> dict:
    """The keyword inputs of a layer at a chunk: per-node tensors (``n`` rows) cut, the rest
    kept."""
    return {
        key: value[nodes] if isinstance(value, Tensor) and len(value) == n else value
        for key, value in extra.items()
    }


class Walk:
    """How a model's forward walks its node sets: whole (``chunk_nodes`` None) or in chunks of
    at most ``chunk_nodes`` nodes (module docstring). Models write their forward pass once
    against it (:meth:`meshop.models.Operator.compute`)."""

    def __init__(self, chunk_nodes: int | None = None):
        self.chunk_nodes = None if chunk_nodes is None else check_chunk_nodes(chunk_nodes)

    @property
    def group(self):
        """The process group of :func:`~meshop.nn.splitting.split_mesh` in force (chunked
        walks only), or None."""
        return None if self.chunk_nodes is None else split_group()

    def map(
        self, fn: Callable[[slice], Tensor], n: int, *, overwrite: Tensor | None = None
    ) -> Tensor:
        """``fn(nodes)`` over the ``n`` nodes of a node set, chunk by chunk; ``overwrite``: a
        tensor the chunks may be written into without autograd (an input read only at each
        chunk's own rows, not needed afterwards)."""
        if self.chunk_nodes is None:
            return fn(slice(0, n))
        return map_over_chunks(fn, n, self.chunk_nodes, out=overwrite)

    def total(self, value: Tensor) -> Tensor:
        """A per-process sum of the split node set summed over the processes (itself
        otherwise), with gradients."""
        group = self.group
        return value if group is None else reduce_sums(value, group)

    def layer(
        self,
        layer: Integral,
        x: Source,
        pos: Tensor | None,
        batch: Tensor,
        weight: Tensor | None = None,
        *,
        num_samples: int,
        pos_dst: Tensor | None = None,
        batch_dst: Tensor | None = None,
        shared: bool = False,
        overwrite: bool = False,
        then: Callable[[Tensor, slice], Tensor] | None = None,
        **extra,
    ) -> Tensor:
        """The ``layer`` from the sources (features ``x``, a tensor or a function of their rows,
        ``pos``, sorted ``batch``, ``weight``) onto the targets ``pos_dst``, ``batch_dst``
        (None: the sources themselves), ``extra`` keyword inputs (per-node tensors are cut with
        the nodes). ``shared``: every process holds this node set whole (a latent mesh): nothing
        is reduced over the split's processes. ``overwrite``: the layer's output may be written
        into ``x`` without autograd. ``then(out, targets)``: per-target work on the layer's
        output, done chunk by chunk with it (so the layer's ``[N_dst, C]`` output need not
        exist)."""
        n = len(batch)
        cross = pos_dst is not None
        group = None if shared else self.group
        if self.chunk_nodes is None or (group is None and self._fits(layer, n, pos_dst)):
            targets = {"pos_dst": pos_dst, "batch_dst": batch_dst} if cross else {}
            out = layer(rows(x, slice(0, n)), pos, batch, weight, **targets, **extra)
            return out if then is None else then(out, slice(0, len(out)))
        if layer.cuts == "targets":
            return self._targets(
                layer, x, pos, batch, weight, num_samples, pos_dst, batch_dst, group, then, extra
            )
        if cross:
            raise ConfigError(f"{type(layer).__name__} is self-attention only (no pos_dst)")
        state = None
        for _ in range(layer.passes):

            def sums_of(nodes, state=state):
                return layer.partial(
                    rows(x, nodes),
                    part(pos, nodes),
                    batch[nodes],
                    part(weight, nodes),
                    num_samples,
                    state,
                    **_at(extra, nodes, n),
                )

            sums = None
            for nodes in node_chunks(n, self.chunk_nodes) or [slice(0, 0)]:
                chunk = run_chunk(sums_of, nodes)
                sums = chunk if sums is None else layer.merge(sums, chunk)
            if group is not None:
                sums = reduce_sums(sums, group)
            state = layer.finish(sums, state)

        def apply(nodes):
            out = layer.apply(
                state, rows(x, nodes), part(pos, nodes), batch[nodes], **_at(extra, nodes, n)
            )
            return out if then is None else then(out, nodes)

        out = x if overwrite and isinstance(x, Tensor) else None
        return map_over_chunks(apply, n, self.chunk_nodes, out=out)

    def _fits(self, layer: Integral, n: int, pos_dst: Tensor | None) -> bool:
        """Whether a layer's sources and targets fit in one chunk, so that its own ``forward``
        (with its fast paths) runs instead; not for layers that search receptive fields, whose
        ``forward`` keeps them in its neighbour cache (the chunks' searches leave it alone)."""
        targets = n if pos_dst is None else len(pos_dst)
        return not layer.searches and max(n, targets) <= self.chunk_nodes

    def _targets(
        self, layer, x, pos, batch, weight, num_samples, pos_dst, batch_dst, group, then, extra
    ):
        """A ``cuts = "targets"`` layer for chunks of targets: each chunk's sums over every
        source (the layer streams or searches them, checkpointing its own blocks), reduced over
        the processes of a split (the targets then every process's: checked; a layer that
        searches gets the whole mesh's fields to its own sources, :func:`split_fields`),
        finished and applied, checkpointed under autograd."""
        cross = pos_dst is not None
        if not cross:
            pos_dst, batch_dst = pos, batch
        chunk_nodes = self.chunk_nodes
        among = None
        if group is not None:
            check_shared(pos_dst, batch_dst, group, f"the target nodes of {type(layer).__name__}")
            if layer.searches:
                among = gather_nodes(pos, batch, group)
        size = layer.target_chunk(chunk_nodes, batch if among is None else among[1])

        def sums(nodes):
            searched = {}
            if among is not None:  # the whole mesh's fields, to this process's sources
                with torch.no_grad():
                    searched["edges"] = split_fields(
                        layer, pos, batch, among, pos_dst[nodes], batch_dst[nodes], group
                    )
            return layer.partial(
                x,
                pos,
                batch,
                weight,
                num_samples,
                pos_dst=pos_dst[nodes],
                batch_dst=batch_dst[nodes],
                chunk_nodes=chunk_nodes,
                **searched,
                **extra,
            )

        def finish(nodes, chunk_sums):
            out = layer.apply(
                layer.finish(chunk_sums),
                None if cross else rows(x, nodes),
                pos_dst[nodes],
                batch_dst[nodes],
            )
            return out if then is None else then(out, nodes)

        chunks = node_chunks(len(pos_dst), size) or [slice(0, 0)]
        if group is not None:  # every process's sums at every target, reduced, then finished
            merged = SoftmaxSums.cat([sums(nodes) for nodes in chunks])
            merged = reduce_sums(merged, group)
            return run_chunk(partial(finish, chunk_sums=merged), slice(0, len(pos_dst)))
        if not torch.is_grad_enabled():
            return map_over_chunks(lambda nodes: finish(nodes, sums(nodes)), len(pos_dst), size)
        return torch.cat([run_chunk(partial(finish, chunk_sums=sums(c)), c) for c in chunks])


__all__ = ["Walk", "check_chunk_nodes", "map_over_chunks", "run_chunk"]

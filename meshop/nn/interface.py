r"""The one calling convention of every attention layer in :mod:`meshop.nn`.

.. code-block:: python

    out = layer(x, pos, batch=None, weight=None, *, pos_dst=None, batch_dst=None, **extra)

- ``x`` ``[N, C]``: features of the source nodes; ``pos`` ``[N, D]`` their coordinates (``None``
  is accepted by the layers that do not read coordinates: physics and orthogonal attention);
- ``batch`` ``[N]``: the sorted sample index of every source node (PyG batches; ``None``: one
  sample);
- ``weight`` ``[N]``: quadrature weights of the source nodes (the domain's ``data.weight``;
  ``None``: every node of a sample counts the same). Every sum over source nodes is the
  quadrature :math:`\sum_k w_k f(y_k)` of an integral over the domain, so a layer converges to
  the same operator on graded and uniform meshes; a node with weight 0 contributes nothing (but
  is still a target in self-attention);
- ``pos_dst`` ``[M, D]`` and ``batch_dst`` ``[M]``: the target nodes. Absent, the layer is
  self-attention (targets = sources); given, it is bipartite (cross) attention from the sources
  onto the targets, each target reading the sources of its own sample;
- ``**extra``: inputs only one layer needs, by keyword (orthogonal attention's eigenfunction
  features ``g`` and ``g_dst``).

The output is ``[M, C_out]`` (``M = N`` for self-attention). Layers whose queries are
projections of the features at the target nodes (the Galerkin family, physics attention) are
self-attention only and say so when given targets; to read them at other points, append the
points as nodes of weight 0.
"""

from __future__ import annotations

from torch import Tensor

from meshop.errors import ConfigError


def check_inputs(
    name: str,
    x: Tensor,
    pos: Tensor | None,
    batch: Tensor | None,
    weight: Tensor | None,
    pos_dst: Tensor | None = None,
    batch_dst: Tensor | None = None,
    *,
    cross: bool = True,
    needs_pos: bool = True,
) -> None:
    """Check the common arguments of an attention layer's forward: shapes agree with ``x`` (the
    source nodes), targets are given consistently, and ``cross=False`` layers get none."""
    n = len(x)
    if needs_pos and pos is None:
        raise ConfigError(f"{name} needs the node coordinates pos [{n}, D]")
    if pos is not None and (pos.dim() != 2 or len(pos) != n):
        raise ConfigError(
            f"{name}: pos must be [N, D] with one row per node of x ({n}), got {tuple(pos.shape)}"
        )
    for what, vec in (("batch", batch), ("weight", weight)):
        if vec is not None and (vec.dim() != 1 or len(vec) != n):
            raise ConfigError(
                f"{name}: {what} must be [N] with one entry per node of x ({n}), got "
                f"{tuple(vec.shape)}"
            )
    if not cross and (pos_dst is not None or batch_dst is not None):
        raise ConfigError(
            f"{name} is self-attention only (its queries are projections of the features at the "
            f"nodes themselves), so it takes no pos_dst/batch_dst; to read it at other points, "
            f"append them as nodes with weight 0"
        )
    if batch_dst is not None and pos_dst is None:
        raise ConfigError(f"{name}: batch_dst was given without pos_dst; give the target nodes")
    if pos_dst is not None:
        if pos is not None and (pos_dst.dim() != 2 or pos_dst.shape[1] != pos.shape[1]):
            raise ConfigError(
                f"{name}: pos_dst must be [M, {pos.shape[1]}] like pos, got {tuple(pos_dst.shape)}"
            )
        if batch_dst is not None and (batch_dst.dim() != 1 or len(batch_dst) != len(pos_dst)):
            raise ConfigError(
                f"{name}: batch_dst must be [M] with one entry per target ({len(pos_dst)}), got "
                f"{tuple(batch_dst.shape)}"
            )
        if (batch is None) != (batch_dst is None) and len(pos_dst) and n:
            raise ConfigError(
                f"{name}: give both batch and batch_dst for a batch of samples, or neither"
            )


__all__ = ["check_inputs"]

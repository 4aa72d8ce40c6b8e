"""A pointwise MLP on node features: the baseline every operator should beat."""

from __future__ import annotations

import torch

from meshop.data.batching import query_features
from meshop.models.base import Operator
from meshop.nn.chunked import map_over_chunks
from meshop.nn.mlp import MLP


class MLPBaseline(Operator):
    r"""Pointwise MLP baseline: the output at a point sees only that point's features,

    .. math::
        \hat u(x) = \mathrm{MLP}\big([a(x), x, \theta]\big),

    where :math:`a` are the input fields, :math:`x` the coordinates and :math:`\theta` the
    per-sample parameters (each when present). It has no communication between points, so it can
    learn what the coordinates and parameters determine pointwise (e.g. the stress of Elasticity
    from position and cavity shape) but not a genuine operator. At query points that are not mesh
    nodes, :math:`a` is taken from the nearest input node.

    Args:
        in_channels: width of ``meshop.data.node_features(data)`` (x, pos and params).
        out_channels: output channels.
        pos_dim: spatial dimension.
        width: width of the hidden layers.
        layers: number of linear layers.
        act: activation between layers (see :class:`meshop.nn.MLP`).

    Shapes:
        input: a ``Data`` or batch with ``pos`` [N, pos_dim] (``x``, ``params``, ``query_pos``
        optional);
        output: [N_query, out_channels] at ``query_nodes(data)``.
    """

    title = "MLP baseline"

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        pos_dim: int,
        width: int = 128,
        layers: int = 4,
        act: str = "gelu",
    ):
        super().__init__()
        widths = [in_channels] + [width] * (layers - 1) + [out_channels]
        self.mlp = MLP(widths, act=act)

    def reset_parameters(self) -> None:
        self.mlp.reset_parameters()

    def forward(self, data) -> torch.Tensor:
        self.check(data)
        return self.mlp(query_features(data))

    def forward_chunked(self, data, chunk_nodes: int) -> torch.Tensor:
        """:meth:`forward` for chunks of query points (:mod:`meshop.nn.chunked`): pointwise, so
        only the MLP's hidden features are chunked."""
        features = query_features(data)
        return map_over_chunks(lambda nodes: self.mlp(features[nodes]), len(features), chunk_nodes)

"""A pointwise MLP on node features: the baseline every operator should beat."""

from __future__ import annotations

import torch

from meshop.data.batching import query_features
from meshop.models.base import Operator
from meshop.nn.chunking import Walk
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
    uses_weights = False  # pointwise: no integral over the domain

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

    def compute(self, data, walk: Walk) -> torch.Tensor:
        """Pointwise: only the MLP's hidden features are chunked."""
        self.check(data)
        features = query_features(data)
        return walk.map(lambda nodes: self.mlp(features[nodes]), len(features))

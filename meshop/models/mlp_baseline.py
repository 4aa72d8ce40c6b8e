"""A pointwise MLP on node features: the baseline every operator should beat."""

from __future__ import annotations

import torch
from torch import nn

from meshop.data import query_features
from meshop.nn import MLP
from meshop.nn.chunked import map_over_chunks


class MLPBaseline(nn.Module):
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
        hidden_channels: width of the hidden layers.
        num_layers: number of linear layers.
        act: activation between layers (see :class:`meshop.nn.MLP`).

    Shapes:
        input: a ``Data`` or batch with ``pos`` [N, pos_dim] (``x``, ``params``, ``query_pos``
        optional);
        output: [N_query, out_channels] at ``query_nodes(data)``.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        pos_dim: int,
        hidden_channels: int = 128,
        num_layers: int = 4,
        act: str = "gelu",
    ):
        super().__init__()
        self.config = dict(
            in_channels=in_channels,
            out_channels=out_channels,
            pos_dim=pos_dim,
            hidden_channels=hidden_channels,
            num_layers=num_layers,
            act=act,
        )
        self.in_channels, self.out_channels, self.pos_dim = in_channels, out_channels, pos_dim
        widths = [in_channels] + [hidden_channels] * (num_layers - 1) + [out_channels]
        self.mlp = MLP(widths, act=act)

    def reset_parameters(self) -> None:
        self.mlp.reset_parameters()

    def forward(self, data) -> torch.Tensor:
        return self.mlp(query_features(data))

    def forward_chunked(self, data, chunk_nodes: int) -> torch.Tensor:
        """:meth:`forward` for chunks of query points (:mod:`meshop.nn.chunked`): pointwise, so
        only the MLP's hidden features are chunked."""
        features = query_features(data)
        return map_over_chunks(lambda nodes: self.mlp(features[nodes]), len(features), chunk_nodes)

    def extra_repr(self) -> str:
        return f"{self.in_channels} -> {self.out_channels}, pos_dim={self.pos_dim}"

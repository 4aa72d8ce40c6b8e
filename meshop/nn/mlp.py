"""A pointwise multi-layer perceptron shared by the models."""

from __future__ import annotations

from itertools import pairwise

from torch import Tensor, nn

from meshop.errors import ConfigError

ACTIVATIONS = {
    "gelu": nn.GELU,
    "relu": nn.ReLU,
    "silu": nn.SiLU,
    "tanh": nn.Tanh,
    "identity": nn.Identity,
}


class MLP(nn.Module):
    r"""Pointwise multi-layer perceptron applied to every node independently.

    .. math::
        \mathrm{MLP}(\mathbf{u}) = W_L\, \sigma(\cdots \sigma(W_1 \mathbf{u} + b_1) \cdots) + b_L

    The activation :math:`\sigma` sits between the linear layers, not after the last one.

    Args:
        channels (list[int]): widths ``[c_in, c_hidden_1, ..., c_out]``; at least two entries
            (two entries give a single linear layer).
        act (str): activation between the layers, one of ``"gelu"``, ``"relu"``, ``"silu"``,
            ``"tanh"``, ``"identity"``.

    Shapes:
        - input: ``[*, c_in]``
        - output: ``[*, c_out]``
    """

    def __init__(self, channels: list[int], act: str = "gelu"):
        super().__init__()
        channels = [int(c) for c in channels]
        if len(channels) < 2 or min(channels) < 1:
            raise ConfigError(
                f"MLP channels must list at least an input and an output width, all >= 1; "
                f"got {channels}. Example: MLP([64, 128, 64])."
            )
        if act not in ACTIVATIONS:
            raise ConfigError(f"unknown activation {act!r}; choose one of {sorted(ACTIVATIONS)}.")
        self.channels = channels
        self.act_name = act
        self.lins = nn.ModuleList(nn.Linear(c_in, c_out) for c_in, c_out in pairwise(channels))
        self.act = ACTIVATIONS[act]()

    def reset_parameters(self) -> None:
        for lin in self.lins:
            lin.reset_parameters()

    def forward(self, x: Tensor) -> Tensor:
        for i, lin in enumerate(self.lins):
            if i > 0:
                x = self.act(x)
            x = lin(x)
        return x

    def extra_repr(self) -> str:
        return f"channels={self.channels}, act={self.act_name!r}"


def check_activation(activation: str) -> str:
    """``activation`` if it is a key of :data:`ACTIVATIONS`, else a :class:`ConfigError`."""
    if activation not in ACTIVATIONS:
        raise ConfigError(f"unknown activation {activation!r}; choose one of {sorted(ACTIVATIONS)}")
    return activation


__all__ = ["ACTIVATIONS", "MLP", "check_activation"]

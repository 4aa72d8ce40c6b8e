"""Attention layers (one per file), grid layers and MLPs.

Every attention layer maps features on a source node set to a target node set (self-attention when
the target is the source): ``layer(x_src, pos_src, pos_dst=None, batch_src=None, batch_dst=None)``.
"""

from meshop.nn.mlp import MLP

__all__: list[str] = ["MLP"]

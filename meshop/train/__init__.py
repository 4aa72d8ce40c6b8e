"""Training: losses, metrics, loop, checkpoints, distributed training."""

from meshop.train.losses import relative_l1, relative_l2, relative_lp

__all__ = ["relative_l1", "relative_l2", "relative_lp"]

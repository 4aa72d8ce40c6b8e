"""Datasets: real-solver generators and loaders of the standard benchmark files."""

from meshop.datasets.base import GeneratedDataset, data_root

__all__ = ["GeneratedDataset", "data_root"]

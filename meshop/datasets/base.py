"""Base class of generated datasets: root folder, deterministic seeding, splits, caching."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from meshop._pyg import Data
from meshop.errors import ConfigError

try:
    from torch_geometric.data import InMemoryDataset
except ImportError:  # pragma: no cover
    raise

#: the repository's ``datasets/`` folder (beside ``meshop/`` in a checkout)
REPO_DATA_ROOT = Path(__file__).resolve().parents[2] / "datasets"


def default_data_root() -> Path:
    """The repository's ``datasets/`` when meshop runs from a checkout (``pyproject.toml`` beside
    ``meshop/``), else ``$XDG_CACHE_HOME/meshop`` (``~/.cache/meshop``) for an installed
    package."""
    if (REPO_DATA_ROOT.parent / "pyproject.toml").is_file():
        return REPO_DATA_ROOT
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "meshop"


def data_root(root: str | os.PathLike | None = None) -> Path:
    """Where datasets live: ``root`` if given, else ``$MESHOP_DATA``, else
    :func:`default_data_root`."""
    if root is not None:
        return Path(root)
    env = os.environ.get("MESHOP_DATA")
    return Path(env) if env else default_data_root()


SPLITS = ("train", "test")

#: bumped whenever the stored sample layout changes, so that old caches are not reused
CACHE_FORMAT = 2


class GeneratedDataset(InMemoryDataset):
    """A dataset whose samples a real solver generates, deterministically by seed, and caches.

    Sample ``i`` is generated from ``numpy.random.default_rng([seed, i])``, so it does not depend on
    the split sizes or on generation order. The train split holds samples ``0 .. num_train - 1``,
    the test split ``num_train .. num_train + num_test - 1``. Each split is generated when it is
    first asked for and cached under ``root/<name>/processed/<hash of the configuration>/``; a
    second construction loads it.

    Subclasses set ``name`` and implement :meth:`generate`; every keyword in ``config`` (the
    solver's parameters) is part of the cache key, and so is ``version``, which a subclass bumps
    whenever what it generates changes, so that caches written by older code are regenerated
    instead of reused.
    """

    name: str = "generated"
    #: the generator's version, part of the cache key
    version: int = 1

    def __init__(
        self,
        root: str | os.PathLike | None = None,
        split: str = "train",
        num_train: int = 1000,
        num_test: int = 200,
        seed: int = 0,
        transform=None,
        progress: bool = True,
        **config,
    ):
        if split not in SPLITS:
            raise ConfigError(f"split must be one of {SPLITS}, got '{split}'")
        if num_train < 1 or num_test < 1:
            raise ConfigError(
                f"num_train and num_test must be at least 1 (got {num_train}, {num_test}); "
                "a generated dataset always has a train and a test split"
            )
        self.split = split
        self.num_train, self.num_test, self.seed = int(num_train), int(num_test), int(seed)
        self.config = dict(config)
        self.progress = progress
        key = json.dumps(
            {
                "n": [self.num_train, self.num_test],
                "seed": self.seed,
                "format": CACHE_FORMAT,
                "version": self.version,
                **self.config,
            },
            sort_keys=True,
            default=str,
        )
        self.config_hash = hashlib.sha1(key.encode()).hexdigest()[:12]
        super().__init__(str(data_root(root) / self.name), transform=transform, log=progress)
        self.load(self.processed_paths[0])

    @property
    def raw_file_names(self) -> list[str]:
        return []

    @property
    def processed_dir(self) -> str:
        return os.path.join(self.root, "processed", self.config_hash)

    @property
    def processed_file_names(self) -> list[str]:
        return [f"{self.split}.pt"]

    def download(self) -> None:  # generated, nothing to download
        pass

    def generate(self, index: int, rng: np.random.Generator) -> Data:
        """Make sample ``index`` with the given random generator."""
        raise NotImplementedError

    def process(self) -> None:
        first = 0 if self.split == "train" else self.num_train
        count = self.num_train if self.split == "train" else self.num_test
        with open(os.path.join(self.processed_dir, "config.json"), "w") as f:
            json.dump(
                {
                    "n": [self.num_train, self.num_test],
                    "seed": self.seed,
                    "version": self.version,
                    **self.config,
                },
                f,
                default=str,
            )
        samples = []
        for i in tqdm(
            range(first, first + count),
            desc=f"{self.name} {self.split}",
            disable=not self.progress or None,
        ):
            sample = self.generate(i, np.random.default_rng([self.seed, i]))
            sample.sample_id = torch.tensor([i])
            samples.append(sample)
        self.save(samples, self.processed_paths[0])

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.split}, {len(self)} samples, root='{self.root}')"

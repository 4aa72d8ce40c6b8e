"""Fixtures that tests in several folders use; plain helpers are in tests/helpers.py."""

import os

import numpy as np
import pytest
import torch

from meshop.data import write_mesh
from tests.helpers import square_mesh

torch.set_num_threads(int(os.environ.get("MESHOP_TEST_THREADS", "1")))


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture
def mesh_folder(tmp_path):
    """Ten .vtu files with an input field 'a' and a target 'u' = 2 a + x."""
    folder = tmp_path / "meshes"
    folder.mkdir()
    for k in range(10):
        data = square_mesh(5 + k % 3)
        a = np.sin((1 + k) * data.pos[:, 1].numpy())
        write_mesh(folder / f"case_{k}.vtu", data, {"a": a, "u": 2 * a + data.pos[:, 0].numpy()})
    return folder

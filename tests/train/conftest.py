"""Fixtures of the tests of meshop.train."""

import pytest

from meshop.cli import main
from meshop.data import write_mesh
from tests.helpers import PREDICT_LATENT, predict_case


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A PiT with an 8-node farthest-point latent mesh, trained by `meshop train` on ten meshes
    (:func:`tests.helpers.predict_case`); returns the folder it lies in and the run folder."""
    root = tmp_path_factory.mktemp("predict")
    folder = root / "meshes"
    folder.mkdir()
    for k in range(10):
        data, a, u = predict_case(5 + k % 3, 1 + k)
        write_mesh(folder / f"case_{k}.vtu", data, {"a": a, "u": u})
    run = root / "run"
    argv = ["train", "--dataset", "folder", "--data-dir", folder, "--model", "pit"]
    argv += ["--dataset-arg", 'inputs=["a"]', "--dataset-arg", 'targets=["u"]', "--epochs", 3]
    argv += ["--batch-size", 4, "--latent-points", PREDICT_LATENT, "--model-arg", "width=8"]
    argv += ["--model-arg", "layers=1", "--model-arg", "encoder_k=4", "--model-arg", "decoder_k=3"]
    argv += ["--out", run, "--no-progress", "--no-figures", "--lr", 1e-2]
    assert main([str(a) for a in argv]) == 0
    return root, run

"""examples/split_one_mesh.py under torchrun: two processes, each with every second node of
one mesh, take the training steps of one process on the whole mesh and predict the same
fields."""

import meshio
import numpy as np
import pytest
import torch

from tests.docs.test_docs import MAX_CODE_COLUMNS
from tests.docs.test_examples import load
from tests.helpers import ROOT, torchrun

EXAMPLE = ROOT / "examples" / "split_one_mesh.py"


def in_gathered_order(mesh: meshio.Mesh, size: int) -> tuple[meshio.Mesh, np.ndarray]:
    """The mesh with its nodes in the order in which ``size`` processes holding the
    nodes ``rank::size`` gather them (those of process 0, then those of process 1, ...),
    and that order. The farthest-point latent mesh of the gathered coordinates
    (``split_latent_mesh``) starts at the node of a given place in that order: one
    process with the reordered mesh samples the latent mesh of the split one."""
    n = len(mesh.points)
    order = np.concatenate([np.arange(rank, n, size) for rank in range(size)])
    renumber = np.empty(n, dtype=np.int64)
    renumber[order] = np.arange(n)
    cells = [(block.type, renumber[block.data]) for block in mesh.cells]
    fields = {name: values[order] for name, values in mesh.point_data.items()}
    return meshio.Mesh(mesh.points[order], cells, point_data=fields), order


def test_two_processes_take_the_steps_of_one_process_on_the_whole_mesh(tmp_path):
    example = load(EXAMPLE)
    mesh = example.generated_mesh(1_600)
    mesh.write(tmp_path / "mesh.vtu")
    reordered, order = in_gathered_order(mesh, 2)
    reordered.write(tmp_path / "reordered.vtu")
    common = ["--smoke", "--dtype", "float64", "--model", "pit"]

    two = ["--mesh", tmp_path / "mesh.vtu", "--out", tmp_path / "two"]
    result = torchrun(EXAMPLE, *common, *two)
    assert result.returncode == 0, result.stderr[-6000:]
    assert result.stdout.count("step 1/3: relative L2") == 1  # printed by process 0 only
    assert "1,600 nodes on 2 process(es)" in result.stdout
    one = example.main(
        [*common, "--mesh", str(tmp_path / "reordered.vtu"), "--out", str(tmp_path / "one")]
    )

    split = torch.load(tmp_path / "two" / "checkpoint.pt")
    assert len(split["losses"]) == 3
    assert split["losses"] == pytest.approx(one["losses"], rel=1e-10)
    whole = torch.load(tmp_path / "one" / "checkpoint.pt")
    for key, value in whole["state_dict"].items():
        assert torch.allclose(split["state_dict"][key], value, rtol=1e-9, atol=1e-12), key
    predicted = [
        meshio.read(tmp_path / run / "prediction.vtu").point_data["u_predicted"]
        for run in ("two", "one")
    ]
    np.testing.assert_allclose(predicted[0][order], predicted[1], rtol=1e-9, atol=1e-12)


def test_the_script_fits_the_page_that_shows_it():
    page = (ROOT / "docs" / "large_meshes.md").read_text()
    assert '```py\n--8<-- "examples/split_one_mesh.py"\n```' in page
    long = [line for line in EXAMPLE.read_text().splitlines() if len(line) > MAX_CODE_COLUMNS]
    assert not long, f"lines over {MAX_CODE_COLUMNS} columns: {long}"

"""The header of a prediction CSV names every column once: a field whose name is taken by a
coordinate (one unnamed target is called ``y``) or by an earlier column gets ``_value`` appended."""

import numpy as np
import pytest
import torch

from meshop.cli import main
from meshop.data import write_mesh
from meshop.train.inference import write_points_csv
from tests.helpers import predict_case


def header(path) -> str:
    return path.read_text().splitlines()[0]


@pytest.mark.parametrize(
    ("dim", "fields", "expected"),
    [
        (2, {"u": 1}, "x,y,u"),
        (2, {"y": 1}, "x,y,y_value"),
        (3, {"z": 1, "v": 2}, "x,y,z,z_value,v_0,v_1"),
        (2, {"y0": 1, "y1": 1}, "x,y,y0,y1"),
        (2, {"y": 1, "y_value": 1}, "x,y,y_value,y_value_value"),
        (2, {"x": 2}, "x,y,x_0,x_1"),
    ],
)
def test_every_column_of_the_header_has_its_own_name(tmp_path, dim, fields, expected):
    points = np.arange(3.0 * dim).reshape(3, dim)
    values = {name: np.full((3, k), i + 10.0) for i, (name, k) in enumerate(fields.items())}
    path = write_points_csv(tmp_path / "p.csv", points, values)
    assert header(path) == expected
    table = np.loadtxt(path, delimiter=",", skiprows=1)
    np.testing.assert_array_equal(table[:, :dim], points)
    np.testing.assert_array_equal(table[:, dim:], np.hstack(list(values.values())))


def test_meshop_predict_writes_one_unnamed_target_as_y_value(trained, tmp_path):
    """A checkpoint without field names (its target is ``y``): ``x,y,y_value`` and the same
    numbers as the named checkpoint's ``u``."""
    _, run = trained
    ckpt = torch.load(run / "checkpoint.pt", weights_only=True)
    for key in ("target_fields", "target_names"):
        ckpt["data"].pop(key, None)
    torch.save(ckpt, tmp_path / "unnamed.pt")
    data, a, _ = predict_case(6, 2.0)
    write_mesh(tmp_path / "mesh.vtu", data, {"a": a})
    (tmp_path / "q.csv").write_text("x,y\n0.5,0.5\n0.25,0.75\n")
    tables = {}
    for name, checkpoint in (("named", run), ("unnamed", tmp_path / "unnamed.pt")):
        out = tmp_path / f"{name}.csv"
        argv = ["predict", "--checkpoint", checkpoint, "--mesh", tmp_path / "mesh.vtu"]
        assert main([str(v) for v in [*argv, "--query", tmp_path / "q.csv", "--out", out]]) == 0
        tables[name] = (header(out), np.loadtxt(out, delimiter=",", skiprows=1))
    assert tables["named"][0] == "x,y,u"
    assert tables["unnamed"][0] == "x,y,y_value"
    np.testing.assert_array_equal(tables["unnamed"][1], tables["named"][1])

"""The accuracy table's zero-shot columns on the refined mesh datasets (Elasticity, DarcyMesh)."""

import json

from benchmarks.accuracy import model_table as accuracy


def table_rows(text: str, title: str) -> list[list[str]]:
    """The cells of the Markdown table under ``### title`` (header row first)."""
    block = text.split(f"### {title}\n", 1)[1].strip().split("\n\n", 1)[0]
    return [[c.strip() for c in line.strip("|").split("|")] for line in block.splitlines()]


def test_elasticity_models_are_evaluated_zero_shot_on_2x_and_4x_finer_meshes(tmp_path, monkeypatch):
    monkeypatch.setenv("MESHOP_DATA", str(tmp_path / "data"))
    args = ["--quick", "--datasets", "elasticity", "--models", "mlp"]
    accuracy.main([*args, "--runs", str(tmp_path / "runs"), "--out", str(tmp_path)])
    (record,) = json.loads((tmp_path / "accuracy.json").read_text())["records"]
    errors = record["refinement"]
    assert list(errors) == ["0", "1", "2"]  # the training meshes, 2x and 4x finer
    assert errors["0"] == record["test_rel_l2"]
    assert all(0 < e < 10 for e in errors.values()) and len(set(errors.values())) == 3
    text = (tmp_path / "accuracy.md").read_text()
    header, _, row = table_rows(text, "Mean test relative L2")
    assert header[-1] == "Elasticity 2x / 4x finer (zero-shot)"
    assert row[-1] == f"{errors['1']:.4f} / {errors['2']:.4f}"
    title = "elasticity zero-shot: the same test cavities and loads on finer meshes"
    header, _, row = table_rows(text, title)
    assert header == ["model", "training meshes", "2x finer meshes", "4x finer meshes"]
    assert row[1:] == [f"{errors[level]:.4f}" for level in "012"]


def record(dataset: str, model: str, error: float, refined=None) -> dict:
    options = {"num_train": 2, "num_test": 1}
    out = dict(dataset=dataset, model=model, test_rel_l2=error, test_rel_l2_median=error)
    out.update(parameters=1, epochs=1, train_seconds=1.0, options=options)
    if refined:
        out["refinement"] = {"0": error, "1": refined[0], "2": refined[1]}
    return out


def test_each_refined_dataset_has_its_own_zero_shot_columns(tmp_path):
    records = [
        record("elasticity", "pit", 0.1, (0.11, 0.12)),
        record("elasticity", "mlp", 0.3, (0.31, 0.32)),
        record("darcy-mesh", "pit", 0.05, (0.055, 0.06)),
        record("darcy-mesh", "mlp", 0.4, (0.41, 0.42)),
    ]
    text = accuracy.summary_table(records)
    header, _, pit, mlp = (
        [c.strip() for c in line.strip("|").split("|")] for line in text.splitlines()
    )
    assert header[-2:] == [
        "Elasticity 2x / 4x finer (zero-shot)",
        "Darcy-mesh 2x / 4x finer (zero-shot)",
    ]
    assert pit[-2:] == ["0.1100 / 0.1200", "0.0550 / 0.0600"]
    assert mlp[-2:] == ["0.3100 / 0.3200", "0.4100 / 0.4200"]
    # a table with only DarcyMesh's levels keeps only its column
    text = accuracy.summary_table(records[2:])
    assert "Elasticity 2x" not in text and "Darcy-mesh 2x / 4x finer (zero-shot)" in text
    info = {"date": "d", "command": "c", "cpu": "cpu", "threads": 1, "torch": "t", "seed": 0}
    path = tmp_path / "accuracy.json"
    path.write_text(json.dumps({"machine": {**info, "budget": "1 epochs"}, "records": records}))
    tables = accuracy.write_tables(path, tmp_path / "accuracy.md")
    for dataset, same in (
        ("elasticity", "cavities and loads"),
        ("darcy-mesh", "domains and fields"),
    ):
        rows = table_rows(tables, f"{dataset} zero-shot: the same test {same} on finer meshes")
        assert [row[0] for row in rows[2:]] == ["PiT", "MLP baseline"]
        wanted = [r for r in records if r["dataset"] == dataset]
        assert [row[1:] for row in rows[2:]] == [
            [f"{e:.4f}" for e in r["refinement"].values()] for r in wanted
        ]


def test_the_refined_datasets_get_their_finer_test_splits():
    args = accuracy.parse_args(["--quick"])
    for dataset in ("elasticity", "darcy-mesh"):
        assert accuracy.zero_shot_tests(dataset, args) == [{"refinement": 1}, {"refinement": 2}]
    assert accuracy.zero_shot_tests("airfoil", args) == []

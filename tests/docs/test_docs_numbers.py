"""One source for every measured number of the documentation: the pages include the tables and
sentences generated from ``benchmarks/results/`` instead of copying their figures by hand."""

import copy
import json
import re
from pathlib import Path

import pytest

from benchmarks.accuracy import ono_eval
from benchmarks.lib import notes
from benchmarks.report import notes as notes_command

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
RESULTS = BENCHMARKS / "results"
DOCS = sorted((ROOT / "docs").glob("*.md"))

SNIPPET = re.compile(r'^--8<-- "([^"]+?)(?::(\w+))?"$', re.M)
# a measured figure as the result tables print it: "1.43 s", "91.8 MB", "3.6x", "0.0425" (an aim,
# "aim 1.5x", is not a measurement)
FIGURE = re.compile(r"(?<![\w.^])(?<!aim )(\d+\.\d+ ?(?:µs|ms|s|MB|GB|TB|x)|\d\.\d{3,})(?!\w)")
# the generated tables and result files a figure may come from, and the generated notes
GENERATED = ("summary.md", "notes.md")


#: figures of a page that equal a figure of a result table without being copied from it
NOT_COPIES = {
    "datasets.md": {"0.0095"},  # the airfoil solver's surface Cp error against the reference
    # the agreement of two memory measurements, not one of them; the paper's errors (Table 2),
    # equal to spreads of the accuracy table
    "transolver.md": {"0.1 MB", "0.0064", "0.0012", "0.0033"},
    "benchmarks.md": {"1.5x"},  # the speed aim of the Galerkin encoder and ONO, not a measurement
    "ono.md": {"0.0815"},  # a toy task's error, equal to one of large_mesh_zero_shot.md
    "pit.md": {"0.092"},  # the quick start's weighted PiT, equal to a Burgers trial's error
    # an example's CSV output, equal to a Burgers trial's loss; the paper's H1 weight in a
    # config, equal to a spread of the accuracy table
    "training.md": {"0.031", "0.0036"},
}


def included(page: Path) -> list[tuple[str, str | None]]:
    """The (file, section) pairs a page includes with pymdownx.snippets."""
    return SNIPPET.findall(page.read_text())


def result_figures() -> dict[str, str]:
    """Every figure of the measured tables in benchmarks/results/ (figure -> file)."""
    found = {}
    for table in sorted(RESULTS.glob("*.md")):
        if table.name in GENERATED:
            continue
        for match in FIGURE.finditer(table.read_text()):
            found.setdefault(match[1].replace(" ", ""), table.name)
    return found


def prose(page: Path) -> str:
    """A page without its snippet lines: what was written by hand."""
    return SNIPPET.sub("", page.read_text())


def test_notes_are_generated_from_the_results_and_included():
    data = notes.load(RESULTS)
    assert (RESULTS / "notes.md").read_text() == notes.notes_markdown(data), (
        "run python -m benchmarks.report.summary"
    )
    # every section is included by a page, and every included section exists
    used = {
        section for page in DOCS for file, section in included(page) if file.endswith("notes.md")
    }
    assert used == set(notes.SECTIONS)
    for page in [ROOT / "README.md", *DOCS]:
        for file, section in included(page):
            text = (ROOT / file).read_text()
            if section:
                assert f"[start:{section}]" in text, f"{page.name} includes {file}:{section}"


def test_notes_follow_the_numbers_of_the_result_files():
    data = copy.deepcopy(notes.load(RESULTS))
    training = data["models"]["records"]

    def record(**match):
        return next(r for r in training if r.items() >= match.items())

    ours = record(table="training", model="PiT", impl="meshop", n=972)
    dense = record(table="training", model="PiT", impl="dense", n=972)
    big_ours = record(table="training", model="PiT", impl="meshop", n=9720)
    big_ours.update(time_s=record(table="training", impl="dense", n=9720)["time_s"] / 12.5)
    ours["time_s"] = dense["time_s"] / 3.6
    step = notes.pit_step(data)
    assert "is 3.6x and not 20x faster" in " ".join(step.split())
    assert "12.5x faster" in step
    ours["time_s"] = dense["time_s"] / 25
    step = " ".join(notes.pit_step(data).split())
    assert step.startswith("**Why the PiT training step is 25.0x faster.**")
    # the inference sentence quotes the largest mesh's records
    quantile = next(r for r in training if r.get("table") == "inference" and r["n"] == 10**6)
    quantile["time_s"] = 123.4
    assert "123.40 s" in notes.large_mesh(data)
    data["models"]["records"] = [r for r in training if r.get("table") != "inference"]
    assert notes.NOT_MEASURED in " ".join(notes.large_mesh(data).split())
    field = max(
        (r for r in data["neighbors"]["records"] if r["operation"] == "quantile"),
        key=lambda r: r["n"],
    )
    field["time_s"] = 3.21
    assert "took 3.21 s" in " ".join(notes.quantile_field(data).split())
    del data["neighbors"]
    assert notes.quantile_field(data) == notes.NOT_MEASURED


def test_notes_command_writes_and_checks(tmp_path, capsys):
    for name in notes.SOURCES:
        (tmp_path / f"{name}.json").write_text((RESULTS / f"{name}.json").read_text())
    args = ["--results", str(tmp_path)]
    assert notes_command.main([*args, "--check"]) == 1
    assert notes_command.main(args) == 0
    assert notes_command.main([*args, "--check"]) == 0
    assert (tmp_path / "notes.md").read_text() == (RESULTS / "notes.md").read_text()


def test_galerkin_stage_table_starts_from_the_recorded_accuracy_row():
    """The Galerkin page includes grid_zero_shot.md, measured on the checkpoint of the accuracy
    table's Darcy Galerkin row: its model's own forward (the last row) has that row's errors, and
    every row the same training-grid error. A rerun of that row needs a rerun of
    ``python -m benchmarks.accuracy.grid_zero_shot`` on that row's run folders."""
    assert (
        '--8<-- "benchmarks/results/grid_zero_shot.md:results"'
        in (ROOT / "docs" / "galerkin.md").read_text()
    )
    records = json.loads((RESULTS / "accuracy.json").read_text())["records"]
    row = next(r for r in records if r["dataset"] == "darcy" and r["model"] == "galerkin")
    stages = json.loads((RESULTS / "grid_zero_shot.json").read_text())["records"]
    assert len(stages[-1]["stages"]) == 4 and not stages[0]["stages"]
    for grid, error in row["super_resolution"].items():
        assert stages[-1]["errors"][grid] == pytest.approx(error, rel=1e-4), "rerun grid_zero_shot"
    assert {round(s["errors"][next(iter(row["super_resolution"]))], 6) for s in stages} == {
        round(row["test_rel_l2"], 6)
    }


def test_ono_tables_fit_and_follow_the_records():
    """The ONO page includes ono_eval.md, whose two tables are those of its records."""
    records = json.loads((RESULTS / "ono_eval.json").read_text())["records"]
    text = (RESULTS / "ono_eval.md").read_text()
    for table in ono_eval.tables(records):
        assert table in text
        assert table.splitlines()[0].count("|") - 1 <= 8  # columns that fit a laptop's page
    assert ("benchmarks/results/ono_eval.md", "results") in included(ROOT / "docs" / "ono.md")


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.name)
def test_no_measured_figure_copied_by_hand(page):
    """No figure of a measured table appears in a page's own text: a page shows it by including
    the table or a generated note, so a rerun of the benchmarks cannot leave a stale copy."""
    figures = result_figures()
    copied = [
        f"{match[1]} (from {figures[match[1].replace(' ', '')]})"
        for match in FIGURE.finditer(prose(page))
        if match[1].replace(" ", "") in figures and match[1] not in NOT_COPIES.get(page.name, ())
    ]
    assert not copied, f"{page.name} copies measured figures by hand: {', '.join(copied)}"


def test_figure_scan_finds_a_copied_figure():
    """The scan above sees a figure written by hand and ignores an included one."""
    figures = result_figures()
    records = json.loads((RESULTS / "accuracy.json").read_text())["records"]
    error = f"{records[0]['test_rel_l2']:.4f}"  # a figure of the accuracy table, whatever its run
    assert "1.43s" in figures and error in figures
    text = f'It took 1.43 s.\n--8<-- "benchmarks/results/models.md:results"\nerror {error}\n'
    page_figures = [m[1] for m in FIGURE.finditer(SNIPPET.sub("", text))]
    assert page_figures == ["1.43 s", error]
    assert [m[1] for m in FIGURE.finditer("aim 1.5x, 1.5x, n^0.93, O(n^2), 2x")] == ["1.5x"]


def test_demo_table_is_the_recorded_run():
    """The README's demo table (which the Training page includes) matches the demo's summary."""
    demo = json.loads((RESULTS / "demo.json").read_text())
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("[start:demo]") : readme.index("[end:demo]")]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip().strip("*") for c in line.strip("|").split("|")]
        if line.startswith("| PiT"):
            rows["pit"] = cells
        elif line.startswith("| MLP"):
            rows["mlp"] = cells
    assert set(rows) == set(demo["results"])
    for name, cells in rows.items():
        run = demo["results"][name]
        assert cells[1:] == [
            f"{run['parameters']:,}",
            f"{100 * run['test_rel_l2']:.2f} %",
            f"{100 * run['test_rel_l2_median']:.2f} %",
            f"{run['train_seconds']:.0f} s",
        ]
    minutes, seconds = divmod(round(demo["total_seconds"]), 60)
    assert f"{minutes} min {seconds} s in all" in " ".join(section.split())
    assert f"Measured on {demo['machine']['date'][:10]}" in section
    training = (ROOT / "docs" / "training.md").read_text()
    assert '--8<-- "README.md:demo"' in training


CODE_SPAN = re.compile(r"`[^`\n]+`")
# a formula typed as code: `q k^T`, `softmax(...)`, `sqrt(...)`, `sum_i ...`, `O(N^2)` (not a
# name such as `sum_over_chunks`)
FORMULA = re.compile(r"\^[-\w{(]|softmax\(|sqrt\(|\bsum_(\w\b|\{)|\bO\(")


def code_formulas(text: str) -> list[str]:
    return [span for span in CODE_SPAN.findall(text) if FORMULA.search(span)]


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.name)
def test_formulas_in_one_notation(page):
    """The site's pages write formulas in LaTeX between ``$`` signs (MathJax renders them), never
    between ``\\(`` and ``\\)`` beside them nor typed as code; code blocks are code."""
    text = re.sub(r"^(```+).*?^\1", "", page.read_text(), flags=re.S | re.M)
    assert "\\(" not in text, f"{page.name}: a formula between \\( and \\): write $...$"
    typed = code_formulas(text)
    assert not typed, f"{page.name}: formulas typed as code: {typed}"


def test_code_formula_pattern():
    assert code_formulas("the paper's `(1/(B M)) sum q q^T` and `x.sum()`") == [
        "`(1/(B M)) sum q q^T`"
    ]
    assert code_formulas("`z = softmax(q k^T / sqrt(D)) v` and `model(batch)`") == [
        "`z = softmax(q k^T / sqrt(D)) v`"
    ]
    assert not code_formulas("`torch.nn.functional.softmax` and `quantile=0.02`")
    assert code_formulas("`sum_i w_i x_i`, `sum_{i} x_i` and `sum_over_chunks`") == [
        "`sum_i w_i x_i`",
        "`sum_{i} x_i`",
    ]

"""One source for every measured number of the documentation: the pages include the tables
generated from ``benchmarks/results/``, and the few figures their prose quotes by hand are checked
against the result files here, so that a rerun of the benchmarks cannot leave a stale copy."""

import json
import re
from pathlib import Path

import pytest

from benchmarks.accuracy import ono_eval
from benchmarks.lib.common import fmt_count, fmt_mb, fmt_time
from benchmarks.lib.training_runs import NAMES

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
RESULTS = BENCHMARKS / "results"
DOCS = sorted((ROOT / "docs").glob("*.md"))

SNIPPET = re.compile(r'^--8<-- "([^"]+?)(?::(\w+))?"$', re.M)
# a measured figure as the result tables print it: "1.43 s", "91.8 MB", "3.6x", "0.0425" (a figure
# after "aim " is not a measurement)
FIGURE = re.compile(r"(?<![\w.^])(?<!aim )(\d+\.\d+ ?(?:µs|ms|s|MB|GB|TB|x)|\d\.\d{3,})(?!\w)")


#: figures of a page that equal a figure of a result table without being copied from it
NOT_COPIES = {
    # the quick start's printed errors, which test_docs.py checks against the code's output
    "README.md": {"0.092", "0.084"},
    # the airfoil solver's surface Cp error against the reference; a learning rate, equal to one
    # printed in folder_zero_shot.md's settings
    "datasets.md": {"0.0095", "0.001"},
    # the agreement of two memory measurements, not one of them; the paper's errors (Table 2),
    # equal to spreads of the accuracy table
    "transolver.md": {"0.1 MB", "0.0064", "0.0012", "0.0033"},
    "ono.md": {"0.0815"},  # a toy task's error, equal to one of large_mesh_zero_shot.md
    # the physics-attention profile's projections, equal to a neighbour search's time; a preset's
    # quantile setting, which tuning.md's settings column names; the physics-attention layer's
    # forward pass in its profile, equal to a write time of predict_file_2threads.md
    "benchmarks.md": {"1.9 ms", "0.016", "5.4 ms"},
    # the quick start's weighted PiT, equal to a Burgers trial's error; the weighted-or-not
    # table's DarcyMesh run, equal to a zero-shot error of accuracy_600s.md
    "pit.md": {"0.092", "0.1127"},
    # an example's CSV output, equal to a Burgers trial's loss; the paper's H1 weight in a
    # config, equal to a spread of the accuracy table
    # (and a learning rate, printed in folder_zero_shot.md's settings)
    "training.md": {"0.031", "0.0036", "0.005"},
    # an example's printed loss and integrals, equal to figures of zero_shot_causes.md and
    # accuracy_600s.md
    "domains.md": {"0.0282", "0.0061", "0.0341"},
    # a preset's quantile setting, which tuning.md's settings column names
    "choosing-a-model.md": {"0.016"},
}


def included(page: Path) -> list[tuple[str, str | None]]:
    """The (file, section) pairs a page includes with pymdownx.snippets."""
    return SNIPPET.findall(page.read_text())


def result_figures() -> dict[str, str]:
    """Every figure of the measured tables in benchmarks/results/ (figure -> file)."""
    found = {}
    for table in sorted(RESULTS.glob("*.md")):
        for match in FIGURE.finditer(table.read_text()):
            found.setdefault(match[1].replace(" ", ""), table.name)
    return found


def prose(page: Path) -> str:
    """A page without its snippet lines: what was written by hand."""
    return SNIPPET.sub("", page.read_text())


def records(name: str, **match) -> list[dict]:
    """The measured records of ``benchmarks/results/<name>.json`` whose fields equal ``match``."""
    found = json.loads((RESULTS / f"{name}.json").read_text())["records"]
    return [r for r in found if r.items() >= match.items() and "time_s" in r]


def quoted() -> dict[str, list[str]]:
    """The figures each page's prose quotes by hand, as the result files have them now."""
    pit = {r["n"]: r for r in records("models", table="training", model="PiT", impl="meshop")}
    dense = {r["n"]: r for r in records("models", table="training", model="PiT", impl="dense")}
    faster = {n: f"{dense[n]['time_s'] / pit[n]['time_s']:.1f}x" for n in dense}
    less = {n: f"{dense[n]['peak_mb'] / pit[n]['peak_mb']:.1f}x" for n in dense}
    larger = [f"{faster[n]} faster and {less[n]} less memory at {n:,} nodes" for n in (9720, 97200)]
    # at 972 nodes: the interleaved steps of speed_vs_reference, the newest measurement
    step = next(
        r
        for r in json.loads((RESULTS / "speed_vs_reference.json").read_text())["records"]
        if (r["case"], r["threads"]) == ("PiT, 972 / 972 nodes, batch 8", 1)
    )
    interleaved = f"{step['dense']['median_s'] / step['meshop']['median_s']:.2f}x"
    inference = {r["fields"]: r for r in records("models", table="inference", n=10**6)}
    field = max(records("neighbors", operation="quantile"), key=lambda r: r["n"])
    return {
        "benchmarks.md": [
            f"Why the PiT training step gains least at 972 nodes ({interleaved} faster).",
            f"The {interleaved} at 972 nodes is the median of interleaved steps on one thread",
            f"gave {faster[972]} at 972 nodes.",
            *larger,
            *(f"{fmt_time(r['time_s'])}, {fmt_mb(r['peak_mb'])}" for r in inference.values()),
            *against_the_authors("vs_authors"),
            *against_the_authors("vs_authors_burgers"),
            *authors_setting(),
            training_loop(),
        ],
        "large_meshes.md": zero_shot_findings(),
        "choosing-a-model.md": choosing_a_model(),
        "ono.md": [against_the_authors("vs_authors_burgers")[1]],
        "pit.md": [pointwise_decoder()],
        "datasets.md": finest_meshes(),
        "domains.md": [
            f"On {fmt_count(field['n'])} random points in the unit square, the 1% quantile field "
            f"of 1024 targets (about {field['n'] // 100:,} neighbours each) took "
            f"{fmt_time(field['time_s'])} and {fmt_mb(field['peak_mb'])} on one CPU thread"
        ],
    }


def the(model: str) -> str:
    """A model's name in a sentence: "PiT", "ONO", "the Galerkin Transformer"."""
    return NAMES[model] if model in ("pit", "ono") else f"the {NAMES[model]}"


def choosing_a_model() -> list[str]:
    """The comparisons on which docs/choosing-a-model.md bases its advice, as the result files
    have them: the lowest error at equal training time per dataset; the zero-shot errors on the
    finer Darcy grids and DarcyMesh meshes against the training resolution's (accuracy.json),
    and on meshes of hundreds of thousands of nodes (large_mesh_zero_shot); what a latent mesh
    saves PiT
    (speed_vs_reference), ONO's training step against PiT's (models) and the slowest model of
    ``meshop predict`` against the fastest (predict_file_2threads)."""
    found = json.loads((RESULTS / "accuracy.json").read_text())["records"]
    error = {(r["dataset"], r["model"]): r["test_rel_l2"] for r in found}
    titles = {
        "elasticity": "Elasticity",
        "airfoil": "Airfoil",
        "darcy": "Darcy",
        "burgers": "Burgers",
        "darcy-mesh": "DarcyMesh",
    }

    def listed(words: list[str]) -> str:
        return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"

    best = {d: min((m for e, m in error if e == d), key=lambda m: error[d, m]) for d in titles}
    winners = list(dict.fromkeys(best.values()))
    lowest = "; ".join(
        f"{the(m)} on {listed([titles[d] for d in titles if best[d] == m])}" for m in winners
    )
    leaders, trailing = ("pit", "galerkin", "fourier"), ("ono", "transolver")
    behind = all(
        min(error[d, m] for m in trailing) > max(error[d, m] for m in leaders)
        and max(error[d, m] for m in trailing) < error[d, "mlp"]
        for d in titles
    )
    floor = all(error[d, m] < error[d, "mlp"] for d, m in error if m != "mlp")
    grid = {r["model"]: r["super_resolution"] for r in found if "super_resolution" in r}
    finer = {m: errors["85"] / errors["22"] for m, errors in grid.items()}
    meshes = [
        errors[level] / errors["0"]
        for r in found
        if r["dataset"] == "darcy-mesh" and (errors := r.get("refinement"))
        for level in ("1", "2")
    ]
    step = {
        r["latent"]: r["meshop"]["median_s"]
        for r in json.loads((RESULTS / "speed_vs_reference.json").read_text())["records"]
        if r["case"].startswith("PiT, 972 /") and r["threads"] == 1
    }
    largest = max(r["n"] for r in records("models", table="training"))
    model = {r["model"]: r for r in records("models", table="training", impl="meshop", n=largest)}
    ono, pit = model["ONO"], model["PiT"]
    files = json.loads((RESULTS / "predict_file_2threads.json").read_text())["records"]
    size = max(
        (r["nodes"] for r in files),
        key=lambda n: (sum(r["nodes"] == n for r in files), n),
    )
    time = {r["model"]: r["time_s"] for r in files if r["nodes"] == size}
    slow, fast = max(time, key=time.get), min(time, key=time.get)
    return [
        f"the lowest error at equal training time: {lowest}",
        "ONO and the Transolver are behind PiT and the Galerkin and Fourier Transformers on every "
        "dataset of the table (though below the MLP baseline's error on every one)"
        if behind
        else "(rerun: ONO or the Transolver ahead of PiT or the Galerkin Transformers somewhere)",
        "every operator is below it on every dataset"
        if floor
        else "(rerun: an operator above the MLP baseline)",
        f"ONO's and the Transolver's errors on the 4x finer grid are {finer['ono']:.2f}x and "
        f"{finer['transolver']:.2f}x their errors on the training grid; PiT's "
        f"{finer['pit']:.2f}x, the Galerkin and Fourier Transformers' {finer['galerkin']:.2f}x "
        f"and {finer['fourier']:.2f}x",
        f"every model's error is {min(meshes):.2f}x to {max(meshes):.2f}x its error on the "
        f"training meshes",
        zero_shot_findings()[4],
        f"a PiT training step on 972 nodes took {step[972] / step[256]:.1f}x as long with the "
        f"input mesh as its latent mesh as with 256 latent nodes",
        f"at {largest:,} nodes ONO's training step took {ono['time_s'] / pit['time_s']:.1f}x "
        f"PiT's time and {ono['peak_mb'] / pit['peak_mb']:.1f}x its memory",
        f"on a file of {size:,} nodes took {time[slow] / time[fast]:.1f}x as long with "
        f"{the(slow)} as with {the(fast)}",
    ]


def against_the_authors(name: str) -> list[str]:
    """meshop's mean error against the authors' model, measured in the larger seed spread."""
    found = json.loads((RESULTS / f"{name}.json").read_text())["records"]
    quotes = []
    for model, title in (("transolver", "Transolver"), ("ono", "ONO")):
        errors = {
            side: [
                r["test_rel_l2"]
                for r in found
                if (r["model"], r["implementation"]) == (model, side)
            ]
            for side in ("meshop", "authors")
        }
        ours, theirs = (sum(e) / len(e) for e in errors.values())
        spread = max(max(e) - min(e) for e in errors.values())
        quotes.append(
            f"{(ours - theirs) / theirs:+.0%} for {'the ' if model == 'transolver' else ''}{title} "
            f"({abs(ours - theirs) / spread:.2f} times the larger seed spread)"
        )
    return quotes


def authors_setting() -> list[str]:
    """The training and the data of the runs against the authors' code, as vs_authors.json has
    them."""
    result = json.loads((RESULTS / "vs_authors.json").read_text())
    t, d = result["training"], result["data"]

    def power(value: float) -> str:
        return f"{value:.0e}".replace("e-0", "e-")

    return [
        f"AdamW (lr {power(t['lr'])}, weight decay {power(t['weight_decay'])})",
        f"(div {t['div_factor']:g}, final div {t['final_div_factor']:g})",
        f"clipped at {t['clip']:g}, batch {t['batch_size']}",
        f"Darcy flow on a {d['resolution']} x {d['resolution']} grid ({d['num_train']} training "
        f"and {d['num_test']} test samples, solved on {d['fine_resolution']} x "
        f"{d['fine_resolution']})",
    ]


def training_loop() -> str:
    """The MLP's second epoch and the other models' share of forward and backward in it, as
    training_loop_profile.json has them."""
    found = json.loads((RESULTS / "training_loop_profile.json").read_text())["records"]
    second = {r["model"]: r["epochs"][1] for r in found}
    shares = [
        (e["parts_s"]["forward"] + e["parts_s"]["backward"]) / e["epoch_s"]
        for model, e in second.items()
        if model not in ("pit", "mlp")
    ]
    return (
        f"(whose epoch took {second['mlp']['epoch_s'] * 1000:.0f} ms) and "
        f"{100 * min(shares):.0f} to {100 * max(shares):.0f} % of the others'"
    )


def pointwise_decoder() -> str:
    """PiT's pointwise decoder against the paper's form on DarcyMesh, at the same epochs in
    tuning.jsonl."""
    trials = [json.loads(line) for line in (RESULTS / "tuning.jsonl").read_text().splitlines()]
    darcy = [t for t in trials if (t["dataset"], t["model"]) == ("darcy-mesh", "pit")]
    pointwise = next(t for t in darcy if t["settings"] == ["model.pointwise=true"])
    paper = next(t for t in darcy if not t["settings"] and t["epochs"] == pointwise["epochs"])
    lower = 1 - pointwise["test_rel_l2"] / paper["test_rel_l2"]
    return (
        f"{pointwise['epochs']} epochs, one seed: the `model.pointwise=true` and `preset` rows of "
        f"`benchmarks/results/tuning.md`) its error was {lower:.0%} lower".replace("%", " %")
    )


def finest_meshes() -> list[str]:
    """The sizes of the finest DarcyMesh test meshes of large_mesh_zero_shot, which datasets.md
    quotes for refinement 5."""
    found = json.loads((RESULTS / "large_mesh_zero_shot.json").read_text())["records"]
    evaluated = [r for r in found if r["kind"] == "evaluation"]
    finest = max(evaluated, key=lambda r: r["refinement"])
    nodes, words = finest["nodes"], {2: "two", 3: "three", 4: "four", 5: "five"}
    return [
        f"the {words.get(len(nodes), len(nodes))} level-{finest['refinement']} test meshes",
        f"had {min(nodes):,} to {max(nodes):,} nodes ({sum(nodes) / len(nodes):,.0f} on average)",
    ]


def zero_shot_findings() -> list[str]:
    """The figures of the zero-shot accuracy on meshes of hundreds of thousands of nodes
    (large_mesh_zero_shot)."""
    found = json.loads((RESULTS / "large_mesh_zero_shot.json").read_text())["records"]
    full, part = (r for r in found if r["kind"] == "training")
    evaluated = {(r["run"], r["refinement"]): r for r in found if r["kind"] == "evaluation"}
    low, high = min(level for _, level in evaluated), max(level for _, level in evaluated)
    common = min(r["samples"] for r in evaluated.values())

    def first(run: dict, level: int) -> float:
        errors = evaluated[run["run"], level]["errors"][:common]
        return sum(errors) / len(errors)

    def side_by_side(run: dict) -> float:  # the epochs that ended before either run ended
        both, ended, times = min(full["train_seconds"], part["train_seconds"]), 0.0, []
        for seconds in run["epoch_seconds"]:
            ended += seconds
            if ended > both * (1 + 1e-9):
                break
            times.append(seconds)
        return sum(times) / len(times)

    ratio = evaluated[part["run"], low]["test_rel_l2"] / evaluated[full["run"], low]["test_rel_l2"]
    same = [first(part, level) / first(full, level) for level in range(low, high + 1)]
    loads = [r["load_average"] for r in found if "load_average" in r]
    nodes = evaluated[full["run"], high]["nodes"][:common]
    wall = next(r["wall_seconds"] for r in found if r["kind"] == "command")
    return [
        f"at the training refinement is {ratio:.2f}x the full-mesh model's",
        f"{min(same):.2f}x to {max(same):.2f}x on the first {common} test domains",
        f"took {side_by_side(part) / side_by_side(full):.2f}x the time of an epoch on every node",
        f"(whole runs: {part['train_seconds'] / full['train_seconds']:.2f}x,",
        *(
            f"at refinement {high} ({sum(nodes) / len(nodes):,.0f} nodes per mesh) "
            f"{first(run, high) / first(run, low):.2f}x its error at refinement {low}"
            for run in (full, part)
        ),
        f"load average was {min(loads):.1f} to {max(loads):.1f}",
        f"the whole command took {wall / 60:.1f} min",
    ]


@pytest.mark.parametrize("page", sorted(quoted()))
def test_quoted_figures_are_those_of_the_result_files(page):
    """Prose that quotes a measured figure by hand quotes the result files' (after a rerun of
    the benchmark, update the sentence)."""
    text = " ".join((ROOT / "docs" / page).read_text().split())
    for quote in quoted()[page]:
        assert quote in text, f"{page} should say: {quote}"


def test_every_included_section_exists():
    for page in [ROOT / "README.md", *DOCS]:
        for file, section in included(page):
            if section:
                text = (ROOT / file).read_text()
                assert f"[start:{section}]" in text, f"{page.name} includes {file}:{section}"


def readme_accuracy_quotes() -> list[str]:
    """The sentences around the README's accuracy table (its command, date, time and findings)
    as accuracy.json has them now."""
    data = json.loads((RESULTS / "accuracy.json").read_text())
    info, found = data["machine"], data["records"]
    error = {(r["dataset"], r["model"]): r["test_rel_l2"] for r in found}

    def versus(dataset: str, model: str) -> str:
        return f"{NAMES[model]} {error[dataset, model]:.4f} against {error[dataset, 'mlp']:.4f}"

    quotes = [
        f"measured {info['date']}; the whole table took {info['wall_seconds'] / 60:.0f} min",
        f"(`{info['command']}`;",
    ]
    for dataset, title in (
        ("darcy-mesh", "DarcyMesh"),
        ("elasticity", "Elasticity"),
        ("airfoil", "Airfoil"),
    ):
        operators = [m for d, m in error if d == dataset and m != "mlp"]
        best = min(operators, key=lambda m: error[dataset, m])
        ratio = error[dataset, "mlp"] / error[dataset, best]
        quotes.append(
            f"{ratio:.{1 if ratio >= 1.95 else 2}f}x on {title} ({versus(dataset, best)})"
        )
        quotes += [  # the operators at or above the baseline's error
            versus(dataset, m).replace(f"{NAMES[m]} ", f"{NAMES[m]} on {title} (")
            for m in operators
            if error[dataset, m] >= error[dataset, "mlp"]
        ]
    mesh = next(
        r["refinement"] for r in found if (r["dataset"], r["model"]) == ("darcy-mesh", "pit")
    )
    quotes.append(f"PiT's error is {mesh['1'] / mesh['0']:.2f}x and {mesh['2'] / mesh['0']:.2f}x")
    grids = [list(r["super_resolution"].values()) for r in found if "super_resolution" in r]
    growth = [errors[1] / errors[0] for errors in grids]
    quotes.append(f"every model's error is {min(growth):.2f}x to {max(growth):.2f}x its error")
    return quotes


def test_readme_accuracy_prose_quotes_the_result_file():
    """The README's accuracy sentences quote accuracy.json (after new results, update them)."""
    readme = " ".join((ROOT / "README.md").read_text().split())
    for quote in readme_accuracy_quotes():
        assert quote in readme, f"README.md should say: {quote}"


def test_readme_speed_prose_says_how_many_threads_measured():
    """The sentence above the README's speed table: one torch thread per case for the layers and
    models, one and two threads for the training steps against the papers' code."""
    for name in ("position_attention", "local_attention", "models", "linear_attention"):
        assert json.loads((RESULTS / f"{name}.json").read_text())["machine"]["threads"] == 1
    reference = json.loads((RESULTS / "speed_vs_reference.json").read_text())["machine"]
    assert reference["threads"] == [1, 2]
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "one torch thread per case" in readme and "at one and two threads" in readme


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


#: the README's sections drawn from the result files (speed, accuracy, demo)
GENERATED = re.compile(r"<!-- --8<-- \[start:(\w+)\] -->.*?<!-- --8<-- \[end:\1\] -->", re.S)


@pytest.mark.parametrize("page", [ROOT / "README.md", *DOCS], ids=lambda p: p.name)
def test_no_measured_figure_copied_by_hand(page):
    """No figure of a measured table appears in a page's own text unless the page quotes it in a
    sentence checked above: a page shows it by including the table (the README: by a section
    drawn from the result files), so that a rerun of the benchmarks cannot leave a stale copy."""
    figures = result_figures()
    if page.name == "README.md":
        checked = " ".join(readme_accuracy_quotes())
        text = GENERATED.sub("", page.read_text())
    else:
        checked = " ".join(quoted().get(page.name, []))
        text = prose(page)
    copied = [
        f"{match[1]} (from {figures[match[1].replace(' ', '')]})"
        for match in FIGURE.finditer(text)
        if match[1].replace(" ", "") in figures
        and match[1] not in NOT_COPIES.get(page.name, ())
        and match[1] not in checked
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

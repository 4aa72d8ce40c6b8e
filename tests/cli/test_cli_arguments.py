"""Every ``--model-arg``, ``--dataset-arg`` and ``--train-arg`` checked against the signature of
what it goes to before any work: a wrong name gets the closest names, a wrong type the expected
type, as one line with exit status 2 and nothing written."""

import pytest

from meshop.arguments import (
    accepts,
    check_arguments,
    describe,
    expected_types,
    options,
    parse_annotation,
)
from meshop.cli import main
from meshop.datasets.registry import DATASETS, dataset_class
from meshop.errors import ConfigError
from meshop.models.registry import MODELS, model_class
from meshop.train.config import TrainConfig
from meshop.train.presets import PAIR_PRESETS, preset
from meshop.train.run import FROM_DATA, SPLIT
from tests.helpers import square_meshio

# parameters that no value of a command line or TOML file can set: accepted as anything
UNTYPED = {"transform", "root", "raw_dir"}


@pytest.fixture
def folder(tmp_path):
    import meshio

    folder = tmp_path / "meshes"
    folder.mkdir()
    for i in range(4):
        meshio.write(folder / f"case_{i}.vtu", square_meshio(4))
    return folder


def train_error(argv, tmp_path, capsys, data_dir) -> str:
    """The one error line of ``meshop train`` on ``argv``, which must write nothing."""
    out = tmp_path / "run"
    argv = ["train", "--out", out, "--data-dir", data_dir, "--no-progress", *argv]
    status = main([str(a) for a in argv])
    captured = capsys.readouterr()
    assert status == 2, captured.err
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("meshop: error: "), captured.err
    assert "Traceback" not in captured.err and captured.out == ""  # no settings printed either
    assert not out.exists()
    return lines[0].removeprefix("meshop: error: ")


FOLDER_PIT = ["--dataset", "folder", "--model", "pit", "--dataset-arg", 'targets="vm"']

BAD_INPUTS = [
    # (options, the whole message)
    (
        ["--model-arg", "width=abc"],
        "'width' of model 'pit' expects an int, got 'abc' (default: 64)",
    ),
    (["--model-arg", "width=1.5"], "'width' of model 'pit' expects an int, got 1.5 (default: 64)"),
    (
        ["--model-arg", "weighted=1"],
        "'weighted' of model 'pit' expects true or false, got 1 (default: true)",
    ),
    (
        ["--model-arg", "encoder_quantile=true"],
        "'encoder_quantile' of model 'pit' expects a number, got true (default: 0.01)",
    ),
    (
        ["--model-arg", 'periodic=[1, "a"]'],
        "'periodic' of model 'pit' expects a number or a list of numbers, got [1, 'a']",
    ),
    (
        ["--model-arg", "lambda_param=2"],
        "'lambda_param' of model 'pit' expects a string, got 2 (default: 'tan')",
    ),
    (
        ["--model-arg", "widht=8"],
        "model 'pit' has no option 'widht'; did you mean 'width' or 'weighted'? (options: width, "
        "heads, layers, encoder_quantile, decoder_quantile, encoder_k, decoder_k, "
        "encoder_radius, decoder_radius, decoder_layers, lambda_param, periodic, weighted, "
        "pointwise, latent_positions)",
    ),
    (
        ["--model-arg", "in_channels=3"],
        "'in_channels' of model 'pit' is not an option here: it is read from the data",
    ),
    (
        ["--dataset-arg", "targets=3"],
        "'targets' of dataset 'folder' expects a string or a list of strings, got 3",
    ),
    (
        ["--dataset-arg", "test_fraction=half"],
        "'test_fraction' of dataset 'folder' expects a number, got 'half' (default: 0.2)",
    ),
    (
        ["--dataset-arg", "patern='*.msh'"],
        "dataset 'folder' has no option 'patern'; did you mean 'pattern'? (options: inputs, "
        "targets, pattern, test_fraction, seed, cell_data_to_nodes, groups, cache_size, "
        "transform, progress)",
    ),
    (
        ["--dataset-arg", 'split="all"'],
        "'split' of dataset 'folder' is not an option here: `meshop train` trains on the train "
        "split and tests on the test split (their sizes are dataset options, such as num_test or "
        "test_fraction)",
    ),
    (
        ["--dataset-arg", 'root="elsewhere"'],
        "'root' of dataset 'folder' is not an option here: give the folder with --data-dir",
    ),
    (
        ["--num-test", "2"],
        "dataset 'folder' has no option 'num_test' (options: inputs, targets, pattern, "
        "test_fraction, seed, cell_data_to_nodes, groups, cache_size, transform, progress)",
    ),
    (
        ["--train-arg", "latent_grid=[8, 8.5]"],
        "'latent_grid' of the training configuration expects a list of ints, got [8, 8.5]",
    ),
    (
        ["--train-arg", "normalize_pos=no"],
        "'normalize_pos' of the training configuration expects true or false, got 'no' "
        "(default: true)",
    ),
    (
        ["--train-arg", "epoch=3"],
        "the training configuration has no option 'epoch'; did you mean 'epochs'? "
        "(options: epochs, batch_size, lr, optimizer, weight_decay, schedule, pct_start, "
        "div_factor, final_div_factor, clip, loss, h1_weight, normalize_x, normalize_y, "
        "normalize_params, normalize_pos, seed, eval_every, latent_points, latent_grid, "
        "latent_sampling, num_workers, device, metrics_format, progress, "
        "find_unused_parameters, compile, chunk_nodes, node_fraction, periodic_shift, "
        "latent_resample, split_mesh)",
    ),
    (
        ["--train-arg", "latent_sampling=2"],
        "'latent_sampling' of the training configuration expects a string, got 2 (default: 'fps')",
    ),
    (
        ["--train-arg", "pct_start=1.5"],
        "pct_start must be in (0, 1), got 1.5",  # the range, checked by TrainConfig
    ),
]


@pytest.mark.parametrize("options_, message", BAD_INPUTS, ids=[" ".join(o) for o, _ in BAD_INPUTS])
def test_a_bad_option_of_meshop_train_is_one_line_before_any_work(
    options_, message, folder, tmp_path, capsys
):
    assert train_error([*FOLDER_PIT, *options_], tmp_path, capsys, folder) == message


def test_a_toml_files_tables_are_checked_the_same_way(folder, tmp_path, capsys):
    config = tmp_path / "run.toml"
    config.write_text('[model]\nwidth = "wide"\n')
    assert train_error([*FOLDER_PIT, "--config", config], tmp_path, capsys, folder) == (
        "'width' of model 'pit' expects an int, got 'wide' (default: 64)"
    )


@pytest.mark.parametrize("model", sorted(MODELS))
def test_every_models_options_are_checked_by_name_and_type(model, folder, tmp_path, capsys):
    argv = ["--dataset", "folder", "--model", model, "--dataset-arg", 'targets="vm"']
    line = train_error([*argv, "--model-arg", "no_such_option=1"], tmp_path, capsys, folder)
    assert line.startswith(f"model '{model}' has no option 'no_such_option'")
    first = next(iter(options(model_class(model), FROM_DATA)))
    line = train_error([*argv, "--model-arg", f"{first}={{a = 1}}"], tmp_path, capsys, folder)
    assert line.startswith(f"'{first}' of model '{model}' expects ")
    assert ", got {a = 1}" in line


@pytest.mark.parametrize("dataset", sorted(DATASETS))
def test_every_datasets_options_are_checked_by_name_and_type(dataset, folder, tmp_path, capsys):
    argv = ["--dataset", dataset, "--model", "mlp"]
    line = train_error([*argv, "--dataset-arg", "no_such_option=1"], tmp_path, capsys, folder)
    assert line.startswith(f"dataset '{dataset}' has no option 'no_such_option'")
    typed = [n for n in options(dataset_class(dataset), {"split": SPLIT}) if n not in UNTYPED]
    line = train_error([*argv, "--dataset-arg", f"{typed[0]}={{a = 1}}"], tmp_path, capsys, folder)
    assert line.startswith(f"'{typed[0]}' of dataset '{dataset}' expects ")


def targets():
    """Every class whose options the command checks: each model, each dataset, TrainConfig."""
    yield from ((f"model '{n}'", model_class(n)) for n in MODELS)
    yield from ((f"dataset '{n}'", dataset_class(n)) for n in DATASETS)
    yield "the training configuration", TrainConfig


@pytest.mark.parametrize("owner, target", list(targets()), ids=lambda v: str(v))
def test_every_option_has_a_checked_type_that_its_default_has(owner, target):
    for name, parameter in options(target).items():
        types = expected_types(parameter)
        if name in UNTYPED:
            continue
        assert ("any",) not in types, f"{owner}: '{name}' has no type the checks understand"
        if parameter.default is not parameter.empty:
            check_arguments(target, {name: parameter.default}, owner)
        with pytest.raises(ConfigError, match=f"'{name}' of {owner} expects "):
            check_arguments(target, {name: {"a": 1}}, owner)


@pytest.mark.parametrize("dataset, model", sorted(PAIR_PRESETS))
def test_the_presets_pass_the_checks(dataset, model):
    chosen = preset(dataset, model)
    check_arguments(TrainConfig, chosen["train"], "the training configuration")
    check_arguments(model_class(model), chosen["model"], f"model '{model}'", FROM_DATA)
    check_arguments(dataset_class(dataset), chosen["dataset"], f"dataset '{dataset}'")


@pytest.mark.parametrize(
    "annotation, good, bad, words",
    [
        ("int", [3, -1], [True, 1.0, "3", None], "an int"),
        ("float | None", [1, 0.5], [False, "0.5", [1.0]], "a number"),
        ("bool", [True, False], [1, 0, "true"], "true or false"),
        ("str | os.PathLike | None", ["a"], [1, ["a"]], "a string"),
        ("Sequence[int]", [[], [1, 2], (3,)], [[1.5], 1, "12"], "a list of ints"),
        ("tuple[float, float]", [[1, 2.5]], [[1.0], [1, 2, 3], ["a", 1]], "a list of 2 numbers"),
        ("tuple[int, ...] | None", [[1, 2, 3]], [[1, "a"]], "a list of ints"),
        ("Optional[int]", [1, None], ["1"], "an int"),
        ("typing.Union[int, str]", [1, "a"], [1.5], "an int or a string"),
        ("tuple[int, str]", [[1, "a"]], [["a", 1]], "a list of 2 values (an int, a string)"),
        ("Tensor | None", [object(), None], [], "anything"),
    ],
)
def test_annotations_give_the_accepted_values_and_their_words(annotation, good, bad, words):
    types = parse_annotation(annotation)
    assert describe(types) == words
    assert all(accepts(types, value) for value in good)
    assert not any(accepts(types, value) for value in bad)


def test_unannotated_parameters_take_the_type_of_their_default():
    def target(count=3, flags=(1, 2), anything=None, name="x"):
        pass

    found = {name: describe(expected_types(p)) for name, p in options(target).items()}
    assert found == {
        "count": "an int",
        "flags": "a list of values",
        "anything": "anything",
        "name": "a string",
    }


def test_a_target_with_var_keywords_takes_any_name_but_checks_its_own():
    def target(width: int = 2, **more):
        pass

    check_arguments(target, {"anything": 1}, "model 'x'")
    with pytest.raises(ConfigError, match="'width' of model 'x' expects an int, got 'a'"):
        check_arguments(target, {"width": "a"}, "model 'x'")

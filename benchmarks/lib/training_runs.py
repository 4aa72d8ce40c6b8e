"""One (dataset, model) training run as the accuracy table (``accuracy/model_table.py``) and the
preset trials (``accuracy/tune.py``, ``accuracy/burgers_features.py``) set it up: the table's split
sizes and dataset options, settings over the presets, the run's configuration, the models'
titles."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from meshop.models.registry import MODELS, model_class
from meshop.train.config import RunConfig
from meshop.train.run import build_trainer, plan_run

#: split sizes and dataset options, the same for every model of a dataset
DATASETS = {
    "elasticity": dict(num_train=200, num_test=50),
    "airfoil": dict(num_train=200, num_test=50, num_panels=100, num_layers=20),
    "darcy": dict(num_train=200, num_test=50, resolution=22, fine_resolution=421),
    "burgers": dict(num_train=200, num_test=50, resolution=256),
    "darcy-mesh": dict(num_train=400, num_test=50),
}
QUICK = {
    "elasticity": dict(num_train=4, num_test=2, max_area=0.01),
    "airfoil": dict(num_train=4, num_test=2, num_panels=30, num_layers=6),
    "darcy": dict(num_train=4, num_test=2, resolution=6, fine_resolution=41),
    "burgers": dict(num_train=4, num_test=2, resolution=32, fine_resolution=1024),
    "darcy-mesh": dict(num_train=4, num_test=2, max_area=0.01),
}
#: the models' titles, as the tables name them
NAMES = {name: model_class(name).title for name in MODELS}


def parse_settings(pairs: list[str]) -> dict[str, dict]:
    """``["train.lr=3e-3", "model.width=32"]`` -> ``{"train": {"lr": 0.003}, ...}``: the values
    read as JSON where they parse (numbers, lists, true/false), else as text."""
    out: dict[str, dict] = {"train": {}, "model": {}, "dataset": {}}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        part, dot, name = key.partition(".")
        if not sep or not dot or part not in out or not name:
            raise SystemExit(
                f"--set {pair!r}: write PART.KEY=VALUE with PART one of train, model, dataset "
                "(e.g. --set train.batch_size=4)"
            )
        try:
            out[part][name] = json.loads(value)
        except json.JSONDecodeError:
            out[part][name] = value
    return out


def dataset_options(dataset: str, args) -> dict:
    """The table's split sizes and options of ``dataset`` (``--quick``: tiny ones), with the
    split sizes that ``args.samples`` (``model_table --samples``) gives it instead."""
    options = dict((QUICK if args.quick else DATASETS)[dataset])
    options.update(getattr(args, "samples", {}).get(dataset, {}))
    return options


def parse_samples(text: str) -> dict[str, dict[str, int]]:
    """``"elasticity=1000/50,airfoil=400"`` -> ``{"elasticity": {"num_train": 1000, "num_test":
    50}, "airfoil": {"num_train": 400}}`` (a dataset's test samples left out keep the table's)."""
    out: dict[str, dict[str, int]] = {}
    for item in (part for part in text.split(",") if part):
        dataset, sep, sizes = item.partition("=")
        train, slash, test = sizes.partition("/")
        try:
            counts = [int(train)] + ([int(test)] if slash else [])
        except ValueError:
            counts = []
        if not sep or dataset not in DATASETS or not counts or min(counts) < 1:
            raise ValueError(
                f"--samples {item!r}: write DATASET=TRAIN or DATASET=TRAIN/TEST with positive "
                f"sample counts and DATASET one of {', '.join(DATASETS)} (e.g. elasticity=1000)"
            )
        out[dataset] = dict(zip(("num_train", "num_test"), counts, strict=False))
    return out


def run_config(
    dataset: str, model: str, epochs: int, out: Path, args, settings=None, train_seed=None
):
    """The run of one pair, ``settings`` (:func:`parse_settings`) over the presets and the table's
    splits, trained with ``train_seed`` where it differs from the data's ``args.seed``."""
    settings, seed = settings or {}, args.seed if train_seed is None else train_seed
    train = dict(settings.get("train", {}), epochs=epochs, seed=seed, progress=False, device="cpu")
    data = dict(dataset_options(dataset, args), **settings.get("dataset", {}))
    data.update(seed=args.seed, progress=False)
    run = dict(dataset=dataset, model=model, out=str(out), data_dir=args.data_dir, train=train)
    return RunConfig(**run, model_args=settings.get("model", {}), dataset_args=data)


def run_trainer(run, out_dir, test: bool = True):
    """The Trainer that ``meshop train`` makes for ``run`` into ``out_dir`` (the test split only
    with ``test``) and the seconds of loading and preparing the data (``load_s``, ``prepare_s``)."""
    plan = plan_run(dataclasses.replace(run, out=str(out_dir)))
    return build_trainer(plan, test=test, log=lambda *_: None)

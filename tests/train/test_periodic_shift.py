"""Random periodic shifts of the training samples (TrainConfig.periodic_shift,
meshop.train.augment, meshop.data.grid.roll_grid): exact on periodic grids, seeded, never applied
to the test split, refused on meshes, and through `meshop train`."""

import json

import pytest
import torch

from meshop.cli import main
from meshop.data import uniform_grid, write_mesh
from meshop.data.grid import roll_grid
from meshop.datasets.burgers import Burgers, periodic_derivative, periodic_modes
from meshop.errors import ConfigError
from meshop.models import MLPBaseline
from meshop.train import TrainConfig, Trainer, seed_everything
from meshop.train.augment import PeriodicShifts, coordinate_channels
from meshop.train.checkpoint import load
from meshop.train.data import prepare_data
from tests.helpers import predict_case, quiet, toy_samples

KERNEL_1D = torch.tensor([0.5, -1.0, 0.25, 0.0, 2.0])  # not symmetric: a shift's sign matters
KERNEL_2D = torch.tensor([[1.0, -0.5, 0.0], [0.25, 2.0, 0.0]])


def circular_convolution(x: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
    """``y[i] = sum_j kernel[j] x[i - j]`` on a periodic grid of any dimension (``x`` on the
    grid, ``[*shape]``): an operator that commutes with every translation of the grid."""
    out = torch.zeros_like(x)
    for offset in torch.cartesian_prod(*(torch.arange(n) for n in kernel.shape)).view(
        -1, kernel.dim()
    ):
        j = tuple(int(k) for k in offset)
        out = out + kernel[j] * torch.roll(x, j, tuple(range(kernel.dim())))
    return out


def periodic_sample(shape, seed: int, kernel: torch.Tensor = KERNEL_1D):
    """A sample on the periodic grid ``j / n`` per axis: ``x`` random, ``y`` its circular
    convolution with ``kernel``."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g)
    y = circular_convolution(x, kernel)
    bounds = [(0.0, 1.0 - 1.0 / n) for n in shape]
    return uniform_grid(shape, x=x.reshape(-1, 1), y=y.reshape(-1, 1), bounds=bounds)


def on_grid(data, values: torch.Tensor) -> torch.Tensor:
    return values.reshape(*data.grid_shape)


def test_rolling_by_k_then_by_n_minus_k_gives_the_sample_back():
    for shape, kernel in (((16,), KERNEL_1D), ((4, 6), KERNEL_2D)):
        data = periodic_sample(shape, 0, kernel)
        there = tuple(k % n for k, n in zip((5, 3), shape))
        back = tuple(n - k for k, n in zip(there, shape))
        rolled = roll_grid(data, there)
        assert not torch.equal(rolled.x, data.x)  # it moved
        dims = tuple(range(len(shape)))
        expected = torch.roll(on_grid(data, data.x), there, dims).reshape(-1, 1)
        assert torch.equal(rolled.x, expected)  # node i's value is now at node i + k
        assert torch.equal(rolled.pos, data.pos) and torch.equal(rolled.weight, data.weight)
        again = roll_grid(rolled, back)
        assert torch.equal(again.x, data.x) and torch.equal(again.y, data.y)
        assert torch.equal(data.x, periodic_sample(shape, 0, kernel).x)  # the original is kept


def test_a_shifted_sample_is_a_sample_of_the_translation_invariant_operator():
    for shape, kernel in (((16,), KERNEL_1D), ((4, 6), KERNEL_2D)):
        samples = [periodic_sample(shape, seed, kernel) for seed in range(4)]
        view = PeriodicShifts(samples, seed=3)
        moved = 0
        for epoch in range(3):
            view.set_epoch(epoch)
            for i, original in enumerate(samples):
                shifted = view[i]
                y = circular_convolution(on_grid(shifted, shifted.x[:, 0]), kernel)
                assert torch.allclose(shifted.y[:, 0], y.reshape(-1), atol=1e-5)
                assert torch.equal(shifted.pos, original.pos)
                moved += not torch.equal(shifted.x, original.x)
        assert moved >= 10  # of 12 (a shift by 0 nodes is drawn now and then)


def test_the_shifts_follow_the_seed_the_epoch_and_the_sample():
    samples = [periodic_sample((64,), seed) for seed in range(3)]

    def drawn(seed, epoch):
        view = PeriodicShifts(samples, seed=seed)
        view.set_epoch(epoch)
        return [view.shifts(i, (64,)) for i in range(3)]

    assert drawn(0, 1) == drawn(0, 1)
    assert drawn(0, 1) != drawn(0, 2) and drawn(0, 1) != drawn(1, 1)
    assert len(set(drawn(0, 1))) == 3  # each sample its own shift


def test_coordinate_inputs_stay_in_place_and_derived_fields_move_with_u0(tmp_path):
    burgers = dict(num_train=2, num_test=1, resolution=32, fine_resolution=64, progress=False)
    train = Burgers(tmp_path, gradient=True, coordinate_modes=2, **burgers)
    data = prepare_data(train, None, TrainConfig(normalize_pos=False))
    assert data.meta["coordinate_inputs"] == ["cos1", "sin1", "cos2", "sin2"]
    keep = coordinate_channels(data.meta)
    assert keep == (2, 3, 4, 5)
    view = PeriodicShifts(data.train_set, seed=0, keep_x=keep)
    for index in range(len(view)):
        original, shifted = data.train_set[index], view[index]
        (k,) = view.shifts(index, (32,))
        assert k != 0  # this seed's draws: the test would pass without any shift otherwise
        assert torch.equal(shifted.x[:, :2], torch.roll(original.x[:, :2], k, 0))
        assert torch.equal(shifted.y, torch.roll(original.y, k, 0))
        assert torch.allclose(shifted.x[:, 1:2], periodic_derivative(shifted.x[:, :1]), atol=1e-5)
        assert torch.equal(shifted.x[:, 2:], periodic_modes(shifted.pos, 2))


class Recording(MLPBaseline):
    """The MLP baseline that records the inputs of every batch it sees, and whether training."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen: list[tuple[bool, torch.Tensor]] = []

    def forward(self, data):
        self.seen.append((self.training, data.x.detach().clone()))
        return super().forward(data)


def recorded_run(shift: bool, seed: int = 0, epochs: int = 2, batch_size: int = 2):
    """A run on six periodic samples (normalised x off: the model sees the raw inputs); returns
    the inputs the model saw in training and in evaluation, and the test samples."""
    train, test = [periodic_sample((16,), s) for s in range(6)], [periodic_sample((16,), 9)]
    config = quiet(epochs=epochs, batch_size=batch_size, normalize_x=False)
    config = config.replace(periodic_shift=shift, seed=seed)
    seed_everything(seed)
    model = Recording(in_channels=2, out_channels=1, pos_dim=1, width=8, layers=2)
    trainer = Trainer(model, prepare_data(train, test, config))
    trainer.fit()
    seen = trainer.model.model.seen
    trained = [x for training, x in seen if training]
    return trained, [x for training, x in seen if not training], test


def test_equal_seeds_shift_alike_and_the_test_split_is_never_shifted():
    first, evaluated, test = recorded_run(shift=True)
    again, _, _ = recorded_run(shift=True)
    plain, plain_evaluated, _ = recorded_run(shift=False)
    other, _, _ = recorded_run(shift=True, seed=1)
    assert len(first) == 6  # 3 batches a epoch, 2 epochs
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    # the same order of samples (the same seed), other values: the shifts
    assert not any(torch.equal(a, b) for a, b in zip(first, plain, strict=True))
    for a, b in zip(first, plain, strict=True):  # a shift moves values, it changes none
        assert torch.equal(a.flatten().sort().values, b.flatten().sort().values)
    assert not all(torch.equal(a, b) for a, b in zip(first, other, strict=True))
    # evaluated after each epoch: the test sample as it is, with and without shifts
    assert len(evaluated) == 2
    assert all(torch.equal(x, test[0].x) for x in [*evaluated, *plain_evaluated])


def test_every_epoch_shifts_anew():
    def samples_seen(shift):  # one batch an epoch: the set of the six samples' inputs
        batches, _, _ = recorded_run(shift=shift, epochs=3, batch_size=6)
        return [{tuple(x.tolist()) for x in batch.view(6, 16)} for batch in batches]

    plain = samples_seen(False)
    assert plain[0] == plain[1] == plain[2]  # the same samples, in other orders
    shifted = samples_seen(True)
    assert shifted[0] != shifted[1] and shifted[1] != shifted[2] and shifted[0] != shifted[2]


def test_the_option_is_refused_on_meshes_before_any_epoch():
    config = quiet(periodic_shift=True)
    Trainer(MLPBaseline(4, 1, 2, width=8), prepare_data(toy_samples(4), config=quiet()))
    with pytest.raises(
        ConfigError,
        match=r"^periodic_shift rolls the fields of samples on uniform grids, but training "
        r"sample 0 is a mesh without grid_shape: train with periodic_shift = false, or give "
        r"samples on a periodic uniform grid \(meshop.data.uniform_grid\)$",
    ):
        Trainer(MLPBaseline(4, 1, 2, width=8), prepare_data(toy_samples(4), config=config))
    mesh = periodic_sample((16,), 2)
    del mesh.grid_shape  # the same nodes, as a mesh
    mixed = [periodic_sample((16,), 0), periodic_sample((16,), 1), mesh]
    Trainer(MLPBaseline(2, 1, 1, width=8), prepare_data(mixed, config=quiet()))
    with pytest.raises(ConfigError, match="training sample 2 is a mesh without grid_shape"):
        Trainer(MLPBaseline(2, 1, 1, width=8), prepare_data(mixed, config=config))
    with pytest.raises(ConfigError, match="training sample 2 is a mesh without grid_shape"):
        PeriodicShifts(mixed)[2]  # a lazy dataset's later samples, as they are read
    with pytest.raises(ConfigError, match="periodic_shift must be true or false"):
        TrainConfig(periodic_shift="yes")
    with pytest.raises(ConfigError, match="whose nodes node_fraction cannot subsample"):
        TrainConfig(periodic_shift=True, node_fraction=0.5)  # node subsets are for meshes
    TrainConfig(periodic_shift=True, node_fraction=1.0)


def test_meshop_train_refuses_it_on_a_folder_of_meshes(tmp_path, capsys):
    folder = tmp_path / "meshes"
    folder.mkdir()
    for k in range(3):
        data, a, u = predict_case(5, 1 + k)
        write_mesh(folder / f"case_{k}.vtu", data, {"a": a, "u": u})
    run = tmp_path / "run"
    argv = ["train", "--dataset", "folder", "--data-dir", folder, "--model", "mlp"]
    argv += ["--dataset-arg", 'inputs=["a"]', "--dataset-arg", 'targets=["u"]', "--epochs", 1]
    argv += ["--train-arg", "periodic_shift=true", "--out", run, "--no-progress", "--no-figures"]
    assert main([str(a) for a in argv]) == 2
    error = capsys.readouterr().err
    assert error.startswith("meshop: error: periodic_shift rolls the fields of samples on uniform")
    assert "training sample 0 is a mesh without grid_shape" in error
    assert not (run / "metrics.jsonl").exists() and not (run / "checkpoint.pt").exists()


def test_meshop_train_trains_burgers_with_periodic_shifts(tmp_path, capsys):
    def train(out, *options):
        argv = ["train", "--dataset", "burgers", "--model", "ono", "--data-dir", tmp_path / "data"]
        argv += ["--dataset-arg", "resolution=32", "--dataset-arg", "fine_resolution=64"]
        argv += ["--num-train", 4, "--num-test", 2, "--epochs", 2, "--batch-size", 2]
        for arg in ("width=8", "layers=1", "k=2", "heads=1"):
            argv += ["--model-arg", arg]
        argv += ["--out", tmp_path / out, "--no-progress", "--no-figures", *options]
        assert main([str(a) for a in argv]) == 0
        lines = (tmp_path / out / "metrics.jsonl").read_text().splitlines()
        return [json.loads(line) for line in lines]

    shifted = train("shifted", "--train-arg", "periodic_shift=true")
    assert "epochs 2, batch 2, seed 0, random periodic shifts" in capsys.readouterr().out
    plain = train("plain", "--train-arg", "periodic_shift=false")  # ONO's preset shifts
    assert "random periodic shifts" not in capsys.readouterr().out
    assert len(shifted) == 2 and all(row["test_rel_l2"] > 0 for row in shifted)
    assert shifted[0]["train_loss"] != plain[0]["train_loss"]  # other samples seen in training
    assert json.loads((tmp_path / "shifted" / "run.json").read_text())["train"]["periodic_shift"]
    ckpt = load(tmp_path / "shifted" / "checkpoint.pt")
    assert ckpt["train_config"]["periodic_shift"] is True
    modes = [f"{t}{k}" for k in range(1, 9) for t in ("cos", "sin")]  # the preset's 8 modes
    assert ckpt["data"]["coordinate_inputs"] == modes

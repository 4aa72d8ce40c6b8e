"""Losses and metrics on inputs with known answers: the relative Lp errors for every p, per sample
in batches of samples of different sizes, the relative H1 seminorm, and the training loss (rel_l1,
h1_weight) as the sum of its terms."""

import math

import numpy as np
import pytest
import torch

from meshop.data import from_points, make_loader, uniform_grid
from meshop.errors import ConfigError
from meshop.models.mlp_baseline import MLPBaseline
from meshop.train import TrainConfig, Trainer, prepare_data, relative_h1
from meshop.train.losses import relative_l1, relative_l2, relative_lp
from meshop.train.metrics import MetricsLog, per_sample_errors, read_metrics, summarize
from meshop.train.trainer import training_loss

# two samples in one batch: 2 nodes, then 3 nodes; one channel
PRED = torch.tensor([[1.0], [2.0], [0.0], [1.0], [5.0]])
TARGET = torch.tensor([[3.0], [4.0], [1.0], [1.0], [2.0]])
BATCH = torch.tensor([0, 0, 1, 1, 1])
# by hand: sample 0 has errors (-2, -2) on targets (3, 4), sample 1 (-1, 0, 3) on (1, 1, 2)
KNOWN = {
    1: [4 / 7, 4 / 4],
    2: [math.sqrt(8) / 5, math.sqrt(10) / math.sqrt(6)],
    3: [(16 / 91) ** (1 / 3), (28 / 10) ** (1 / 3)],
}


@pytest.mark.parametrize("p", [1, 2, 3])
def test_relative_lp_of_each_sample_is_the_ratio_of_its_own_p_norms(p):
    per_sample = relative_lp(PRED, TARGET, BATCH, p, reduction="none")
    assert per_sample.tolist() == pytest.approx(KNOWN[p], rel=1e-6)
    assert float(relative_lp(PRED, TARGET, BATCH, p)) == pytest.approx(np.mean(KNOWN[p]), rel=1e-6)
    assert float(relative_lp(PRED, TARGET, BATCH, p, reduction="sum")) == pytest.approx(
        sum(KNOWN[p]), rel=1e-6
    )


def test_relative_l1_and_l2_are_the_p1_and_p2_errors_per_sample():
    assert float(relative_l1(PRED, TARGET, BATCH)) == pytest.approx(np.mean(KNOWN[1]), rel=1e-6)
    assert float(relative_l2(PRED, TARGET, BATCH)) == pytest.approx(np.mean(KNOWN[2]), rel=1e-6)
    assert relative_l2(PRED, TARGET, BATCH, reduction="none").tolist() == pytest.approx(
        KNOWN[2], rel=1e-6
    )


def test_relative_lp_sums_over_channels_and_treats_no_batch_as_one_sample():
    pred = torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.0, 1.0]])
    target = torch.tensor([[0.0, 2.0], [0.0, 1.0], [0.0, 1.0]])  # error (1, -2, 0, -1, 0, 0)
    assert float(relative_l2(pred, target)) == pytest.approx(math.sqrt(6 / 6), rel=1e-6)
    assert float(relative_l1(pred, target)) == pytest.approx(4 / 4, rel=1e-6)
    assert relative_lp(pred, target, reduction="none").shape == (1,)


def test_relative_lp_defaults_to_the_mean_relative_l2():
    assert float(relative_lp(PRED, TARGET, BATCH)) == pytest.approx(np.mean(KNOWN[2]), rel=1e-6)
    for function, p in ((relative_l1, 1), (relative_l2, 2)):
        per_sample = function(PRED, TARGET, BATCH, reduction="none")
        assert per_sample.tolist() == pytest.approx(KNOWN[p], rel=1e-6)


def test_num_samples_counts_samples_without_nodes_at_the_end_of_a_batch():
    for function, p in ((relative_l1, 1), (relative_l2, 2)):
        per_sample = function(PRED, TARGET, BATCH, num_samples=3, reduction="none")
        assert per_sample.tolist() == pytest.approx([*KNOWN[p], 0.0], rel=1e-6)
    per_sample = relative_lp(PRED, TARGET, BATCH, 3, num_samples=4, reduction="none")
    assert per_sample.tolist() == pytest.approx([*KNOWN[3], 0.0, 0.0], rel=1e-6)


def test_the_relative_error_of_a_zero_target_is_large_and_positive():
    error = float(relative_l2(torch.ones(3, 1), torch.zeros(3, 1)))
    assert error > 1e6


def test_an_unknown_reduction_is_refused():
    with pytest.raises(ConfigError, match="reduction"):
        relative_lp(PRED, TARGET, BATCH, reduction="average")


def test_per_sample_errors_are_relative_l2_in_dataset_order_and_summarised():
    class Shifted(torch.nn.Module):  # predicts y + 1 at every node
        def forward(self, data):
            return data.y + 1.0

    a = from_points(torch.rand(2, 2), y=torch.tensor([[3.0], [4.0]]))
    b = from_points(torch.rand(3, 2), y=torch.tensor([[1.0], [-1.0], [1.0]]))
    errors = per_sample_errors(Shifted(), [a, b, a], batch_size=2)
    expected = [math.sqrt(2) / 5, 1.0, math.sqrt(2) / 5]
    assert errors.tolist() == pytest.approx(expected, rel=1e-6)
    assert summarize(errors) == pytest.approx(
        {"test_rel_l2": np.mean(expected), "test_rel_l2_median": math.sqrt(2) / 5}
    )


def triangulated_square(n: int = 5):
    """The unit square, (n - 1)^2 squares cut into two triangles each."""
    grid = uniform_grid((n, n))
    i, j = torch.meshgrid(torch.arange(n - 1), torch.arange(n - 1), indexing="ij")
    corner = (i * n + j).flatten()
    mesh = from_points(grid.pos)
    mesh.face = torch.cat(
        [
            torch.stack([corner, corner + n, corner + n + 1]),
            torch.stack([corner, corner + n + 1, corner + 1]),
        ],
        dim=1,
    )
    return mesh


def test_relative_h1_of_a_batch_of_triangle_meshes_averages_each_samples_ratio():
    first, second = triangulated_square(5), triangulated_square(4)
    x, y = first.pos[:, :1], first.pos[:, 1:]
    first.y, first.guess = 2 * x + 3 * y, 3 * x + 3 * y  # |grad e|^2 / |grad t|^2 = 1 / 13
    second.y, second.guess = second.pos[:, :1], 3 * second.pos[:, :1]  # error 2x on target x: 4
    batch = next(iter(make_loader([first, second], 2)))
    expected = (math.sqrt(1 / 13) + 2.0) / 2
    assert float(relative_h1(batch.guess, batch.y, batch)) == pytest.approx(expected, rel=1e-5)


def grid_samples():
    """Two 9 x 7 grids with linear targets: errors x and 2y, so every term is known by hand."""
    samples = []
    for shift in (1.0, 2.0):
        grid = uniform_grid((9, 7))
        x, y = grid.pos[:, :1], grid.pos[:, 1:]
        grid.y = 2 * x + 3 * y + shift
        samples.append(grid)
    batch = next(iter(make_loader(samples, 2)))
    x, y, first = batch.pos[:, :1], batch.pos[:, 1:], batch.batch[:, None] == 0
    pred = batch.y + torch.where(first, x, 2 * y)
    return batch, pred


def hand_rel_lp(batch, pred, p):
    out = []
    for s in range(2):
        e = (pred - batch.y)[batch.batch == s].numpy().ravel()
        t = batch.y[batch.batch == s].numpy().ravel()
        out.append((np.abs(e) ** p).sum() ** (1 / p) / (np.abs(t) ** p).sum() ** (1 / p))
    return float(np.mean(out))


def test_training_loss_is_the_relative_l2_or_l1_of_the_predictions():
    batch, pred = grid_samples()
    l2 = training_loss(pred, batch, TrainConfig())
    l1 = training_loss(pred, batch, TrainConfig(loss="rel_l1"))
    assert float(l2) == pytest.approx(hand_rel_lp(batch, pred, 2), rel=1e-5)
    assert float(l1) == pytest.approx(hand_rel_lp(batch, pred, 1), rel=1e-5)
    assert float(l1) != pytest.approx(float(l2), rel=1e-2)


def test_training_loss_with_h1_weight_adds_the_weighted_h1_seminorm():
    batch, pred = grid_samples()
    # |grad x|^2 / |grad(2x + 3y)|^2 = 1 / 13, |grad 2y|^2 / 13 = 4 / 13: exact for linear fields
    h1 = (math.sqrt(1 / 13) + math.sqrt(4 / 13)) / 2
    for loss, p in (("rel_l2", 2), ("rel_l1", 1)):
        config = TrainConfig(loss=loss, h1_weight=0.5)
        expected = hand_rel_lp(batch, pred, p) + 0.5 * h1
        assert float(training_loss(pred, batch, config)) == pytest.approx(expected, rel=1e-5)


def test_a_training_step_optimises_the_loss_with_its_h1_term():
    samples = []
    for k in range(4):
        grid = uniform_grid((6, 5))
        grid.x = torch.sin((1 + k) * grid.pos[:, :1])
        grid.y = grid.x * grid.pos[:, 1:] + grid.pos[:, :1]
        samples.append(grid)
    torch.manual_seed(0)
    model = MLPBaseline(3, 1, 2, width=8, layers=2)
    config = TrainConfig(batch_size=4, h1_weight=0.5, progress=False)
    trainer = Trainer(model, prepare_data(samples, config=config))
    batch = next(iter(trainer.loader))
    with torch.no_grad():
        pred = trainer.model(batch)
    expected = float(
        relative_l2(pred, batch.y, batch.batch) + 0.5 * relative_h1(pred, batch.y, batch)
    )
    assert float(relative_h1(pred, batch.y, batch)) > 0.1  # the H1 term is not negligible
    assert trainer.step(batch) == pytest.approx(expected, rel=1e-5)


def test_relative_h1_on_grids_of_several_channels_off_the_origin():
    first = uniform_grid((9, 7), bounds=[(1.0, 2.0), (0.0, 3.0)])
    second = uniform_grid((9, 7), bounds=[(0.0, 1.0), (2.0, 2.5)])
    for grid in (first, second):
        x, y = grid.pos[:, :1], grid.pos[:, 1:]
        grid.y = torch.cat([2 * x + 3 * y, x - y], dim=1)  # |grad t|^2 = 13 + 2
    first.guess = first.y + torch.cat([first.pos[:, :1], 2 * first.pos[:, 1:]], dim=1)  # 1 + 4
    second.guess = second.y + torch.cat([second.pos[:, 1:], 0 * second.pos[:, 1:]], dim=1)  # 1
    batch = next(iter(make_loader([first, second], 2)))
    expected = (math.sqrt(5 / 15) + math.sqrt(1 / 15)) / 2
    assert float(relative_h1(batch.guess, batch.y, batch)) == pytest.approx(expected, rel=1e-5)


def test_relative_h1_on_a_grid_integrates_with_the_quadrature_weights():
    grid = uniform_grid((11,), bounds=[(0.0, 1.0)])
    x = grid.pos[:, 0].double()
    grid.weight = x.clone()
    grid.weight[-1] = 0.0  # the one-sided end differences get no weight
    target, error = x**2, x  # central differences are exact inside: t' = 2x, e' = 1
    inside = slice(1, -1)
    expected = math.sqrt(float(x[inside].sum() / (4 * x[inside] ** 3).sum()))
    value = relative_h1((target + error)[:, None], target[:, None], grid)
    assert float(value) == pytest.approx(expected, rel=1e-6)


def test_relative_h1_on_triangles_weighs_each_gradient_with_its_area():
    # triangle A of area 0.5, triangle B of area 2; target x (gradient (1, 0) on both), error y on
    # B only: |e|^2 = 2 * 1, |t|^2 = (0.5 + 2) * 1
    pos = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [3.0, 0.0], [1.0, 2.0]])
    mesh = from_points(pos)
    mesh.face = torch.tensor([[0, 1, 2], [1, 3, 4]]).T
    target = pos[:, :1]
    error = torch.tensor([[0.0], [0.0], [0.0], [0.0], [2.0]])
    value = relative_h1(target + error, target, mesh)
    assert float(value) == pytest.approx(math.sqrt(2 / 2.5), rel=1e-6)


def test_relative_h1_refuses_query_points_and_says_when_to_drop_it():
    grid = uniform_grid((5, 5))
    grid.y = grid.pos[:, :1]
    grid.query_pos = grid.pos[:3]
    with pytest.raises(ConfigError, match="the H1 penalty needs predictions at the mesh nodes"):
        relative_h1(grid.y[:3], grid.y[:3], grid)
    cloud = from_points(torch.rand(6, 2), y=torch.rand(6, 1))
    with pytest.raises(ConfigError, match="set h1_weight = 0 for point clouds"):
        relative_h1(cloud.y, cloud.y, cloud)


def test_metrics_log_defaults_to_json_lines_in_a_folder_it_creates(tmp_path):
    history = [{"epoch": 1, "loss": 0.5}, {"epoch": 2, "loss": 0.25, "val_rel_l2": 0.1}]
    log = MetricsLog(tmp_path / "runs" / "a")  # neither folder exists yet
    log.rewrite(history)
    assert log.path == tmp_path / "runs" / "a" / "metrics.jsonl"
    assert read_metrics(log.path) == history


def test_metrics_csv_reads_a_column_missing_from_some_epochs_as_none(tmp_path):
    log = MetricsLog(tmp_path / "run", fmt="csv")
    log.rewrite([{"epoch": 1, "loss": 0.5}, {"epoch": 2, "loss": 0.25, "val_rel_l2": 0.1}])
    assert log.path.read_text().splitlines()[1] == "1,0.5,"
    assert read_metrics(log.path) == [
        {"epoch": 1.0, "loss": 0.5, "val_rel_l2": None},
        {"epoch": 2.0, "loss": 0.25, "val_rel_l2": 0.1},
    ]

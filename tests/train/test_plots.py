"""meshop.train.plots: what each figure draws (panels, values, colour limits, curves), read off
the matplotlib figure before it is closed."""

import numpy as np
import pytest
import torch
from matplotlib.collections import PathCollection, PolyCollection, TriMesh

from meshop._pyg import Data
from meshop.train import plots


@pytest.fixture
def figures(monkeypatch):
    """The figures the plotting functions make, kept open instead of closed."""
    kept, close = [], plots.plt.close
    monkeypatch.setattr(plots.plt, "close", kept.append)
    yield kept
    for fig in kept:
        close(fig)


def square(x=True, y=True, channels=2):
    pos = torch.tensor([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    data = Data(pos=pos, face=torch.tensor([[0, 1], [1, 2], [2, 3]]))
    if x:
        data.x = torch.tensor([[1.0, 9.0], [2.0, 9.0], [3.0, 9.0], [4.0, 9.0]])
    if y:
        data.y = torch.arange(4 * channels, dtype=torch.float32).reshape(4, channels)
    return data


def drawn(ax) -> np.ndarray:
    """The values a panel colours (tripcolor or scatter)."""
    (artist,) = [c for c in ax.collections if isinstance(c, (TriMesh, PolyCollection))]
    return np.asarray(artist.get_array())


def test_a_triangle_mesh_gets_input_target_prediction_and_error_panels(figures, tmp_path):
    data = square()
    pred = data.y + torch.tensor([[0.5, -1.0]])
    out = tmp_path / "sub" / "deeper" / "s.png"  # folders made with their parents
    path = plots.plot_sample(data, pred, out, channel=1, title="sample 7")
    assert path == out and path.stat().st_size > 0
    (fig,) = figures
    axes = [ax for ax in fig.axes if ax.get_title()]
    titles = [ax.get_title() for ax in axes]
    assert titles == ["input", "target", "prediction", "|prediction - target|"]
    assert fig._suptitle.get_text() == "sample 7"
    np.testing.assert_allclose(drawn(axes[0]), [1, 2, 3, 4])  # first input channel
    np.testing.assert_allclose(drawn(axes[1]), [1, 3, 5, 7])  # the chosen target channel
    np.testing.assert_allclose(drawn(axes[2]), [0, 2, 4, 6])
    np.testing.assert_allclose(drawn(axes[3]), [1, 1, 1, 1])
    # target and prediction share one colour scale: min and max over both
    for ax in axes[1:3]:
        (artist,) = [c for c in ax.collections if isinstance(c, (TriMesh, PolyCollection))]
        assert artist.get_clim() == (0.0, 7.0)
        assert isinstance(artist, TriMesh)  # triangles drawn with Gouraud shading
        np.testing.assert_array_equal(artist._triangulation.triangles, [[0, 1, 2], [1, 2, 3]])
        np.testing.assert_allclose(artist._triangulation.x, [0, 1, 1, 0])
        np.testing.assert_allclose(artist._triangulation.y, [0, 0, 1, 1])
        assert artist.get_cmap().name == "viridis"
    error_panel = next(c for c in axes[3].collections if isinstance(c, TriMesh))
    assert error_panel.get_cmap().name == "magma"
    assert len(fig.axes) == 8  # each panel has its colour bar


def test_panels_follow_the_fields_a_sample_has(figures, tmp_path):
    plots.plot_sample(square(x=False), square().y, tmp_path / "a.png")
    plots.plot_sample(square(y=False), square().y, tmp_path / "b.png")
    titles = [[ax.get_title() for ax in fig.axes if ax.get_title()] for fig in figures]
    assert titles[0] == ["target", "prediction", "|prediction - target|"]
    assert titles[1] == ["input", "prediction"]
    assert figures[0]._suptitle is None


def test_query_points_are_drawn_as_a_scatter_and_the_input_on_its_mesh(figures, tmp_path):
    data = square(y=False)
    data.query_pos = torch.tensor([[0.2, 0.3], [0.7, 0.1], [0.5, 0.5]])
    plots.plot_sample(data, torch.tensor([[1.0], [2.0], [3.0]]), tmp_path / "q.png")
    (fig,) = figures
    inputs, prediction = [ax for ax in fig.axes if ax.get_title()]
    assert isinstance(inputs.collections[0], TriMesh)
    (scatter,) = prediction.collections
    assert isinstance(scatter, PathCollection)
    np.testing.assert_allclose(scatter.get_offsets(), data.query_pos.numpy())
    np.testing.assert_allclose(scatter.get_array(), [1, 2, 3])


def test_a_point_cloud_is_a_scatter(figures, tmp_path):
    data = square()
    del data.face
    plots.plot_sample(data, data.y, tmp_path / "p.png")
    (fig,) = figures
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert all(isinstance(ax.collections[0], PathCollection) for ax in panels)
    assert [ax.collections[0].get_cmap().name for ax in panels] == ["viridis"] * 3 + ["magma"]
    np.testing.assert_allclose(panels[1].collections[0].get_offsets(), data.pos.numpy())


def test_one_dimensional_samples_are_lines_over_the_sorted_coordinate(figures, tmp_path):
    pos = torch.tensor([[0.5], [0.0], [1.0]])
    x, y = torch.tensor([[5.0], [4.0], [6.0]]), torch.tensor([[2.0], [1.0], [3.0]])
    data = Data(pos=pos, x=x, y=y)
    pred = torch.tensor([[2.5], [1.0], [2.0]])
    plots.plot_sample(data, pred, tmp_path / "line.png")
    (fig,) = figures
    values, error = fig.axes
    lines = {line.get_label(): line for line in values.get_lines()}
    assert list(lines) == ["input", "target", "prediction"]
    expected_values = {"input": [4, 5, 6], "target": [1, 2, 3], "prediction": [1, 2.5, 2]}
    for label, expected in expected_values.items():
        np.testing.assert_allclose(lines[label].get_xdata(), [0, 0.5, 1])
        np.testing.assert_allclose(lines[label].get_ydata(), expected)
    assert lines["prediction"].get_linestyle() == "--"
    (diff,) = error.get_lines()
    np.testing.assert_allclose(diff.get_xdata(), [0, 0.5, 1])  # over the coordinate too
    np.testing.assert_allclose(diff.get_ydata(), [0, 0.5, -1])
    assert error.get_title() == "prediction - target"


def test_loss_curve_draws_the_epochs_that_have_each_value(figures, tmp_path):
    history = [
        {"epoch": 1, "train_loss": 0.5, "test_rel_l2": None},
        {"epoch": 2, "train_loss": 0.25, "test_rel_l2": 0.3},
        {"epoch": 3, "train_loss": 0.125},
    ]
    path = plots.plot_loss_curve(history, tmp_path / "d" / "e" / "loss.png", title="pit")
    assert path.stat().st_size > 0
    (fig,) = figures
    (ax,) = fig.axes
    train, test = ax.get_lines()
    assert (train.get_label(), test.get_label()) == ("train loss", "test relative L2")
    np.testing.assert_allclose(train.get_xdata(), [1, 2, 3])
    np.testing.assert_allclose(train.get_ydata(), [0.5, 0.25, 0.125])
    np.testing.assert_allclose(test.get_xdata(), [2])
    assert train.get_marker() == "."
    assert ax.get_yscale() == "log" and ax.get_xlabel() == "epoch" and ax.get_title() == "pit"
    long = [{"epoch": i, "train_loss": 1.0 / i} for i in range(1, 51)]  # 50 rows: no markers
    plots.plot_loss_curve(long, tmp_path / "long.png")
    (line,) = figures[1].axes[0].get_lines()
    assert line.get_marker() in (None, "None", "")
    assert figures[1].axes[0].get_title() == ""


def test_predictions_may_be_tensors_with_gradients_or_numpy_arrays(figures, tmp_path):
    data = square()
    weight = torch.ones(1, requires_grad=True)
    plots.plot_sample(data, data.y * weight, tmp_path / "grad.png")  # a model's raw output
    plots.plot_sample(data, data.y.numpy() + 1.0, tmp_path / "array.png")
    values = [
        drawn(next(ax for ax in fig.axes if ax.get_title() == "prediction")) for fig in figures
    ]
    np.testing.assert_allclose(values[0], [0, 2, 4, 6])
    np.testing.assert_allclose(values[1], [1, 3, 5, 7])

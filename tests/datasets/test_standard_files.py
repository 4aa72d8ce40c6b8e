"""Standard-file loaders: tiny files in the published layouts load into meshop's Data form."""

import os

import h5py
import numpy as np
import pytest
import scipy.io
import torch

from meshop.data import make_loader
from meshop.datasets import FNOBurgers, FNODarcy, GeoFNOAirfoil, GeoFNOElasticity
from meshop.datasets.standard import read_mat, structured_quads
from meshop.errors import ConfigError, FieldError, MeshReadError


def write_mat(path, arrays, version):
    """A MATLAB file: v5 (scipy), or v7.3 = HDF5 with arrays in column-major order."""
    if version == "v5":
        scipy.io.savemat(path, arrays)
        return
    with h5py.File(path, "w") as f:
        for key, value in arrays.items():
            f[key] = np.asarray(value).transpose()


def test_geofno_elasticity_reads_the_published_layout(tmp_path, rng):
    n, s = 12, 5
    xy, sigma, rr = rng.random((n, 2, s)), rng.random((n, s)), rng.random((42, s))
    raw = tmp_path / "geofno_elasticity" / "raw"  # the default raw_dir under the data root
    raw.mkdir(parents=True)
    np.save(raw / "Random_UnitCell_XY_10.npy", xy)
    np.save(raw / "Random_UnitCell_sigma_10.npy", sigma)
    np.save(raw / "Random_UnitCell_rr_10.npy", rr)
    train = GeoFNOElasticity(tmp_path, num_train=3, num_test=1)
    test = GeoFNOElasticity(tmp_path, split="test", num_train=3, num_test=1)
    assert len(train) == 3 and len(test) == 1
    data = train[1]
    np.testing.assert_allclose(data.pos.numpy(), xy[:, :, 1], rtol=1e-6)
    np.testing.assert_allclose(data.y[:, 0].numpy(), sigma[:, 1], rtol=1e-6)
    torch.testing.assert_close(data.weight, torch.full((n,), 1.0 / n))
    np.testing.assert_allclose(test[0].y[:, 0].numpy(), sigma[:, -1], rtol=1e-6)  # test = the last
    # the same Data form as the generated Elasticity dataset: the cavity only through the points
    assert set(data.keys()) == {"pos", "y", "weight"}
    with_radii = GeoFNOElasticity(tmp_path, num_train=3, num_test=1, shape_params=True)
    torch.testing.assert_close(with_radii[1].pos, data.pos)
    np.testing.assert_allclose(with_radii[1].params[0].numpy(), rr[:, 1], rtol=1e-6)
    assert next(iter(make_loader(with_radii, batch_size=3))).params.shape == (3, 42)


def test_converted_files_are_cached_until_the_files_change(tmp_path, rng, monkeypatch):
    files = tmp_path / "published"
    files.mkdir()
    sigma = rng.random((6, 3))
    np.save(files / "Random_UnitCell_XY_10.npy", rng.random((6, 2, 3)))
    np.save(files / "Random_UnitCell_sigma_10.npy", sigma)
    np.save(files / "Random_UnitCell_rr_10.npy", rng.random((42, 3)))
    first = GeoFNOElasticity(tmp_path / "root", raw_dir=files, num_train=2, num_test=1)
    assert (
        len(list(files.iterdir())) == 3
    )  # the cache is in the data root: raw_dir may be read-only

    def no_reading(self):
        raise AssertionError("cached files must not be converted again")

    with monkeypatch.context() as m:
        m.setattr(GeoFNOElasticity, "read", no_reading)
        cached = GeoFNOElasticity(tmp_path / "root", raw_dir=files, num_train=2, num_test=1)
        torch.testing.assert_close(cached[1].y, first[1].y)
    np.save(files / "Random_UnitCell_sigma_10.npy", 2.0 * sigma)
    os.utime(files / "Random_UnitCell_sigma_10.npy", ns=(1, 1))
    changed = GeoFNOElasticity(tmp_path / "root", raw_dir=files, num_train=2, num_test=1)
    torch.testing.assert_close(changed[1].y, 2.0 * first[1].y)


def test_geofno_airfoil_reads_mach_on_the_curved_grid(tmp_path, rng):
    s, h, w = 4, 9, 5
    radius = np.linspace(1.0, 2.0, w)[None, :]
    angle = np.linspace(0.0, np.pi / 2, h)[:, None]
    x = np.broadcast_to(radius * np.cos(angle), (s, h, w)).copy()
    y = np.broadcast_to(radius * np.sin(angle), (s, h, w)).copy()
    q = rng.random((s, 5, h, w))
    for name, array in {"X": x, "Y": y, "Q": q}.items():
        np.save(tmp_path / f"NACA_Cylinder_{name}.npy", array)
    ds = GeoFNOAirfoil(tmp_path / "root", raw_dir=tmp_path, num_train=2, num_test=2)
    data = ds[1]
    assert data.pos.shape == (h * w, 2) and data.cell_index_quad.shape == (4, (h - 1) * (w - 1))
    np.testing.assert_allclose(data.y[:, 0].numpy(), q[1, 4].reshape(-1), rtol=1e-6)  # Mach
    np.testing.assert_allclose(data.pos[:, 0].numpy(), x[1].reshape(-1), rtol=1e-6)
    # lumped weights sum to the area of the polygonal quarter annulus
    chord = 0.5 * np.sin(np.pi / 2 / (h - 1)) * (h - 1)
    assert data.weight.sum().item() == pytest.approx(chord * (2.0**2 - 1.0**2), rel=1e-5)
    test = GeoFNOAirfoil(tmp_path / "root", "test", tmp_path, num_train=2, num_test=2, subsample=2)
    assert test[0].num_nodes == 5 * 3
    np.testing.assert_allclose(test[1].y[:, 0].numpy(), q[3, 4, ::2, ::2].reshape(-1), rtol=1e-6)


def test_geofno_airfoil_leaves_out_collapsed_grid_cells(tmp_path):
    # a wake cut or a closed trailing edge can make grid lines coincide: their cells have no area
    x, y = np.meshgrid(np.array([0.0, 1.0, 1.0, 2.0]), np.linspace(0.0, 1.0, 3), indexing="ij")
    np.save(tmp_path / "NACA_Cylinder_X.npy", np.stack([x, x]))
    np.save(tmp_path / "NACA_Cylinder_Y.npy", np.stack([y, y]))
    np.save(tmp_path / "NACA_Cylinder_Q.npy", np.ones((2, 5, 4, 3)))
    data = GeoFNOAirfoil(tmp_path / "root", raw_dir=tmp_path, num_train=1, num_test=1)[0]
    assert data.cell_index_quad.shape == (4, 4)  # 6 grid cells, 2 of them collapsed
    assert data.weight.sum().item() == pytest.approx(2.0)


def test_structured_quads_are_the_grid_cells():
    quads = structured_quads((3, 4))  # node (i, j) is i * 4 + j
    assert quads.shape == (6, 4) and set(np.unique(quads)) == set(range(12))
    assert quads[4].tolist() == [5, 9, 10, 6]  # cell (1, 1): (1,1) (2,1) (2,2) (1,2)


@pytest.mark.parametrize("version", ["v5", "v7.3"])
def test_fno_darcy_reads_both_mat_versions_onto_uniform_grids(tmp_path, rng, version):
    coeff = {k: np.where(rng.random((3, 9, 9)) > 0.5, 12.0, 3.0) for k in (1, 2)}
    sol = {k: rng.random((3, 9, 9)) for k in (1, 2)}
    for k in (1, 2):
        path = tmp_path / f"piececonst_r421_N1024_smooth{k}.mat"
        arrays = {"coeff": coeff[k], "sol": sol[k]}
        write_mat(path, arrays, version)
    train = FNODarcy(tmp_path / "root", raw_dir=tmp_path, num_train=3, num_test=2, subsample=2)
    test = FNODarcy(tmp_path / "root", "test", tmp_path, num_train=3, num_test=2, subsample=2)
    data = train[2]
    assert data.grid_shape == (5, 5) and len(test) == 2
    np.testing.assert_allclose(data.x.view(5, 5).numpy(), coeff[1][2, ::2, ::2], rtol=1e-6)
    np.testing.assert_allclose(test[1].y.view(5, 5).numpy(), sol[2][1, ::2, ::2], rtol=1e-6)
    # coeff[n, i, j] sits at (x_i, y_j)
    torch.testing.assert_close(data.pos.view(5, 5, 2)[3, 1], torch.tensor([0.75, 0.25]))
    assert data.weight.sum().item() == pytest.approx(1.0)


@pytest.mark.parametrize("version", ["v5", "v7.3"])
def test_fno_burgers_reads_the_periodic_grid(tmp_path, rng, version):
    a, u = rng.random((6, 32)), rng.random((6, 32))
    path = tmp_path / "burgers_data_R10.mat"
    write_mat(path, {"a": a, "u": u}, version)
    train = FNOBurgers(tmp_path / "root", raw_dir=tmp_path, num_train=4, num_test=2, subsample=4)
    test = FNOBurgers(tmp_path / "root", "test", tmp_path, num_train=4, num_test=2, subsample=4)
    data = train[0]
    assert data.grid_shape == (8,) and len(train) == 4
    np.testing.assert_allclose(data.x[:, 0].numpy(), a[0, ::4], rtol=1e-6)
    np.testing.assert_allclose(test[1].y[:, 0].numpy(), u[-1, ::4], rtol=1e-6)  # test = the last
    torch.testing.assert_close(data.pos[:, 0], torch.arange(8) / 8.0)
    torch.testing.assert_close(data.weight, torch.full((8,), 1.0 / 8))


def test_missing_files_say_which_files_to_put_where(tmp_path, monkeypatch):
    np.save(tmp_path / "Random_UnitCell_XY_10.npy", np.zeros((3, 2, 2)))
    with pytest.raises(MeshReadError) as info:
        GeoFNOElasticity(tmp_path / "root", raw_dir=tmp_path)
    message = str(info.value)
    assert "Random_UnitCell_sigma_10.npy" in message and "Random_UnitCell_rr_10.npy" in message
    assert "Random_UnitCell_XY_10.npy" not in message and str(tmp_path) in message
    assert "drive.google.com" in message
    monkeypatch.setenv("MESHOP_DATA", str(tmp_path / "data"))
    with pytest.raises(MeshReadError, match=r"burgers_data_R10\.mat.*data[/\\]fno_burgers[/\\]raw"):
        FNOBurgers()


def test_wrong_layouts_and_sizes_are_explained(tmp_path, rng):
    np.save(tmp_path / "Random_UnitCell_XY_10.npy", rng.random((5, 2, 4)))
    np.save(tmp_path / "Random_UnitCell_sigma_10.npy", rng.random((4, 5)))  # transposed
    np.save(tmp_path / "Random_UnitCell_rr_10.npy", rng.random((42, 4)))
    with pytest.raises(FieldError, match=r"expected \[N, 2, S\], \[N, S\] and \[42, S\]"):
        GeoFNOElasticity(tmp_path / "root", raw_dir=tmp_path, num_train=2, num_test=1)
    np.save(tmp_path / "Random_UnitCell_sigma_10.npy", rng.random((5, 4)))
    with pytest.raises(ConfigError, match="holds 4 samples"):
        GeoFNOElasticity(tmp_path / "root", raw_dir=tmp_path, num_train=4, num_test=1)
    scipy.io.savemat(tmp_path / "burgers_data_R10.mat", {"a": rng.random((3, 8))})
    with pytest.raises(FieldError, match=r"no variable\(s\) \['u'\]; it has \['a'\]"):
        read_mat(tmp_path / "burgers_data_R10.mat", ("a", "u"))

"""meshop.train.data: latent meshes given to samples, lazy views, the shapes and field names a
checkpoint stores, the errors of data that does not fit a trained model (known answers), and
prepare_data, which readies a run's data in one call."""

import pickle

import pytest
import torch
from torch.utils.data import Dataset as TorchDataset

from meshop._pyg import Data
from meshop.data import add_latent_mesh
from meshop.errors import ConfigError, FieldError, MeshError
from meshop.train.config import TrainConfig
from meshop.train.data import (
    LatentMesh,
    PreparedSamples,
    check_compatible,
    describe,
    field_layout_of,
    field_meta,
    is_lazy,
    prepare,
    prepare_data,
)
from meshop.train.normalized import fit_normalizers


def sample(n=30, x=1, y=2, params=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    data = Data(pos=torch.rand(n, 2, generator=g), y=torch.rand(n, y, generator=g))
    if x:
        data.x = torch.rand(n, x, generator=g)
    if params:
        data.params = torch.rand(1, params, generator=g)
    return data


class Lazy(TorchDataset):
    """A dataset that makes its samples when asked (as a folder reads files)."""

    def __init__(self, count=3):
        self.count, self.reads = count, []
        self.target_names = ["u", "v"]

    def __len__(self):
        return self.count

    def __getitem__(self, i):
        self.reads.append(i)
        return sample(seed=i)


def test_latent_mesh_without_sizes_returns_the_sample_itself():
    data = sample()
    assert LatentMesh()(data) is data
    assert not hasattr(LatentMesh(sampling="random")(data), "latent_pos")


def test_farthest_point_latent_mesh_is_a_seeded_copy_and_leaves_the_sample_alone():
    data = sample()
    out = LatentMesh(num_points=7, seed=3)(data)
    assert out is not data and not hasattr(data, "latent_pos")
    expected = add_latent_mesh(data.clone(), num_points=7, seed=3).latent_pos
    torch.testing.assert_close(out.latent_pos, expected, rtol=0, atol=0)
    torch.testing.assert_close(LatentMesh(num_points=7, seed=3)(data).latent_pos, expected)
    assert out.latent_pos.shape == (7, 2)


def test_a_latent_mesh_shares_the_sample_s_tensors_and_leaves_its_latent_weights_alone():
    # a shallow copy: a huge mesh is not held twice in memory while it is predicted
    data = sample()
    data.weight = torch.rand(len(data.pos))
    data.latent_pos, data.latent_weight = data.pos[:3].clone(), torch.ones(3)
    out = LatentMesh(num_points=5, seed=1)(data)
    assert out.pos is data.pos and out.x is data.x and out.weight is data.weight
    assert len(out.latent_pos) == 5 and len(out.latent_weight) == 5
    assert len(data.latent_pos) == 3 and torch.equal(data.latent_weight, torch.ones(3))


def test_random_latent_mesh_keeps_seeded_nodes_in_their_order():
    data = sample()
    out = LatentMesh(num_points=5, seed=1, sampling="random")(data)
    keep = torch.randperm(30, generator=torch.Generator().manual_seed(1))[:5].sort().values
    torch.testing.assert_close(out.latent_pos, data.pos[keep], rtol=0, atol=0)
    other = LatentMesh(num_points=5, seed=2, sampling="random")(data)
    assert not torch.equal(other.latent_pos, out.latent_pos)
    assert not hasattr(data, "latent_pos")
    # random sampling differs from farthest point sampling of the same size
    fps = LatentMesh(num_points=5, seed=1)(data)
    assert not torch.equal(fps.latent_pos, out.latent_pos)


def test_grid_latent_mesh_covers_the_bounding_box():
    data = sample()
    out = LatentMesh(grid_shape=(3, 4))(data)
    assert out.latent_pos.shape == (12, 2)
    torch.testing.assert_close(out.latent_pos.min(0).values, data.pos.min(0).values)
    torch.testing.assert_close(out.latent_pos.max(0).values, data.pos.max(0).values)
    # "random" applies to a number of points only: a grid stays a grid
    grid = LatentMesh(grid_shape=(3, 4), sampling="random")(data)
    torch.testing.assert_close(grid.latent_pos, out.latent_pos)


def test_prepare_gives_lists_their_latent_meshes_once_and_keeps_datasets_lazy():
    samples = [sample(seed=i) for i in range(3)]
    prepared = prepare(samples, LatentMesh(num_points=4))
    assert isinstance(prepared, list) and len(prepared) == 3
    assert all(p.latent_pos.shape == (4, 2) for p in prepared)
    assert prepare(samples) == samples  # no latent mesh: the samples themselves
    lazy = Lazy()
    assert is_lazy(lazy) and not is_lazy(samples)
    view = prepare(lazy, LatentMesh(num_points=4))
    assert isinstance(view, PreparedSamples) and lazy.reads == []


def test_prepared_samples_read_on_access_with_python_indexing():
    lazy = Lazy(count=3)
    view = PreparedSamples(lazy, LatentMesh(num_points=4))
    assert len(view) == 3
    torch.testing.assert_close(view[-1].pos, sample(seed=2).pos)
    assert view[0].latent_pos.shape == (4, 2)
    assert lazy.reads == [2, 0]
    with pytest.raises(IndexError, match="sample 3 of 3"):
        view[3]
    with pytest.raises(IndexError, match="sample -4 of 3"):
        view[-4]
    torch.testing.assert_close(view[-3].pos, sample(seed=0).pos)
    lazy.reads.clear()
    assert [d.pos.shape[0] for d in view] == [30, 30, 30]
    assert lazy.reads == [0, 1, 2]
    plain = PreparedSamples(lazy)
    assert plain[1].pos is not None and not hasattr(plain[1], "latent_pos")
    # the dataset's own attributes (field names) show through
    assert view.target_names == ["u", "v"]
    with pytest.raises(AttributeError):
        view.no_such_attribute
    # a copy (as DataLoader workers get) reads the same samples; before its attributes are set
    # back, looking one up is an AttributeError naming it, not an endless lookup
    copy = pickle.loads(pickle.dumps(PreparedSamples(Lazy(count=2), LatentMesh(num_points=4))))
    assert len(copy) == 2 and copy.target_names == ["u", "v"]
    bare = PreparedSamples.__new__(PreparedSamples)
    for name in ("dataset", "latent"):
        with pytest.raises(AttributeError, match=f"^{name}$"):
            getattr(bare, name)
    assert repr(view).startswith("PreparedSamples(") and "LatentMesh(num_points=4" in repr(view)


def test_describe_gives_the_widths_a_model_is_built_with():
    assert describe(sample(x=3, y=2, params=4)) == {
        "in_channels": 3 + 2 + 4,
        "out_channels": 2,
        "pos_dim": 2,
        "x_channels": 3,
        "params_channels": 4,
    }
    assert describe(sample(x=0, y=1)) == {
        "in_channels": 2,
        "out_channels": 1,
        "pos_dim": 2,
        "x_channels": 0,
        "params_channels": 0,
    }
    no_targets = sample()
    del no_targets.y
    match = "^the training samples have no targets y; .* --dataset-arg 'targets="
    with pytest.raises(FieldError, match=match):
        describe(no_targets)


def test_check_compatible_names_what_differs_from_training():
    expected = describe(sample(x=1, params=2))
    check_compatible(sample(x=1, params=2, n=12), expected)  # other sizes are fine
    data3d = Data(pos=torch.rand(5, 3), x=torch.rand(5, 1), params=torch.rand(1, 2))
    with pytest.raises(MeshError, match="^the data is 3D but the model was trained on 2D domains$"):
        check_compatible(data3d, expected)
    message = (
        "^the query has 2 input field channels but the model was trained with 1; "
        r"give the same fields \(and parameters\) as in training$"
    )
    with pytest.raises(FieldError, match=message):
        check_compatible(sample(x=2, params=2), expected, what="the query")
    with pytest.raises(FieldError, match="has 0 input field channels but .* with 1"):
        check_compatible(sample(x=0, params=2), expected)
    with pytest.raises(FieldError, match="^the data has 0 parameters but the model was trained"):
        check_compatible(sample(x=1), expected)
    with pytest.raises(FieldError, match="has 3 parameters but the model was trained with 2"):
        check_compatible(sample(x=1, params=3), expected)


class Names:
    def __init__(self, **attrs):
        self.__dict__.update(attrs)


def test_field_layouts_from_fields_names_or_numbered_channels():
    fields = Names(input_fields=[("a", 1), ("vel", 2)], input_names=["ignored"])
    assert field_layout_of(fields, "input", 3) == [("a", 1), ("vel", 2)]
    # fields that do not add up to the channels fall back to the names
    assert field_layout_of(fields, "input", 2) == [("ignored", 2)]
    assert field_layout_of(Names(target_names=["p", "q"]), "target", 2) == [("p", 1), ("q", 1)]
    assert field_layout_of(Names(target_names="disp"), "target", 3) == [("disp", 3)]
    assert field_layout_of(Names(target_names="disp"), "target", 1) == [("disp", 1)]
    assert field_layout_of(Names(target_names=["u"]), "target", 1) == [("u", 1)]
    assert field_layout_of(Names(), "target", 1) == [("y", 1)]
    assert field_layout_of(Names(), "target", 2) == [("y0", 1), ("y1", 1)]
    assert field_layout_of(Names(), "input", 1) == [("x", 1)]
    assert field_layout_of(Names(input_names=["a", "b", "c"]), "input", 2) == [
        ("x0", 1),
        ("x1", 1),
    ]
    assert field_layout_of(Names(input_fields=[], input_names=None), "input", 1) == [("x", 1)]


def test_field_meta_is_what_a_checkpoint_stores():
    dataset = Names(input_names=["a"], target_fields=[("disp", 2), ("p", 1)])
    info = {"x_channels": 1, "out_channels": 3}
    assert field_meta(dataset, info) == {
        "input_fields": [["a", 1]],
        "target_fields": [["disp", 2], ["p", 1]],
        "input_names": ["a"],
        "target_names": ["disp", "p"],
    }
    # no input fields: the coordinates are the only input
    meta = field_meta(Names(input_names=["a"]), {"x_channels": 0, "out_channels": 1})
    assert meta["input_fields"] == [] and meta["input_names"] == []
    assert meta["target_fields"] == [["y", 1]] and meta["target_names"] == ["y"]


def test_prepare_data_readies_a_run_in_one_call():
    samples, tests = [sample(seed=i, params=1) for i in range(3)], [sample(seed=9, params=1)]
    config = TrainConfig(latent_points=4, normalize_params=False, normalize_pos=True)
    data = prepare_data(samples, tests, config, meta={"dataset": "mine", "target_names": ["s"]})
    assert data.config is config and data.latent == LatentMesh(4)
    assert data.info == describe(samples[0])
    assert all(s.latent_pos.shape == (4, 2) for s in [*data.train_set, *data.test_set])
    # the caller's meta first and kept, the field names of the samples filled in
    assert list(data.meta)[:2] == ["dataset", "target_names"]
    assert data.meta["target_names"] == ["s"] and data.meta["input_names"] == ["x"]
    assert sorted(data.normalizers) == ["pos", "x", "y"]
    fitted = fit_normalizers(samples, pos=True, params=False)
    for key, normalizer in data.normalizers.items():
        torch.testing.assert_close(normalizer.mean, fitted[key].mean)
        torch.testing.assert_close(normalizer.std, fitted[key].std)
    assert prepare_data(samples).test_set is None and prepare_data(samples).config == TrainConfig()


def test_prepare_data_keeps_a_lazy_dataset_lazy_and_reads_it_once_to_fit():
    lazy = Lazy()
    data = prepare_data(lazy, lazy, TrainConfig(latent_points=4))
    assert all(isinstance(split, PreparedSamples) for split in (data.train_set, data.test_set))
    assert lazy.reads == [0, 0, 1, 2]  # the first sample described, then every sample fitted
    assert data.meta["target_names"] == ["u", "v"]


def test_prepare_data_refuses_an_empty_split_and_data_prepared_otherwise():
    with pytest.raises(ConfigError, match="^the training split is empty$"):
        prepare_data([])
    data = prepare_data([sample()], None, TrainConfig(latent_points=4))
    data.check_config(TrainConfig(latent_points=4, epochs=3))  # training fields may differ
    with pytest.raises(ConfigError) as caught:
        data.check_config(TrainConfig(latent_points=5, normalize_y=False))
    assert str(caught.value) == (
        "the data was prepared with latent_points=4, normalize_y=True, which this configuration "
        "changes; prepare it with the configuration the run trains with"
    )

"""The normalised model: which fields get which normaliser, and inputs encoded only where a
normaliser and a field both exist."""

import torch

from meshop._pyg import Data
from meshop.data import GaussianNormalizer
from meshop.train.normalized import (
    NormalizedModel,
    PositionNormalizer,
    fit_normalizers,
    make_normalizer,
)


def samples(n: int = 4, params: bool = True) -> list[Data]:
    generator = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        sample = Data(
            x=torch.randn(5, 2, generator=generator) * torch.tensor([1.0, 10.0]),
            y=torch.randn(5, 1, generator=generator) + 3,
            pos=torch.rand(5, 2, generator=generator) * torch.tensor([1.0, 4.0]),
        )
        if params:
            sample.params = torch.randn(1, 3, generator=generator)
        out.append(sample)
    return out


def test_fields_get_per_channel_normalisers_and_coordinates_an_isotropic_one():
    fitted = fit_normalizers(samples())
    assert sorted(fitted) == ["params", "x", "y"]  # x, y and params by default, not pos
    assert type(fitted["x"]) is GaussianNormalizer
    assert fitted["x"].std[1] > 5 * fitted["x"].std[0]  # per channel
    assert type(make_normalizer("y", 1)) is GaussianNormalizer
    pos = fit_normalizers(samples(), x=False, y=False, params=False, pos=True)
    assert list(pos) == ["pos"] and type(pos["pos"]) is PositionNormalizer
    assert pos["pos"].std[0] == pos["pos"].std[1]  # one length for both axes


class Echo(torch.nn.Module):
    """Returns what it was given: the encoded x, then the encoded params on every node."""

    def forward(self, data):
        columns = [data.x]
        if getattr(data, "params", None) is not None:
            columns.append(data.params.expand(len(data.x), -1))
        return torch.cat(columns, dim=1)


def test_the_model_sees_encoded_x_and_params_and_fields_without_normaliser_unchanged():
    train = samples()
    fitted = fit_normalizers(train, y=False)
    sample = train[0]
    seen = NormalizedModel(Echo(), fitted)(sample)
    assert torch.allclose(seen[:, :2], fitted["x"].encode(sample.x))
    assert torch.allclose(seen[:, 2:], fitted["params"].encode(sample.params).expand(5, -1))
    # a normaliser of y only: x and params reach the model as they are
    only_y = {"y": GaussianNormalizer(5).fit(torch.randn(10, 5))}
    seen = NormalizedModel(Echo(), only_y)(sample)
    expected = torch.cat([sample.x, sample.params.expand(5, -1)], dim=1)
    assert torch.allclose(seen, only_y["y"].decode(expected))
    # a params normaliser and a sample without params
    bare = samples(params=False)[0]
    assert torch.allclose(NormalizedModel(Echo(), fitted)(bare), fitted["x"].encode(bare.x))


class Indexed:
    """A map-style dataset that reads its samples by index and cannot be iterated."""

    def __init__(self, items):
        self.items = items

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]

    def __iter__(self):
        raise TypeError("read by index")


class Streamed:
    """A sized stream without indexing."""

    def __init__(self, items):
        self.items = items

    def __len__(self):
        return len(self.items)

    def __iter__(self):
        return iter(self.items)


def _statistics(normalizers):
    return {k: (n.mean.tolist(), n.std.tolist()) for k, n in normalizers.items()}


def test_statistics_are_read_by_index_from_datasets_and_by_iteration_from_streams():
    expected = _statistics(fit_normalizers(samples(), True, True, True, True))
    for source in (Indexed(samples()), Streamed(samples()), iter(samples())):
        assert _statistics(fit_normalizers(source, True, True, True, True)) == expected


def test_repr_names_the_normalised_fields():
    normalizers = fit_normalizers(samples(), x=True, y=True, params=False)
    model = NormalizedModel(torch.nn.Linear(2, 1), normalizers)
    assert repr(model).startswith("NormalizedModel(\n  normalized=['x', 'y']\n")

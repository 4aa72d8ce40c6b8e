"""Normaliser statistics of data far from the origin: coordinates in metres of a site at
(4.5e5, 5.2e6) m, 100 m across, and pressures around 1e5 Pa with a spread of 100 Pa, given in
float32 and streamed in chunks. The mean and standard deviation are those numpy computes in float64
from the same float32 values (to the float32 rounding of the stored statistics), whatever the
chunks; float64 sums of squares would lose most digits of the variance to the offset."""

import numpy as np
import pytest
import torch

from meshop import ConfigError
from meshop.data import GaussianNormalizer, RunningMoments, from_points
from meshop.train import fit_normalizers

SITE = (4.5e5, 5.2e6)  # easting, northing in metres


def site_data(n: int, seed: int = 0, offsets=(*SITE, 1e5)) -> np.ndarray:
    """[n, 3] float32 rows: easting, northing (100 m across) and a pressure (spread 100 Pa)."""
    rng = np.random.default_rng(seed)
    spread = np.c_[100 * rng.random((n, 2)), 100 * rng.standard_normal(n)]
    return (np.asarray(offsets) + spread).astype(np.float32)


def chunkings(n: int):
    """The same rows as one chunk, as uneven chunks, and as many small chunks."""
    return {
        "whole": [slice(0, n)],
        "uneven": [slice(0, 7), slice(7, n // 2), slice(n // 2, n)],
        "small": [slice(i, i + 100) for i in range(0, n, 100)],
    }


@pytest.mark.parametrize("chunking", ["whole", "uneven", "small"])
@pytest.mark.parametrize("offsets", [(*SITE, 1e5), (-SITE[0], -SITE[1], -1e5)], ids=["+", "-"])
def test_streamed_moments_of_large_offset_data_equal_numpys_float64(chunking, offsets):
    data = site_data(20_000, offsets=offsets)
    exact = data.astype(np.float64)
    moments = RunningMoments(3)
    for part in chunkings(len(data))[chunking]:
        moments.update(torch.from_numpy(data[part]))
    mean, var = moments.mean_var()
    assert moments.count == len(data)
    np.testing.assert_allclose(mean.numpy(), exact.mean(0), rtol=1e-13, atol=0)
    np.testing.assert_allclose(var.numpy(), exact.var(0), rtol=1e-9, atol=0)


@pytest.mark.parametrize("chunking", ["whole", "uneven", "small"])
def test_a_normalisers_statistics_are_float64_exact_to_their_float32_rounding(chunking):
    data = site_data(20_000)
    exact = data.astype(np.float64)
    chunks = (torch.from_numpy(data[part]) for part in chunkings(len(data))[chunking])
    normalizer = GaussianNormalizer(3).fit(chunks)  # a generator: read once
    assert normalizer.mean.dtype == normalizer.std.dtype == torch.float32
    # float32 keeps 24 bits: half a unit in the last place is 6e-8 of the value
    np.testing.assert_allclose(normalizer.mean.double(), exact.mean(0), rtol=1e-7, atol=0)
    np.testing.assert_allclose(normalizer.std.double(), exact.std(0), rtol=1e-7, atol=0)
    assert normalizer.std[:2].double().numpy() == pytest.approx(100 / np.sqrt(12), rel=0.02)


def test_float64_data_with_an_offset_a_million_times_its_spread_keeps_its_variance():
    """A 1 m part placed at the site: in float64 the offset is 5e6 times the spread."""
    rng = np.random.default_rng(1)
    data = np.asarray(SITE) + rng.random((5000, 2))
    moments = RunningMoments(2)
    for part in np.array_split(data, 9):
        moments.update(torch.from_numpy(part))
    mean, var = moments.mean_var()
    np.testing.assert_allclose(mean.numpy(), data.mean(0), rtol=1e-13, atol=0)
    np.testing.assert_allclose(var.numpy(), data.var(0), rtol=1e-6, atol=0)


def test_samples_at_a_site_get_the_site_statistics_of_coordinates_and_fields():
    """``fit_normalizers`` over samples one at a time: the fields per channel, the coordinates
    with one length for both axes (the root mean square of the axes' standard deviations)."""
    data = site_data(12_000, seed=3)
    samples = []
    for part in np.array_split(data, 5):
        pos, p = torch.from_numpy(part[:, :2]), torch.from_numpy(part[:, 2:])
        samples.append(from_points(pos, p, 2 * p))
    normalizers = fit_normalizers(iter(samples), pos=True)
    exact = data.astype(np.float64)
    np.testing.assert_allclose(normalizers["pos"].mean.double(), exact[:, :2].mean(0), rtol=1e-7)
    isotropic = np.sqrt(exact[:, :2].var(0).mean())
    np.testing.assert_allclose(normalizers["pos"].std.double(), [isotropic] * 2, rtol=1e-7)
    np.testing.assert_allclose(normalizers["x"].mean.double(), exact[:, 2:].mean(0), rtol=1e-7)
    np.testing.assert_allclose(normalizers["x"].std.double(), exact[:, 2:].std(0), rtol=1e-7)
    y = 2 * exact[:, 2:]
    np.testing.assert_allclose(normalizers["y"].std.double(), y.std(0), rtol=1e-7)


def test_encoding_standardises_and_decoding_inverts_it_also_for_constant_channels():
    u = torch.tensor([[1.0, 5.0, 2.0], [3.0, 5.0, 2.00001], [5.0, 5.0, 2.0]], dtype=torch.float64)
    normalizer = GaussianNormalizer(3, eps=1e-6).double()
    assert not normalizer.fitted
    normalizer.fit(u)
    assert normalizer.fitted
    mean, std = u.mean(0), u.std(0, unbiased=False)
    encoded = normalizer(u)
    torch.testing.assert_close(encoded, (u - mean) / (std + 1e-6), rtol=1e-8, atol=0)
    assert torch.equal(encoded, normalizer.encode(u))
    assert torch.equal(encoded[:, 1], torch.zeros(3))  # a constant channel stays finite
    torch.testing.assert_close(normalizer.decode(encoded), u, rtol=1e-9, atol=0)
    one_row = GaussianNormalizer(3).fit(u[:1])  # a single row: mean the row, std 0
    torch.testing.assert_close(one_row.mean, u[0].float())
    assert torch.equal(one_row.std, torch.zeros(3))


def test_chunks_of_any_leading_shape_after_an_empty_chunk_give_the_same_moments():
    data = torch.from_numpy(site_data(24, seed=4)).double()
    moments = RunningMoments(3)
    moments.update(torch.zeros(0, 3))
    moments.update(data[:6].reshape(3, 2, 3))  # [3, 2 nodes, 3 channels]
    moments.update(data[6:])
    mean, var = moments.mean_var()
    torch.testing.assert_close(mean, data.mean(0), rtol=1e-13, atol=0)
    torch.testing.assert_close(var, data.var(0, unbiased=False), rtol=1e-9, atol=0)


def test_wrong_channels_and_no_data_are_refused_with_whole_sentences():
    with pytest.raises(ConfigError, match=r"^normaliser has 3 channels, data has 2$"):
        RunningMoments(3).update(torch.zeros(4, 2))
    with pytest.raises(ConfigError, match=r"^cannot fit a normaliser on no data$"):
        GaussianNormalizer(3).fit(iter([]))
    moments = RunningMoments(2)
    moments.update(torch.ones(3, 2))
    with pytest.raises(ConfigError, match=r"^normaliser has 3 channels, the moments 2$"):
        GaussianNormalizer(3).fit_moments(moments)

"""The Galerkin Transformer's paper configurations (Table 5) and its re-initialisation."""

import pytest
import torch

from meshop.models import GalerkinTransformer


@pytest.mark.parametrize(
    "preset, expected, parameters",
    [
        ("burgers", dict(in_channels=2, pos_dim=1, width=96, heads=1, layers=4, spectral_width=48,
                         modes=16, project=False, path="grid", decoder="spectral"), 534_385),
        ("darcy", dict(in_channels=3, pos_dim=2, width=128, heads=4, layers=6, spectral_width=32,
                       modes=12, project=True, coarse_shape=43, path="grid",
                       decoder="spectral"), 2_220_957),
        ("inverse", dict(in_channels=3, pos_dim=2, width=192, heads=4, layers=6,
                         coarse_shape=36, path="grid", decoder="ffn"), 2_387_329),
    ],
)  # fmt: skip
def test_paper_configurations_and_the_parameter_counts_their_docstrings_quote(
    preset, expected, parameters
):
    model = getattr(GalerkinTransformer, preset)()
    assert {k: model.config[k] for k in expected} == expected
    assert model.config["out_channels"] == 1
    assert sum(p.numel() for p in model.parameters()) == parameters
    # keyword arguments override the preset
    assert getattr(GalerkinTransformer, preset)(width=16, heads=2).config["width"] == 16


@pytest.mark.parametrize("path", ["mesh", "grid"])
def test_reset_parameters_reinitialises_every_part_of_the_model(path):
    if path == "mesh":
        model = GalerkinTransformer(3, 1, pos_dim=2, width=16, heads=2, layers=1, path="mesh")
    else:
        model = GalerkinTransformer.darcy(
            width=16, heads=2, layers=1, spectral_width=8, modes=4, coarse_shape=5
        )
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.fill_(7.0)
    model.reset_parameters()
    untouched = [n for n, p in model.named_parameters() if bool((p == 7.0).all())]
    assert not untouched

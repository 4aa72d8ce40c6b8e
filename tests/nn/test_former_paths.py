"""Names that moved to their own modules still import from their former module paths."""

import importlib

import pytest

FORMER_PATHS = [
    ("meshop.nn.galerkin_attention", "HeadAttention", "meshop.nn.head_attention.HeadAttention"),
    ("meshop.nn.galerkin_attention", "HeadLayerNorm", "meshop.nn.head_attention.HeadLayerNorm"),
    (
        "meshop.nn.galerkin_attention",
        "FourierAttention",
        "meshop.nn.fourier_attention.FourierAttention",
    ),
    ("meshop.nn.galerkin_attention", "default_weight", "meshop.data.weights.default_weight"),
    ("meshop.nn.galerkin_attention", "weighted_moment", "meshop.nn.quadrature.weighted_moment"),
    ("meshop.nn.galerkin_attention", "log_weight_mask", "meshop.nn.quadrature.log_weight_mask"),
    ("meshop.nn.position_attention", "PositionKernel", "meshop.nn.position_kernel.PositionKernel"),
    (
        "meshop.nn.position_attention",
        "positive_lambda",
        "meshop.nn.position_kernel.positive_lambda",
    ),
    ("meshop.nn.position_attention", "LAMBDA_PARAMS", "meshop.nn.position_kernel.LAMBDA_PARAMS"),
    ("meshop.nn.position_attention", "log_weight", "meshop.nn.quadrature.log_weight"),
    ("meshop.nn.position_attention", "minimum_image", "meshop.data.neighbors.minimum_image"),
    ("meshop.nn.position_attention", "box_lengths", "meshop.data.neighbors.box_lengths"),
    (
        "meshop.nn.encoder",
        "GalerkinEncoderLayer",
        "meshop.nn.blocks.galerkin_encoder_layer.GalerkinEncoderLayer",
    ),
    ("meshop.nn.encoder", "ATTENTIONS", "meshop.nn.blocks.galerkin_encoder_layer.ATTENTIONS"),
    ("meshop.nn.encoder", "NORMS", "meshop.nn.blocks.galerkin_encoder_layer.NORMS"),
    (
        "meshop.nn.encoder",
        "check_attention",
        "meshop.nn.blocks.galerkin_encoder_layer.check_attention",
    ),
    ("meshop.nn.grid", "grid_tensor", "meshop.data.grid.grid_tensor"),
    ("meshop.nn.grid", "node_tensor", "meshop.data.grid.node_tensor"),
    ("meshop.nn.grid", "interpolate_grid", "meshop.data.grid.interpolate_grid"),
    ("meshop.nn.grid", "sample_grid", "meshop.data.grid.sample_grid"),
    ("meshop.nn.grid", "middle_shape", "meshop.nn.cinn.middle_shape"),
    ("meshop.nn.grid", "CiNNDown", "meshop.nn.cinn.CiNNDown"),
    ("meshop.nn.grid", "CiNNUp", "meshop.nn.cinn.CiNNUp"),
    ("meshop.nn.grid", "SpectralConv", "meshop.nn.spectral_conv.SpectralConv"),
    ("meshop.nn.grid", "SpectralRegressor", "meshop.nn.spectral_regressor.SpectralRegressor"),
    ("meshop.models.pit", "PiTBlock", "meshop.nn.blocks.pit_block.PiTBlock"),
    ("meshop.models.pit", "pit_weights", "meshop.data.batching.node_set_weights"),
    (
        "meshop.models.transolver",
        "TransolverBlock",
        "meshop.nn.blocks.transolver_block.TransolverBlock",
    ),
    ("meshop.models.ono", "FeatureBlock", "meshop.nn.blocks.ono_blocks.FeatureBlock"),
    ("meshop.models.ono", "SolutionBlock", "meshop.nn.blocks.ono_blocks.SolutionBlock"),
    ("meshop.models.ono", "FEATURE_ATTENTIONS", "meshop.nn.blocks.ono_blocks.FEATURE_ATTENTIONS"),
]


@pytest.mark.parametrize(("former", "name", "home"), FORMER_PATHS)
def test_a_moved_name_is_the_same_object_at_its_former_path(former, name, home):
    module = importlib.import_module(former)
    assert name in module.__all__
    home_module, _, home_name = home.rpartition(".")
    assert getattr(module, name) is getattr(importlib.import_module(home_module), home_name)

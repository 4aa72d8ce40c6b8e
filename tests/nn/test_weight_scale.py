"""The unit of length does not reach a layer: a mesh in millimetres instead of metres multiplies
every quadrature weight by 1e-6 (2D) or 1e-9 (3D), and a layer's output stays the same. Every layer
of ``meshop.nn`` that takes weights is given them scaled by 1e-9 and by 1e9, in float32 and in
float64, on a batch of two samples (of different sizes, and of equal sizes) with graded weights."""

import inspect
from dataclasses import dataclass, field

import pytest
import torch

import meshop.nn
from meshop.nn import (
    FeatureBlock,
    FourierAttention,
    GalerkinAttention,
    GalerkinEncoderLayer,
    LinearAttention,
    LocalPositionAttention,
    OrthogonalAttention,
    PhysicsAttention,
    PiTBlock,
    PositionAttention,
    SoftmaxAttention,
    SolutionBlock,
    TransolverBlock,
)

C = 4  # feature width
SCALES = [1e-9, 1e9]


@dataclass
class Case:
    name: str
    build: object
    #: how the layer is called, from (x, pos, batch, weight)
    call: object = field(default=lambda layer, x, pos, batch, w: layer(x, pos, batch, w))
    train: bool = False  # run in training mode (a layer whose training pass reads the weights)


def galerkin_family(cls):
    return lambda: cls(C, 2, heads=2)


CASES = [
    Case("PositionAttention", lambda: PositionAttention(C, C, heads=2)),
    Case(
        "LocalPositionAttention-radius",
        lambda: LocalPositionAttention(C, C, heads=2, radius=0.5, max_num_neighbors=64),
    ),
    Case("LocalPositionAttention-k", lambda: LocalPositionAttention(C, C, heads=2, k=5)),
    Case("GalerkinAttention", galerkin_family(GalerkinAttention)),
    Case("FourierAttention", galerkin_family(FourierAttention)),
    Case("SoftmaxAttention", galerkin_family(SoftmaxAttention)),
    Case("LinearAttention", galerkin_family(LinearAttention)),
    Case("PhysicsAttention", lambda: PhysicsAttention(C, heads=2, slices=3)),
    Case(
        "OrthogonalAttention",
        lambda: OrthogonalAttention(C, C, k=3),
        lambda layer, x, pos, batch, w: layer(x, pos, batch, w, g=x.flip(1)),
    ),
    Case(
        "OrthogonalAttention-batch",
        lambda: OrthogonalAttention(C, C, k=3, orthonormalize="batch"),
        lambda layer, x, pos, batch, w: layer(x, pos, batch, w, g=x.flip(1)),
        train=True,
    ),
    Case("GalerkinEncoderLayer", lambda: GalerkinEncoderLayer(C, 2, heads=2)),
    Case("PiTBlock", lambda: PiTBlock(C, heads=2)),
    Case(
        "TransolverBlock",
        lambda: TransolverBlock(C, heads=2, slices=3),
        lambda layer, x, pos, batch, w: layer(x, None, batch, w),
    ),
    Case(
        "FeatureBlock",
        lambda: FeatureBlock(C, 2, heads=2),
        lambda layer, x, pos, batch, w: layer(x, pos, batch, w),
    ),
    Case(
        "SolutionBlock",
        lambda: SolutionBlock(C, C, k=3),
        lambda layer, x, pos, batch, w: layer(x, None, batch, w, g=x.flip(1)),
    ),
]
IDS = [case.name for case in CASES]


def layer_of(case: Case, dtype: torch.dtype) -> torch.nn.Module:
    torch.manual_seed(0)
    layer = case.build().to(dtype).train(case.train)
    with torch.no_grad():  # weights of order one, so that every part of the layer matters
        for name, param in layer.named_parameters():
            if param.dim() == 2 and "norm" not in name:
                param.normal_(0.0, 0.7)
    return layer


def batch_of_two(dtype: torch.dtype, sizes: tuple[int, int]):
    """Two samples in the unit square; weights spread over two decades, summing to the square's
    area, as a graded mesh's."""
    g = torch.Generator().manual_seed(1)
    sizes = torch.tensor(sizes)
    batch = torch.repeat_interleave(torch.arange(2), sizes)
    pos = torch.rand(len(batch), 2, generator=g, dtype=torch.float64)
    x = torch.randn(len(batch), C, generator=g, dtype=torch.float64)
    weight = 10.0 ** (-2 * torch.rand(len(batch), generator=g, dtype=torch.float64))
    weight = weight / torch.zeros(2, dtype=torch.float64).index_add_(0, batch, weight)[batch]
    return x.to(dtype), pos.to(dtype), batch, weight.to(dtype)


def test_every_layer_of_meshop_nn_that_takes_weights_is_checked():
    takes_weights = {
        name
        for name in meshop.nn.__all__
        if inspect.isclass(cls := getattr(meshop.nn, name))
        and issubclass(cls, torch.nn.Module)
        and "weight" in inspect.signature(cls.forward).parameters
    }
    checked = {case.name.split("-")[0] for case in CASES}
    # HeadAttention is the Galerkin family's base class, checked through its four subclasses
    assert takes_weights - {"HeadAttention"} <= checked


@pytest.mark.parametrize("scale", SCALES, ids=["1e-9", "1e9"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
# samples of different sizes, and of equal sizes (the layers' fast paths without padding)
@pytest.mark.parametrize("sizes", [(23, 17), (20, 20)], ids=["sizes-differ", "sizes-equal"])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_scaling_every_weight_leaves_the_output_unchanged(case, sizes, dtype, scale):
    x, pos, batch, weight = batch_of_two(dtype, sizes)
    out = case.call(layer_of(case, dtype), x, pos, batch, weight)
    scaled = case.call(layer_of(case, dtype), x, pos, batch, weight * scale)
    assert torch.isfinite(scaled).all()
    tol = 1e-4 if dtype == torch.float32 else 1e-9
    torch.testing.assert_close(scaled, out, rtol=tol, atol=tol * out.abs().max().item())

"""Every integral layer and block of meshop.nn implements the one protocol of meshop.nn.integral,
and the drivers are modules that no layer imports."""

import ast
import inspect
from pathlib import Path

import torch

import meshop.nn
from meshop.nn.integral import Integral, SoftmaxSums, merge_sums

INTEGRAL_LAYERS = {
    "FeatureBlock",
    "FourierAttention",
    "GalerkinAttention",
    "GalerkinEncoderLayer",
    "HeadAttention",
    "LinearAttention",
    "LocalPositionAttention",
    "OrthogonalAttention",
    "PhysicsAttention",
    "PiTBlock",
    "PositionAttention",
    "SoftmaxAttention",
    "SolutionBlock",
    "TransolverBlock",
}


def test_every_integral_layer_and_block_subclasses_the_protocol():
    classes = {n: getattr(meshop.nn, n) for n in meshop.nn.__all__}
    protocol = {n for n, c in classes.items() if inspect.isclass(c) and issubclass(c, Integral)}
    assert protocol == INTEGRAL_LAYERS
    for name in INTEGRAL_LAYERS:
        cls = classes[name]
        assert cls.cuts in ("nodes", "targets") and cls.passes in (1, 2), name
        for method in ("partial", "finish", "apply"):
            assert getattr(cls, method) is not getattr(Integral, method), (name, method)


def test_no_layer_imports_a_driver():
    root = Path(meshop.nn.__file__).parent
    drivers = {"meshop.nn.chunking", "meshop.nn.splitting"}
    for path in [*root.glob("*.py"), *root.glob("blocks/*.py")]:
        if path.stem in ("chunking", "splitting"):
            continue
        imported = {
            node.module
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ImportFrom) and node.module
        }
        assert not imported & drivers, path


def test_softmax_sums_of_two_parts_merge_into_the_sums_of_the_whole():
    torch.manual_seed(0)
    logits, values = torch.randn(3, 10, dtype=torch.float64) * 30, torch.randn(10, 4).double()

    def sums(part):
        top = logits[:, part].amax(1)
        p = torch.exp(logits[:, part] - top[:, None])
        return SoftmaxSums(p @ values[part], p.sum(1), top)

    whole = torch.softmax(logits, 1) @ values
    merged = merge_sums(sums(slice(0, 4)), sums(slice(4, 10)))
    torch.testing.assert_close(merged.quotient(), whole)
    empty = SoftmaxSums(
        torch.zeros(3, 4).double(), torch.zeros(3).double(), torch.full((3,), -torch.inf).double()
    )
    torch.testing.assert_close(merge_sums(empty, sums(slice(0, 10))).quotient(), whole)
    assert (
        merge_sums((torch.ones(2), {"a": torch.ones(1)}), (torch.ones(2), {"a": torch.ones(1)}))[1][
            "a"
        ]
        == 2
    )

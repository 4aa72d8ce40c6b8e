"""Every attention layer of meshop.nn through the one signature of meshop.nn.interface,

    layer(x, pos, batch=None, weight=None, *, pos_dst=None, batch_dst=None, **extra),

checked for the same properties: equivariance to the order of the nodes, independence of the
samples of a batch of different sizes, invariance to splitting a node into two copies of half its
weight, and convergence under refinement of a graded mesh to the same limit as on a uniform mesh.
"""

from dataclasses import dataclass, field

import pytest
import torch

from meshop.errors import ConfigError
from meshop.nn import (
    FourierAttention,
    GalerkinAttention,
    LinearAttention,
    LocalPositionAttention,
    OrthogonalAttention,
    PhysicsAttention,
    PositionAttention,
    SoftmaxAttention,
)

C = 4  # feature width of every layer


@dataclass
class Case:
    name: str
    build: object
    cross: bool  # takes target nodes (pos_dst, batch_dst)
    weighted: bool = True  # sums are quadratures: splitting a node in two halves changes nothing
    keywords: object = field(default=lambda x, x_dst: {})  # the layer's extra inputs

    def __call__(self, layer, x, pos, batch=None, weight=None, x_dst=None, **targets):
        return layer(x, pos, batch, weight, **targets, **self.keywords(x, x_dst))


def orthogonal_keywords(x, x_dst):
    # the eigenfunction features: here the solution features themselves
    return {"g": x} if x_dst is None else {"g": x, "g_dst": x_dst}


CASES = [
    Case("position", lambda: PositionAttention(C, C, heads=2), cross=True),
    Case("position-periodic", lambda: PositionAttention(C, C, heads=2, periodic=3.0), cross=True),
    Case(
        "local-radius",
        lambda: LocalPositionAttention(C, C, heads=2, radius=0.45, max_num_neighbors=8192),
        cross=True,
    ),
    # a k-nearest or quantile field counts nodes: a copy of a node takes a neighbour's place
    Case("local-k", lambda: LocalPositionAttention(C, C, heads=2, k=6), cross=True, weighted=False),
    Case("galerkin", lambda: GalerkinAttention(C, 2, heads=2), cross=False),
    Case("fourier", lambda: FourierAttention(C, 2, heads=2), cross=False),
    Case("softmax", lambda: SoftmaxAttention(C, 2, heads=2), cross=False),
    Case("linear", lambda: LinearAttention(C, 2, heads=2), cross=False),
    Case("physics", lambda: PhysicsAttention(C, heads=2, slices=3), cross=False),
    Case(
        "orthogonal",
        lambda: OrthogonalAttention(C, C, k=3),
        cross=True,
        keywords=orthogonal_keywords,
    ),
]
IDS = [case.name for case in CASES]


def make(case: Case):
    torch.manual_seed(0)
    layer = case.build().double().eval()
    with torch.no_grad():  # features of order one, so that every part of the layer matters
        for name, param in layer.named_parameters():
            if param.dim() == 2 and "norm" not in name:
                param.normal_(0.0, 0.7)
    return layer


def nodes(n, seed, offset=0.0):
    g = torch.Generator().manual_seed(seed)
    pos = torch.rand(n, 2, generator=g, dtype=torch.float64) + offset
    x = torch.randn(n, C, generator=g, dtype=torch.float64)
    weight = 10.0 ** (-2 * torch.rand(n, generator=g, dtype=torch.float64))  # graded-mesh spread
    return x, pos, weight


def close(a, b, tol=1e-9):
    torch.testing.assert_close(a, b, rtol=tol, atol=tol)


# ---------------------------------------------------------------- permutation equivariance


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_outputs_follow_the_order_of_the_nodes(case):
    layer = make(case)
    x, pos, weight = nodes(40, seed=1)
    perm = torch.randperm(40, generator=torch.Generator().manual_seed(2))
    out = case(layer, x, pos, None, weight)
    close(case(layer, x[perm], pos[perm], None, weight[perm]), out[perm])
    if case.cross:  # sources in any order, targets permuted with the output
        x_dst, pos_dst, _ = nodes(15, seed=3)
        out = case(layer, x, pos, None, weight, x_dst, pos_dst=pos_dst)
        close(case(layer, x[perm], pos[perm], None, weight[perm], x_dst, pos_dst=pos_dst), out)
        p = torch.randperm(15, generator=torch.Generator().manual_seed(4))
        close(case(layer, x, pos, None, weight, x_dst[p], pos_dst=pos_dst[p]), out[p])


# ---------------------------------------------------------------- batch independence


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_samples_of_different_sizes_do_not_see_each_other(case):
    layer = make(case)
    sizes, sizes_dst = [9, 31, 17], [5, 0, 12]
    parts = [nodes(n, seed=10 + i, offset=0.3 * i) for i, n in enumerate(sizes)]
    x, pos, weight = (torch.cat(t) for t in zip(*parts))
    batch = torch.repeat_interleave(torch.arange(3), torch.tensor(sizes))
    out = case(layer, x, pos, batch, weight)
    for b, (xb, pb, wb) in enumerate(parts):
        close(out[batch == b], case(layer, xb, pb, None, wb))
    if case.cross:
        targets = [nodes(n, seed=20 + i, offset=0.3 * i) for i, n in enumerate(sizes_dst)]
        x_dst, pos_dst, _ = (torch.cat(t) for t in zip(*targets))
        batch_dst = torch.repeat_interleave(torch.arange(3), torch.tensor(sizes_dst))
        out = case(layer, x, pos, batch, weight, x_dst, pos_dst=pos_dst, batch_dst=batch_dst)
        assert out.shape == (len(pos_dst), C)
        for b, ((xb, pb, wb), (xd, pd, _)) in enumerate(zip(parts, targets)):
            alone = case(layer, xb, pb, None, wb, xd, pos_dst=pd)
            close(out[batch_dst == b], alone)


# ---------------------------------------------------------------- a node split in two halves


@pytest.mark.parametrize("case", [c for c in CASES if c.weighted], ids=lambda c: c.name)
def test_splitting_a_node_into_two_copies_of_half_its_weight_changes_nothing(case):
    layer = make(case)
    x, pos, weight = nodes(30, seed=5)
    out = case(layer, x, pos, None, weight)
    twice = torch.tensor([0, 7, 21])  # these nodes get a copy, each copy half the weight
    halved = weight.clone()
    halved[twice] /= 2
    x2, pos2 = torch.cat([x, x[twice]]), torch.cat([pos, pos[twice]])
    w2 = torch.cat([halved, halved[twice]])
    out2 = case(layer, x2, pos2, None, w2)
    close(out2[:30], out)
    close(out2[30:], out[twice])
    if case.cross:
        x_dst, pos_dst, _ = nodes(12, seed=6)
        out = case(layer, x, pos, None, weight, x_dst, pos_dst=pos_dst)
        close(case(layer, x2, pos2, None, w2, x_dst, pos_dst=pos_dst), out)


# ---------------------------------------------------------------- mesh refinement


def graded_grid(n):
    """A tensor grid of [0, 1]^2 with nodes at (i/n)^2: spacing 1/n^2 at the origin's edges,
    2/n at the far ones (2n times coarser), and its trapezoidal quadrature weights."""
    t = (torch.arange(n + 1, dtype=torch.float64) / n) ** 2
    w = torch.zeros(n + 1, dtype=torch.float64)
    w[:-1] += (t[1:] - t[:-1]) / 2
    w[1:] += (t[1:] - t[:-1]) / 2
    pos = torch.stack(torch.meshgrid(t, t, indexing="ij"), -1).reshape(-1, 2)
    return pos, torch.outer(w, w).reshape(-1)


def uniform_grid(n):
    """The cell centres of an n x n grid of [0, 1]^2, equal weights."""
    t = (torch.arange(n, dtype=torch.float64) + 0.5) / n
    pos = torch.stack(torch.meshgrid(t, t, indexing="ij"), -1).reshape(-1, 2)
    return pos, torch.full((n * n,), 1.0 / n**2, dtype=torch.float64)


def smooth(pos):
    """Smooth input features on the domain."""
    x, y = pos[:, :1], pos[:, 1:]
    return torch.cat([torch.sin(3 * x), torch.cos(2 * y), x * y, x - y**2], dim=1)


PROBES = torch.tensor(
    [[0.1, 0.2], [0.5, 0.5], [0.8, 0.3], [0.3, 0.9], [0.95, 0.95], [0.05, 0.6]],
    dtype=torch.float64,
)


def at_probes(case, layer, pos, weight):
    """The layer's output at PROBES: as targets of a cross layer, or as nodes of weight 0 (they
    read the integrals and add nothing to them) of a self-attention layer."""
    with torch.no_grad():
        if case.cross:
            return case(layer, smooth(pos), pos, None, weight, smooth(PROBES), pos_dst=PROBES)
        pos = torch.cat([pos, PROBES])
        weight = torch.cat([weight, torch.zeros(len(PROBES), dtype=weight.dtype)])
        return case(layer, smooth(pos), pos, None, weight)[-len(PROBES) :]


@pytest.mark.parametrize("case", [c for c in CASES if c.weighted], ids=lambda c: c.name)
def test_refining_a_graded_mesh_converges_to_the_uniform_meshes_limit(case):
    """Outputs on graded meshes of 9^2 ... 33^2 nodes approach the output on a uniform 64 x 64
    mesh: the layer's sums are integrals over the domain, not over the node density."""
    layer = make(case)
    reference = at_probes(case, layer, *uniform_grid(64))
    errors = [
        (at_probes(case, layer, *graded_grid(n)) - reference).norm().item() for n in (8, 16, 32)
    ]
    scale = reference.norm().item()
    assert errors[0] > errors[1] > errors[2], errors
    assert errors[2] < errors[0] / 3 and errors[2] < 0.02 * scale, (errors, scale)


def test_without_weights_position_attention_converges_to_the_node_density():
    """The paper's unweighted form on the graded mesh stays away from the uniform limit (the
    dense corner dominates every average): the weights are what make the limit the domain's."""
    case = CASES[0]
    layer = make(case)
    reference = at_probes(case, layer, *uniform_grid(64))
    pos, weight = graded_grid(32)
    weighted = (at_probes(case, layer, pos, weight) - reference).norm()
    unweighted = (at_probes(case, layer, pos, None) - reference).norm()
    assert unweighted > 20 * weighted


# ---------------------------------------------------------------- the common arguments


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_bad_common_arguments_are_config_errors(case):
    layer = make(case)
    x, pos, weight = nodes(10, seed=7)
    with pytest.raises(ConfigError, match="weight must be"):
        case(layer, x, pos, None, weight[:9])
    with pytest.raises(ConfigError, match="batch must be"):
        case(layer, x, pos, torch.zeros(9, dtype=torch.long), weight)
    if not case.cross:
        with pytest.raises(ConfigError, match="self-attention only"):
            case(layer, x, pos, None, weight, pos_dst=pos[:3])

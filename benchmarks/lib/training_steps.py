"""The training steps that ``speed/training_vs_reference.py`` times and ``speed/profile_pit.py``
and ``speed/profile_ono.py`` profile: meshop's model and the reference formulation of
:mod:`meshop.testing` on the same inputs, each step forward, loss, backward and an Adam
step. Every ``*_case`` returns ``{implementation: (step, parameters)}``."""

from __future__ import annotations

import torch

from benchmarks.lib.settings import ELASTICITY_PARAMS, PIT_BLOCKS, PIT_HEADS, PIT_WIDTH
from benchmarks.lib.workloads import batch_of, build_model, samples
from meshop import testing
from meshop.data import from_points, grid_points, make_loader
from meshop.models import ONO, Transolver
from meshop.nn import GalerkinEncoderLayer
from meshop.train import relative_l2

#: Transolver as ``meshop train`` builds it on the CPU datasets (meshop.train.presets)
TRANSOLVER = dict(width=64, layers=4, heads=4, slices=32, mlp_ratio=1)
#: the Galerkin Transformer's 1D encoder (Burgers, Table 5) and the issue's model settings
GT_CHANNELS, GT_HEADS, GT_LAYERS, GT_BATCH = 96, 1, 4, 4


def _step(net, loss, train: bool = True) -> tuple:
    """(a training step of ``net`` on ``loss()``, or with ``train=False`` a forward pass without
    gradients, ``net``'s parameter count)."""
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-4)

    def step():
        if not train:
            with torch.no_grad():
                return loss()
        optimizer.zero_grad(set_to_none=True)
        loss().backward()
        optimizer.step()

    return step, sum(p.numel() for p in net.parameters())


def _relative_l2(data, batch_size: int):
    """The per-sample relative L2 loss of a prediction on ``data``'s batch."""
    y = data.y.view(-1, 1)
    return lambda pred: relative_l2(pred.reshape(-1, 1), y, data.batch, batch_size)


def galerkin_case(attention: str, n: int) -> dict:
    """The encoder of the Galerkin Transformer (4 layers, d = 96, 1 head, 1D, batch 4)."""
    torch.manual_seed(0)
    b, d = GT_BATCH, GT_CHANNELS
    x = torch.randn(b, n, d)
    pos = torch.linspace(0, 1, n).repeat(b, 1)[..., None]  # [B, n, 1]
    batch = torch.arange(b).repeat_interleave(n)
    layers = (GalerkinEncoderLayer(d, 1, attention, heads=GT_HEADS) for _ in range(GT_LAYERS))
    ours = torch.nn.ModuleList(layers)
    ref = testing.GalerkinReferenceEncoder(d, GT_HEADS, 1, GT_LAYERS, attention)

    def meshop_loss():
        h = x.view(b * n, d)
        for layer in ours:
            h = layer(h, pos.view(b * n, 1), batch)
        return h.square().mean()

    reference = _step(ref, lambda: ref(x, pos).square().mean())
    return {"meshop": _step(ours, meshop_loss), "reference": reference}


def pit_case(n: int, latent: int, batch_size: int) -> dict:
    """PiT at the issue's setting: width 64, 2 heads, 4 blocks, 2 % quantile fields; its dense
    form runs meshop's weights."""
    torch.manual_seed(0)
    data = batch_of(samples(n, batch_size, latent=latent))
    ours = build_model("PiT")
    ref = testing.PiTReference(2 + ELASTICITY_PARAMS, 1, PIT_WIDTH, PIT_HEADS, PIT_BLOCKS)
    pos, features, latent_pos = testing.dense_inputs(data, batch_size)
    loss = _relative_l2(data, batch_size)
    return {
        "meshop": _step(ours, lambda: loss(ours(data))),
        "reference": _step(ref, lambda: loss(ref(features, pos, latent_pos))),
        "dense": _step(ours, lambda: loss(testing.dense_pit(ours, pos, features, latent_pos))),
    }


#: meshop's ONO options of the authors' orthogonal attention: batch whitening with a running
#: moment, no value projection W_V, the raw sum as inner product
ONO_AUTHORS_WHITENING = dict(orthonormalize="batch", value_projection=False, inner_product="sum")
#: ... and of the authors' blocks: linear attention without per-head layer norms, coordinates or
#: Q, K, V biases, the queries' softmax scaled by d_head^-1/2, the last stage's FFN a single linear
#: layer, ``ONO2``'s one-layer lift and initialisation: the authors' ``ONO2``
ONO_AUTHORS = dict(
    ONO_AUTHORS_WHITENING, feature_layer_norm=False, feature_coordinates=False, authors_init=True
)
ONO_AUTHORS.update(feature_qkv_bias=False, feature_query_scale=True)
ONO_AUTHORS.update(linear_decoder=True, linear_encoder=True)
#: the options of ``ono_case(authors=...)``
ONO_OPTIONS = {True: ONO_AUTHORS, "whitening": ONO_AUTHORS_WHITENING, False: {}}


def ono_model(authors: bool | str):
    """meshop's ONO at the benchmark's sizes: the authors' model (``True``), the authors'
    whitening in meshop's blocks (``"whitening"``) or meshop's defaults (``False``)."""
    sizes = dict(layers=4, k=16, heads=4, feature_attention="linear", mlp_ratio=1)
    return ONO(3, 1, 2, 64, **sizes, **ONO_OPTIONS[authors])


def ono_case(n: int, batch_size: int, grid: bool, authors: bool | str = True) -> dict:
    """ONO: width 64, 4 layers, 4 heads, k = 16, mlp_ratio 1, linear feature attention, on one
    input field; meshop as the authors' model, with the authors' whitening in meshop's blocks, or
    with its defaults (see :func:`ono_model`)."""
    torch.manual_seed(0)
    side = round(n**0.5)
    fields = []
    for _ in range(batch_size):
        pos = grid_points((side, side)) if grid else torch.rand(n, 2)
        f = torch.randn(len(pos))
        fields.append(from_points(pos, x=f, y=torch.sin(3 * pos[:, 0]) * f))
    data = next(iter(make_loader(fields, batch_size=batch_size)))
    ours = ono_model(authors)
    ref = testing.ONOReference(3, 1, width=64, layers=4, heads=4, psi_dim=16, mlp_ratio=1)
    features = torch.cat([data.pos, data.x], dim=-1).view(batch_size, len(fields[0].pos), 3)
    loss = _relative_l2(data, batch_size)
    reference = _step(ref, lambda: loss(ref(features)))
    return {"meshop": _step(ours, lambda: loss(ours(data))), "reference": reference}


def transolver_case(n: int, batch_size: int, train: bool = True) -> dict:
    """Transolver (:data:`TRANSOLVER`) on Elasticity-like point clouds of ``n`` nodes, against
    the authors' irregular-mesh model (:class:`TransolverReference`): training steps, or
    (``train=False``) forward passes in evaluation mode without gradients."""
    torch.manual_seed(0)
    data = batch_of(samples(n, batch_size, latent=n))
    in_channels = 2 + ELASTICITY_PARAMS
    ours = Transolver(in_channels, 1, 2, **TRANSOLVER).train(train)
    ref = testing.TransolverReference(in_channels, 1, **TRANSOLVER).train(train)
    _, features, _ = testing.dense_inputs(data, batch_size)
    loss = _relative_l2(data, batch_size) if train else lambda pred: pred
    reference = _step(ref, lambda: loss(ref(features)), train)
    return {"meshop": _step(ours, lambda: loss(ours(data)), train), "reference": reference}

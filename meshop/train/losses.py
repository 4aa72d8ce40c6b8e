"""Losses and metrics, computed per sample with batch vectors (samples may have different sizes)."""

from __future__ import annotations

import torch

from meshop._pyg import scatter
from meshop.data.batching import grid_shape_of, node_batch, num_samples
from meshop.errors import ConfigError

REDUCTIONS = ("mean", "sum", "none")


def _per_sample_sum(
    values: torch.Tensor, batch: torch.Tensor | None, p: int, num_samples: int | None
):
    """``sum |values|^p`` over the nodes of every sample."""
    if batch is None:
        batch = torch.zeros(values.shape[0], dtype=torch.long, device=values.device)
    size = num_samples if num_samples is not None else int(batch.max()) + 1
    per_node = values.abs().pow(p).reshape(values.shape[0], -1).sum(-1)
    return scatter(per_node, batch, dim=0, dim_size=size, reduce="sum")


def whole_sums(sums: torch.Tensor, group) -> torch.Tensor:
    """Per-sample sums over each process's part of the same samples (``split_mesh``) summed over
    the processes of ``group``: the whole meshes' sums, the same on every process. The other
    processes' parts enter as constants: each process differentiates the same loss through its
    own part only, so the sum over the processes of their gradients is the whole loss's
    gradient (:mod:`meshop.nn.splitting`), as for a loss summed over the nodes."""
    total = sums.detach().clone()
    torch.distributed.all_reduce(total, group=group)
    return sums + (total - sums.detach())


def relative_lp(
    pred: torch.Tensor,
    target: torch.Tensor,
    batch: torch.Tensor | None = None,
    p: int = 2,
    num_samples: int | None = None,
    reduction: str = "mean",
    eps: float = 1e-12,
    group=None,
) -> torch.Tensor:
    """Relative Lp error ``||pred - target||_p / ||target||_p`` of each sample, then reduced.

    Args:
        pred: [N, C] predicted values at the nodes of all samples of a batch.
        target: [N, C] target values at the same nodes.
        batch: [N] sample index of each node (None: one sample).
        p: 2 for the relative L2 of the papers, 1 for PiT's Burgers/ShockTube.
        reduction: ``"mean"``, ``"sum"`` or ``"none"`` (one value per sample).
        group: under :func:`~meshop.nn.splitting.split_mesh`, the processes that hold the other
            parts of the same samples: the sums of both norms are summed over them before the
            division (:func:`whole_sums`), so every process gets the whole meshes' errors.

    Raises:
        ConfigError: an unknown ``reduction``.
    """
    if reduction not in REDUCTIONS:
        raise ConfigError(f"reduction must be one of {list(REDUCTIONS)}, got {reduction!r}")
    err = _per_sample_sum(pred - target, batch, p, num_samples)
    ref = _per_sample_sum(target, batch, p, num_samples)
    if group is not None:
        err, ref = whole_sums(err, group), whole_sums(ref, group)
    rel = err.pow(1.0 / p) / (ref.pow(1.0 / p) + eps)
    if reduction == "none":
        return rel
    return rel.sum() if reduction == "sum" else rel.mean()


def relative_l2(
    pred, target, batch=None, num_samples=None, reduction: str = "mean"
) -> torch.Tensor:
    """Relative L2 error per sample, reduced (see :func:`relative_lp`)."""
    return relative_lp(pred, target, batch, 2, num_samples, reduction)


def relative_l1(
    pred, target, batch=None, num_samples=None, reduction: str = "mean"
) -> torch.Tensor:
    """Relative L1 error per sample, reduced (see :func:`relative_lp`)."""
    return relative_lp(pred, target, batch, 1, num_samples, reduction)


def _grid_gradient_energy(u: torch.Tensor, data) -> torch.Tensor:
    """Per-node ``|grad u|^2`` (summed over channels) by central finite differences on a grid."""
    shape = grid_shape_of(data)
    b = num_samples(data)
    dim = len(shape)
    u = u.reshape(b, *shape, -1)
    pos = data.pos.reshape(b, -1, dim)
    spacing = (pos.amax(1) - pos.amin(1)) / (torch.tensor(shape, device=pos.device) - 1)  # [B, dim]
    energy = torch.zeros(u.shape[:-1], dtype=u.dtype, device=u.device)
    for axis in range(dim):
        du = torch.gradient(u, dim=axis + 1)[0]
        h = spacing[:, axis].reshape(b, *([1] * (dim + 1)))
        energy = energy + (du / h).pow(2).sum(-1)
    return energy.reshape(-1)


def _h1_seminorm_sq(u: torch.Tensor, data, size: int) -> torch.Tensor:
    """``|u|_{H^1}^2`` of every sample: grid finite differences with the quadrature weights, or the
    exact seminorm of the piecewise-linear interpolant on a triangle mesh."""
    if getattr(data, "grid_shape", None) is not None:
        per_node = _grid_gradient_energy(u, data) * data.weight
        return scatter(per_node, node_batch(data), dim=0, dim_size=size, reduce="sum")
    face = getattr(data, "face", None)
    if face is None or data.pos.shape[1] != 2:
        raise ConfigError(
            "the H1 penalty needs a uniform grid or a 2D triangle mesh (domain.face); "
            "set h1_weight = 0 for point clouds and other meshes"
        )
    p0, p1, p2 = (data.pos[face[i]] for i in range(3))
    jac = torch.stack([p1 - p0, p2 - p0], dim=1)  # [F, 2, 2], rows are edges
    du = torch.stack([u[face[1]] - u[face[0]], u[face[2]] - u[face[0]]], dim=1)  # [F, 2, C]
    grad = torch.linalg.solve(jac, du)  # [F, 2, C]: jac @ grad = du
    area = 0.5 * torch.linalg.det(jac).abs()
    per_face = grad.pow(2).sum((1, 2)) * area
    return scatter(per_face, node_batch(data)[face[0]], dim=0, dim_size=size, reduce="sum")


def relative_h1(pred: torch.Tensor, target: torch.Tensor, data, eps: float = 1e-12) -> torch.Tensor:
    r"""Mean relative H1 seminorm :math:`|p - t|_{H^1} / |t|_{H^1}` of the samples of ``data``
    (the derivative penalty of the Galerkin Transformer's loss, Sec. 4).

    Gradients are central finite differences on uniform grids (``grid_shape``) and exact gradients
    of the piecewise-linear interpolant on 2D triangle meshes (``face``); the values must live at
    the mesh nodes, not at separate query points.

    Raises:
        ConfigError: the domain is neither a grid nor a 2D triangle mesh.
    """
    if getattr(data, "query_pos", None) is not None:
        raise ConfigError("the H1 penalty needs predictions at the mesh nodes, not at query points")
    size = num_samples(data)
    err = _h1_seminorm_sq(pred - target, data, size)
    ref = _h1_seminorm_sq(target, data, size)
    return (err / (ref + eps)).clamp_min(eps * eps).sqrt().mean()

"""Dense reference forms that tests check meshop's layers against: each paper's equations with
explicit matrices, one sample (or one head) at a time, in float64 where it matters. The papers'
published model code, re-expressed densely, is in :mod:`meshop.testing`."""

import itertools
import math

import torch

# ---------------------------------------------------------------- position attention (PiT)


def squared_distances(pos_dst, pos_src, periodic=None):
    """Dense D [N_dst, N_src]; with a periodic box, the minimum over the images of the sources
    (coordinates wrapped into the box first)."""
    if periodic is None:
        return (pos_dst[:, None] - pos_src[None]).pow(2).sum(-1)
    box = torch.tensor([0.0 if p is None else p for p in periodic])
    on = box > 0
    safe = torch.where(on, box, torch.ones_like(box))
    pos_dst = torch.where(on, pos_dst - safe * torch.floor(pos_dst / safe), pos_dst)
    pos_src = torch.where(on, pos_src - safe * torch.floor(pos_src / safe), pos_src)
    shifts = [(-1.0, 0.0, 1.0) if p else (0.0,) for p in on.tolist()]
    images = [pos_src + torch.tensor(s) * box for s in itertools.product(*shifts)]
    return torch.stack([(pos_dst[:, None] - im[None]).pow(2).sum(-1) for im in images]).amin(0)


def field_mask(D, quantile=None, k=None, radius=None):
    """Receptive field of PiT eq. (10) as a dense boolean mask (all True for global attention)."""
    if quantile is not None:
        return D <= torch.quantile(D, quantile, dim=1, keepdim=True)
    if k is not None:
        return D <= D.sort(dim=1).values[:, min(k, D.shape[1]) - 1 : min(k, D.shape[1])]
    if radius is not None:
        return D <= radius**2
    return torch.ones_like(D, dtype=torch.bool)


def dense_attention(
    layer, x_src, pos_src, pos_dst=None, batch_src=None, batch_dst=None, weight=None, **field
):
    """Concat_h [w_k exp(-lambda_h D_ik) / sum_j w_j exp(-lambda_h D_ij)] U W_h over each sample's
    own sources (equal w_k without ``weight``), with explicit N_dst x N_src matrices, in float64."""
    if pos_dst is None:
        pos_dst, batch_dst = pos_src, batch_src
    if batch_src is None:
        batch_src = torch.zeros(len(pos_src), dtype=torch.long)
        batch_dst = torch.zeros(len(pos_dst), dtype=torch.long)
    periodic = layer.periodic
    if periodic is not None and not isinstance(periodic, tuple):
        periodic = (periodic,) * pos_src.shape[1]
    H, C = layer.heads, layer.head_channels
    v = (x_src.double() @ layer.lin_v.weight.double().T).view(-1, H, C)
    lam = layer.lam.detach().double()
    out = torch.zeros(len(pos_dst), H, C, dtype=torch.float64)
    for b in batch_dst.unique():
        src, dst = batch_src == b, batch_dst == b
        D = squared_distances(pos_dst[dst], pos_src[src], periodic)
        mask = field_mask(D, **field)
        for h in range(H):
            kernel = torch.exp(-lam[h] * D.double()) * mask
            if weight is not None:
                kernel = kernel * weight[src].double()
            out[dst, h] = (kernel / kernel.sum(1, keepdim=True)) @ v[src, h]
    return out.view(len(pos_dst), H * C)


# ---------------------------------------------------------------- physics attention (Transolver)


def dense_physics_attention(layer, x, w):
    """Physics attention (Transolver eqs. (1)-(4)) of ``layer`` on one sample of features ``x``
    [n, C] with quadrature weights ``w`` [n], head by head, with explicit matrices."""
    d, out = layer.head_channels, []
    W = torch.diag(w)
    for h in range(layer.heads):
        rows = slice(h * d, (h + 1) * d)
        xh = x @ layer.lin_x.weight[rows].T + layer.lin_x.bias[rows]
        fh = x @ layer.lin_fx.weight[rows].T + layer.lin_fx.bias[rows]
        logits = (xh @ layer.lin_slice.weight.T + layer.lin_slice.bias) / layer.temperature[h]
        S = torch.exp(logits) / torch.exp(logits).sum(1, keepdim=True)  # eq. (1), [n, M]
        Z = torch.diag(1 / (S.T @ W).sum(1)) @ S.T @ W @ fh  # eq. (2), [M, D]
        q, k, v = Z @ layer.lin_q.weight.T, Z @ layer.lin_k.weight.T, Z @ layer.lin_v.weight.T
        A = torch.exp(q @ k.T / math.sqrt(d))
        Zp = (A / A.sum(1, keepdim=True)) @ v  # eq. (3)
        out.append(S @ Zp)  # eq. (4)
    return layer.lin_out(torch.cat(out, dim=1))

"""Reference forms to check layers against: the papers' published implementations, written
densely as their code computes them.

These are not meshop's layers: they are the published implementations' ways of computing the same
operators, re-expressed here in a few lines each on dense ``[B, N, C]`` tensors. The tests check
meshop's layers and models against them (with the same weights, meshop computes what they
compute), and the speed benchmarks (``benchmarks/speed/training_vs_reference.py``) time both in
one process on the same inputs. Nothing in meshop imports this module.

- :class:`GalerkinReferenceLayer`: the Galerkin Transformer authors' encoder layer (their
  ``SimpleAttention`` + feed-forward): features as dense ``[B, n, d]``; Q, K, V by ``nn.Linear``,
  split into heads; a layer norm per head (a Python loop over the heads' ``nn.LayerNorm``) on K and
  V (Galerkin) or Q and K (Fourier); the coordinates concatenated in front of every head; Galerkin
  ``Q (K^T V) / n`` or Fourier ``(Q K^T) V / n`` by einsum; an output linear; residual; FFN
  ``d -> 2d -> d`` (ReLU) with residual (Cao 2021, eqs. (4)-(6)).
- :class:`PiTReference`: the PiT authors' model (Chen & Wu 2024): in every position-attention layer
  and every forward pass the pairwise squared distances ``[B, N_out, N_in]``, scaled by each head's
  ``lambda = tan(pi/4 (1 - 1e-7)(1 + sin theta))`` to ``[B, H, N_out, N_in]``, ``torch.quantile``
  of every row at the layer's locality (1.0 in the processor, so the global layers sort every row
  too), entries above it set to the float32 maximum, softmax of the negated values,
  ``einsum("bhnj,bjd->bnhd")`` with the full-width input features (every head sees all channels),
  then (processor) concatenation with the input and a two-layer MLP.
- :class:`ONOReference`: the ONO authors' model ``ONOmodel2.ONO2`` with ``orth=True`` (Xiao et al.
  2024): one linear layer lifting ``[pos, f]`` to ``2d``, split into the feature stream ``x``
  and the solution stream ``fx``; per block ``x += Attn(LN(x))`` with the linear attention of the
  ``linear-attention-transformer`` package (written densely here: per head ``q`` softmax over
  channels times ``d_head^-1/2``, ``k`` softmax over nodes, ``q (k^T v)``), ``x += MLP(LN(x))``,
  ``x_ = Linear(x)`` to ``k`` channels, the batch second moment ``einsum("blc,bld->cd") / (B n)``
  (in training; it also updates the running covariance that evaluation uses), its Cholesky factor
  ``L`` inverted and ``x_ <- x_ L^{-T}``, then ``fx <- (x_ softplus(mu)) (x_^T fx) + fx`` and
  ``fx <- MLP(LN(fx))`` (a linear to the output in the last block).
- :class:`TransolverReference`: the Transolver authors' irregular-mesh model
  (``Transolver_Irregular_Mesh.Model`` with its ``Physics_Attention_Irregular_Mesh``; Wu et al.
  2024), on dense ``[B, N, C]`` tensors: a Linear-GELU-Linear lift of ``[pos, f]`` plus a learned
  placeholder; per block ``x += Attn(LN(x))``, ``x += MLP(LN(x))``, the last block ending in
  ``Linear(LN(x))``. In the attention, the features and the slice inputs by two linears, each
  permuted to ``[B, H, N, D]`` and made contiguous; slice logits by a linear on the slice inputs,
  divided by each head's temperature, softmax over the slices; the slice norm by a sum over the
  nodes; tokens ``einsum("bhnc,bhng->bhgc")`` divided by the norm plus ``1e-5``; Q, K, V of the
  tokens, ``softmax(Q K^T / sqrt(D)) V``; deslice ``einsum("bhgc,bhng->bhnc")``, heads merged into
  ``[B, N, H D]`` and an output linear. ``tests/models/test_transolver_reference.py`` checks it
  equal to the authors' model when a clone of their repository is given.
- :func:`dense_pit`: meshop's PiT (its modules and weights) evaluated as the PiT authors' code
  evaluates theirs, on ``[B, N, C]`` tensors: full distance matrices, ``torch.quantile`` masks,
  softmax and einsum (``benchmarks/speed/whole_models.py`` checks that it agrees with meshop's PiT).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

_FLOAT32_MAX = torch.finfo(torch.float32).max


# --- Galerkin / Fourier Transformer ------------------------------------------------------------


class GalerkinReferenceAttention(nn.Module):
    """The Galerkin Transformer authors' ``SimpleAttention`` (``galerkin`` or ``fourier``)."""

    def __init__(self, d: int, heads: int, pos_dim: int, attention: str = "galerkin"):
        super().__init__()
        if attention not in ("galerkin", "fourier"):
            raise ValueError(f"attention must be 'galerkin' or 'fourier', got {attention!r}")
        self.attention, self.heads, self.d_k, self.pos_dim = attention, heads, d // heads, pos_dim
        self.linears = nn.ModuleList(nn.Linear(d, d) for _ in range(3))
        self.norm_1 = nn.ModuleList(nn.LayerNorm(self.d_k) for _ in range(heads))
        self.norm_2 = nn.ModuleList(nn.LayerNorm(self.d_k) for _ in range(heads))
        self.fc = nn.Linear(heads * (self.d_k + pos_dim), d)

    def _norm(self, norms, t: Tensor) -> Tensor:
        return torch.stack([norm(t[:, i]) for i, norm in enumerate(norms)], dim=1)

    def forward(self, x: Tensor, pos: Tensor) -> Tensor:
        b, n = x.shape[:2]
        q, k, v = (lin(x).view(b, -1, self.heads, self.d_k).transpose(1, 2) for lin in self.linears)
        if self.attention == "galerkin":
            k, v = self._norm(self.norm_1, k), self._norm(self.norm_2, v)
        else:
            q, k = self._norm(self.norm_1, q), self._norm(self.norm_2, k)
        pos = pos.unsqueeze(1).repeat([1, self.heads, 1, 1])
        q, k, v = (torch.cat([pos, t], dim=-1) for t in (q, k, v))
        if self.attention == "galerkin":
            out = torch.einsum("bhnd,bhde->bhne", q, torch.einsum("bhnd,bhne->bhde", k, v) / n)
        else:
            out = torch.einsum("bhnm,bhme->bhne", torch.einsum("bhnd,bhmd->bhnm", q, k) / n, v)
        out = out.transpose(1, 2).contiguous().view(b, -1, self.heads * (self.d_k + self.pos_dim))
        return self.fc(out)


class GalerkinReferenceLayer(nn.Module):
    """The authors' encoder layer: ``x + Attn(x)``, then ``x + FFN(x)`` with FFN d -> 2d -> d."""

    def __init__(self, d: int, heads: int, pos_dim: int, attention: str = "galerkin"):
        super().__init__()
        self.attn = GalerkinReferenceAttention(d, heads, pos_dim, attention)
        self.ffn = nn.Sequential(nn.Linear(d, 2 * d), nn.ReLU(), nn.Linear(2 * d, d))

    def forward(self, x: Tensor, pos: Tensor) -> Tensor:
        x = x + self.attn(x, pos)
        return x + self.ffn(x)


class GalerkinReferenceEncoder(nn.Module):
    """``layers`` reference encoder layers on dense ``[B, n, d]`` features and ``[B, n, m]``
    coordinates."""

    def __init__(self, d: int, heads: int, pos_dim: int, layers: int, attention: str = "galerkin"):
        super().__init__()
        self.layers = nn.ModuleList(
            GalerkinReferenceLayer(d, heads, pos_dim, attention) for _ in range(layers)
        )

    def forward(self, x: Tensor, pos: Tensor) -> Tensor:
        for layer in self.layers:
            x = layer(x, pos)
        return x


# --- PiT ---------------------------------------------------------------------------------------


def pit_lambda(theta: Tensor) -> Tensor:
    """The PiT authors' positive bandwidth of each head."""
    return torch.tan(0.25 * math.pi * (1.0 - 1e-7) * (1.0 + torch.sin(theta)))


class PiTReferencePosAtt(nn.Module):
    """One position-attention layer of the PiT authors' code: returns ``[B, N_out, H * C]``, every
    head averaging all ``C`` input channels with its own Gaussian kernel."""

    def __init__(self, heads: int, locality: float):
        super().__init__()
        self.locality = locality
        self.theta = nn.Parameter(torch.rand(heads))

    def weights(self, pos_out: Tensor, pos_in: Tensor) -> Tensor:
        """Attention weights ``[B, H, N_out, N_in]``."""
        dist = (pos_out[:, :, None, :] - pos_in[:, None, :, :]).square().sum(-1)  # [B, No, Ni]
        scaled = pit_lambda(self.theta)[None, :, None, None] * dist[:, None]  # [B, H, No, Ni]
        threshold = torch.quantile(scaled, self.locality, dim=-1, keepdim=True)
        scaled = torch.where(scaled > threshold, _FLOAT32_MAX, scaled)
        return torch.softmax(-scaled, dim=-1)

    def forward(self, u: Tensor, pos_in: Tensor, pos_out: Tensor) -> Tensor:
        attn = self.weights(pos_out, pos_in)
        return torch.einsum("bhnj,bjd->bnhd", attn, u).flatten(-2)


def _mlp(sizes: list[int]) -> nn.Sequential:
    return nn.Sequential(nn.Linear(sizes[0], sizes[1]), nn.GELU(), nn.Linear(sizes[1], sizes[2]))


class PiTReference(nn.Module):
    """The PiT authors' encoder-processor-decoder (GELU between the stages)."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        width: int = 64,
        heads: int = 2,
        blocks: int = 4,
        encoder_locality: float = 0.02,
        decoder_locality: float = 0.02,
    ):
        super().__init__()
        self.lift = nn.Linear(in_channels, width)
        self.encoder = PiTReferencePosAtt(heads, encoder_locality)
        self.encoder_mlp = _mlp([heads * width, width, width])
        self.processor = nn.ModuleList(PiTReferencePosAtt(heads, 1.0) for _ in range(blocks))
        self.processor_mlps = nn.ModuleList(
            _mlp([heads * width + width, width, width]) for _ in range(blocks)
        )
        self.decoder = PiTReferencePosAtt(heads, decoder_locality)
        self.decoder_mlp = _mlp([heads * width, width, width])
        self.head = _mlp([width, width, out_channels])

    def forward(self, features: Tensor, pos: Tensor, latent_pos: Tensor) -> Tensor:
        """``features`` [B, N, C_in], ``pos`` [B, N, D], ``latent_pos`` [B, N_latent, D]."""
        u = F.gelu(self.lift(features))
        u = F.gelu(self.encoder_mlp(self.encoder(u, pos, latent_pos)))
        for attn, mlp in zip(self.processor, self.processor_mlps):
            u = F.gelu(mlp(torch.cat([attn(u, latent_pos, latent_pos), u], dim=-1)))
        u = F.gelu(self.decoder_mlp(self.decoder(u, latent_pos, pos)))
        return self.head(u)


# --- ONO ---------------------------------------------------------------------------------------


class LinearAttentionReference(nn.Module):
    """The non-causal ``SelfAttention`` of ``linear-attention-transformer`` (softmax feature maps),
    written densely: Q, K, V without bias, merged heads through a linear with bias."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads, self.dim_head = heads, dim // heads
        inner = heads * self.dim_head
        self.to_q = nn.Linear(dim, inner, bias=False)
        self.to_k = nn.Linear(dim, inner, bias=False)
        self.to_v = nn.Linear(dim, inner, bias=False)
        self.to_out = nn.Linear(inner, dim)

    def forward(self, x: Tensor) -> Tensor:
        b, n, _ = x.shape

        def split(t):
            return t.reshape(b, n, self.heads, self.dim_head).transpose(1, 2)

        q, k, v = split(self.to_q(x)), split(self.to_k(x)), split(self.to_v(x))
        q = q.softmax(dim=-1) * self.dim_head**-0.5
        k = k.softmax(dim=-2)
        context = torch.einsum("bhnd,bhne->bhde", k, v)
        out = torch.einsum("bhnd,bhde->bhne", q, context)
        return self.to_out(out.transpose(1, 2).reshape(b, n, -1))


class _ONOMLP(nn.Module):
    """The ONO authors' ``MLP(n_input, n_hidden, n_output, n_layers=0)``: linear, GELU, linear."""

    def __init__(self, n_in: int, n_hidden: int, n_out: int):
        super().__init__()
        self.pre = nn.Sequential(nn.Linear(n_in, n_hidden), nn.GELU())
        self.post = nn.Linear(n_hidden, n_out)

    def forward(self, x: Tensor) -> Tensor:
        return self.post(self.pre(x))


class ONOReferenceBlock(nn.Module):
    """One ``ONOBlock`` of ``ONO2`` with ``orth=True``."""

    def __init__(
        self,
        width: int,
        heads: int,
        psi_dim: int,
        mlp_ratio: int = 1,
        last: bool = False,
        out_dim: int = 1,
        momentum: float = 0.9,
    ):
        super().__init__()
        self.momentum = momentum
        self.ln_1, self.ln_2, self.ln_3 = (nn.LayerNorm(width) for _ in range(3))
        self.attn = LinearAttentionReference(width, heads)
        self.mlp = _ONOMLP(width, width * mlp_ratio, width)
        self.proj = nn.Linear(width, psi_dim)
        self.mu = nn.Parameter(torch.zeros(psi_dim))
        self.register_buffer("feature_cov", torch.eye(psi_dim))
        self.register_buffer("initialised", torch.tensor(False))
        self.mlp2 = nn.Linear(width, out_dim) if last else _ONOMLP(width, width * mlp_ratio, width)

    def forward(self, x: Tensor, fx: Tensor) -> tuple[Tensor, Tensor]:
        x = self.attn(self.ln_1(x)) + x
        x = self.mlp(self.ln_2(x)) + x
        x_ = self.proj(x)
        if self.training:
            cov = torch.einsum("blc,bld->cd", x_, x_) / x_.shape[0] / x_.shape[1]
            with torch.no_grad():
                if not bool(self.initialised):
                    self.feature_cov.copy_(cov)
                    self.initialised.fill_(True)
                else:
                    self.feature_cov.mul_(self.momentum).add_(cov, alpha=1 - self.momentum)
        else:
            cov = self.feature_cov
        chol = torch.linalg.cholesky(cov)
        x_ = x_ @ torch.linalg.inv(chol).transpose(-2, -1)
        fx = (x_ * F.softplus(self.mu)) @ (x_.transpose(-2, -1) @ fx) + fx
        return x, self.mlp2(self.ln_3(fx))


class ONOReference(nn.Module):
    """``ONO2``: ``x, fx = Linear([pos, f]).chunk(2)`` (its ``preprocess``: one linear layer),
    then the blocks."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        width: int = 64,
        layers: int = 4,
        heads: int = 4,
        psi_dim: int = 16,
        mlp_ratio: int = 1,
    ):
        super().__init__()
        self.preprocess = nn.Linear(in_channels, 2 * width)
        self.blocks = nn.ModuleList(
            ONOReferenceBlock(
                width, heads, psi_dim, mlp_ratio, last=i == layers - 1, out_dim=out_channels
            )
            for i in range(layers)
        )

    def forward(self, features: Tensor) -> Tensor:
        """``features`` [B, n, C_in] (coordinates and input fields) -> [B, n, C_out]."""
        x, fx = self.preprocess(features).chunk(2, dim=-1)
        for block in self.blocks:
            x, fx = block(x, fx)
        return fx


# --- Transolver --------------------------------------------------------------------------------


class PhysicsAttentionReference(nn.Module):
    """The Transolver authors' ``Physics_Attention_Irregular_Mesh`` on ``[B, N, C]`` features."""

    #: added to the slice norms before the division, as in the authors' code
    eps = 1e-5

    def __init__(self, dim: int, heads: int, slices: int):
        super().__init__()
        self.heads, self.dim_head = heads, dim // heads
        inner = heads * self.dim_head
        self.temperature = nn.Parameter(torch.full((1, heads, 1, 1), 0.5))
        self.lin_x = nn.Linear(dim, inner)
        self.lin_fx = nn.Linear(dim, inner)
        self.lin_slice = nn.Linear(self.dim_head, slices)
        nn.init.orthogonal_(self.lin_slice.weight)
        self.lin_q, self.lin_k, self.lin_v = (
            nn.Linear(self.dim_head, self.dim_head, bias=False) for _ in range(3)
        )
        self.lin_out = nn.Linear(inner, dim)

    def forward(self, x: Tensor) -> Tensor:
        b, n, _ = x.shape

        def heads(t):  # [B, N, H D] -> contiguous [B, H, N, D]
            return t.reshape(b, n, self.heads, self.dim_head).permute(0, 2, 1, 3).contiguous()

        fx, xs = heads(self.lin_fx(x)), heads(self.lin_x(x))
        s = torch.softmax(self.lin_slice(xs) / self.temperature, dim=-1)  # [B, H, N, M]
        norm = s.sum(2)  # [B, H, M]
        tokens = torch.einsum("bhnc,bhng->bhgc", fx, s)
        tokens = tokens / (norm + self.eps)[:, :, :, None].repeat(1, 1, 1, self.dim_head)
        q, k, v = self.lin_q(tokens), self.lin_k(tokens), self.lin_v(tokens)
        attn = torch.softmax(q @ k.transpose(-1, -2) * self.dim_head**-0.5, dim=-1)
        out = torch.einsum("bhgc,bhng->bhnc", attn @ v, s)
        return self.lin_out(out.permute(0, 2, 1, 3).reshape(b, n, -1))


class TransolverReferenceBlock(nn.Module):
    """The authors' ``Transolver_block`` (the last one ends in ``Linear(LN(x))``)."""

    def __init__(self, width: int, heads: int, slices: int, mlp_ratio: int, out_dim: int | None):
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.attn = PhysicsAttentionReference(width, heads, slices)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = _ONOMLP(width, width * mlp_ratio, width)
        self.head = None
        if out_dim is not None:
            self.head = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, out_dim))

    def forward(self, x: Tensor) -> Tensor:
        x = self.attn(self.ln_1(x)) + x
        x = self.mlp(self.ln_2(x)) + x
        return x if self.head is None else self.head(x)


class TransolverReference(nn.Module):
    """The authors' irregular-mesh ``Model`` (no time input, no unified position encoding); its
    parameters in the order of theirs (``tests/models/test_transolver_reference.py`` maps one onto
    the other)."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        width: int = 64,
        layers: int = 4,
        heads: int = 4,
        slices: int = 32,
        mlp_ratio: int = 1,
    ):
        super().__init__()
        self.preprocess = _ONOMLP(in_channels, 2 * width, width)
        self.blocks = nn.ModuleList(
            TransolverReferenceBlock(
                width, heads, slices, mlp_ratio, out_channels if i == layers - 1 else None
            )
            for i in range(layers)
        )
        self.placeholder = nn.Parameter(torch.rand(width) / width)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.trunc_normal_(module.weight, std=0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)

    def forward(self, features: Tensor) -> Tensor:
        """``features`` [B, N, C_in] (coordinates, then input fields) -> [B, N, C_out]."""
        x = self.preprocess(features) + self.placeholder
        for block in self.blocks:
            x = block(x)
        return x


def dense_attention(layer, u, pos_src, pos_dst, quantile=None):
    """Position-attention as the PiT authors' code computes it, on [B, N, C] tensors.

    Args:
        layer: a meshop PositionAttention or LocalPositionAttention (its W^V and lambda).
        u: [B, N_src, C] source features; pos_src [B, N_src, D], pos_dst [B, N_dst, D].
        quantile: the local receptive field (None: global attention).
    """
    b, n_src = u.shape[:2]
    v = layer.lin_v(u).view(b, n_src, layer.heads, layer.head_channels)
    dist = (pos_dst[:, :, None, :] - pos_src[:, None, :, :]).square().sum(-1)  # [B, Nd, Ns]
    logits = -layer.lam[None, :, None, None] * dist[:, None]  # [B, H, Nd, Ns]
    if quantile is not None:
        radius = torch.quantile(dist, quantile, dim=-1, keepdim=True)  # [B, Nd, 1]
        logits = logits.masked_fill((dist > radius)[:, None], float("-inf"))
    attn = torch.softmax(logits, dim=-1)
    return torch.einsum("bhij,bjhc->bihc", attn, v).reshape(b, pos_dst.shape[1], -1)


def dense_pit(model, pos, features, latent_pos):
    """meshop's PiT (same modules and weights) evaluated densely: [B, N, C] -> [B, N, C_out]."""
    q_in, q_out = model.encoder.field["quantile"], model.decoder.field["quantile"]
    u = F.gelu(model.lift(features))
    u = F.gelu(dense_attention(model.encoder, u, pos, latent_pos, q_in))
    for block in model.processor:
        h = F.gelu(dense_attention(block.attn, u, latent_pos, latent_pos))
        u = F.gelu(block.mlp(h) + block.skip(u))
    u = F.gelu(dense_attention(model.decoder, u, latent_pos, pos, q_out))
    return model.head(u)


def dense_inputs(batch, size: int):
    """A batch of ``size`` samples with equal node counts as the dense code takes it: ``[B, N, D]``
    positions, ``[B, N, C]`` node features (coordinates, input fields, parameters) and
    ``[B, N_latent, D]`` latent positions."""
    from meshop.data import latent_nodes, node_features

    latent_pos, _ = latent_nodes(batch)
    dim = batch.pos.shape[-1]
    return (
        batch.pos.view(size, -1, dim),
        node_features(batch).view(size, batch.pos.shape[0] // size, -1),
        latent_pos.view(size, -1, dim),
    )


__all__ = [
    "GalerkinReferenceAttention",
    "GalerkinReferenceEncoder",
    "GalerkinReferenceLayer",
    "LinearAttentionReference",
    "ONOReference",
    "ONOReferenceBlock",
    "PhysicsAttentionReference",
    "PiTReference",
    "PiTReferencePosAtt",
    "TransolverReference",
    "TransolverReferenceBlock",
    "dense_attention",
    "dense_inputs",
    "dense_pit",
    "pit_lambda",
]

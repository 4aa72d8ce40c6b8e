"""Orthogonal attention (ONO): a kernel integral built from batch-whitened neural eigenfunctions."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from meshop._pyg import scatter, to_dense_batch
from meshop.errors import ConfigError

INNER_PRODUCTS = ("mean", "sum")


class OrthogonalAttention(nn.Module):
    r"""Orthogonal attention of ONO (Xiao et al.), from a source node set to a target node set.

    Eigenfunction features come from a separate feature stream :math:`g` (ONO eq. (4)):
    :math:`q = g W_Q \in \mathbb{R}^{N \times k}`. They are whitened with ONE Cholesky factor
    shared by every node of every sample of the batch (eqs. (7)-(9)):

    .. math::
        C = \frac{1}{B} \sum_{b=1}^{B} \sum_{i \in b} \bar w_i\, q_i q_i^\top = L L^\top,
        \qquad \psi = q L^{-\top},
        \qquad \bar w_i = \frac{w_i}{\sum_{j \in b} w_j},

    where :math:`w` are the nodes' quadrature weights, normalised per sample so that each sample
    counts equally. On uniform sampling (:math:`w_i = 1/M`) this is the paper's plain average
    :math:`\frac{1}{BM} \sum q q^\top`; on non-uniform meshes it is the consistent quadrature of
    the second moment (the paper has none). Then :math:`\frac{1}{B}\sum_b \sum_{i \in b} \bar w_i
    \psi_i \psi_i^\top = I`. The output is the truncated Mercer expansion (eqs. (5), (15)),
    evaluated at the target nodes :math:`Y` from the source nodes :math:`X` (App. A, eq. (20)):

    .. math::
        \tilde h(Y) = \psi(Y)\, \mathrm{diag}(\mu)\, \langle \psi(X), h(X) W_V \rangle,
        \qquad \mu = \mathrm{softplus}(m),

    with the inner product taken per sample, :math:`\langle \psi, v \rangle_b = \sum_{i \in b}
    \bar w_i \psi_i v_i^\top \in \mathbb{R}^{k \times d}` (``inner_product="mean"``, independent of
    the resolution) or :math:`n_b \langle \psi, v \rangle_b` with :math:`n_b` the number of
    weighted nodes of the sample (``inner_product="sum"``: the authors' code, a raw sum
    :math:`\sum_i \psi_i v_i^\top` on uniform sampling, which grows with the resolution). The
    :math:`k \times d` coefficients are formed first: no :math:`N \times N` matrix exists.

    Training whitens with the batch moment :math:`C` (gradients flow through the Cholesky factor
    and the triangular solve, as in batch normalisation) and updates the running moment without
    gradient, BatchNorm's momentum convention:
    :math:`C_{\mathrm{run}} \leftarrow (1 - \mathrm{momentum})\, C_{\mathrm{run}} +
    \mathrm{momentum}\, C` (the authors' "0.9" is ``momentum=0.1``); the first training batch
    sets it. Evaluation whitens with :math:`C_{\mathrm{run}}` (the identity before any training
    batch). The moment, the Cholesky factor and the solve run in float64 and the integral in
    float32 (at least), with autocast disabled; a moment that is not numerically positive
    definite gets a growing jitter :math:`\epsilon\, \mathrm{tr}(C)/k\, I`. Under
    ``torch.distributed`` with more than one process, the moment is summed over the ranks (with
    gradients, like ``SyncBatchNorm``), so that every rank whitens with the same factor.

    Args:
        channels (int): width :math:`d` of the solution stream :math:`h`.
        feature_channels (int): width :math:`d'` of the feature stream :math:`g`.
        k (int): number of eigenfunctions, the rank of the kernel.
        value_projection (bool): apply :math:`W_V` (eq. (5)); ``False`` leaves :math:`h` as it is,
            as the authors' code does. Without :math:`W_V` the operator :math:`h \mapsto h +
            \tilde h` has eigenvalues :math:`\geq 1` (the kernel is positive semi-definite), so
            one stage cannot, e.g., subtract a mean.
        momentum (float): weight of the new batch moment in the running moment (see above).
        inner_product (str): ``"mean"`` or ``"sum"`` (see above).

    Shapes:
        - input: solution features :math:`h` ``[N, d]``, eigenfunction features :math:`g`
          ``[N, d']``, optional ``batch`` ``[N]`` (sorted, as in PyG batches), ``weight``
          ``[N]`` (None: uniform), and for the cross form target features ``g_dst``
          ``[N_dst, d']`` with ``batch_dst`` ``[N_dst]``.
        - output: ``[N_dst, d]`` (``N_dst = N`` for self-attention).
    """

    def __init__(
        self,
        channels: int,
        feature_channels: int,
        k: int = 8,
        value_projection: bool = True,
        momentum: float = 0.1,
        inner_product: str = "mean",
    ):
        super().__init__()
        if min(channels, feature_channels, k) < 1:
            raise ConfigError(
                f"channels, feature_channels and k must be positive, got {channels}, "
                f"{feature_channels} and {k}"
            )
        if not 0.0 < momentum <= 1.0:
            raise ConfigError(f"momentum is the weight of the new batch, in (0, 1]; got {momentum}")
        if inner_product not in INNER_PRODUCTS:
            raise ConfigError(
                f"inner_product must be one of {INNER_PRODUCTS}, got {inner_product!r}"
            )
        self.channels = channels
        self.feature_channels = feature_channels
        self.k = k
        self.momentum = momentum
        self.inner_product = inner_product
        self.lin_q = nn.Linear(feature_channels, k)
        self.lin_v = nn.Linear(channels, channels, bias=False) if value_projection else None
        self.eigen_logit = nn.Parameter(torch.empty(k))
        self.register_buffer("running_moment", torch.eye(k))
        self.register_buffer("initialized", torch.tensor(False))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Truncated-normal weights (std 0.02) and zero biases as in the authors' code, m = 0."""
        for lin in (self.lin_q, self.lin_v):
            if lin is not None:
                nn.init.trunc_normal_(lin.weight, std=0.02)
                if lin.bias is not None:
                    nn.init.zeros_(lin.bias)
        nn.init.zeros_(self.eigen_logit)
        self.reset_running_stats()

    def reset_running_stats(self) -> None:
        """Forget the running moment: identity, not initialised."""
        self.running_moment.copy_(torch.eye(self.k))
        self.initialized.fill_(False)

    @property
    def eigenvalues(self) -> Tensor:
        """The positive eigenvalues :math:`\\mu = \\mathrm{softplus}(m)`, ``[k]``."""
        return F.softplus(self.eigen_logit)

    def forward(
        self,
        h: Tensor,
        g: Tensor,
        batch: Tensor | None = None,
        weight: Tensor | None = None,
        g_dst: Tensor | None = None,
        batch_dst: Tensor | None = None,
    ) -> Tensor:
        batch = _batch_or_zeros(batch, len(g), g.device)
        num_samples = int(batch.max()) + 1 if batch.numel() else 1
        w = _sample_normalised(weight, batch, num_samples, g)
        cross = g_dst is not None
        if cross:
            batch_dst = _batch_or_zeros(batch_dst, len(g_dst), g.device)
        psi, psi_dst = self._eigenfunctions(g, w, num_samples, g_dst if cross else None)
        value = self.lin_v(h) if self.lin_v is not None else h
        dtype = torch.promote_types(value.dtype, torch.float32)
        with torch.autocast(device_type=value.device.type, enabled=False):
            psi_w, _ = to_dense_batch((psi * w[:, None]).to(dtype), batch, batch_size=num_samples)
            value_d, _ = to_dense_batch(value.to(dtype), batch, batch_size=num_samples)
            coeff = psi_w.transpose(1, 2) @ value_d  # [B, k, d]
            if self.inner_product == "sum":
                coeff = coeff * _weighted_count(w, batch, num_samples).to(dtype)[:, None, None]
            coeff = self.eigenvalues.to(dtype)[None, :, None] * coeff
            psi_dst_d, mask = to_dense_batch(
                (psi_dst if cross else psi).to(dtype),
                batch_dst if cross else batch,
                batch_size=num_samples,
            )
            return (psi_dst_d @ coeff)[mask]  # [N_dst, d]

    def eigenfunctions(
        self,
        g: Tensor,
        batch: Tensor | None = None,
        weight: Tensor | None = None,
        g_dst: Tensor | None = None,
    ) -> Tensor:
        """The whitened eigenfunctions :math:`\\psi` (float64) at the nodes of ``g``, or of
        ``g_dst`` if given, ``[N(_dst), k]``.

        The moment comes from ``g`` (with ``batch`` and ``weight``) in training mode, which also
        updates the running moment exactly as :meth:`forward` does; from the running moment in
        evaluation mode.
        """
        batch = _batch_or_zeros(batch, len(g), g.device)
        num_samples = int(batch.max()) + 1 if batch.numel() else 1
        w = _sample_normalised(weight, batch, num_samples, g)
        psi, psi_dst = self._eigenfunctions(g, w, num_samples, g_dst)
        return psi if g_dst is None else psi_dst

    def _eigenfunctions(self, g, w, num_samples, g_dst) -> tuple[Tensor, Tensor | None]:
        q = self.lin_q(g)
        q_dst = self.lin_q(g_dst) if g_dst is not None else None
        with torch.autocast(device_type=q.device.type, enabled=False):
            q = q.to(torch.float64)
            if self.training:
                moment = self._batch_moment(q, w, num_samples)
                self._update_running_moment(moment.detach())
            else:
                moment = self.running_moment.to(torch.float64)
            chol = _cholesky_with_jitter(moment)
            psi = _whiten(q, chol)
            psi_dst = _whiten(q_dst.to(torch.float64), chol) if q_dst is not None else None
        return psi, psi_dst

    def _batch_moment(self, q: Tensor, w: Tensor, num_samples: int) -> Tensor:
        moment_sum = (q * w.to(q.dtype)[:, None]).T @ q  # sum over samples of per-sample moments
        count = torch.tensor([float(num_samples)], dtype=q.dtype, device=q.device)
        if _distributed():
            from torch.distributed.nn.functional import all_reduce

            packed = all_reduce(torch.cat([moment_sum.flatten(), count]))
            moment_sum, count = packed[:-1].view(self.k, self.k), packed[-1:]
        return moment_sum / count

    @torch.no_grad()
    def _update_running_moment(self, moment: Tensor) -> None:
        moment = moment.to(self.running_moment.dtype)
        if bool(self.initialized):
            self.running_moment.lerp_(moment, self.momentum)
        else:
            self.running_moment.copy_(moment)
            self.initialized.fill_(True)

    def extra_repr(self) -> str:
        return (
            f"{self.channels}, feature_channels={self.feature_channels}, k={self.k}, "
            f"value_projection={self.lin_v is not None}, momentum={self.momentum}, "
            f"inner_product={self.inner_product!r}"
        )


def _batch_or_zeros(batch: Tensor | None, n: int, device) -> Tensor:
    return batch if batch is not None else torch.zeros(n, dtype=torch.long, device=device)


def _sample_normalised(weight, batch, num_samples, like) -> Tensor:
    """Quadrature weights scaled to sum to one in every sample (uniform when ``weight`` is None)."""
    w = torch.ones(len(batch), device=like.device) if weight is None else weight
    w = w.to(torch.promote_types(w.dtype, torch.float32))
    total = scatter(w, batch, dim=0, dim_size=num_samples, reduce="sum")
    return w / total[batch]


def _weighted_count(w, batch, num_samples) -> Tensor:
    """Number of nodes with a positive weight in every sample, ``[B]``."""
    return scatter((w > 0).to(w.dtype), batch, dim=0, dim_size=num_samples, reduce="sum")


def _whiten(q: Tensor, chol: Tensor) -> Tensor:
    """``q L^{-T}`` by a triangular solve (``X L^T = q``), never an explicit inverse."""
    return torch.linalg.solve_triangular(chol.T, q, upper=True, left=False)


def _cholesky_with_jitter(moment: Tensor, tries: int = 10) -> Tensor:
    """Cholesky factor of ``moment``; adds ``eps tr/k I`` (eps = 1e-10, 1e-9, ...) if needed."""
    chol, info = torch.linalg.cholesky_ex(moment)
    if int(info) == 0:
        return chol
    k = moment.shape[-1]
    eye = torch.eye(k, dtype=moment.dtype, device=moment.device)
    scale = (moment.diagonal().sum().abs() / k).clamp_min(torch.finfo(moment.dtype).tiny)
    for exponent in range(-10, -10 + tries):
        chol, info = torch.linalg.cholesky_ex(moment + scale * 10.0**exponent * eye)
        if int(info) == 0:
            return chol
    raise torch.linalg.LinAlgError(
        "orthogonal attention: the second moment of the eigenfunction features is not positive "
        "definite even with jitter (are the features NaN or Inf? lower the learning rate or "
        "check the inputs for non-finite values)"
    )


def _distributed() -> bool:
    dist = torch.distributed
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


__all__ = ["OrthogonalAttention"]

"""Orthogonal attention (ONO): a kernel integral of orthonormalised neural eigenfunctions."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from meshop._pyg import to_dense_batch
from meshop.data.batching import sample_ranges
from meshop.data.neighbors import equal_sizes
from meshop.errors import ConfigError
from meshop.nn.integral import Integral, split_group
from meshop.nn.interface import check_inputs
from meshop.nn.quadrature import (
    chunk_weight,
    normalised_equal_weight,
    normalised_weight,
    weighted_count,
)

INNER_PRODUCTS = ("mean", "sum")
ORTHONORMALIZATIONS = ("sample", "batch")


class OrthogonalAttention(Integral):
    r"""Orthogonal attention of ONO (Xiao et al.), from a source node set to a target node set.

    Eigenfunction features come from a separate feature stream :math:`g` (ONO eq. (4)):
    :math:`q = g W_Q \in \mathbb{R}^{N \times k}`. They are made orthonormal by a Cholesky factor
    of their second moment (eqs. (7)-(9)). With ``orthonormalize="sample"`` (the default) every
    sample :math:`b` of the batch gets its own factor, from its own nodes and quadrature weights:

    .. math::
        C_b = \sum_{i \in b} \bar w_i\, q_i q_i^\top = L_b L_b^\top,
        \qquad \psi_i = q_i L_{b(i)}^{-\top},
        \qquad \bar w_i = \frac{w_i}{\sum_{j \in b} w_j},

    where :math:`w` are the nodes' quadrature weights. Then :math:`\sum_{i \in b} \bar w_i \psi_i
    \psi_i^\top = I` in every sample: the :math:`k` eigenfunctions are orthonormal in
    :math:`L^2` of the sample's own domain (with the measure normalised to one), which is the
    inner product of eqs. (5) and (15) on a mesh. Nothing is estimated across samples, so
    training and evaluation compute the same function and a prediction never depends on the
    other samples of its batch. A sample needs at least :math:`k` nodes with a positive weight.

    With ``orthonormalize="batch"`` (the authors' form, eqs. (7)-(9) literally) one factor is
    shared by every node of every sample of the batch:
    :math:`C = \frac{1}{B} \sum_b C_b = L L^\top`, :math:`\psi = q L^{-\top}`, so that only the
    batch as a whole is white. On uniform sampling (:math:`w_i = 1/M`) :math:`C` is the paper's
    plain average :math:`\frac{1}{BM} \sum q q^\top`. Training whitens with the batch moment and
    updates a running moment without gradient, BatchNorm's momentum convention:
    :math:`C_{\mathrm{run}} \leftarrow (1 - \mathrm{momentum})\, C_{\mathrm{run}} +
    \mathrm{momentum}\, C` (the authors' "0.9" is ``momentum=0.1``); the first training batch
    sets it. Evaluation whitens with :math:`C_{\mathrm{run}}` (the identity before any training
    batch), which on meshes of different sizes is a poor stand-in for the batch moments the
    model was trained with (see the ONO page of the documentation for measurements). Under
    ``torch.distributed`` with more than one process, the batch moment is summed over the ranks
    (with gradients, like ``SyncBatchNorm``), so that every rank whitens with the same factor;
    ``"sample"`` needs no communication.

    The output is the truncated Mercer expansion (eqs. (5), (15)), evaluated at the target nodes
    :math:`Y` from the source nodes :math:`X` (App. A, eq. (20)), a target node using the factor
    of its own sample:

    .. math::
        \tilde h(Y) = \psi(Y)\, \mathrm{diag}(\mu)\, \langle \psi(X), h(X) W_V \rangle,
        \qquad \mu = \mathrm{softplus}(m),

    with the inner product taken per sample, :math:`\langle \psi, v \rangle_b = \sum_{i \in b}
    \bar w_i \psi_i v_i^\top \in \mathbb{R}^{k \times d}` (``inner_product="mean"``, independent of
    the resolution) or :math:`n_b \langle \psi, v \rangle_b` with :math:`n_b` the number of
    weighted nodes of the sample (``inner_product="sum"``: the authors' code, a raw sum
    :math:`\sum_i \psi_i v_i^\top` on uniform sampling, which grows with the resolution). The
    :math:`k \times d` coefficients are formed first: no :math:`N \times N` matrix exists.

    Gradients flow through the moments, the Cholesky factors and the triangular solves. These
    run in float64 (the factors batched over the samples, ``[B, k, k]``) and the integral in
    float32 (at least), with autocast disabled; a moment that is not numerically positive
    definite gets a growing jitter :math:`\epsilon\, \mathrm{tr}(C)/k\, I` (only that moment).

    Args:
        channels (int): width :math:`d` of the solution stream :math:`h`.
        feature_channels (int): width :math:`d'` of the feature stream :math:`g`.
        k (int): number of eigenfunctions, the rank of the kernel.
        value_projection (bool): apply :math:`W_V` (eq. (5)); ``False`` leaves :math:`h` as it is,
            as the authors' code does. Without :math:`W_V` the operator :math:`h \mapsto h +
            \tilde h` has eigenvalues :math:`\geq 1` (the kernel is positive semi-definite), so
            one stage cannot, e.g., subtract a mean.
        orthonormalize (str): ``"sample"`` or ``"batch"`` (see above).
        momentum (float): weight of the new batch moment in the running moment
            (``orthonormalize="batch"`` only).
        inner_product (str): ``"mean"`` or ``"sum"`` (see above).

    Shapes:
        - input: the common signature of :mod:`meshop.nn.interface`: solution features
          :math:`h` as ``x`` ``[N, d]``, ``pos`` (not read; ``None`` will do), optional
          ``batch`` ``[N]`` (sorted, as in PyG batches), ``weight`` ``[N]`` (None: uniform);
          keywords: the eigenfunction features :math:`g` ``[N, d']`` (required) and, for the
          cross form, target features ``g_dst`` ``[N_dst, d']`` with ``batch_dst``
          ``[N_dst]`` (sorted; ``pos_dst`` optional, only checked). A target of a sample that
          has no source nodes gets zeros.
        - output: ``[N_dst, d]`` (``N_dst = N`` for self-attention).
    """

    #: the moments' factors first, then the inner products that need them
    passes = 2

    def __init__(
        self,
        channels: int,
        feature_channels: int,
        k: int = 8,
        value_projection: bool = True,
        orthonormalize: str = "sample",
        momentum: float = 0.1,
        inner_product: str = "mean",
    ):
        super().__init__()
        if min(channels, feature_channels, k) < 1:
            raise ConfigError(
                f"channels, feature_channels and k must be positive, got {channels}, "
                f"{feature_channels} and {k}"
            )
        if orthonormalize not in ORTHONORMALIZATIONS:
            raise ConfigError(
                f"orthonormalize must be one of {ORTHONORMALIZATIONS}, got {orthonormalize!r}"
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
        self.orthonormalize = orthonormalize
        self.momentum = momentum
        self.inner_product = inner_product
        self.lin_q = nn.Linear(feature_channels, k)
        self.lin_v = nn.Linear(channels, channels, bias=False) if value_projection else None
        self.eigen_logit = nn.Parameter(torch.empty(k))
        if orthonormalize == "batch":
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
        """Forget the running moment (identity, not initialised); ``"sample"`` keeps none."""
        if self.orthonormalize == "batch":
            self.running_moment.copy_(torch.eye(self.k))
            self.initialized.fill_(False)

    @property
    def eigenvalues(self) -> Tensor:
        """The positive eigenvalues :math:`\\mu = \\mathrm{softplus}(m)`, ``[k]``."""
        return F.softplus(self.eigen_logit)

    def forward(
        self,
        x: Tensor,
        pos: Tensor | None,
        batch: Tensor | None = None,
        weight: Tensor | None = None,
        *,
        pos_dst: Tensor | None = None,
        batch_dst: Tensor | None = None,
        g: Tensor,
        g_dst: Tensor | None = None,
    ) -> Tensor:
        h = x
        _check_streams(h, pos, batch, weight, pos_dst, batch_dst, g, g_dst)
        if g_dst is None and len(g):
            sizes = equal_sizes(len(g), len(g), batch, batch)
            if sizes is not None:
                return self._forward_equal(h, g, weight, sizes[0])
        batch = _batch_or_zeros(batch, len(g), g.device)
        if g_dst is not None:
            batch_dst = _batch_or_zeros(batch_dst, len(g_dst), g.device)
        num_samples = _num_samples(batch, batch_dst if g_dst is not None else None)
        w = normalised_weight(weight, batch, num_samples, g)
        psi, w_d, psi_dst, mask_dst = self._eigenfunctions(
            g, batch, w, num_samples, g_dst, batch_dst
        )
        dtype = torch.promote_types(h.dtype, torch.float32)
        with torch.autocast(device_type=h.device.type, enabled=False):
            h_d, _ = to_dense_batch(h.to(dtype), batch, batch_size=num_samples)
            coeff = (psi * w_d[..., None]).to(dtype).transpose(1, 2) @ h_d  # [B, k, d]
            count = weighted_count(w, batch, num_samples) if self.inner_product == "sum" else None
            return (psi_dst.to(dtype) @ self._coefficients(coeff, count))[mask_dst]  # [N_dst, d]

    def _forward_equal(self, h: Tensor, g: Tensor, weight: Tensor | None, b: int) -> Tensor:
        """Samples of equal sizes as ``[B, m, *]`` views: no padding, no gathering (the same
        numbers as the padded path up to rounding)."""
        n, m = len(g), len(g) // b
        w = normalised_equal_weight(weight, b, m, g)  # [B, m]
        q = self.lin_q(g)
        dtype = torch.promote_types(h.dtype, torch.float32)
        with torch.autocast(device_type=h.device.type, enabled=False):
            q_d = q.to(torch.float64).view(b, m, self.k)
            w_d = w.to(torch.float64)
            count = (w > 0).sum(1).to(w.dtype)
            chol = self._factor(q_d, w_d, count, torch.ones(b, dtype=torch.bool, device=g.device))
            psi = _whiten(q_d, chol).to(dtype)  # [B, m, k]
            h_d = h.to(dtype).view(b, m, -1)
            coeff = (psi * w.to(dtype)[..., None]).transpose(1, 2) @ h_d  # [B, k, d]
            coeff = self._coefficients(coeff, count if self.inner_product == "sum" else None)
            return (psi @ coeff).view(n, -1)

    def _coefficients(self, coeff: Tensor, count: Tensor | None) -> Tensor:
        """``diag(mu) <psi, h> W_V^T`` from ``<psi, h>`` ``[B, k, d]``: the value projection acts
        on the k x d coefficients (``<psi, h W_V^T> = <psi, h> W_V^T``), not on every node; the
        authors' raw sum multiplies by the count of weighted nodes ``count`` ``[B]``."""
        if self.lin_v is not None:
            coeff = coeff @ self.lin_v.weight.to(coeff.dtype).T
        if count is not None:
            coeff = coeff * count.to(coeff.dtype)[:, None, None]
        return self.eigenvalues.to(coeff.dtype)[None, :, None] * coeff

    def eigenfunctions(
        self,
        g: Tensor,
        batch: Tensor | None = None,
        weight: Tensor | None = None,
        g_dst: Tensor | None = None,
        batch_dst: Tensor | None = None,
    ) -> Tensor:
        """The orthonormalised eigenfunctions :math:`\\psi` (float64) at the nodes of ``g``, or
        of ``g_dst`` (of the samples ``batch_dst``) if given, ``[N(_dst), k]``.

        The factors come from ``g`` with ``batch`` and ``weight``, as in :meth:`forward`; with
        ``orthonormalize="batch"`` training mode also updates the running moment exactly as
        :meth:`forward` does, and evaluation mode uses the running moment.
        """
        batch = _batch_or_zeros(batch, len(g), g.device)
        if g_dst is not None:
            batch_dst = _batch_or_zeros(batch_dst, len(g_dst), g.device)
        num_samples = _num_samples(batch, batch_dst if g_dst is not None else None)
        w = normalised_weight(weight, batch, num_samples, g)
        _, _, psi_dst, mask_dst = self._eigenfunctions(g, batch, w, num_samples, g_dst, batch_dst)
        return psi_dst[mask_dst]

    def _eigenfunctions(self, g, batch, w, num_samples, g_dst, batch_dst):
        """Padded per-sample tensors: ``psi`` ``[B, M, k]`` and ``w`` ``[B, M]`` at the source
        nodes, ``psi`` at the target nodes ``[B, M_dst, k]`` and their mask (the source nodes'
        when there are no targets)."""
        q = self.lin_q(g)
        q_dst = self.lin_q(g_dst) if g_dst is not None else None
        with torch.autocast(device_type=q.device.type, enabled=False):
            q_d, mask = to_dense_batch(q.to(torch.float64), batch, batch_size=num_samples)
            w_d, _ = to_dense_batch(w.to(torch.float64), batch, batch_size=num_samples)
            count = weighted_count(w, batch, num_samples)
            # a sample without source nodes (only targets) integrates to zero: any factor will do
            present = torch.bincount(batch, minlength=num_samples) > 0
            chol = self._factor(q_d, w_d, count, present)  # [B or 1, k, k]
            psi = _whiten(q_d, chol)
            if q_dst is None:
                return psi, w_d, psi, mask
            q_dst_d, mask_dst = to_dense_batch(
                q_dst.to(torch.float64), batch_dst, batch_size=num_samples
            )
            return psi, w_d, _whiten(q_dst_d, chol), mask_dst

    def _factor(self, q_d, w_d, count, present) -> Tensor:
        """Cholesky factors: one per sample ``[B, k, k]``, or the batch's ``[1, k, k]``; ``count``
        is the number of weighted nodes of every sample ``[B]``, ``present`` whether it has any
        source node."""
        if self.orthonormalize == "batch" and not self.training:
            return _cholesky_with_jitter(self.running_moment.to(torch.float64))[None]
        moments = (q_d * w_d[..., None]).transpose(1, 2) @ q_d  # [B, k, k]: C_b
        if self.orthonormalize == "sample":
            _check_enough_nodes(count, self.k, present)
            eye = torch.eye(self.k, dtype=moments.dtype, device=moments.device)
            return _cholesky_with_jitter(torch.where(present[:, None, None], moments, eye))
        moment = self._batch_moment(moments, present)
        self._update_running_moment(moment.detach())
        return _cholesky_with_jitter(moment)[None]

    def _batch_moment(self, moments: Tensor, present: Tensor) -> Tensor:
        moment_sum = moments.sum(0)  # sum over samples of per-sample moments
        count = present.sum().to(moments.dtype).clamp_min(1.0).view(1)  # samples with sources
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

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        if f"{prefix}lin_q.weight" in state_dict:
            saved = "batch" if f"{prefix}running_moment" in state_dict else "sample"
            if saved != self.orthonormalize:
                raise ConfigError(
                    f"the state of '{prefix.rstrip('.') or 'the layer'}' was saved with "
                    f"orthonormalize={saved!r} (it {'has' if saved == 'batch' else 'has no'} "
                    f"running moment) but this model was built with "
                    f"orthonormalize={self.orthonormalize!r}; build it with "
                    f"orthonormalize={saved!r}"
                )
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    # The integral protocol (meshop.nn.integral), in the order of the unchunked sample path: two
    # passes, the moments C_b (then their Cholesky factors), then the coefficients <psi, h>
    # (which need the factors), then psi diag(mu) <psi, h> per node.

    def partial(self, x, pos, batch, weight, num_samples, state=None, *, g, **extra):
        r"""The sums of these nodes (solution features ``x`` [n, d], eigenfunction features
        ``g`` [n, d'], sorted ``batch`` [n] of global sample indices, ``weight`` [n] or None),
        per sample. First pass (``state`` None), in float64: :math:`\sum_i w_i q_i q_i^\top`
        (``"qq"``), :math:`\sum_i w_i` (``"mass"``), the number of positive weights
        (``"count"``) and of nodes (``"nodes"``). Second pass (``state`` the first pass's
        :meth:`finish`): the inner products :math:`\langle \psi, h \rangle_b = \sum_{i \in b}
        \bar w_i \psi_i h_i^\top` ``[B, k, d]``."""
        if state is None:
            q = self.lin_q(g).to(torch.float64)
            w = chunk_weight(weight, g, torch.float64)
            sums = {
                "qq": q.new_zeros(num_samples, self.k, self.k),
                "mass": q.new_zeros(num_samples),
                "count": q.new_zeros(num_samples),
                "nodes": q.new_zeros(num_samples),
            }
            for sample, nodes in sample_ranges(batch, num_samples):
                sums["qq"][sample] = (q[nodes] * w[nodes, None]).T @ q[nodes]
                sums["mass"][sample] = w[nodes].sum()
                sums["count"][sample] = (w[nodes] > 0).sum()
                sums["nodes"][sample] = nodes.stop - nodes.start
            return sums
        factors, moments = state
        dtype = torch.promote_types(x.dtype, torch.float32)
        w = chunk_weight(weight, g, torch.float64)
        inner = x.new_zeros(len(factors), self.k, x.shape[1], dtype=dtype)
        for sample, nodes in sample_ranges(batch, len(factors)):
            psi = self._chunk_eigenfunctions(g[nodes], factors[sample], dtype)
            w_bar = (w[nodes] / moments["mass"][sample]).to(dtype)
            inner[sample] = (psi * w_bar[:, None]).T @ x[nodes].to(dtype)
        return inner

    def finish(self, sums, state=None):
        """First pass: ``(factors, moments)``, the Cholesky factors ``[B, k, k]`` (float64) of
        the per-sample moments (``"sample"``), or one factor for every sample (``"batch"``: the
        batch moment, which training also folds into the running moment as :meth:`forward`
        does, or the running moment in evaluation). Second pass: ``(factors, coefficients)``,
        :math:`\\mathrm{diag}(\\mu) \\langle \\psi, h \rangle W_V^\top` ``[B, k, d]``."""
        if state is not None:
            factors, moments = state
            count = moments["count"] if self.inner_product == "sum" else None
            return factors, self._coefficients(sums, count)
        mass = sums["mass"].clamp_min(torch.finfo(torch.float64).tiny)
        moments = sums["qq"] / mass[:, None, None]
        present = sums["nodes"] > 0
        if self.orthonormalize == "batch":
            if self.training:
                moment = self._batch_moment(moments, present)
                self._update_running_moment(moment.detach())
            else:
                moment = self.running_moment.to(torch.float64)
            return _cholesky_with_jitter(moment).expand(len(moments), -1, -1), sums
        _check_enough_nodes(sums["count"], self.k, present)
        eye = torch.eye(self.k, dtype=moments.dtype, device=moments.device)
        return _cholesky_with_jitter(torch.where(present[:, None, None], moments, eye)), sums

    def apply(self, state, x, pos, batch, *, g, **extra) -> Tensor:
        r"""The output :math:`\psi(Y) \mathrm{diag}(\mu) \langle \psi, h \rangle` ``[n, d]``
        at these nodes, with eigenfunction features ``g``."""
        factors, coefficients = state
        out = coefficients.new_empty(len(g), coefficients.shape[-1])
        for sample, nodes in sample_ranges(batch, len(coefficients)):
            psi = self._chunk_eigenfunctions(g[nodes], factors[sample], coefficients.dtype)
            out[nodes] = psi @ coefficients[sample]
        return out

    def _chunk_eigenfunctions(self, g: Tensor, factor: Tensor, dtype: torch.dtype) -> Tensor:
        r""":math:`\psi = q L^{-\top}` of one sample's nodes in a chunk, ``[n, k]``."""
        return _whiten(self.lin_q(g).to(torch.float64)[None], factor[None])[0].to(dtype)

    def extra_repr(self) -> str:
        return (
            f"{self.channels}, feature_channels={self.feature_channels}, k={self.k}, "
            f"value_projection={self.lin_v is not None}, "
            f"orthonormalize={self.orthonormalize!r}, momentum={self.momentum}, "
            f"inner_product={self.inner_product!r}"
        )


def _num_samples(batch: Tensor, batch_dst: Tensor | None) -> int:
    """Samples of a (source, target) batch: every sample index of either node set counts, so
    targets of a sample without sources are read (as zeros), not dropped."""
    last = max([int(b.max()) for b in (batch, batch_dst) if b is not None and b.numel()], default=0)
    return last + 1


def _check_streams(h, pos, batch, weight, pos_dst, batch_dst, g, g_dst) -> None:
    """The common arguments (:mod:`meshop.nn.interface`) and the two feature streams agree."""
    check_inputs("OrthogonalAttention", h, pos, batch, weight, needs_pos=False)
    if g.dim() != 2 or len(g) != len(h):
        raise ConfigError(
            f"OrthogonalAttention: g (the eigenfunction features) must be [N, d'] with one row "
            f"per node of x ({len(h)}), got {tuple(g.shape)}"
        )
    if g_dst is None:
        if pos_dst is not None or batch_dst is not None:
            raise ConfigError(
                "OrthogonalAttention evaluates its eigenfunctions at the targets from their "
                "features: give g_dst (and batch_dst) for a cross form"
            )
        return
    if g_dst.dim() != 2 or g_dst.shape[1] != g.shape[1]:
        raise ConfigError(
            f"OrthogonalAttention: g_dst must be [M, {g.shape[1]}] like g, got {tuple(g_dst.shape)}"
        )
    for what, t in (("pos_dst", pos_dst), ("batch_dst", batch_dst)):
        if t is not None and len(t) != len(g_dst):
            raise ConfigError(
                f"OrthogonalAttention: {what} has {len(t)} rows but g_dst has {len(g_dst)}; "
                f"give one per target node"
            )


def _batch_or_zeros(batch: Tensor | None, n: int, device) -> Tensor:
    return batch if batch is not None else torch.zeros(n, dtype=torch.long, device=device)


def _check_enough_nodes(count, k, present) -> None:
    """k functions can be orthonormal on a sample only if it has k nodes with positive weight
    (``count`` of every sample, ``[B]``; samples without any source node, ``present`` False,
    have nothing to orthonormalise)."""
    short = (count < k) & present
    if bool(short.any()):
        b = int(torch.argmax(short.to(torch.int8)))
        raise ConfigError(
            f"orthonormalize='sample' makes k={k} eigenfunctions orthonormal on every sample, "
            f"which needs at least k nodes with a positive weight, but sample {b} of the batch "
            f"has {int(count[b])}; lower k, or build with orthonormalize='batch'"
        )


def _whiten(q: Tensor, chol: Tensor) -> Tensor:
    """``q L^{-T}`` per sample by a triangular solve (``X L^T = q``), never an explicit inverse;
    ``q`` ``[B, M, k]``, ``chol`` ``[B, k, k]`` or ``[1, k, k]``."""
    return torch.linalg.solve_triangular(chol.transpose(-2, -1), q, upper=True, left=False)


def _cholesky_with_jitter(moment: Tensor, tries: int = 10) -> Tensor:
    """Cholesky factors of ``moment`` ``[..., k, k]``; a moment that is not numerically positive
    definite gets ``eps tr/k I`` added (eps = 1e-10, 1e-9, ...), the others are left as they are.
    The factors come from a single final call, so gradients never see a failed factorisation."""
    k = moment.shape[-1]
    eye = torch.eye(k, dtype=moment.dtype, device=moment.device)
    scale = (moment.diagonal(dim1=-2, dim2=-1).sum(-1).abs() / k).clamp_min(
        torch.finfo(moment.dtype).tiny
    )
    jitter = torch.zeros_like(scale)
    chol, info = torch.linalg.cholesky_ex(moment)
    for exponent in range(-10, -10 + tries):
        failed = info > 0
        if not bool(failed.any()):
            return chol
        jitter = torch.where(failed, scale * 10.0**exponent, jitter)
        chol, info = torch.linalg.cholesky_ex(moment + jitter[..., None, None] * eye)
    if not bool((info > 0).any()):
        return chol
    raise torch.linalg.LinAlgError(
        "orthogonal attention: the second moment of the eigenfunction features is not positive "
        "definite even with jitter (are the features NaN or Inf? lower the learning rate or "
        "check the inputs for non-finite values)"
    )


def _distributed() -> bool:
    """Whether the batch moment is summed over processes that hold other samples (data
    parallelism); under :func:`~meshop.nn.splitting.split_mesh` the processes hold parts of the
    same samples, whose moments are already summed."""
    dist = torch.distributed
    if split_group() is not None:
        return False
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


__all__ = ["ORTHONORMALIZATIONS", "OrthogonalAttention"]

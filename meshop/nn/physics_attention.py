r"""Physics-attention of Transolver (Wu et al., ICML 2024, Sec. 3.1, eqs. (1)-(4)): nodes are softly
sliced into a few learned physical states, attention runs among the states, and the result is
broadcast back to the nodes."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from meshop.data.batching import sample_ranges
from meshop.errors import ConfigError
from meshop.nn.integral import Integral
from meshop.nn.interface import check_inputs
from meshop.nn.quadrature import chunk_weight


class PhysicsAttention(Integral):
    r"""Transolver's physics-attention (Transolver Sec. 3.1, eqs. (1)-(4)), linear in the nodes.

    For every head :math:`h` (head width :math:`D`) and every sample, with node features
    :math:`\mathbf{x}_i \in \mathbb{R}^C` and quadrature weights :math:`w_i`:

    .. math::
        \mathbf{s}_i &= \mathrm{Softmax}_j\big(W_s (W_x \mathbf{x}_i)_h / \tau_h\big)
            \in \mathbb{R}^M
            &\text{(eq. (1): slice weights, } \textstyle\sum_j s_{ij} = 1) \\
        \mathbf{z}_j &= \frac{\sum_i w_i\, s_{ij}\, (W_f \mathbf{x}_i)_h}{\sum_i w_i\, s_{ij}}
            &\text{(eq. (2): slice tokens)} \\
        \mathbf{z}'_j &= \sum_{k} \mathrm{Softmax}_k\Big(
            \frac{(W_q \mathbf{z}_j) \cdot (W_k \mathbf{z}_k)}{\sqrt{D}}\Big)\, W_v \mathbf{z}_k
            &\text{(eq. (3): attention among the } M \text{ tokens)} \\
        \mathbf{x}'_i &= W_o \big[\textstyle\sum_j s_{ij}\, \mathbf{z}'_j\big]_{h}
            &\text{(eq. (4): deslice, heads merged)}

    :math:`\tau_h` is a learnable temperature per head (0.5 at initialisation, as in the authors'
    code). The paper's eq. (2) averages over the nodes with equal weights; here the sums are
    integrals with the mesh's quadrature weights (``1/n`` per sample when none are given, which is
    the paper's formula), so a slice token is the slice-weighted mean of the features over the
    *domain*, not over the node density: on a graded mesh the tokens converge to the same values
    as on a uniform one when the mesh is refined. The weights only enter the ratio of eq. (2), so
    their scale (a per-sample normalisation) does not matter. A node with weight zero reads the
    tokens (it gets its own :math:`\mathbf{x}'_i`) but adds nothing to them: that is how models
    evaluate the layer at query points.

    Cost: :math:`O(N H M D)` time and :math:`O(N H M)` memory for the slicing and deslicing (one
    matrix product per sample, no padding of the nodes), plus :math:`O(B H M^2 D)` for the
    attention among the tokens, stored densely as ``[B, heads, M, D]``.

    Args:
        channels (int): width :math:`C` of the input and output features.
        heads (int): number of heads :math:`H`.
        slices (int): number of slices :math:`M` per head.
        head_channels (int, optional): head width :math:`D` (default ``channels // heads``).
        dropout (float): dropout on the token attention weights, applied in training only.
        temperature (float): initial value of every :math:`\tau_h`.

    Shapes:
        - input: the common signature of :mod:`meshop.nn.interface`, self-attention only:
          ``x`` [N, C], ``pos`` [N, dim] or ``None`` (not used: the features carry the
          coordinates, as in the paper), ``batch`` [N] (sorted, as in PyG batches), ``weight``
          [N] (``pos_dst`` and ``batch_dst`` raise: the slice weights are the nodes' own)
        - output: [N, C]
    """

    def __init__(
        self,
        channels: int,
        heads: int = 8,
        slices: int = 64,
        head_channels: int | None = None,
        dropout: float = 0.0,
        temperature: float = 0.5,
    ):
        super().__init__()
        if head_channels is None:
            if heads < 1 or channels % heads:
                raise ConfigError(
                    f"heads ({heads}) must be positive and divide channels ({channels}), or give "
                    f"head_channels"
                )
            head_channels = channels // heads
        if min(channels, heads, slices, head_channels) < 1 or temperature <= 0:
            raise ConfigError(
                "channels, heads, slices and head_channels must be positive and temperature > 0; "
                f"got {channels}, {heads}, {slices}, {head_channels}, {temperature}"
            )
        self.channels, self.heads, self.slices = channels, heads, slices
        self.head_channels, self.dropout = head_channels, dropout
        self.init_temperature = temperature
        inner = heads * head_channels
        self.lin_x = nn.Linear(channels, inner)  # W_x: features that choose the slices
        self.lin_fx = nn.Linear(channels, inner)  # W_f: features averaged into the tokens
        self.lin_slice = nn.Linear(head_channels, slices)  # W_s, shared by the heads
        self.temperature = nn.Parameter(torch.empty(heads))
        self.lin_q = nn.Linear(head_channels, head_channels, bias=False)
        self.lin_k = nn.Linear(head_channels, head_channels, bias=False)
        self.lin_v = nn.Linear(head_channels, head_channels, bias=False)
        self.lin_out = nn.Linear(inner, channels)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """PyTorch's default linear initialisation; the slice projection orthogonal (authors'
        code); every temperature at its initial value."""
        for lin in (self.lin_x, self.lin_fx, self.lin_q, self.lin_k, self.lin_v, self.lin_out):
            lin.reset_parameters()
        nn.init.orthogonal_(self.lin_slice.weight)
        nn.init.zeros_(self.lin_slice.bias)
        nn.init.constant_(self.temperature, self.init_temperature)

    def slice_weights(self, x: Tensor) -> Tensor:
        """Eq. (1): the soft assignment of every node to the slices of every head, [N, H, M]
        (non-negative, summing to one over the slices)."""
        return self._slice_weights(x).transpose(0, 1)

    def slice_tokens(
        self, x: Tensor, batch: Tensor | None = None, weight: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Eqs. (1)-(2): ``(slice weights [N, H, M], slice tokens [B, H, M, D])``, the tokens
        integrated per sample with the quadrature ``weight`` (``1/n`` per sample when None)."""
        s, tokens = self._slice(x, _sample_sizes(batch, len(x)), weight)
        return s.transpose(0, 1), tokens

    def forward(
        self,
        x: Tensor,
        pos: Tensor | None,
        batch: Tensor | None = None,
        weight: Tensor | None = None,
        *,
        pos_dst: Tensor | None = None,
        batch_dst: Tensor | None = None,
    ) -> Tensor:
        check_inputs(
            type(self).__name__,
            x,
            pos,
            batch,
            weight,
            pos_dst,
            batch_dst,
            cross=False,
            needs_pos=False,
        )
        sizes = _sample_sizes(batch, len(x))
        if len(x) and _all_equal(sizes):
            return self._forward_equal(x, weight, len(sizes))
        s, z = self._slice(x, sizes, weight)  # [H, N, M], [B, H, M, D]
        z = self._attend(z)  # eq. (3)
        out = [s_b @ z_b for s_b, z_b in zip(s.split(sizes, dim=1), z)]  # eq. (4)
        return self.lin_out(torch.cat(out, dim=1).transpose(0, 1).reshape(len(x), -1))

    def _forward_equal(self, x: Tensor, weight: Tensor | None, b: int) -> Tensor:
        """Eqs. (1)-(4) for ``b`` samples of equal sizes: the per-sample loop's head-major
        tensors viewed as ``[H B, n, *]`` batches, so that each product is one batched call.
        The quadrature weights ride as one more column of the weighted features, so that one
        product (``[D + 1, n] @ [n, M]``, the odd width on the side that costs nothing) gives the
        tokens' integrals and the slice measures together."""
        n, heads, d, m = len(x) // b, self.heads, self.head_channels, self.slices
        s = self._slice_weights(x)  # [H, N, M]
        fx = self.lin_fx(x).view(len(x), heads, d).transpose(0, 1)  # [H, N, D]
        w = _per_node_weight(weight, b, n, fx.dtype)
        if w is None:  # equal positive weights in every sample: they cancel in eq. (2)
            rows = torch.cat([fx, fx.new_ones(1, 1, 1).expand(heads, len(x), 1)], dim=-1)
        else:
            w = w.view(1, len(x), 1).expand(heads, len(x), 1)
            rows = torch.cat([fx * w, w], dim=-1)  # [H, N, D + 1]
        s = s.view(heads * b, n, m)
        integrals = rows.view(heads * b, n, d + 1).transpose(1, 2) @ s  # [H B, D + 1, M]
        mass = integrals[:, d:].transpose(1, 2)  # [H B, M, 1]: the measure of each slice
        z = integrals[:, :d].transpose(1, 2) / mass.clamp_min(_tiny(mass))  # eq. (2)
        z = self._attend(z.view(heads, b, m, d).transpose(0, 1))  # eq. (3), [B, H, M, D]
        out = s @ z.transpose(0, 1).reshape(heads * b, m, d)  # eq. (4), [H B, n, D]
        return self.lin_out(out.view(heads, len(x), d).transpose(0, 1).reshape(len(x), -1))

    def _attend(self, z: Tensor) -> Tensor:
        """Eq. (3) on the tokens ``[B, H, M, D]``."""
        return F.scaled_dot_product_attention(
            self.lin_q(z),
            self.lin_k(z),
            self.lin_v(z),
            dropout_p=self.dropout if self.training else 0.0,
        )

    def _slice_weights(self, x: Tensor) -> Tensor:
        r"""Eq. (1) head-major, [H, N, M]: the temperature folded into the rows of ``W_x``
        (:math:`(W_x x + b_x) / \tau_h` by one product, no pass over the nodes), one batched
        product writes the logits from the ``[H, N, D]`` view, each head's bias
        :math:`b_s / \tau_h` is added in place (a broadcast bias in ``baddbmm`` would be copied
        into the output first), one softmax gives the weights."""
        inv_t = 1.0 / self.temperature
        scale = inv_t.repeat_interleave(self.head_channels)  # [H D]
        xs = F.linear(x, self.lin_x.weight * scale[:, None], self.lin_x.bias * scale)
        xs = xs.view(len(x), self.heads, self.head_channels).transpose(0, 1)  # [H, N, D]
        logits = torch.bmm(xs, self.lin_slice.weight.T.expand(self.heads, -1, -1))
        # in place: the product's backward needs its inputs only
        return torch.softmax(logits.add_((self.lin_slice.bias * inv_t[:, None])[:, None]), -1)

    def _slice(self, x: Tensor, sizes: list[int], weight: Tensor | None):
        """Eqs. (1)-(2) head-major: ``(s [H, N, M], tokens [B, H, M, D])``. The weights multiply
        the features and enter the slice measures by a matrix-vector product, so no second
        [H, N, M] tensor is formed."""
        s = self._slice_weights(x)
        fx = self.lin_fx(x).view(len(x), self.heads, self.head_channels).transpose(0, 1)
        if weight is None:
            weight = torch.ones(len(x), dtype=x.dtype, device=x.device)
        weight = weight.to(fx.dtype)
        wfx = fx * weight[None, :, None]  # [H, N, D]
        tokens = []
        parts = zip(s.split(sizes, dim=1), wfx.split(sizes, dim=1), weight.split(sizes))
        for s_b, wfx_b, weight_b in parts:  # split, not indexed: the backward is one concatenation
            s_t = s_b.transpose(1, 2)  # [H, M, n_b]
            mass = s_t @ weight_b  # [H, M]: the measure of each slice
            tokens.append((s_t @ wfx_b) / mass.clamp_min(_tiny(mass))[..., None])
        return s, torch.stack(tokens)

    # The integral protocol (meshop.nn.integral): eq. (2)'s integrals accumulated over any
    # chunks, eq. (3) once per sample, eqs. (1) and (4) per node.

    def partial(self, x, pos, batch, weight, num_samples, state=None, **extra):
        r"""The integrals of eq. (2) over these nodes (``x`` [n, C], sorted ``batch`` [n] of
        global sample indices, ``weight`` [n] or None for equal weights):
        :math:`\sum_i w_i s_{ij} (W_f x_i)_h` ``[B, H, M, D]`` and the slice measures
        :math:`\sum_i w_i s_{ij}` ``[B, H, M]``."""
        s = self._slice_weights(x)  # [H, n, M]
        fx = self.lin_fx(x).view(len(x), self.heads, self.head_channels).transpose(0, 1)
        w = chunk_weight(weight, x, fx.dtype)
        features = x.new_zeros(num_samples, self.heads, self.slices, self.head_channels)
        mass = x.new_zeros(num_samples, self.heads, self.slices)
        for sample, nodes in sample_ranges(batch, num_samples):
            s_t = s[:, nodes].transpose(1, 2)  # [H, M, n_b]
            features[sample] = s_t @ (fx[:, nodes] * w[None, nodes, None])
            mass[sample] = s_t @ w[nodes]
        return features, mass

    def finish(self, sums, state=None) -> Tensor:
        """Eqs. (2)-(3) from the merged sums: the attended slice tokens ``[B, H, M, D]``."""
        features, mass = sums
        return self._attend(features / mass.clamp_min(_tiny(mass))[..., None])

    def apply(self, state, x, pos, batch, **extra) -> Tensor:
        """Eqs. (1) and (4): the output ``[n, C]`` at these nodes from the attended tokens of
        every sample ``state``."""
        s = self._slice_weights(x)  # [H, n, M]
        out = x.new_empty(self.heads, len(x), self.head_channels)
        for sample, nodes in sample_ranges(batch, len(state)):
            out[:, nodes] = s[:, nodes] @ state[sample]
        return self.lin_out(out.transpose(0, 1).reshape(len(x), -1))

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}({self.channels}, heads={self.heads}, "
            f"slices={self.slices}, head_channels={self.head_channels}, dropout={self.dropout})"
        )


def _sample_sizes(batch: Tensor | None, n: int) -> list[int]:
    """The number of nodes of each sample of a sorted batch vector (one sample when None)."""
    if batch is None:
        return [n]
    if n > 1 and bool((batch[1:] < batch[:-1]).any()):
        raise ConfigError(
            "batch is not sorted; physics-attention expects the nodes of each sample to be "
            "contiguous, as in a PyG DataLoader batch (sort the nodes by sample first)"
        )
    return torch.bincount(batch).tolist()


def _per_node_weight(weight: Tensor | None, b: int, n: int, dtype) -> Tensor | None:
    """The weights ``[B, n]`` of ``b`` samples of ``n`` nodes, or None when they are equal and
    positive within every sample (a common factor of eq. (2)'s numerator and denominator)."""
    if weight is None:
        return None
    w = weight.view(b, n).to(dtype)
    if torch.equal(w, w[:, :1].expand_as(w)) and bool((w[:, 0] > 0).all()):
        return None
    return w


def _all_equal(sizes: list[int]) -> bool:
    """Whether every sample has the same number of nodes (the dense batched path)."""
    return min(sizes) == max(sizes)


def _tiny(t: Tensor) -> float:
    return torch.finfo(t.dtype).tiny


__all__ = ["PhysicsAttention"]

"""Gaussian random fields on uniform grids, the random inputs of the Darcy and Burgers datasets.

A field is drawn from :math:`\\mathcal N(0, \\sigma^2 (-\\Delta + \\tau^2 I)^{-\\alpha})` by its
Karhunen-Loeve expansion in the eigenfunctions :math:`\\phi_k` of the Laplacian on the unit box,

.. math::
    u(x) = \\sum_{k \\neq 0} \\sigma\\,(\\lambda_k + \\tau^2)^{-\\alpha/2}\\, \\xi_k\\, \\phi_k(x),
    \\qquad \\xi_k \\sim \\mathcal N(0, 1),

with :math:`\\phi_k` orthonormal in :math:`L^2` and the constant mode left out (mean zero), as in
the data generators of the FNO and Galerkin Transformer papers:

- ``"neumann"``: cosines :math:`\\prod_d \\sqrt{2 - \\delta_{k_d 0}}\\cos(\\pi k_d x_d)`,
  :math:`\\lambda_k = \\pi^2 |k|^2`, evaluated on ``linspace(0, 1, n)`` (endpoints included);
  :class:`CosineSeriesField` is the same series as a function, evaluable at any points of the box
  (the nodes of any mesh of a domain inside it);
- ``"periodic"``: Fourier modes :math:`e^{2\\pi i k \\cdot x}` (real and imaginary parts, times
  :math:`\\sqrt 2`), :math:`\\lambda_k = 4\\pi^2 |k|^2`, on ``arange(n) / n`` (the endpoint 1 is the
  point 0), all modes the grid resolves except the Nyquist ones.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from meshop.errors import ConfigError

BOUNDARIES = ("neumann", "periodic")


def _sqrt_eigenvalues(
    frequencies: Sequence[np.ndarray], alpha: float, tau: float, sigma: float
) -> np.ndarray:
    """sigma (|k|^2 + tau^2)^(-alpha/2) on the tensor grid of the given angular frequencies."""
    grids = np.meshgrid(*frequencies, indexing="ij")
    return sigma * (sum(g**2 for g in grids) + tau**2) ** (-alpha / 2)


def gaussian_random_field(
    rng: np.random.Generator,
    shape: int | Sequence[int],
    alpha: float = 2.0,
    tau: float = 3.0,
    sigma: float | None = None,
    boundary: str = "neumann",
    modes: int | None = None,
) -> np.ndarray:
    """One sample of a mean-zero Gaussian random field on a uniform grid of the unit box.

    Args:
        rng: the random generator (the sample is a deterministic function of its state).
        shape: grid points per axis (1 to 3 axes).
        alpha: smoothness exponent of the covariance :math:`(-\\Delta + \\tau^2 I)^{-\\alpha}`.
        tau: inverse length scale.
        sigma: amplitude; default :math:`\\tau^{\\alpha - 1}` (the FNO Darcy generator's choice).
        boundary: ``"neumann"`` (cosine series) or ``"periodic"`` (Fourier series).
        modes: Neumann only: highest cosine index per axis (default: ``n - 1``, as many as points).

    Returns:
        The field on the grid, an array of ``shape`` (C order: first axis slowest).
    """
    shape = (shape,) if isinstance(shape, int) else tuple(int(s) for s in shape)
    if boundary not in BOUNDARIES:
        raise ConfigError(f"boundary must be one of {BOUNDARIES}, got '{boundary}'")
    if not 1 <= len(shape) <= 3 or min(shape) < 2:
        raise ConfigError(f"grid shape must have 1 to 3 axes of at least 2 points, got {shape}")
    sigma = tau ** (alpha - 1) if sigma is None else sigma
    if boundary == "periodic":
        return _periodic_field(rng, shape, alpha, tau, sigma)
    return _neumann_field(rng, shape, alpha, tau, sigma, modes)


def _neumann_coefficients(rng, counts, alpha, tau, sigma) -> np.ndarray:
    """The Karhunen-Loeve coefficients [*counts] of the cosine series, the constant one zero."""
    freqs = [np.pi * np.arange(m) for m in counts]
    coef = _sqrt_eigenvalues(freqs, alpha, tau, sigma) * rng.standard_normal(counts)
    coef.flat[0] = 0.0  # mean zero
    return coef


def _cosine_basis(x: np.ndarray, count: int) -> np.ndarray:
    """The orthonormal cosines ``sqrt(2 - delta_k0) cos(pi k x)`` [len(x), count]."""
    basis = np.cos(np.pi * np.outer(x, np.arange(count))) * np.sqrt(2.0)
    basis[:, 0] = 1.0
    return basis


def _neumann_field(rng, shape, alpha, tau, sigma, modes) -> np.ndarray:
    counts = [(n if modes is None else int(modes) + 1) for n in shape]
    field = _neumann_coefficients(rng, counts, alpha, tau, sigma)
    for axis, (n, m) in enumerate(zip(shape, counts)):
        basis = _cosine_basis(np.linspace(0.0, 1.0, n), m)  # [n, m]
        field = np.moveaxis(np.tensordot(basis, field, axes=([1], [axis])), 0, axis)
    return field


class CosineSeriesField:
    r"""A Gaussian random field on the unit box as a function: the truncated Karhunen-Loeve series

    .. math::
        g(x) = \sum_{k \in \{0..m-1\}^d,\, k \neq 0} \sigma\,(\pi^2|k|^2 + \tau^2)^{-\alpha/2}
            \,\xi_k \prod_{i=1}^{d} \sqrt{2}\cos(\pi k_i x_i),\qquad \xi_k \sim \mathcal N(0, 1),

    the cosine series of :func:`gaussian_random_field` (``boundary="neumann"``) with ``m`` modes
    per axis. Being a function, it can be evaluated at the nodes of any mesh, and at the quadrature
    points of a finite element solver: meshes of the same domain at several resolutions see the
    same field.

    Args:
        rng: the random generator (the coefficients are its next ``m^d`` normal draws).
        dim: dimension ``d`` of the box.
        modes: ``m``, cosines per axis (16 keeps 99.7% of the variance for alpha 2, tau 3).
        alpha, tau, sigma: as in :func:`gaussian_random_field`; ``sigma=None`` scales the field to
            unit variance averaged over the box (its coefficients' squares sum to 1).
    """

    def __init__(
        self,
        rng: np.random.Generator,
        dim: int = 2,
        modes: int = 16,
        alpha: float = 2.0,
        tau: float = 3.0,
        sigma: float | None = None,
    ):
        if not 1 <= dim <= 3 or modes < 2:
            raise ConfigError(f"need 1 <= dim <= 3 and modes >= 2, got dim={dim}, modes={modes}")
        self.coefficients = _neumann_coefficients(rng, [int(modes)] * dim, alpha, tau, 1.0)
        if sigma is None:
            scale = _sqrt_eigenvalues([np.pi * np.arange(modes)] * dim, alpha, tau, 1.0)
            scale.flat[0] = 0.0
            self.coefficients /= np.sqrt(np.sum(scale**2))
        else:
            self.coefficients *= sigma

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """The field at points ``x`` [dim, ...] (coordinates first, as scikit-fem's ``w.x``)."""
        x = np.asarray(x, dtype=np.float64)
        dim, modes = self.coefficients.ndim, self.coefficients.shape[0]
        if x.shape[0] != dim:
            raise ConfigError(f"points must have shape [{dim}, ...], got {tuple(x.shape)}")
        flat = x.reshape(dim, -1)
        field = self.coefficients
        letters = "abc"[:dim]
        bases = [_cosine_basis(flat[i], modes) for i in range(dim)]  # [P, m] each
        spec = ",".join(f"p{letter}" for letter in letters) + f",{letters}->p"
        return np.einsum(spec, *bases, field, optimize=True).reshape(x.shape[1:])


def _periodic_field(rng, shape, alpha, tau, sigma) -> np.ndarray:
    # u = Re sum_k c_k exp(2 pi i k.x) over all k with independent c_k = lambda_k (a_k + i b_k):
    # the k and -k terms together give lambda (a' sqrt2 cos + b' sqrt2 sin) with a', b' ~ N(0, 1)
    freqs = [2 * np.pi * np.fft.fftfreq(n, 1.0 / n) for n in shape]
    scale = _sqrt_eigenvalues(freqs, alpha, tau, sigma)
    coef = scale * (rng.standard_normal(shape) + 1j * rng.standard_normal(shape))
    coef.flat[0] = 0.0  # mean zero
    # drop the Nyquist modes: their sine part is invisible on the grid
    for axis, n in enumerate(shape):
        if n % 2 == 0:
            index = [slice(None)] * len(shape)
            index[axis] = n // 2
            coef[tuple(index)] = 0.0
    return np.fft.ifftn(coef * np.prod(shape)).real

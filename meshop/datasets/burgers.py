"""Viscous Burgers equation on the periodic unit interval: the FNO / Galerkin Transformer benchmark.

:math:`u_t + u u_x = \\nu u_{xx}` on :math:`(0, 1)` with periodic boundary conditions, initial data
:math:`u_0 \\sim \\mathcal N(0, 625(-\\Delta + 25 I)^{-2})` (the Galerkin Transformer paper's
statement of the FNO data), and the operator :math:`u_0 \\mapsto u(\\cdot, 1)`. The solver is
pseudo-spectral on a fine grid (2/3-rule dealiasing of :math:`(u^2)_x`) with the fourth-order
exponential time differencing Runge-Kutta scheme ETDRK4 of Cox & Matthews, with the coefficients
evaluated by contour integrals (Kassam & Trefethen 2005), so the stiff diffusion is integrated
exactly.
"""

from __future__ import annotations

import copy
import math
import os

import numpy as np
import torch
from torch_geometric.transforms import Compose

from meshop._pyg import Data
from meshop.data import uniform_grid
from meshop.datasets.base import GeneratedDataset
from meshop.datasets.grf import gaussian_random_field
from meshop.errors import ConfigError, MeshopError


def _etdrk4_coefficients(lh: np.ndarray, contour_points: int = 32):
    """phi-function combinations of ETDRK4 for the diagonal linear operator ``h L`` (real)."""
    r = np.exp(1j * np.pi * (np.arange(1, contour_points + 1) - 0.5) / contour_points)
    z = lh[:, None] + r[None, :]
    ez = np.exp(z)

    def mean(values):
        return np.mean(values, axis=1).real

    q = mean((np.exp(z / 2) - 1) / z)
    f1 = mean((-4 - z + ez * (4 - 3 * z + z**2)) / z**3)
    f2 = mean((2 + z + ez * (z - 2)) / z**3)
    f3 = mean((-4 - 3 * z - z**2 + ez * (4 - z)) / z**3)
    return q, f1, f2, f3


def solve_burgers(
    u0: np.ndarray, viscosity: float, t_final: float = 1.0, time_step: float = 2e-3
) -> np.ndarray:
    """Solve :math:`u_t + (u^2/2)_x = \\nu u_{xx}` on the periodic unit interval.

    Args:
        u0: [n] initial values at ``x_j = j / n`` (n even).
        viscosity: :math:`\\nu`.
        t_final: the final time.
        time_step: the largest time step; the step used divides ``t_final`` evenly.

    Returns:
        u: [n] the solution at ``t_final`` at the same points.

    Raises:
        MeshopError: the solution became non-finite (time step too large for this data).
    """
    u0 = np.asarray(u0, dtype=np.float64)
    n = len(u0)
    if u0.ndim != 1 or n < 4 or n % 2:
        raise ConfigError(
            f"u0 must be a 1D array of an even number (>= 4) of values, got {u0.shape}"
        )
    steps = max(1, math.ceil(t_final / time_step - 1e-9))
    h = t_final / steps
    k = 2 * np.pi * np.fft.rfftfreq(n, 1.0 / n)
    linear = -viscosity * k**2
    e, e2 = np.exp(h * linear), np.exp(h * linear / 2)
    q, f1, f2, f3 = (h * c for c in _etdrk4_coefficients(h * linear))
    # -(u^2/2)_x in Fourier space, with the modes beyond 2/3 of the resolved range removed
    g = -0.5j * k * (np.arange(len(k)) < n / 3)

    def nonlinear(v):
        return g * np.fft.rfft(np.fft.irfft(v, n) ** 2)

    v = np.fft.rfft(u0)
    with np.errstate(over="ignore", invalid="ignore"):  # an unstable run is reported below
        for _ in range(steps):
            nv = nonlinear(v)
            a = e2 * v + q * nv
            na = nonlinear(a)
            b = e2 * v + q * na
            nb = nonlinear(b)
            c = e2 * a + q * (2 * nb - nv)
            v = e * v + f1 * nv + 2 * f2 * (na + nb) + f3 * nonlinear(c)
    u = np.fft.irfft(v, n)
    if not np.all(np.isfinite(u)):
        raise MeshopError(
            f"Burgers solution blew up (viscosity {viscosity}, time step {h:g}); "
            "use a smaller time_step"
        )
    return u


def periodic_derivative(values: torch.Tensor) -> torch.Tensor:
    """Central difference :math:`(v_{i+1} - v_{i-1}) / (2h)` of node values ``[n, C]`` on the
    periodic unit interval (``n`` nodes ``i / n``, :math:`h = 1/n`), wrapped at the ends;
    second-order accurate."""
    n = len(values)
    return (torch.roll(values, -1, 0) - torch.roll(values, 1, 0)) * (n / 2)


def periodic_modes(pos: torch.Tensor, modes: int) -> torch.Tensor:
    """Fourier modes of the periodic coordinate: ``[N, 1]`` -> ``[N, 2 modes]``, the columns
    :math:`\\cos 2\\pi k x, \\sin 2\\pi k x` for :math:`k = 1, \\dots,` ``modes``."""
    angles = 2 * math.pi * pos * torch.arange(1, modes + 1, dtype=pos.dtype, device=pos.device)
    return torch.stack([angles.cos(), angles.sin()], dim=-1).flatten(1)


class InputFeatures:
    """Transform that appends derived inputs to ``x`` (the sample is copied): the
    :func:`periodic_derivative` of every input field with ``gradient``, then the
    :func:`periodic_modes` of the periodic coordinate with ``modes > 0``."""

    def __init__(self, gradient: bool = False, modes: int = 0):
        self.gradient, self.modes = bool(gradient), int(modes)

    def names(self, fields: tuple[str, ...]) -> tuple[str, ...]:
        """The input names after the transform, from those of ``fields``."""
        derived = tuple(f"{f}_x" for f in fields) if self.gradient else ()
        return (*fields, *derived, *self.mode_names())

    def mode_names(self) -> tuple[str, ...]:
        """The names of the coordinate's modes: ``cos1, sin1, cos2, ...``."""
        return tuple(f"{t}{k}" for k in range(1, self.modes + 1) for t in ("cos", "sin"))

    def __call__(self, data: Data) -> Data:
        data = copy.copy(data)
        parts = [data.x]
        if self.gradient:
            parts.append(periodic_derivative(data.x))
        if self.modes:
            parts.append(periodic_modes(data.pos, self.modes))
        data.x = torch.cat(parts, dim=-1)
        return data

    def __repr__(self) -> str:
        return f"{type(self).__name__}(gradient={self.gradient}, modes={self.modes})"


class Burgers(GeneratedDataset):
    """Burgers samples ``u0 -> u(., t_final)`` on a periodic 1D grid (FNO data, real solver).

    Each sample is a 1D :func:`meshop.data.uniform_grid` domain with ``resolution`` nodes
    ``x_j = j / resolution`` (the periodic endpoint 1 is the node 0), ``x`` = :math:`u_0` [N, 1],
    ``y`` = :math:`u(\\cdot, t_{final})` [N, 1], ``grid_shape = (resolution,)`` and weights
    ``1 / N`` (the periodic rectangle rule). The solver runs on ``fine_resolution`` nodes and every
    ``fine_resolution // resolution``-th node is kept, so all resolutions show the same samples.

    Args:
        root: data root (default ``$MESHOP_DATA`` or the repository's ``datasets/``).
        split: ``"train"`` or ``"test"``.
        num_train: training samples.
        num_test: test samples (they follow the training samples).
        seed: random seed; sample ``i`` is drawn from ``default_rng([seed, i])``.
        resolution: nodes of the returned grid; must divide ``fine_resolution``.
        fine_resolution: nodes of the solver grid (8192 as in the FNO / Galerkin data).
        viscosity: :math:`\\nu`; default :math:`0.1 / (2\\pi)`, the value the Galerkin Transformer
            paper (appendix C) states for the FNO data (the FNO paper says 0.1; with 0.1 the
            target at t = 1 keeps about 1% of the initial amplitude).
        t_final: the time of the target.
        time_step: the solver's largest time step.
        alpha: exponent :math:`\\alpha` of the initial data's law
            :math:`\\mathcal N(0, \\sigma^2(-\\Delta+\\tau^2 I)^{-\\alpha})`.
        tau: inverse length scale :math:`\\tau` of that law.
        sigma: amplitude :math:`\\sigma` of that law.
        gradient: append :math:`\\partial_x u_0` (:func:`periodic_derivative` on the returned
            grid) to ``x``, which becomes ``[N, 2]`` (``u0``, ``u0_x``); computed on access, so
            the cache is shared with ``gradient=False``. A model whose kernels depend on distances
            only (PiT's position-attention) is mirror-symmetric without it: it cannot tell in
            which direction :math:`u_0` moves its mass, the part of the map that is even in
            :math:`u_0` (36 % of the target on the default data) is out of its reach, and PiT
            stalls near 41 %; with the derivative (and lr 2e-3) it reached 2.7 % in 67 epochs
            (``benchmarks/results/burgers_features.md``).
        coordinate_modes: append :func:`periodic_modes` of the coordinate, :math:`\\cos 2\\pi
            k x` and :math:`\\sin 2\\pi k x` for :math:`k \\le` ``coordinate_modes`` (after the
            derivative), computed on access. Models that see where a node is only through its
            features (ONO, Transolver) then have a periodic basis in which a kernel
            :math:`q(x) \\cdot k(y)` can be a convolution: with raw ``x`` the coordinate ends
            are far apart though they are neighbours. They are the dataset's
            ``coordinate_inputs``: ``TrainConfig.periodic_shift`` rolls ``u0`` and its
            derivative over the grid and leaves them in place.
        transform: PyG transform applied on access (after the derived inputs).
        progress: show a tqdm progress bar while generating.
    """

    name = "burgers"
    input_names = ("u0",)
    target_names = ("u",)
    #: inputs that are functions of the coordinate, not fields (random periodic shifts keep them)
    coordinate_inputs: tuple[str, ...] = ()

    def __init__(
        self,
        root: str | os.PathLike | None = None,
        split: str = "train",
        num_train: int = 1000,
        num_test: int = 200,
        seed: int = 0,
        resolution: int = 1024,
        fine_resolution: int = 8192,
        viscosity: float = 0.1 / (2 * math.pi),
        t_final: float = 1.0,
        time_step: float = 2e-3,
        alpha: float = 2.0,
        tau: float = 5.0,
        sigma: float = 25.0,
        gradient: bool = False,
        coordinate_modes: int = 0,
        transform=None,
        progress: bool = True,
    ):
        resolution, fine_resolution = int(resolution), int(fine_resolution)
        if fine_resolution % 2 or resolution < 2 or fine_resolution % resolution:
            raise ConfigError(
                f"resolution {resolution} must divide fine_resolution {fine_resolution} "
                "(an even number >= 4), e.g. 512, 1024, 2048 or 8192 with the default 8192"
            )
        if viscosity <= 0 or t_final <= 0 or time_step <= 0:
            raise ConfigError("viscosity, t_final and time_step must be positive")
        if coordinate_modes < 0:
            raise ConfigError(f"coordinate_modes must be >= 0, got {coordinate_modes}")
        features = InputFeatures(gradient, coordinate_modes)
        if features.gradient or features.modes:
            self.input_names = features.names(self.input_names)
            self.coordinate_inputs = features.mode_names()
            transform = features if transform is None else Compose([features, transform])
        super().__init__(
            root=root,
            split=split,
            num_train=num_train,
            num_test=num_test,
            seed=seed,
            transform=transform,
            progress=progress,
            resolution=resolution,
            fine_resolution=fine_resolution,
            viscosity=float(viscosity),
            t_final=float(t_final),
            time_step=float(time_step),
            alpha=float(alpha),
            tau=float(tau),
            sigma=float(sigma),
        )

    def generate(self, index: int, rng: np.random.Generator) -> Data:
        c = self.config
        n, res = c["fine_resolution"], c["resolution"]
        u0 = gaussian_random_field(
            rng, n, alpha=c["alpha"], tau=c["tau"], sigma=c["sigma"], boundary="periodic"
        )
        u = solve_burgers(u0, c["viscosity"], c["t_final"], c["time_step"])
        stride = n // res
        data = uniform_grid((res,), x=u0[::stride], y=u[::stride], bounds=[(0.0, 1.0 - 1.0 / res)])
        data.weight.fill_(1.0 / res)  # periodic: N cells of width 1/N, not a closed interval
        return data

"""Subsonic flow around NACA 4-digit airfoils on body-fitted O-meshes (panel method + Karman-Tsien).

Each sample draws an airfoil (camber, camber position, thickness) and a free stream (angle of
attack, Mach number), builds a structured O-mesh of quadrilaterals around it, solves the
incompressible potential flow with the linear vortex panel method of :mod:`meshop.datasets.panel`,
corrects the pressure for compressibility with the Karman-Tsien rule and derives the local Mach
number from the isentropic relations.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import meshio
import numpy as np
from scipy.optimize import brentq

from meshop._pyg import Data
from meshop.data import from_meshio
from meshop.datasets.base import GeneratedDataset
from meshop.datasets.panel import panel_velocity, solve_vortex_panels, surface_speed
from meshop.errors import ConfigError, MeshError

#: ratio of specific heats of air
GAMMA = 1.4


def naca4(
    camber: float, camber_position: float, thickness: float, num_panels: int = 200
) -> np.ndarray:
    """Closed clockwise polygon [num_panels + 1, 2] of a NACA 4-digit airfoil of unit chord.

    The thickness distribution :math:`y_t = 5t(0.2969\\sqrt x - 0.1260x - 0.3516x^2 + 0.2843x^3
    - 0.1036x^4)` (the closed trailing-edge variant) is laid off normal to the camber line
    :math:`y_c = \\frac{m}{p^2}(2px - x^2)` for :math:`x < p`,
    :math:`\\frac{m}{(1-p)^2}(1 - 2p + 2px - x^2)` otherwise, at cosine-spaced chord stations
    (dense at both edges). The nodes run from the trailing edge (1, 0) along the lower surface to
    the leading edge (0, 0) and back along the upper surface, as
    :func:`~meshop.datasets.panel.solve_vortex_panels` expects.

    Args:
        camber: maximum camber :math:`m` (fraction of the chord, e.g. 0.02 for NACA 2412).
        camber_position: its chordwise position :math:`p` (e.g. 0.4 for NACA 2412).
        thickness: maximum thickness :math:`t` (e.g. 0.12 for NACA 2412).
        num_panels: number of panels, even (half on each surface).
    """
    if num_panels < 8 or num_panels % 2:
        raise ConfigError(f"num_panels must be an even number >= 8, got {num_panels}")
    if not (0 <= camber < 0.2 and 0.05 <= camber_position <= 0.95 and 0 < thickness < 0.5):
        raise ConfigError(
            f"NACA parameters out of range: camber {camber} (0 to 0.2), camber position "
            f"{camber_position} (0.05 to 0.95), thickness {thickness} (0 to 0.5)"
        )
    m, p, t = camber, camber_position, thickness
    x = 0.5 * (1 - np.cos(np.linspace(0.0, np.pi, num_panels // 2 + 1)))  # leading -> trailing
    front = x < p
    yc = np.where(front, m / p**2 * x * (2 * p - x), m / (1 - p) ** 2 * (1 - x) * (1 - 2 * p + x))
    slope = np.where(front, 2 * m / p**2 * (p - x), 2 * m / (1 - p) ** 2 * (p - x))
    yt = 5 * t * (0.2969 * np.sqrt(x) - 0.1260 * x - 0.3516 * x**2 + 0.2843 * x**3 - 0.1036 * x**4)
    theta = np.arctan(slope)
    upper = np.stack([x - yt * np.sin(theta), yc + yt * np.cos(theta)], axis=1)
    lower = np.stack([x + yt * np.sin(theta), yc - yt * np.cos(theta)], axis=1)
    nodes = np.concatenate([lower[::-1], upper[1:]])
    nodes[-1] = nodes[0]
    return nodes


def o_mesh(
    surface: np.ndarray,
    num_layers: int = 40,
    first_layer: float = 1e-3,
    farfield: float = 15.0,
    blend_length: float = 0.5,
) -> tuple[np.ndarray, np.ndarray]:
    """A structured O-mesh of quadrilaterals around a body of unit chord on ``[0, 1] x {0}``.

    Layer ``j`` (``j = 0`` is the surface) lies at distance :math:`d_j` from the body, with
    :math:`d_1 =` ``first_layer`` and a geometric growth up to the far field, a circle of radius
    ``farfield`` around the mid-chord point :math:`c = (1/2, 0)`. Node ``i`` of layer ``j`` blends
    the surface node pushed out along its normal with the point at the same angle on a circle,

    .. math::
        p_{ij} = (1 - b_j)(s_i + d_j n_i) + b_j\\big(c + (\\tfrac12 + d_j)
            (\\cos\\varphi_i, \\sin\\varphi_i)\\big),\\qquad
        b_j = \\Big(\\frac{1 - e^{-d_j/\\lambda}}{1 - e^{-d_{L}/\\lambda}}\\Big)^2,\\quad
        \\varphi_i = -2\\pi i / N,

    so the mesh is orthogonal to the body near the wall and a polar grid far away. With the
    cosine-spaced surface nodes of :func:`naca4`, node ``i`` on the surface and on the circle have
    about the same chordwise position.

    Args:
        surface: [N, 2] body nodes, clockwise from the trailing edge (the closed polygon of
            :func:`naca4` without its repeated last node).
        num_layers: number of cell layers ``L`` (the mesh has ``N (L + 1)`` nodes).
        first_layer: height of the first cell layer (chords).
        farfield: radius of the outer boundary (chords).
        blend_length: :math:`\\lambda`, the distance over which the layers turn circular.

    Returns:
        ``(points, quads)``: [N (L + 1), 2] nodes (node ``i`` of layer ``j`` is row ``j N + i``)
        and [N L, 4] counter-clockwise quadrilaterals.

    Raises:
        MeshError: a cell came out inverted (a body too far from a unit-chord airfoil).
    """
    surface = np.asarray(surface, dtype=np.float64)
    n = len(surface)
    outer = farfield - 0.5
    if num_layers < 2 or first_layer <= 0 or first_layer * num_layers >= outer:
        raise ConfigError(
            "the O-mesh needs num_layers >= 2 and 0 < first_layer * num_layers < farfield - 0.5 "
            f"(geometric growth), got num_layers {num_layers}, first_layer {first_layer}, "
            f"farfield {farfield}"
        )
    growth = brentq(lambda q: first_layer * (q**num_layers - 1) / (q - 1) - outer, 1 + 1e-9, 10.0)
    distance = first_layer * (growth ** np.arange(num_layers + 1) - 1) / (growth - 1)
    edge = np.roll(surface, -1, axis=0) - surface
    edge /= np.linalg.norm(edge, axis=1, keepdims=True)
    panel_normal = np.stack([-edge[:, 1], edge[:, 0]], axis=1)
    normal = panel_normal + np.roll(panel_normal, 1, axis=0)
    normal /= np.linalg.norm(normal, axis=1, keepdims=True)
    phi = -2 * np.pi * np.arange(n) / n
    ray = np.stack([np.cos(phi), np.sin(phi)], axis=1)
    d = distance[:, None, None]
    blend = ((1 - np.exp(-d / blend_length)) / (1 - np.exp(-outer / blend_length))) ** 2
    extruded = surface[None] + d * normal[None]
    circle = np.array([0.5, 0.0]) + (0.5 + d) * ray[None]
    points = ((1 - blend) * extruded + blend * circle).reshape(-1, 2)

    i = np.arange(n)
    j = np.arange(num_layers)[:, None]
    quads = np.stack(
        [j * n + i, j * n + (i + 1) % n, (j + 1) * n + (i + 1) % n, (j + 1) * n + i], axis=-1
    ).reshape(-1, 4)
    corners = points[quads]
    edges = np.roll(corners, -1, axis=1) - corners
    previous = np.roll(edges, 1, axis=1)
    turn = previous[..., 0] * edges[..., 1] - previous[..., 1] * edges[..., 0]  # > 0: convex, ccw
    if np.any(turn <= 0):
        raise MeshError(
            f"the O-mesh has {int(np.sum(np.any(turn <= 0, axis=1)))} inverted or non-convex "
            "cells; the body must be an airfoil-like shape of unit chord on [0, 1]"
        )
    return points, quads


def karman_tsien(cp0: np.ndarray, mach: float) -> np.ndarray:
    """Karman-Tsien compressibility correction of an incompressible pressure coefficient.

    .. math:: C_p = \\frac{C_{p,0}}{\\sqrt{1 - M_\\infty^2} + \\frac{M_\\infty^2}{1 + \\sqrt{1 -
        M_\\infty^2}}\\frac{C_{p,0}}{2}}

    NaN where the denominator is not positive: suctions so strong that the flow would be far
    beyond sonic, where the rule has no meaning.
    """
    beta = np.sqrt(1 - mach**2)
    denominator = beta + mach**2 / (1 + beta) * np.asarray(cp0) / 2
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(denominator > 0, cp0 / denominator, np.nan)


def local_mach(cp: np.ndarray, mach: float, gamma: float = GAMMA) -> np.ndarray:
    """Local Mach number from the pressure coefficient by the isentropic relations.

    With :math:`p/p_\\infty = 1 + \\frac{\\gamma}{2}M_\\infty^2 C_p` and constant total pressure,

    .. math:: M^2 = \\frac{2}{\\gamma - 1}\\Big[\\big(1 + \\tfrac{\\gamma-1}{2}M_\\infty^2\\big)
        \\big(p/p_\\infty\\big)^{-(\\gamma-1)/\\gamma} - 1\\Big],

    clipped at 0 where the corrected pressure exceeds the total pressure (the Karman-Tsien rule
    overshoots the stagnation pressure by up to 2% at Mach 0.6).
    """
    ratio = 1 + 0.5 * gamma * mach**2 * np.asarray(cp)
    total = 1 + 0.5 * (gamma - 1) * mach**2
    with np.errstate(invalid="ignore"):  # p <= 0 (or NaN Cp): NaN
        square = 2 / (gamma - 1) * (total * ratio ** (-(gamma - 1) / gamma) - 1)
    return np.sqrt(np.clip(square, 0.0, None))


def critical_pressure_coefficient(mach: float, gamma: float = GAMMA) -> float:
    """The pressure coefficient at which the flow turns sonic (:func:`local_mach` = 1)."""
    ratio = ((2 + (gamma - 1) * mach**2) / (gamma + 1)) ** (gamma / (gamma - 1))
    return 2 / (gamma * mach**2) * (ratio - 1)


def airfoil_flow(
    camber: float,
    camber_position: float,
    thickness: float,
    alpha: float,
    mach: float,
    num_panels: int = 200,
    num_layers: int = 40,
    first_layer: float = 1e-3,
    farfield: float = 15.0,
) -> meshio.Mesh:
    """The O-mesh around a NACA 4-digit airfoil with the subsonic flow at its nodes.

    The incompressible flow comes from the linear vortex panel method with the Kutta condition
    (:func:`~meshop.datasets.panel.solve_vortex_panels`) on the mesh's own surface nodes: the
    surface speed is the nodal vortex strength (:func:`~meshop.datasets.panel.surface_speed`),
    every other node gets the analytic velocity the panels induce there. Then
    :math:`C_{p,0} = 1 - |V|^2/V_\\infty^2`, the Karman-Tsien correction (:func:`karman_tsien`)
    and the isentropic local Mach number (:func:`local_mach`).

    Args:
        camber: maximum camber, a chord fraction (see :func:`naca4`).
        camber_position: position of the maximum camber, a chord fraction.
        thickness: maximum thickness, a chord fraction.
        alpha: angle of attack in degrees.
        mach: free-stream Mach number.
        num_panels: panels on the surface = nodes around the O-mesh (see :func:`naca4`).
        num_layers: cell layers of the O-mesh (see :func:`o_mesh`).
        first_layer: height of the first cell layer, in chords.
        farfield: outer radius of the O-mesh, in chords.

    Returns:
        A ``meshio.Mesh`` of quads (points with z = 0) with point data ``"Cp"`` and ``"Mach"``
        (NaN where the Karman-Tsien rule breaks down; above 1 where the flow would be supersonic).
    """
    body = naca4(camber, camber_position, thickness, num_panels)
    points, quads = o_mesh(body[:-1], num_layers, first_layer, farfield)
    angle = np.deg2rad(alpha)
    gamma = solve_vortex_panels(body, angle)
    speed = np.empty(len(points))
    speed[:num_panels] = surface_speed(gamma)
    field = panel_velocity(points[num_panels:], body, gamma, angle)
    speed[num_panels:] = np.linalg.norm(field, axis=1)
    cp = karman_tsien(1 - speed**2, mach)
    points = np.concatenate([points, np.zeros((len(points), 1))], axis=1)  # 3D: what VTK expects
    return meshio.Mesh(
        points, [("quad", quads)], point_data={"Cp": cp, "Mach": local_mach(cp, mach)}
    )


class Airfoil(GeneratedDataset):
    """Subsonic flow around random NACA 4-digit airfoils on body-fitted O-meshes.

    Each sample draws, uniformly in the given ranges, a NACA 4-digit section (maximum camber,
    its position, thickness), an angle of attack (degrees) and a free-stream Mach number, and keeps
    the draw only if the flow is subsonic everywhere (rejection sampling: the parameters are
    uniform on the part of the box where the Karman-Tsien local Mach number stays below 1). The
    sample is a :func:`meshop.data.from_meshio` domain of the O-mesh (:func:`o_mesh`, quads as
    ``cell_index_quad``, lumped-mass ``weight`` summing to the area between body and far field):

    - ``pos`` [N, 2] node coordinates (chords; leading edge at the origin), no input field ``x``;
    - ``params`` [1, 2] = the flow conditions: angle of attack (degrees) and free-stream Mach;
    - ``y`` [N, 2] = pressure coefficient :math:`C_p` and local Mach number.

    As in Geo-FNO's airfoil benchmark, the section's shape reaches the model only through the
    body-fitted mesh (``pos``, the cells and weights). ``shape_params=True`` prepends the NACA
    parameters: ``params`` [1, 5] = camber, camber position, thickness, angle of attack, Mach
    (``param_names``); the drawn sections and flows are the same either way.

    The flow is computed by :func:`airfoil_flow` (vortex panels, Karman-Tsien, isentropic Mach).

    Args:
        root: data root (default ``$MESHOP_DATA`` or the repository's ``datasets/``).
        split: ``"train"`` or ``"test"``.
        num_train: training samples.
        num_test: test samples (they follow the training samples).
        seed: random seed; sample ``i`` is drawn from ``default_rng([seed, i])``.
        camber: range of the maximum camber (chord fraction).
        camber_position: range of the maximum camber's position (chord fraction).
        thickness: range of the maximum thickness (chord fraction).
        alpha: range of the angle of attack in degrees.
        mach: range of the free-stream Mach number.
        num_panels: panels on the surface = nodes around the O-mesh.
        num_layers: cell layers of the O-mesh (see :func:`o_mesh`).
        first_layer: height of the first cell layer, in chords.
        farfield: outer radius of the O-mesh, in chords.
        shape_params: also give the NACA parameters (camber, camber position, thickness) as the
            first ``params`` (off by default: with them, a pointwise regression already knows the
            section).
        transform: PyG transform applied on access.
        progress: show a tqdm progress bar while generating.
    """

    name = "airfoil"
    #: 2: ``params`` holds only the flow conditions unless ``shape_params=True``
    version = 2
    #: draws per sample before giving up on a parameter box without subsonic flows
    max_tries = 100
    #: the section's NACA parameters and the flow conditions, in the order they are drawn
    shape_names = ("camber", "camber_position", "thickness")
    flow_names = ("alpha", "mach")
    target_names = ("Cp", "Mach")

    def __init__(
        self,
        root: str | os.PathLike | None = None,
        split: str = "train",
        num_train: int = 1000,
        num_test: int = 200,
        seed: int = 0,
        camber: Sequence[float] = (0.0, 0.06),
        camber_position: Sequence[float] = (0.2, 0.6),
        thickness: Sequence[float] = (0.06, 0.18),
        alpha: Sequence[float] = (-5.0, 5.0),
        mach: Sequence[float] = (0.2, 0.6),
        num_panels: int = 200,
        num_layers: int = 40,
        first_layer: float = 1e-3,
        farfield: float = 15.0,
        shape_params: bool = False,
        transform=None,
        progress: bool = True,
    ):
        ranges = {
            "camber": camber,
            "camber_position": camber_position,
            "thickness": thickness,
            "alpha": alpha,
            "mach": mach,
        }
        for key, bounds in ranges.items():
            if len(bounds) != 2 or bounds[0] > bounds[1]:
                raise ConfigError(
                    f"{key} must be a range (low, high) with low <= high, got {bounds}"
                )
        if not (0 <= mach[0] and mach[1] < 1):
            raise ConfigError(f"mach must be a subsonic range within [0, 1), got {mach}")
        super().__init__(
            root=root,
            split=split,
            num_train=num_train,
            num_test=num_test,
            seed=seed,
            transform=transform,
            progress=progress,
            **{key: [float(v) for v in bounds] for key, bounds in ranges.items()},
            num_panels=int(num_panels),
            num_layers=int(num_layers),
            first_layer=float(first_layer),
            farfield=float(farfield),
            shape_params=bool(shape_params),
        )

    @property
    def param_names(self) -> tuple[str, ...]:
        """Names of the ``params`` columns: the flow conditions, after the NACA parameters with
        ``shape_params=True``."""
        return (self.shape_names if self.config["shape_params"] else ()) + self.flow_names

    def generate(self, index: int, rng: np.random.Generator) -> Data:
        c = self.config
        names = self.shape_names + self.flow_names
        low, high = np.array([c[k] for k in names]).T
        mesh_options = {k: c[k] for k in ("num_panels", "num_layers", "first_layer", "farfield")}
        kept = slice(0 if c["shape_params"] else len(self.shape_names), None)
        for _ in range(self.max_tries):
            params = rng.uniform(low, high)
            mesh = airfoil_flow(*params, **mesh_options)
            if np.all(mesh.point_data["Mach"] < 1):  # False for NaN: far beyond sonic
                data = from_meshio(mesh, targets=list(self.target_names), params=params[kept])
                del data.source
                return data
        box = {k: (float(lo), float(hi)) for k, lo, hi in zip(names, low, high)}
        raise ConfigError(
            f"no subsonic flow in {self.max_tries} draws from the parameter box {box}; "
            "lower the Mach number or angle-of-attack range"
        )

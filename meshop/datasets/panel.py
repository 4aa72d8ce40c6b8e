"""Linear-strength vortex panel method for inviscid incompressible flow around a 2D body.

The body surface is a closed polygon of ``N`` panels through nodes ``P_0 .. P_N`` (``P_N = P_0`` is
the trailing edge) ordered clockwise, i.e. from the trailing edge along the lower surface to the
leading edge and back along the upper surface, so the outward normal is the left normal of each
panel. The vorticity is a sheet whose strength :math:`\\gamma` varies linearly along each panel and
is continuous at the nodes. The ``N + 1`` nodal strengths solve

- zero normal velocity at the ``N`` panel midpoints (free stream plus induced velocity), and
- the Kutta condition :math:`\\gamma_0 + \\gamma_N = 0` (smooth flow off the trailing edge)

(Katz & Plotkin, *Low-Speed Aerodynamics*, sec. 11.4.2). The flow inside the body is then at rest,
so the surface speed at node ``i`` is :math:`|\\gamma_i|` (:func:`surface_speed`), and the
velocity anywhere outside is the free stream plus the analytic velocity the panels induce
(:func:`panel_frame_velocity`).
Velocities are in units of the free-stream speed; lengths in units of the chord.
"""

from __future__ import annotations

import numpy as np

from meshop.errors import MeshError


def _panels(nodes: np.ndarray):
    start, end = nodes[:-1], nodes[1:]
    length = np.linalg.norm(end - start, axis=1)
    tangent = (end - start) / length[:, None]
    normal = np.stack([-tangent[:, 1], tangent[:, 0]], axis=1)  # left normal: outward (clockwise)
    return start, length, tangent, normal


def check_body(nodes: np.ndarray) -> np.ndarray:
    """Validate and return a closed clockwise polygon [N + 1, 2] of body nodes."""
    nodes = np.asarray(nodes, dtype=np.float64)
    if nodes.ndim != 2 or nodes.shape[1] != 2 or len(nodes) < 4:
        raise MeshError(f"body nodes must be [N + 1, 2] with N >= 3 panels, got {nodes.shape}")
    if not np.allclose(nodes[0], nodes[-1]):
        raise MeshError("the body polygon must be closed: the last node must repeat the first")
    if np.any(np.linalg.norm(np.diff(nodes, axis=0), axis=1) == 0):
        raise MeshError("the body polygon has a zero-length panel (repeated node)")
    x, y = nodes[:, 0], nodes[:, 1]
    if np.sum(x[:-1] * y[1:] - x[1:] * y[:-1]) >= 0:
        raise MeshError(
            "the body nodes must run clockwise (trailing edge, lower surface, leading edge, "
            "upper surface); reverse their order"
        )
    return nodes


def panel_frame_velocity(
    points: np.ndarray, nodes: np.ndarray, gamma_start, gamma_end
) -> tuple[np.ndarray, np.ndarray]:
    """Velocity induced at ``points`` by each linear vortex panel, in the panel's own frame.

    For a panel of length :math:`L` in its frame (``x`` along the panel from its start node, ``y``
    along its outward normal), the counter-clockwise sheet :math:`\\gamma(s) = \\gamma_a +
    (\\gamma_b - \\gamma_a)s/L` induces, with :math:`\\bar\\gamma = \\gamma(x)`,
    :math:`\\Delta = \\gamma_a - \\gamma_b`, :math:`\\beta = \\theta_2 - \\theta_1` the angle the
    panel subtends at the point and :math:`\\ell = \\ln(r_1 / r_2)` (distances to its ends),

    .. math::
        u = -\\frac{1}{2\\pi}\\Big[\\bar\\gamma\\beta + \\Delta\\frac{y}{L}\\ell\\Big],\\qquad
        v = \\frac{1}{2\\pi}\\Big[\\bar\\gamma\\ell
            + \\Delta\\big(1 - \\frac{y}{L}\\beta\\big)\\Big]

    (the integrals of the point-vortex velocity over the panel).

    Args:
        points: [M, 2] evaluation points, none of them a panel node.
        nodes: [N + 1, 2] closed clockwise body polygon.
        gamma_start: strength at the start node of each panel ([N] or a scalar).
        gamma_end: strength at the end node of each panel ([N] or a scalar).

    Returns:
        ``(u, v)``, each [M, N]: the velocity along and normal to each panel.
    """
    start, length, tangent, normal = _panels(nodes)
    rel = points[:, None, :] - start[None, :, :]  # [M, N, 2]
    x = np.einsum("mnd,nd->mn", rel, tangent)
    y = np.einsum("mnd,nd->mn", rel, normal)
    beta = np.arctan2(y, x - length) - np.arctan2(y, x)
    ell = 0.5 * np.log((x**2 + y**2) / ((x - length) ** 2 + y**2))
    t = y / length
    difference = gamma_start - gamma_end
    local = gamma_start - difference * (x / length)
    u = -(local * beta + difference * t * ell) / (2 * np.pi)
    v = (local * ell + difference * (1 - t * beta)) / (2 * np.pi)
    return u, v


def solve_vortex_panels(nodes: np.ndarray, alpha: float) -> np.ndarray:
    """Nodal vortex strengths :math:`\\gamma` [N + 1] for a unit free stream at angle ``alpha``.

    Args:
        nodes: [N + 1, 2] closed clockwise body polygon (see the module docstring).
        alpha: angle of attack in radians (free stream :math:`(\\cos\\alpha, \\sin\\alpha)`).

    Returns:
        gamma [N + 1]; :func:`surface_speed` turns it into the speed at the body nodes.
    """
    nodes = check_body(nodes)
    start, length, tangent, normal = _panels(nodes)
    midpoints = start + 0.5 * length[:, None] * tangent
    n = len(length)
    along, across = tangent @ normal.T, normal @ normal.T  # [panel, midpoint] direction cosines
    matrix = np.zeros((n + 1, n + 1))
    for offset, unit in ((0, (1.0, 0.0)), (1, (0.0, 1.0))):  # start and end node of each panel
        u, v = panel_frame_velocity(midpoints, nodes, *unit)
        matrix[:n, offset : offset + n] += u * along.T + v * across.T
    matrix[n, [0, n]] = 1.0  # Kutta condition
    rhs = np.zeros(n + 1)
    rhs[:n] = -(np.cos(alpha) * normal[:, 0] + np.sin(alpha) * normal[:, 1])
    return np.linalg.solve(matrix, rhs)


def panel_velocity(points: np.ndarray, nodes: np.ndarray, gamma: np.ndarray, alpha: float):
    """Velocity [M, 2] at points outside the body: free stream plus the panels' induced velocity."""
    _, _, tangent, normal = _panels(nodes)
    u, v = panel_frame_velocity(np.asarray(points, dtype=np.float64), nodes, gamma[:-1], gamma[1:])
    return np.array([np.cos(alpha), np.sin(alpha)]) + u @ tangent + v @ normal


def surface_speed(gamma: np.ndarray) -> np.ndarray:
    """Flow speed [N] at the body nodes ``0 .. N - 1``: :math:`|\\gamma_i|`, 0 at the trailing edge.

    A trailing edge of finite angle is a stagnation point of the potential flow; the method does
    not determine the nodal strength there accurately (only :math:`\\gamma_0 + \\gamma_N = 0`), so
    node 0 gets the exact value 0.
    """
    speed = np.abs(gamma[:-1])
    speed[0] = 0.0
    return speed


def lift_coefficient(nodes: np.ndarray, gamma: np.ndarray) -> float:
    """Lift coefficient from the circulation (Kutta-Joukowski): :math:`c_l = 2\\Gamma / (V c)`.

    :math:`\\Gamma` is the clockwise circulation, the integral of the sheet strength, and the chord
    ``c`` is the distance from the trailing edge (node 0) to the farthest node.
    """
    _, length, _, _ = _panels(nodes)
    circulation = -np.sum(0.5 * length * (gamma[:-1] + gamma[1:]))
    chord = np.max(np.linalg.norm(nodes - nodes[0], axis=1))
    return 2.0 * circulation / chord

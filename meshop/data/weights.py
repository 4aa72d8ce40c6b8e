"""Quadrature weights of mesh nodes: the lumped mass of the top-dimensional cells.

Each cell's length/area/volume is shared equally by its nodes, so the weights of a mesh sum to the
measure of the domain and ``sum(weight * f)`` approximates ``\\int f``. Boundary lines and surface
triangles that mesh generators store beside the volume cells are ignored: only the cells of the
highest topological dimension present count. A point cloud (no cells) has no such measure: its
weights are estimated from the local point density (:func:`knn_weights`) or uniform ``1/N``.
A domain (or a batch of domains) that carries no weights at all integrates with
:func:`default_weight`, ``1/n`` per sample: the papers' mean over the nodes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from math import gamma

import numpy as np
import torch

from meshop.errors import MeshError

#: topological dimension and number of corner nodes of each (linear) cell family
CELL_FAMILIES: dict[str, tuple[int, int]] = {
    "vertex": (0, 1),
    "line": (1, 2),
    "triangle": (2, 3),
    "quad": (2, 4),
    "tetra": (3, 4),
    "hexahedron": (3, 8),
    "wedge": (3, 6),
    "pyramid": (3, 5),
}

# simplex decompositions (corner indices, VTK ordering) used to measure non-simplex cells. A quad
# face that is not plane is split by one of its diagonals; the isoparametric cell is bounded by the
# bilinear face, whose volume is the mean of the two splits. So a cell's measure is the mean over
# decompositions that use each diagonal of every face equally often: the hexahedron's 6 tetrahedra
# around each of its 4 main diagonals, the wedge's 6 splits, the pyramid's 2; this is exact for
# the trilinear map (the integral of its Jacobian), not only for cells with plane faces.
_SPLITS: dict[str, list[list[tuple[int, ...]]]] = {
    "quad": [[(0, 1, 2), (0, 2, 3)]],
    "hexahedron": [
        [(0, 1, 2, 6), (0, 2, 3, 6), (0, 3, 7, 6), (0, 7, 4, 6), (0, 4, 5, 6), (0, 5, 1, 6)],
        [(1, 0, 3, 7), (1, 3, 2, 7), (1, 2, 6, 7), (1, 6, 5, 7), (1, 5, 4, 7), (1, 4, 0, 7)],
        [(3, 2, 1, 5), (3, 1, 0, 5), (3, 0, 4, 5), (3, 4, 7, 5), (3, 7, 6, 5), (3, 6, 2, 5)],
        [(4, 5, 6, 2), (4, 6, 7, 2), (4, 7, 3, 2), (4, 3, 0, 2), (4, 0, 1, 2), (4, 1, 5, 2)],
    ],
    "wedge": [
        [(0, 1, 2, 3), (1, 2, 3, 4), (2, 3, 4, 5)],
        [(2, 1, 0, 5), (1, 0, 5, 4), (0, 5, 4, 3)],
        [(1, 2, 0, 4), (2, 0, 4, 5), (0, 4, 5, 3)],
        [(0, 2, 1, 3), (2, 1, 3, 5), (1, 3, 5, 4)],
        [(2, 0, 1, 5), (0, 1, 5, 3), (1, 5, 3, 4)],
        [(1, 0, 2, 4), (0, 2, 4, 3), (2, 4, 3, 5)],
    ],
    "pyramid": [[(0, 1, 2, 4), (0, 2, 3, 4)], [(0, 1, 3, 4), (1, 2, 3, 4)]],
}


def cell_family(cell_type: str) -> str | None:
    """Family of a meshio cell type (``"triangle6"`` -> ``"triangle"``); None if not supported."""
    base = re.sub(r"\d+$", "", cell_type)
    return base if base in CELL_FAMILIES else None


def cell_dimension(cell_type: str) -> int | None:
    """Topological dimension of a meshio cell type, None for unsupported types (polygons, ...)."""
    family = cell_family(cell_type)
    return None if family is None else CELL_FAMILIES[family][0]


def as_tensor_view(array: np.ndarray) -> torch.Tensor:
    """A torch tensor sharing ``array``'s memory, to be read only; a copy where torch cannot
    share it (negative strides) or would warn (a read-only array)."""
    if min(array.strides, default=0) < 0 or not array.flags.writeable:
        array = array.copy()
    return torch.from_numpy(array)


def _corners(points: np.ndarray, simplices: np.ndarray) -> list[np.ndarray]:
    """The coordinates of every simplex's corners: one ``[M, space_dim]`` array per corner,
    gathered by torch on all its threads (numpy's fancy indexing takes twice as long on one)."""
    table = as_tensor_view(points)
    columns = (
        np.ascontiguousarray(simplices[:, j], dtype=np.int64) for j in range(simplices.shape[1])
    )
    return [table.index_select(0, as_tensor_view(c)).numpy() for c in columns]


def _simplex_measure(points: np.ndarray, simplices: np.ndarray, signed: bool = False) -> np.ndarray:
    """Length/area/volume of simplices [M, k+1] of dimension k embedded in points' space; with
    ``signed`` (k = the space's dimension), oriented: negative for simplices turned inside out."""
    p0, *others = _corners(points, simplices)
    edges = [p - p0 for p in others]  # k arrays [M, space_dim]
    k, space = len(edges), points.shape[1]
    # closed forms of the determinants below for the usual cells (a third of their time)
    if k == 1:
        return np.sqrt(np.einsum("md,md->m", edges[0], edges[0]))
    if k == 2 and space == 2:
        area = 0.5 * (edges[0][:, 0] * edges[1][:, 1] - edges[0][:, 1] * edges[1][:, 0])
        return area if signed else np.abs(area)
    if k == 2 and space == 3:
        return 0.5 * np.linalg.norm(np.cross(edges[0], edges[1]), axis=1)
    if k == 3 and space == 3:
        volume = np.einsum("md,md->m", edges[0], np.cross(edges[1], edges[2])) / 6.0
        return volume if signed else np.abs(volume)
    edges = np.stack(edges, axis=1)  # [M, k, space_dim]
    if signed:
        return np.linalg.det(edges) / float(np.prod(np.arange(1, k + 1)))
    gram = np.einsum("mid,mjd->mij", edges, edges)
    det = np.linalg.det(gram) if k > 1 else gram[:, 0, 0]
    return np.sqrt(np.clip(det, 0.0, None)) / float(np.prod(np.arange(1, k + 1)))


def cell_measures(points: np.ndarray, cell_type: str, connectivity: np.ndarray) -> np.ndarray:
    """Measure (length, area or volume) of every cell of one block, from its corner nodes."""
    family = cell_family(cell_type)
    if family is None:
        raise MeshError(f"cell type '{cell_type}' is not supported for quadrature weights")
    dim, corners = CELL_FAMILIES[family]
    if dim == 0:
        return np.zeros(len(connectivity))
    conn = np.asarray(connectivity)[:, :corners]
    if family in _SPLITS:
        # oriented within a split (a split of a mirrored cell is mirrored), so that a simplex
        # turned inside out in a valid cell counts negative
        signed = dim == np.shape(points)[1]
        splits = [
            np.abs(sum(_simplex_measure(points, conn[:, list(s)], signed) for s in split))
            for split in _SPLITS[family]
        ]
        return sum(splits) / len(splits)
    return _simplex_measure(points, conn)


def top_dimensional_cells(
    cells: Sequence[tuple[str, np.ndarray]],
) -> tuple[int, list[tuple[str, np.ndarray]]]:
    """The cell blocks of the highest topological dimension, and that dimension (-1 if none)."""
    dims = [cell_dimension(t) for t, _ in cells]
    known = [d for d in dims if d is not None]
    if not known:
        return -1, []
    top = max(known)
    return top, [(t, c) for (t, c), d in zip(cells, dims) if d == top and len(c) > 0]


#: cells whose measures :func:`lumped_mass_weights` computes at once
WEIGHT_CELLS = 2**20


def lumped_mass_weights(
    points: np.ndarray,
    cells: Sequence[tuple[str, np.ndarray]],
    source: str = "<arrays>",
    rtol: float = 1e-12,
    point_weights: str = "uniform",
) -> np.ndarray:
    """Per-node quadrature weights [N] from the top-dimensional cells (lumped mass).

    Points that belong to no top-dimensional cell get weight 0. Without cells of dimension >= 1
    (a point cloud) every node gets ``1 / N`` (``point_weights="uniform"``) or the
    density-corrected :func:`knn_weights` (``"knn"``).

    Raises:
        MeshError: a top-dimensional cell has zero measure (degenerate), or the cells have a higher
            dimension than the points' space.
    """
    points = np.asarray(points, dtype=np.float64)
    n = len(points)
    dim, blocks = top_dimensional_cells(cells)
    if dim <= 0:
        if point_weights not in POINT_WEIGHTS:
            raise MeshError(f"point_weights must be one of {POINT_WEIGHTS}, got '{point_weights}'")
        return knn_weights(points) if point_weights == "knn" else np.full(n, 1.0 / n)
    if dim > points.shape[1]:
        raise MeshError(
            f"{source}: mixed dimensions: {dim}D cells on {points.shape[1]}D points; "
            "check that the file's points have all their coordinates"
        )
    table = as_tensor_view(points)
    extent = float((table.amax(0) - table.amin(0)).max()) or 1.0  # numpy's ptp: 4x as long
    weights = np.zeros(n)
    for cell_type, conn in blocks:
        conn = np.asarray(conn, dtype=np.int64)
        k = conn.shape[1]
        bad = []
        for start in range(0, len(conn), WEIGHT_CELLS):  # bounded temporaries on huge meshes
            part = conn[start : start + WEIGHT_CELLS]
            measures = cell_measures(points, cell_type, part)
            bad.append(start + np.flatnonzero(measures <= rtol * extent**dim))
            _add_shares(weights, part, measures / k)
        bad = np.concatenate(bad) if bad else bad
        if len(bad):
            raise MeshError(
                f"{source}: {len(bad)} degenerate {cell_type} cell(s) with zero measure "
                f"(first: cell {int(bad[0])} with nodes {conn[bad[0]].tolist()}); "
                "remove or repair them in the mesh generator"
            )
    return weights


def _add_shares(weights: np.ndarray, cells: np.ndarray, share: np.ndarray) -> None:
    """Add ``share[i]`` to the weight of every node of cell ``i`` (``cells`` [M, k]): a count per
    corner over the range of nodes the cells hold (a mesh's nearby cells hold nearby nodes)."""
    if not len(cells):
        return
    lo, hi = int(cells.min()), int(cells.max()) + 1
    for j in range(cells.shape[1]):
        weights[lo:hi] += np.bincount(cells[:, j] - lo, share, minlength=hi - lo)


#: how the nodes of a point cloud (a file without cells) are weighted
POINT_WEIGHTS = ("knn", "uniform")


def intrinsic_dimension(points: np.ndarray, k: int = 8, ratio: float = 0.05) -> int:
    """The dimension of the manifold a point cloud samples (a surface in 3D: 2), by local PCA.

    For every point, the covariance of its ``k`` nearest neighbours has as many eigenvalues above
    ``ratio`` times the largest as the cloud has local directions; the median over the points is
    returned.
    """
    from scipy.spatial import cKDTree

    points = np.asarray(points, dtype=np.float64)
    n, space = points.shape
    k = min(k, n)
    if space == 1 or k < 3:
        return space
    _, neighbours = cKDTree(points).query(points, k=k)
    local = points[neighbours] - points[neighbours].mean(1, keepdims=True)  # [N, k, d]
    eig = np.linalg.eigvalsh(np.einsum("nki,nkj->nij", local, local))  # ascending
    count = (eig > ratio * eig[:, -1:]).sum(1)
    return int(max(1, np.median(count)))


def knn_weights(points: np.ndarray, k: int = 8, dim: int | None = None) -> np.ndarray:
    """Quadrature weights [N] of a point cloud from its local point density.

    Node ``i`` gets the volume of the ``dim``-ball reaching its ``k``-th nearest neighbour divided
    by ``k`` (the share of space one sample occupies there), ``w_i = V_dim r_k(i)^dim / k``: dense
    regions get small weights and sparse regions large ones, so ``sum_i w_i f_i`` estimates the
    integral of ``f`` over the sampled domain (the weights sum to about its measure) whatever the
    sampling density, where uniform weights ``1/N`` would average with the density. Nodes on the
    boundary see neighbours on one side only and get weights up to ``2^dim`` times too large:
    meshes with cells, whose weights are exact, are always preferable.

    Args:
        points: [N, space] coordinates.
        k: neighbours per node (excluding the node itself).
        dim: dimension of the sampled domain; None estimates it (:func:`intrinsic_dimension`),
            so that points on a surface in 3D get areas.
    """
    from scipy.spatial import cKDTree

    points = np.asarray(points, dtype=np.float64)
    n = len(points)
    if n <= 1:
        return np.ones(n)
    dim = intrinsic_dimension(points, k) if dim is None else int(dim)
    k = min(k, n - 1)
    distance, _ = cKDTree(points).query(points, k=k + 1)  # the first neighbour is the node
    radius = distance[:, -1]
    ball = np.pi ** (dim / 2) / gamma(dim / 2 + 1)
    return ball * radius**dim / k


def default_weight(n: int, batch: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    """Quadrature weights ``1 / n_b`` for every node of sample ``b`` (the paper's ``1/n``), with the
    dtype and device of ``like``; ``batch`` [n] is the nodes' batch vector (None: one sample)."""
    if batch is None:
        return torch.full((n,), 1.0 / n, dtype=like.dtype, device=like.device)
    return 1.0 / torch.bincount(batch).to(like.dtype)[batch]

"""Domains as PyG ``Data``: mesh I/O, quadrature weights, grids, latent/query meshes, neighbours,
normalisers and batching."""

from meshop.data.batching import (
    FOLLOW_BATCH,
    grid_shape_of,
    latent_nodes,
    make_loader,
    node_batch,
    node_features,
    nodes_with_queries,
    num_samples,
    query_features,
    query_nodes,
)
from meshop.data.domains import from_points, grid_points, uniform_grid
from meshop.data.integrals import group_weights, integrate, mesh_integrals
from meshop.data.latent import (
    add_latent_mesh,
    coarse_shape,
    farthest_point_sampling,
    set_query_points,
)
from meshop.data.mesh_io import (
    GROUP_PREFIX,
    field_layout,
    from_meshio,
    group_cells,
    group_masks,
    mesh_cells,
    read_mesh,
    read_meshio,
    split_fields,
    to_meshio,
    write_mesh,
)
from meshop.data.neighbors import (
    knn_index,
    neighbor_index,
    quantile_index,
    radius_index,
    squared_distance,
)
from meshop.data.normalizers import GaussianNormalizer, RunningMoments
from meshop.data.weights import cell_measures, knn_weights, lumped_mass_weights

__all__ = [
    "FOLLOW_BATCH",
    "GROUP_PREFIX",
    "GaussianNormalizer",
    "RunningMoments",
    "add_latent_mesh",
    "cell_measures",
    "coarse_shape",
    "farthest_point_sampling",
    "field_layout",
    "from_meshio",
    "from_points",
    "grid_points",
    "grid_shape_of",
    "group_cells",
    "group_masks",
    "group_weights",
    "integrate",
    "knn_index",
    "knn_weights",
    "latent_nodes",
    "lumped_mass_weights",
    "make_loader",
    "mesh_cells",
    "mesh_integrals",
    "neighbor_index",
    "node_batch",
    "node_features",
    "nodes_with_queries",
    "num_samples",
    "quantile_index",
    "query_features",
    "query_nodes",
    "radius_index",
    "read_mesh",
    "read_meshio",
    "set_query_points",
    "split_fields",
    "squared_distance",
    "to_meshio",
    "uniform_grid",
    "write_mesh",
]

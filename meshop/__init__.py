"""meshop: neural operators on arbitrary meshes and point clouds.

PiT position-attention, Galerkin/Fourier Transformers and ONO orthogonal attention in one
mesh-agnostic frame built on PyTorch Geometric.
"""

from meshop import _pyg  # noqa: F401  (imports PyG with its torch-cluster warning filtered)
from meshop.data import (
    GaussianNormalizer,
    add_latent_mesh,
    from_meshio,
    from_points,
    make_loader,
    read_mesh,
    set_query_points,
    uniform_grid,
    write_mesh,
)
from meshop.errors import ConfigError, FieldError, MeshError, MeshopError, MeshReadError

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "FieldError",
    "GaussianNormalizer",
    "MeshError",
    "MeshReadError",
    "MeshopError",
    "__version__",
    "add_latent_mesh",
    "from_meshio",
    "from_points",
    "make_loader",
    "read_mesh",
    "set_query_points",
    "uniform_grid",
    "write_mesh",
]

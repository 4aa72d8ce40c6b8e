"""Datasets: real-solver generators and loaders of the standard benchmark files."""

from meshop.datasets.airfoil import Airfoil
from meshop.datasets.base import GeneratedDataset, data_root
from meshop.datasets.burgers import Burgers
from meshop.datasets.darcy import Darcy
from meshop.datasets.darcy_mesh import DarcyMesh
from meshop.datasets.elasticity import Elasticity
from meshop.datasets.mesh_folder import SAMPLE_MESHES, MeshFolder
from meshop.datasets.standard import FNOBurgers, FNODarcy, GeoFNOAirfoil, GeoFNOElasticity

__all__ = [
    "Airfoil",
    "Burgers",
    "Darcy",
    "DarcyMesh",
    "Elasticity",
    "FNOBurgers",
    "FNODarcy",
    "GeneratedDataset",
    "GeoFNOAirfoil",
    "GeoFNOElasticity",
    "SAMPLE_MESHES",
    "MeshFolder",
    "data_root",
]

"""Import PyTorch Geometric quietly.

PyG warns at import time that torch-cluster is deprecated in favour of pyg-lib, which is not
available on every platform; meshop calls ``torch_cluster`` directly on purpose, so that warning
is filtered here, in the one place meshop imports PyG first.
"""

import warnings

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=r".*torch[-_]cluster.*", category=DeprecationWarning)
    warnings.filterwarnings("ignore", message=r".*torch[-_]cluster.*", category=UserWarning)
    warnings.filterwarnings(
        "ignore", message=r".*torch\.jit\.script.*", category=DeprecationWarning
    )
    warnings.filterwarnings("ignore", message=r".*An issue occurred while importing.*")
    import torch_geometric  # noqa: F401
    from torch_geometric.data import Batch, Data
    from torch_geometric.loader import DataLoader
    from torch_geometric.utils import scatter, softmax, to_dense_batch

    try:
        import torch_cluster
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ImportError(
            "meshop needs torch-cluster, which is built from source: run `make install` "
            "(or `MAX_JOBS=2 pip install --no-build-isolation torch-cluster` after torch)."
        ) from exc

__all__ = ["Batch", "Data", "DataLoader", "scatter", "softmax", "to_dense_batch", "torch_cluster"]

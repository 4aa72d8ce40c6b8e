"""Plain helpers that tests in several files share: meshes, toy samples and models, training
settings, the ``meshop`` command and torchrun. Fixtures live in the conftest.py files."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
from pathlib import Path

import meshio
import numpy as np
import torch
import torch.nn.functional as F

from meshop.cli import main
from meshop.data import from_points, query_features
from meshop.models.mlp_baseline import MLPBaseline
from meshop.train import TrainConfig, seed_everything
from meshop.train.demo import DemoSettings

#: the repository's root (the folder holding meshop/, tests/, docs/, benchmarks/)
ROOT = Path(__file__).resolve().parents[1]

# ---------------------------------------------------------------- meshes


def square_with_hole(radius: float = 0.2, segments: int = 24, max_area: float = 0.005):
    """Points and triangles of the unit square minus a regular polygon hole (Triangle mesher)."""
    import triangle

    t = np.linspace(0, 2 * np.pi, segments, endpoint=False)
    hole = 0.5 + radius * np.stack([np.cos(t), np.sin(t)], 1)
    square = np.array([[0, 0], [1, 0], [1, 1], [0, 1]], float)
    vertices = np.concatenate([square, hole])
    seg_sq = [[i, (i + 1) % 4] for i in range(4)]
    seg_hole = [[4 + i, 4 + (i + 1) % segments] for i in range(segments)]
    mesh = triangle.triangulate(
        {"vertices": vertices, "segments": np.array(seg_sq + seg_hole), "holes": [[0.5, 0.5]]},
        f"pq30a{max_area}",
    )
    hole_area = 0.5 * segments * radius**2 * np.sin(2 * np.pi / segments)
    return mesh["vertices"], mesh["triangles"], 1.0 - hole_area


def square_mesh(n: int = 6, shift: float = 0.0):
    """A triangulated unit square (optionally shifted) as a domain without fields."""
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    pos = np.stack([i.ravel(), j.ravel()], 1) / (n - 1) + shift
    corner = (i[:-1, :-1] * n + j[:-1, :-1]).ravel()
    faces = np.concatenate(
        [
            np.stack([corner, corner + n, corner + n + 1], 1),
            np.stack([corner, corner + n + 1, corner + 1], 1),
        ]
    )
    data = from_points(pos)
    data.face = torch.as_tensor(faces.T.copy())
    return data


def square_meshio(n: int, shift: float = 0.0) -> meshio.Mesh:
    """An n x n-node triangulated unit square with fields 'load' [N], 'u' [N, 2], 'vm' [N]."""
    x, y = np.meshgrid(np.linspace(0, 1, n), np.linspace(0, 1, n), indexing="ij")
    points = np.stack([x.ravel(), y.ravel(), np.zeros(n * n)], axis=1)
    node = np.arange(n * n).reshape(n, n)
    a, b, c, d = node[:-1, :-1], node[1:, :-1], node[1:, 1:], node[:-1, 1:]
    tri = np.concatenate(
        [np.stack([a, b, c], -1).reshape(-1, 3), np.stack([a, c, d], -1).reshape(-1, 3)]
    )
    load = points[:, 0] + shift
    fields = {"load": load, "u": np.stack([load, -load], 1), "vm": load**2}
    return meshio.Mesh(points, [("triangle", tri)], point_data=fields)


def gmsh_square(n: int = 6, shift: float = 0.0) -> meshio.Mesh:
    """An n x n-node triangulated unit square with gmsh physical groups: the four sides as named
    lines and the plate as a named surface; point field u = 1 + 2x + 3y (+ shift)."""
    x, y = (a.ravel() for a in np.meshgrid(np.linspace(0, 1, n), np.linspace(0, 1, n)))
    node = np.arange(n * n).reshape(n, n)  # node[row j (y), column i (x)]
    a, b, c, d = node[:-1, :-1], node[:-1, 1:], node[1:, 1:], node[1:, :-1]
    tri = np.concatenate(
        [np.stack([a, b, c], -1).reshape(-1, 3), np.stack([a, c, d], -1).reshape(-1, 3)]
    )
    sides = {
        "bottom": node[0],
        "right": node[:, -1],
        "top": node[-1][::-1],
        "left": node[:, 0][::-1],
    }
    lines = np.concatenate([np.stack([s[:-1], s[1:]], 1) for s in sides.values()])
    tags = np.repeat(np.arange(1, 5), n - 1)
    field_data = {name: np.array([i + 1, 1]) for i, name in enumerate(sides)}
    field_data["plate"] = np.array([5, 2])
    return meshio.Mesh(
        np.c_[x, y, np.zeros(n * n)],
        [("line", lines), ("triangle", tri)],
        # Python floats: meshio's ASCII gmsh writer prints numpy scalars with repr()
        point_data={"u": (1 + 2 * x + 3 * y + shift).astype(object)},
        cell_data={
            "gmsh:physical": [tags, np.full(len(tri), 5)],
            "gmsh:geometrical": [tags, np.full(len(tri), 5)],
        },
        field_data=field_data,
    )


def unit_grid(*shape: int) -> torch.Tensor:
    """``[1, dim, *shape]`` coordinates of a uniform grid over the unit box."""
    axes = torch.meshgrid(*(torch.linspace(0, 1, n) for n in shape), indexing="ij")
    return torch.stack(axes)[None]


#: the targets of :func:`predict_case` lie this far from zero: predictions left in normalised
#: units are far off
PREDICT_OFFSET = 50.0
#: the latent mesh of the ``trained`` fixture (tests/train/conftest.py): 8 farthest points
PREDICT_LATENT = 8


def predict_case(n: int, k: float):
    """An n x n-node square, its input field a = sin(k y) and target u = OFFSET + 2 a + x."""
    data = square_mesh(n)
    a = np.sin(k * data.pos[:, 1].numpy())
    return data, a, PREDICT_OFFSET + 2 * a + data.pos[:, 0].numpy()


class CountingReads:
    """``read_meshio`` that counts the files it reads."""

    def __init__(self, monkeypatch):
        import meshop.datasets.mesh_folder as module

        self.read = module.read_meshio
        self.files: list[str] = []
        monkeypatch.setattr(module, "read_meshio", self)

    def __call__(self, path, *args, **kwargs):
        self.files.append(os.path.basename(path))
        return self.read(path, *args, **kwargs)


# ---------------------------------------------------------------- toy training


def toy_samples(count: int, seed: int = 0):
    """Point clouds of 12-17 nodes: y = 2 x + x_1^2 from x = a sin(3 x_0) and the parameter a."""
    g = torch.Generator().manual_seed(seed)
    samples = []
    for i in range(count):
        pos = torch.rand(12 + i % 6, 2, generator=g)
        a = 0.5 + torch.rand(1, generator=g)
        x = a * torch.sin(3 * pos[:, :1])
        samples.append(from_points(pos, x, 2 * x + pos[:, 1:] ** 2, params=a))
    return samples


def tiny_model(seed: int = 0) -> MLPBaseline:
    seed_everything(seed)
    return MLPBaseline(in_channels=4, out_channels=1, pos_dim=2, width=16, layers=3)


class NoisyMLP(MLPBaseline):
    """The MLP baseline with input dropout (torch's generator) and, while training, an output
    jitter drawn from numpy's and Python's global generators: a resume that forgets any of the
    three generators trains on other random numbers."""

    def forward(self, data):
        out = self.mlp(F.dropout(query_features(data), 0.3, self.training))
        if self.training:
            jitter = 0.05 * np.random.standard_normal() + 0.05 * random.random()  # noqa: NPY002
            out = out * (1.0 + jitter)
        return out


def noisy_model(seed: int = 0) -> NoisyMLP:
    seed_everything(seed)
    return NoisyMLP(in_channels=4, out_channels=1, pos_dim=2, width=16, layers=3)


def quiet(**changes) -> TrainConfig:
    base = dict(epochs=3, batch_size=4, lr=1e-2, schedule="cosine", progress=False)
    return TrainConfig(**{**base, **changes})


def parameters(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


#: the demo at the smallest sizes that still run every step
TINY_DEMO = DemoSettings(
    num_train=4,
    num_test=2,
    max_area=8e-3,
    epochs=1,
    batch_size=2,
    latent_points=16,
    pit=dict(width=8, heads=1, layers=1, encoder_k=4, decoder_k=4),
    mlp=dict(width=8, layers=2),
    vtu_samples=1,
    new_points=5,
)

# ---------------------------------------------------------------- commands


def free_port() -> int:
    """A TCP port free on the loopback interface, for a torch.distributed process group."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ok(argv, capsys):
    """``meshop ARGV`` in this process: exit status 0; returns what it printed."""
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert status == 0, err
    return out


def torchrun(*args) -> subprocess.CompletedProcess:
    """``python -m torch.distributed.run --standalone --nproc_per_node 2 ARGS`` on the CPU, with
    the repository's root on the path (scripts import ``tests.helpers``)."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
    launcher = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    return subprocess.run(
        [sys.executable, *launcher, *map(str, args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


#: the start of a script run in a fresh process that measures its resident memory: ``status(key)``
#: reads ``VmRSS`` (now) or ``VmHWM`` (the high-water mark) in bytes, ``reset_peak()`` sets the
#: high-water mark to the resident set now (in one process, memory freed by an earlier
#: prediction would be reused unseen: hence a fresh process)
MEMORY_PRELUDE = """
def status(key):
    with open("/proc/self/status") as lines:
        return next(int(line.split()[1]) * 1024 for line in lines if line.startswith(key + ":"))

def reset_peak():
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")
"""


def decoded_arrays(monkeypatch) -> list[str]:
    """The names of the DataArrays that :func:`meshop.data.vtu.read_vtu` decodes from now on
    (appended as they are decoded), by a spy on its reader."""
    from meshop.data import vtu

    decoded = []
    real = vtu._Reader.data_array

    def spied(self, elem, *args):
        decoded.append(elem.get("Name"))
        return real(self, elem, *args)

    monkeypatch.setattr(vtu._Reader, "data_array", spied)
    return decoded

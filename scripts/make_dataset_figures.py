"""Draw one sample of each generated dataset into docs/figures/<name>.png (the docs' figures).

Usage: python scripts/make_dataset_figures.py [--out docs/figures] [--root /tmp/meshop-figures]

Each dataset's first training samples are generated under ``--root``, default a temporary folder,
so the repository's cache is untouched.
Datasets that are not available in this installation are skipped with a message.
"""

from __future__ import annotations

import argparse
import importlib
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import matplotlib.tri as mtri
import numpy as np

#: dataset class of each figure, the plot window (None: the whole domain), the sample drawn
DATASETS = {
    "elasticity": ("meshop.datasets.elasticity:Elasticity", None, 0),
    "airfoil": ("meshop.datasets.airfoil:Airfoil", ((-0.4, 1.4), (-0.5, 0.5)), 0),
    "darcy": ("meshop.datasets.darcy:Darcy", None, 0),
    "burgers": ("meshop.datasets.burgers:Burgers", None, 0),
    "darcy_mesh": ("meshop.datasets.darcy_mesh:DarcyMesh", None, 1),  # sample 1 has holes
}


def field_panels(data, dataset) -> list[tuple[str, object]]:
    """(title, [N] values) of the input fields and the targets of a sample."""

    def names(kind: str, count: int) -> list[str]:
        given = list(getattr(dataset, f"{kind}_names", ()))
        return given if len(given) == count else [f"{kind} {i}" for i in range(count)]

    panels = []
    if getattr(data, "x", None) is not None:
        panels += [(n, data.x[:, i]) for i, n in enumerate(names("input", data.x.shape[1]))]
    panels += [(n, data.y[:, i]) for i, n in enumerate(names("target", data.y.shape[1]))]
    if getattr(data, "displacement", None) is not None:
        panels.append(("|displacement|", data.displacement.norm(dim=1)))
    return panels


def triangles(data):
    """Triangles [F, 3] of a sample's triangles or quads (split in two), None without cells."""
    if getattr(data, "face", None) is not None:
        return data.face.t().numpy()
    if getattr(data, "cell_index_quad", None) is not None:
        quads = data.cell_index_quad.t().numpy()
        return np.concatenate([quads[:, [0, 1, 2]], quads[:, [0, 2, 3]]])
    return None


def draw(data, dataset, title: str, path: Path, window=None) -> None:
    panels = field_panels(data, dataset)
    shape = getattr(data, "grid_shape", None)
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.8), squeeze=False)
    for ax, (name, values) in zip(axes[0], panels):
        values = values.detach().numpy()
        pos = data.pos.detach().numpy()
        if shape is not None and len(shape) == 1:
            ax.plot(pos[:, 0], values)
            ax.set_xlabel("x")
        else:
            if shape is not None:
                art = ax.imshow(
                    values.reshape(shape).T, origin="lower", extent=(0, 1, 0, 1), cmap="viridis"
                )
            elif triangles(data) is not None:
                tri = mtri.Triangulation(pos[:, 0], pos[:, 1], triangles(data))
                art = ax.tripcolor(tri, values, shading="gouraud", cmap="viridis")
                ax.triplot(tri, lw=0.1, color="k", alpha=0.3)
            else:
                art = ax.scatter(pos[:, 0], pos[:, 1], c=values, s=3, cmap="viridis")
            fig.colorbar(art, ax=ax, shrink=0.8)
            ax.set_aspect("equal")
            if window is not None:
                ax.set_xlim(*window[0])
                ax.set_ylim(*window[1])
        ax.set_title(name)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", default=str(Path(__file__).resolve().parents[1] / "docs" / "figures")
    )
    parser.add_argument("--root", default=None, help="data root (default: a temporary folder)")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = args.root or tmp
        for name, (target, window, index) in DATASETS.items():
            module_name, _, class_name = target.partition(":")
            try:
                cls = getattr(importlib.import_module(module_name), class_name)
            except (ImportError, AttributeError) as exc:
                print(f"skipped {name}: {target} is not available ({exc})")
                continue
            dataset = cls(root, num_train=index + 1, num_test=1, progress=False)
            data = dataset[index]
            title = f"{class_name}: training sample {index} ({data.num_nodes} nodes)"
            draw(data, dataset, title, out / f"{name}.png", window)
            print(f"wrote {out / f'{name}.png'}")


if __name__ == "__main__":
    main()

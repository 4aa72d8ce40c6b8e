import os

import numpy as np
import pytest
import torch

torch.set_num_threads(int(os.environ.get("MESHOP_TEST_THREADS", "1")))


@pytest.fixture
def rng():
    return np.random.default_rng(0)


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

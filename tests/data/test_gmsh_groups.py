"""gmsh numbers physical groups per dimension, so a point, a curve and a surface group of one file
often share a tag number. Each group is the cells of its own dimension with its tag: its node mask
and its integrals are those of that dimension alone (a boundary integral gives the boundary's
length, not the plate's area), in the gmsh 2.2 and the gmsh 4.1 format alike.

The files are written by hand, as gmsh writes them: a triangulated plate [0, 2] x [0, 1] whose
physical groups are the point "anchor" (tag 1, dimension 0), the curves "wall" (bottom and top,
tag 1), "inlet" (left, tag 2) and "outlet" (right, tag 3), and the surface "fluid" (tag 1).
"""

import numpy as np
import pytest
import torch

from meshop.data import group_masks, group_weights, mesh_integrals, read_mesh, read_meshio

NX, NY = 5, 3  # nodes along x and y
WIDTH, HEIGHT = 2.0, 1.0
#: name -> (dimension, tag); every dimension has a group with tag 1
PHYSICAL = {"anchor": (0, 1), "wall": (1, 1), "inlet": (1, 2), "outlet": (1, 3), "fluid": (2, 1)}
#: gmsh element types
LINE, TRIANGLE, POINT = 1, 2, 15


def plate():
    """Nodes [N, 3], and the elements of each geometrical entity:
    ``{(dim, entity): (physical tag, gmsh element type, node indices [M, k])}``."""
    x, y = np.meshgrid(np.linspace(0, WIDTH, NX), np.linspace(0, HEIGHT, NY))
    points = np.c_[x.ravel(), y.ravel(), np.zeros(NX * NY)]
    node = np.arange(NX * NY).reshape(NY, NX)  # node[row (y), column (x)]
    a, b, c, d = node[:-1, :-1], node[:-1, 1:], node[1:, 1:], node[1:, :-1]
    tri = np.concatenate([np.stack([a, b, c], -1), np.stack([a, c, d], -1)]).reshape(-1, 3)

    def segments(nodes):
        return np.stack([nodes[:-1], nodes[1:]], 1)

    entities = {
        (0, 1): (1, POINT, node[:1, :1]),  # the corner (0, 0)
        (1, 1): (1, LINE, segments(node[0])),  # bottom: wall
        (1, 2): (3, LINE, segments(node[:, -1])),  # right: outlet
        (1, 3): (1, LINE, segments(node[-1, ::-1])),  # top: wall
        (1, 4): (2, LINE, segments(node[::-1, 0])),  # left: inlet
        (2, 1): (1, TRIANGLE, tri),
    }
    return points, entities


def physical_names() -> list[str]:
    lines = [f'{dim} {tag} "{name}"' for name, (dim, tag) in PHYSICAL.items()]
    return ["$PhysicalNames", str(len(lines)), *lines, "$EndPhysicalNames"]


def gmsh22() -> str:
    points, entities = plate()
    nodes = [f"{i + 1} {x!r} {y!r} {z!r}" for i, (x, y, z) in enumerate(points.tolist())]
    elements = []
    for (_, entity), (tag, kind, conn) in entities.items():
        for cell in conn + 1:
            elements.append(f"{kind} 2 {tag} {entity} {' '.join(map(str, cell))}")
    elements = [f"{i + 1} {e}" for i, e in enumerate(elements)]
    sections = [
        *["$MeshFormat", "2.2 0 8", "$EndMeshFormat", *physical_names()],
        *["$Nodes", str(len(nodes)), *nodes, "$EndNodes"],
        *["$Elements", str(len(elements)), *elements, "$EndElements", ""],
    ]
    return "\n".join(sections)


def gmsh41() -> str:
    points, entities = plate()
    n = len(points)

    def box(conn):
        corners = points[np.unique(conn)]
        return " ".join(repr(v) for v in [*corners.min(0).tolist(), *corners.max(0).tolist()])

    by_dim = [[(e, t, c) for (d, e), (t, _, c) in entities.items() if d == dim] for dim in range(3)]
    records = [" ".join(map(str, [*map(len, by_dim), 0]))]
    records += [
        f"{e} {repr(points[c[0, 0]].tolist())[1:-1].replace(',', '')} 1 {t}"
        for e, t, c in by_dim[0]
    ]
    records += [f"{e} {box(c)} 1 {t} 0" for e, t, c in by_dim[1]]
    records += [f"{e} {box(c)} 1 {t} 4 1 2 3 4" for e, t, c in by_dim[2]]
    # every node in the surface's block (gmsh puts boundary nodes in the curves' blocks: the
    # reader does not care which entity a node belongs to)
    nodes = [f"1 {n} 1 {n}", f"2 1 0 {n}", *map(str, range(1, n + 1))]
    nodes += [" ".join(repr(v) for v in p) for p in points.tolist()]
    blocks, count = [], 0
    for (dim, entity), (_, kind, conn) in entities.items():
        blocks.append(f"{dim} {entity} {kind} {len(conn)}")
        for cell in conn + 1:
            count += 1
            blocks.append(f"{count} {' '.join(map(str, cell))}")
    sections = [
        *["$MeshFormat", "4.1 0 8", "$EndMeshFormat", *physical_names()],
        *["$Entities", *records, "$EndEntities", "$Nodes", *nodes, "$EndNodes"],
        *["$Elements", f"{len(entities)} {count} 1 {count}", *blocks, "$EndElements", ""],
    ]
    return "\n".join(sections)


@pytest.fixture(params=["2.2", "4.1"])
def plate_msh(request, tmp_path):
    path = tmp_path / f"plate-{request.param}.msh"
    path.write_text(gmsh22() if request.param == "2.2" else gmsh41())
    return path


def expected_masks(pos: np.ndarray) -> dict[str, np.ndarray]:
    x, y = pos[:, 0], pos[:, 1]
    return {
        "anchor": (x == 0) & (y == 0),
        "fluid": np.ones(len(pos), dtype=bool),
        "inlet": x == 0,
        "outlet": x == WIDTH,
        "wall": (y == 0) | (y == HEIGHT),
    }


def test_the_file_holds_groups_of_every_dimension_with_tag_1(plate_msh):
    mesh = read_meshio(plate_msh)
    shared = {name for name, value in mesh.field_data.items() if int(np.ravel(value)[0]) == 1}
    assert shared == {"anchor", "wall", "fluid"}


def test_each_groups_node_mask_holds_the_nodes_of_its_own_dimensions_cells(plate_msh):
    mesh = read_meshio(plate_msh)
    masks = group_masks(mesh)
    expected = expected_masks(mesh.points)
    assert list(masks) == sorted(expected)  # sorted by name
    for name, mask in masks.items():
        np.testing.assert_array_equal(mask, expected[name], err_msg=name)


def test_groups_as_masks_and_features_of_a_domain_are_the_same_nodes(plate_msh):
    data = read_mesh(plate_msh, groups="masks")
    pos = data.pos.double().numpy()
    for name, mask in expected_masks(pos).items():
        assert torch.equal(data[f"group_{name}"], torch.as_tensor(mask)), name
    features = read_mesh(plate_msh, groups="features").x
    columns = np.stack([expected_masks(pos)[name] for name in sorted(PHYSICAL)], 1)
    np.testing.assert_array_equal(features.numpy(), columns.astype(np.float32))


def test_a_curve_groups_integrals_are_over_its_lines_and_the_surfaces_over_the_plate(plate_msh):
    mesh = read_meshio(plate_msh)
    x, y = mesh.points[:, 0], mesh.points[:, 1]
    fields = {"one": np.ones(len(x)), "u": 1 + 2 * x + 3 * y}  # linear: the rules are exact
    result = mesh_integrals(plate_msh, fields, groups=["wall", "inlet", "outlet", "fluid"])
    assert result["wall"]["one"] == pytest.approx(2 * WIDTH)  # the length of bottom and top
    assert result["inlet"]["one"] == pytest.approx(HEIGHT)
    assert result["outlet"]["one"] == pytest.approx(HEIGHT)
    assert result["fluid"]["one"] == pytest.approx(WIDTH * HEIGHT)
    assert result["domain"]["one"] == pytest.approx(WIDTH * HEIGHT)
    # bottom: int_0^2 (1 + 2x) dx = 6; top: int_0^2 (4 + 2x) dx = 12
    assert result["wall"]["u"] == pytest.approx(18.0)
    assert result["inlet"]["u"] == pytest.approx(2.5)  # int_0^1 (1 + 3y) dy
    assert result["outlet"]["u"] == pytest.approx(6.5)  # int_0^1 (5 + 3y) dy
    assert result["fluid"]["u"] == pytest.approx(9.0)  # 2 + 2 * 2 + 3 * 2 / 2
    wall = group_weights(mesh, "wall")
    h = WIDTH / (NX - 1)
    ends = (x == 0) | (x == WIDTH)
    expected = np.where(expected_masks(mesh.points)["wall"], np.where(ends, h / 2, h), 0.0)
    np.testing.assert_allclose(wall, expected, rtol=1e-12, atol=0)

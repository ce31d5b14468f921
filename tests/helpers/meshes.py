"""Small mesh files for the tests."""

import numpy as np
import trimesh

# An OBJ whose position 1 is used with two texture coordinates (a seam) and whose
# position 5 no face uses: its vertex list is its five `v` lines, in file order.
SEAM_OBJ = """mtllib skin.mtl
o part
v 0 0 0
v 1 0 0
v 0 1 0
v 0 0 1
v 5 5 5
vt 0 0
vt 1 0
vt 0 1
vt 1 1
vn 0 0 1
usemtl skin
f 1/1/1 2/2/1 3/3/1
f 1/4/1 2/2/1 4/3/1
"""


def off_text(vertices, faces, declared: tuple[int, int] | None = None) -> str:
    """An OFF file of vertices [V, 3] and triangles [T, 3] whose count line declares
    `declared` (vertices, faces), by default (V, T)."""
    counts = declared or (len(vertices), len(faces))
    return (f"OFF\n{counts[0]} {counts[1]} 0\n"
            + "".join(f"{x} {y} {z}\n" for x, y, z in vertices)
            + "".join(f"3 {a} {b} {c}\n" for a, b, c in faces))


def ascii_ply_text(vertices, faces, declared: tuple[int, int] | None = None) -> str:
    """An ASCII PLY file of vertices [V, 3] and triangles [T, 3] whose header declares
    `declared` (vertices, faces), by default (V, T)."""
    counts = declared or (len(vertices), len(faces))
    header = ["ply", "format ascii 1.0", f"element vertex {counts[0]}", "property float x",
              "property float y", "property float z", f"element face {counts[1]}",
              "property list uchar int vertex_indices", "end_header"]
    return ("\n".join(header) + "\n" + "".join(f"{x} {y} {z}\n" for x, y, z in vertices)
            + "".join(f"3 {a} {b} {c}\n" for a, b, c in faces))


# The reason each file of `write_cut_meshes` is refused with.
CUT_MESH_REASONS = {
    "faces_cut.off": "80 faces declared, 40 read",
    "faces_cut.ply": "80 faces declared, 50 read",
    "vertices_cut.off": "42 vertices declared, 30 read",
    "triangles_cut.stl": "80 triangles declared, 77 read (a binary STL of 3934 bytes, "
                         "4084 expected)",
    "faces_cut_binary.ply": "80 faces declared, 50 read",
}


def write_cut_meshes(folder) -> list:
    """Writes an icosphere (42 vertices, 80 faces) into `folder` as five files whose data
    are cut short of what they declare: OFF with 40 of 80 face lines, ASCII PLY with 50,
    OFF with 30 of 42 vertex lines, binary STL without its last 3 triangles, binary PLY
    without its last 30 faces. Returns their paths."""
    sphere = trimesh.creation.icosphere(subdivisions=1)
    vertices, faces = sphere.vertices.tolist(), sphere.faces.tolist()
    (folder / "faces_cut.off").write_text(off_text(vertices, faces[:40], (42, 80)))
    (folder / "faces_cut.ply").write_text(ascii_ply_text(vertices, faces[:50], (42, 80)))
    (folder / "vertices_cut.off").write_text(off_text(vertices[:30], faces, (42, 80)))
    (folder / "triangles_cut.stl").write_bytes(sphere.export(file_type="stl")[:-3 * 50])
    binary_ply = sphere.export(file_type="ply", encoding="binary")
    (folder / "faces_cut_binary.ply").write_bytes(binary_ply[:-30 * 13])  # 13 bytes a face
    return [folder / name for name in ("faces_cut.off", "faces_cut.ply", "vertices_cut.off",
                                       "triangles_cut.stl", "faces_cut_binary.ply")]


def write_sphere_folder(root) -> list:
    """Four labelled icospheres (42 vertices) in a mesh folder laid out as
    conf/data/rna_sample.yaml with `data.meshes=.`: `s<i>.ply`, `labels/s<i>.txt` (the sign
    of x), train.txt (3 meshes) and test.txt (1); returns the mesh paths."""
    (root / "labels").mkdir(parents=True)
    paths = []
    for index in range(4):
        sphere = trimesh.creation.icosphere(1)
        vertices = sphere.vertices * (1 + 0.2 * index)
        path = root / f"s{index}.ply"
        trimesh.Trimesh(vertices, sphere.faces, process=False).export(path)
        np.savetxt(root / "labels" / f"s{index}.txt", (vertices[:, 0] > 0).astype(int), fmt="%d")
        paths.append(path)
    (root / "train.txt").write_text("s0.ply\ns1.ply\ns2.ply\n")
    (root / "test.txt").write_text("s3.ply\n")
    return paths


def write_labelled_mesh(mesh: dict, mesh_path, label_path) -> None:
    """Writes `mesh` ({"vertices", "triangles", "labels"}, e.g. `conftest._octant_mesh`) as
    it is (`process=False`) to `mesh_path` (format by suffix) and its per-vertex labels, one
    integer per line, to `label_path`."""
    trimesh.Trimesh(mesh["vertices"], mesh["triangles"], process=False).export(mesh_path)
    np.savetxt(label_path, mesh["labels"], fmt="%d")


def write_octant_folder(root, num_train: int, num_test: int):
    """A mesh folder of octant-labelled stretched icospheres (`conftest._octant_mesh`, 42 and
    162 vertices alternately, 6 classes): `meshes/train<i>.ply` and `meshes/test<i>.ply`,
    `labels/<stem>.txt`, train.txt and test.txt; returns `root`."""
    from conftest import _octant_mesh

    (root / "meshes").mkdir(parents=True)
    (root / "labels").mkdir()
    names = {"train": [f"train{i}.ply" for i in range(num_train)],
             "test": [f"test{i}.ply" for i in range(num_test)]}
    for seed, name in enumerate(names["train"] + names["test"]):
        write_labelled_mesh(_octant_mesh(1 + seed % 2, seed), root / "meshes" / name,
                            root / "labels" / f"{name[:-4]}.txt")
    for split, entries in names.items():
        (root / f"{split}.txt").write_text("\n".join(entries) + "\n")
    return root

"""Specification of mesh-file reading and validation (meshseg.data.mesh.meshfiles, .validate)."""

import warnings

import numpy as np
import pytest
import trimesh

from helpers.meshes import (CUT_MESH_REASONS, SEAM_OBJ, ascii_ply_text, off_text,
                            write_cut_meshes)
from meshseg.data.mesh.meshfiles import (face_to_vertex_labels, load_geometry, load_label_file,
                                         load_labelled_mesh, load_mesh)
from meshseg.data.mesh.validate import (InvalidMeshError, count_suspicious_faces,
                                        validate_geometry, validate_labels)

QUAD_OBJ = "v 0 0 0\nv 1 0 0\nv 1 1 0\nv 0 1 0\nf 1 2 3 4\n"
QUAD_OFF = "OFF\n4 1 0\n0 0 0\n1 0 0\n1 1 0\n0 1 0\n4 0 1 2 3\n"


@pytest.mark.parametrize("suffix, text", [(".obj", QUAD_OBJ), (".off", QUAD_OFF)])
def test_polygons_are_triangulated_keeping_vertex_order(tmp_path, suffix, text):
    path = tmp_path / f"quad{suffix}"
    path.write_text(text)
    vertices, faces = load_mesh(path)
    np.testing.assert_array_equal(vertices, [[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]])
    np.testing.assert_array_equal(faces, [[0, 1, 2], [2, 3, 0]])
    assert vertices.dtype == np.float64 and faces.dtype == np.int64


# A pentagon whose corner 3 is reflex (its area is 2.5); a fan from corner 0 (trimesh's)
# gives triangles outside it (3.5 in all) and no diagonal at corner 3.
PENTAGON = [[0, 0, 0], [2, 0, 0], [2, 2, 0], [1, 0.5, 0], [0, 2, 0]]
# Neighbours: a dart (a quad with reflex corner 1, which trimesh split 0-2, outside it), an
# L-shaped hexagon, a pentagon with a straight corner (trimesh: a zero-area triangle).
NON_CONVEX = {
    "pentagon": (PENTAGON, 2.5),
    "dart": ([[0, 0, 0], [1, 0.6, 0], [2, 0, 0], [1, 2, 0]], 1.4),
    "l_shape": ([[0, 0, 0], [2, 0, 0], [2, 1, 0], [1, 1, 0], [1, 2, 0], [0, 2, 0]], 3.0),
    "straight_corner": ([[0, 0, 0], [1, 0, 0], [2, 0, 0], [2, 2, 0], [1, 0.5, 0]], 1.5),
}
SIX_CORNERS = PENTAGON + [[3, 0, 0]]


def _polygon_file(path, corners, faces) -> None:
    """A mesh of `faces` (lists of corner indices) over `corners`, in the format of `path`'s
    suffix: .off, .obj, .ply (ASCII) or .bply (binary little-endian PLY, named .ply)."""
    vertices = np.asarray(corners, np.float32)
    lines = "".join(f"{x} {y} {z}\n" for x, y, z in corners)
    listed = "".join(f"{len(face)} " + " ".join(map(str, face)) + "\n" for face in faces)
    if path.suffix == ".off":
        path.write_text(f"OFF\n{len(corners)} {len(faces)} 0\n" + lines + listed)
        return path
    if path.suffix == ".obj":
        path.write_text("".join(f"v {x} {y} {z}\n" for x, y, z in corners) + "".join(
            "f " + " ".join(str(i + 1) for i in face) + "\n" for face in faces))
        return path
    binary = path.suffix == ".bply"
    header = (f"ply\nformat {'binary_little_endian' if binary else 'ascii'} 1.0\n"
              f"element vertex {len(corners)}\nproperty float x\nproperty float y\n"
              f"property float z\nelement face {len(faces)}\n"
              "property list uchar int vertex_indices\nend_header\n")
    path = path.with_suffix(".ply")
    if binary:
        path.write_bytes(header.encode() + vertices.tobytes() + b"".join(
            bytes([len(face)]) + np.asarray(face, "<i4").tobytes() for face in faces))
    else:
        path.write_text(header + lines + listed)
    return path


def _signed_areas(vertices, faces) -> np.ndarray:
    """Each triangle's area, negative when it turns against the z axis (the way the
    polygons here turn)."""
    corners = np.asarray(vertices)[faces]
    return 0.5 * np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0])[:, 2]


POLYGON_FORMATS = [".off", ".obj", ".ply", ".bply"]


@pytest.mark.parametrize("name", NON_CONVEX)
@pytest.mark.parametrize("suffix", POLYGON_FORMATS)
def test_non_convex_polygons_are_ear_clipped_inside_the_polygon(tmp_path, suffix, name):
    """Expected: V - 2 triangles, each turning the polygon's way with an area > 0, together
    exactly its area: the polygon is covered once and nothing outside it is."""
    corners, area = NON_CONVEX[name]
    path = _polygon_file(tmp_path / f"{name}{suffix}", corners, [list(range(len(corners)))])
    vertices, faces = load_mesh(path)
    np.testing.assert_allclose(vertices, corners)
    areas = _signed_areas(vertices, faces)
    assert faces.shape == (len(corners) - 2, 3)
    assert np.all(areas > 1e-6), areas
    assert areas.sum() == pytest.approx(area)


def test_a_non_planar_polygon_is_cut_into_triangles_turning_one_way(tmp_path):
    corners = (np.array(PENTAGON) + np.outer([1, -1, 1, 0, -1], [0, 0, 0.1])).tolist()
    vertices, faces = load_mesh(_polygon_file(tmp_path / "bent.off", corners, [range(5)]))
    assert faces.shape == (3, 3) and np.all(_signed_areas(vertices, faces) > 0)
    assert _signed_areas(vertices, faces).sum() == pytest.approx(2.5)


@pytest.mark.parametrize("suffix", [".off", ".obj", ".ply"])
def test_faces_are_triangulated_in_file_order_each_polygons_triangles_together(tmp_path,
                                                                               suffix):
    """A triangle, the pentagon and a convex quad: 1 + 3 + 2 triangles in that order (trimesh
    put triangles first, then quads, then polygons); the convex quad is cut as before."""
    faces = [[1, 5, 2], [0, 1, 2, 3, 4], [0, 1, 5, 2]]
    path = _polygon_file(tmp_path / f"mixed{suffix}", SIX_CORNERS, faces)
    _, triangles = load_mesh(path)
    assert triangles.shape == (6, 3)
    assert triangles[0].tolist() == [1, 5, 2]
    assert {frozenset(t) for t in triangles[1:4].tolist()} <= {frozenset(c) for c in (
        (0, 1, 3), (1, 2, 3), (0, 3, 4))}
    assert triangles[4:].tolist() == [[2, 0, 1], [1, 5, 2]]  # corner 1 of 0-1-5 is straight


@pytest.mark.parametrize("suffix", POLYGON_FORMATS)
def test_a_self_intersecting_polygon_is_refused_naming_the_face(tmp_path, suffix):
    bowtie = [[0, 0, 0], [1, 1, 0], [1, 0, 0], [0, 1, 0]]
    star = [[0, 0, 0], [2, 0, 0], [0, 1, 0], [2, 2, 0], [1, -1, 0]]  # drawn through itself
    path = _polygon_file(tmp_path / f"bad{suffix}", bowtie, [[0, 1, 2, 3], [0, 1, 2, 3]])
    with pytest.raises(InvalidMeshError, match=r"^face 0 \(4 corners\) is self-intersecting"):
        load_mesh(path)
    path = _polygon_file(tmp_path / f"star{suffix}", star, [[0, 1, 2, 3, 4]] * 2)
    with pytest.raises(InvalidMeshError, match=r"^face 0 \(5 corners\) is self-intersecting "
                                               r"\(its edges 0 and 3 cross\)"):
        load_mesh(path)
    if suffix != ".bply":  # a binary PLY's faces have one corner count (see below)
        path = _polygon_file(tmp_path / f"third{suffix}", bowtie + star,
                             [[0, 1, 2], [4, 5, 6], [4, 5, 6, 7, 8]])
        with pytest.raises(InvalidMeshError, match=r"^face 2 \(5 corners\) is self-int"):
            load_mesh(path)


def test_a_binary_ply_with_faces_of_different_corner_counts_is_refused_saying_so(tmp_path):
    path = _polygon_file(tmp_path / "mixed.bply", SIX_CORNERS, [[1, 5, 2], [0, 1, 2, 3, 4]])
    with pytest.raises(InvalidMeshError, match=r"binary PLY whose face lists have 3 to 5 "
                                               r"entries .*save the mesh as ASCII PLY"):
        load_mesh(path)


def test_a_degenerate_polygon_is_fanned_and_its_flat_triangles_counted(tmp_path):
    """All corners on one line, or one corner repeated: no area to cover, so the faces
    are kept as triangles that validation counts as degenerate, as in a triangle file."""
    path = _polygon_file(tmp_path / "flat.off", [[0, 0, 0], [1, 0, 0], [2, 0, 0], [3, 0, 0],
                                                 [0, 1, 0]], [[0, 1, 2, 3], [0, 1, 1, 4]])
    vertices, faces = load_mesh(path)
    assert faces.shape == (4, 3)
    np.testing.assert_allclose(np.abs(_signed_areas(vertices, faces)), [0, 0, 0.5, 0])


@pytest.mark.parametrize("suffix", [".ply", ".obj", ".off", ".glb"])
def test_formats_round_trip_vertices_and_faces_without_processing(tmp_path, suffix):
    box = trimesh.creation.box()
    path = tmp_path / f"box{suffix}"
    box.export(path)
    vertices, faces = load_mesh(path)
    np.testing.assert_allclose(vertices, box.vertices, atol=1e-6)
    np.testing.assert_array_equal(faces, box.faces)


def test_stl_has_three_unshared_vertices_per_triangle(tmp_path):
    path = tmp_path / "box.stl"
    trimesh.creation.box().export(path)
    vertices, faces = load_mesh(path)
    assert vertices.shape == (36, 3)
    np.testing.assert_array_equal(faces, np.arange(36).reshape(12, 3))


def _refusal(path) -> str | None:
    """The InvalidMeshError message of loading `path`, None if it loads."""
    try:
        load_mesh(path)
    except InvalidMeshError as error:
        return str(error)
    return None


def test_files_cut_short_of_their_declared_counts_are_refused_naming_both_counts(tmp_path):
    files = write_cut_meshes(tmp_path)
    assert {path.name: _refusal(path) for path in files} == CUT_MESH_REASONS


def test_files_holding_more_than_their_declared_counts_are_refused(tmp_path):
    sphere = trimesh.creation.icosphere(subdivisions=1)
    vertices, faces = sphere.vertices.tolist(), sphere.faces.tolist()
    (tmp_path / "extra.off").write_text(off_text(vertices, faces, (42, 70)))
    (tmp_path / "extra.ply").write_text(ascii_ply_text(vertices, faces, (40, 80)))
    stl = sphere.export(file_type="stl")
    (tmp_path / "extra.stl").write_bytes(stl + stl[-50:])
    assert [_refusal(tmp_path / name) for name in ("extra.off", "extra.ply", "extra.stl")] == [
        "70 faces declared, 80 read", "40 vertices declared, 42 read",
        "80 triangles declared, 81 read (a binary STL of 4134 bytes, 4084 expected)"]


def test_count_checks_pass_comments_counts_on_the_off_line_and_ascii_stl(tmp_path):
    (tmp_path / "quad.off").write_text("OFF 4 1 0 # counts\n# corners\n"
                                       + QUAD_OFF.split("4 1 0\n")[1])
    assert load_mesh(tmp_path / "quad.off")[1].tolist() == [[0, 1, 2], [2, 3, 0]]
    box = trimesh.creation.box()
    (tmp_path / "box.stl").write_text(box.export(file_type="stl_ascii"))
    assert load_mesh(tmp_path / "box.stl")[1].shape == (12, 3)


def test_scene_geometries_are_concatenated_in_sorted_name_order_in_scene_coordinates(tmp_path):
    box, sphere = trimesh.creation.box(), trimesh.creation.icosphere(subdivisions=1)
    scene = trimesh.Scene()
    scene.add_geometry(sphere, geom_name="zeta",
                       transform=trimesh.transformations.translation_matrix([5, 0, 0]))
    scene.add_geometry(box, geom_name="alpha")
    path = tmp_path / "scene.glb"
    scene.export(path)
    vertices, faces = load_mesh(path)
    np.testing.assert_allclose(vertices[:8], box.vertices, atol=1e-6)
    np.testing.assert_allclose(vertices[8:], sphere.vertices + [5, 0, 0], atol=1e-6)
    np.testing.assert_array_equal(faces[12:], sphere.faces + 8)


def test_instanced_scene_geometry_is_refused(tmp_path):
    scene = trimesh.Scene()
    box = trimesh.creation.box()
    scene.add_geometry(box, geom_name="box", node_name="a")
    scene.graph.update(frame_to="b", geometry="box",
                       matrix=trimesh.transformations.translation_matrix([3, 0, 0]))
    path = tmp_path / "twice.glb"
    scene.export(path)
    with pytest.raises(InvalidMeshError, match="placed by 2 nodes"):
        load_mesh(path)


def test_label_files_in_npy_int64_and_float64_are_cast(tmp_path):
    np.save(tmp_path / "a.npy", np.array([0, 3, 2], np.int64))
    np.save(tmp_path / "b.npy", np.array([0.0, 3.0, 2.0]))
    for name in ("a.npy", "b.npy"):
        labels = load_label_file(tmp_path / name)
        assert labels.dtype == np.int64
        np.testing.assert_array_equal(labels, [0, 3, 2])
    np.save(tmp_path / "c.npy", np.array([0.5]))
    with pytest.raises(InvalidMeshError, match="label 0.5 at index 0 is not an integer"):
        load_label_file(tmp_path / "c.npy")


def test_face_labels_take_the_majority_of_incident_faces_ties_to_lowest():
    # Vertex 0 touches faces labelled 2, 2, 1 -> 2; vertex 4 touches 1 and 3 -> 1 (tie).
    triangles = np.array([[0, 1, 2], [0, 2, 3], [0, 3, 4], [4, 3, 5]])
    labels = face_to_vertex_labels(triangles, np.array([2, 2, 1, 3]), 6)
    np.testing.assert_array_equal(labels, [2, 2, 2, 1, 1, 3])


def test_face_labels_refuse_a_vertex_without_faces():
    with pytest.raises(InvalidMeshError, match="vertex 3 has no incident face"):
        face_to_vertex_labels(np.array([[0, 1, 2]]), np.array([1]), 4)


def test_labelled_mesh_from_per_face_label_file(tmp_path):
    path = tmp_path / "quad.obj"
    path.write_text(QUAD_OBJ)
    (tmp_path / "quad.txt").write_text("4\n7\n")
    mesh = load_labelled_mesh(path, tmp_path / "quad.txt", label_kind="face")
    np.testing.assert_array_equal(mesh.labels, [4, 4, 4, 7])  # vertices 0, 2 tie -> 4
    assert mesh.labels.dtype == np.int32 and mesh.triangles.dtype == np.int32
    assert mesh.max_degree == 4 and mesh.edges.shape == (14, 2)


def _tetrahedron():
    vertices = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]], float)
    triangles = np.array([[0, 1, 2], [0, 1, 3], [0, 2, 3], [1, 2, 3]])
    return vertices, triangles, np.array([0, 1, 1, 2])


@pytest.mark.parametrize("change, message", [
    (lambda v, t, l: (v[:0], t[:0], l[:0]), r"empty mesh \(0 vertices, 0 triangles\)"),
    (lambda v, t, l: (v, t[:, :2], l), r"faces must be triangles, got shape \(4, 2\)"),
    (lambda v, t, l: (np.where(v == 1, np.inf, v), t, l), "contain NaN or infinity"),
    (lambda v, t, l: (v, t - 1, l), r"face vertex indices span \[-1, 2\], outside \[0, 4\)"),
    (lambda v, t, l: (v, t, l[:3]), "3 labels for 4 vertices"),
    (lambda v, t, l: (v, t, l - 1), r"labels span \[-1, 1\], outside \[0, inf\)"),
])
def test_each_validation_rule_has_its_message(change, message):
    vertices, triangles, labels = change(*_tetrahedron())
    with pytest.raises(InvalidMeshError, match=message):
        validate_geometry(vertices, triangles)
        validate_labels(labels, len(vertices))


def test_labels_at_num_classes_are_refused():
    vertices, triangles, labels = _tetrahedron()
    validate_labels(labels, len(vertices), num_classes=3)
    with pytest.raises(InvalidMeshError, match=r"outside \[0, 2\) \(num_classes=2\)"):
        validate_labels(labels, len(vertices), num_classes=2)


def test_degenerate_and_duplicate_faces_are_counted():
    vertices, triangles, _ = _tetrahedron()
    vertices = np.vstack([vertices, [[2, 0, 0]]])  # vertex 4 is collinear with 0 and 1
    extra = np.array([[0, 0, 1], [0, 1, 4], [2, 1, 0], [3, 1, 0]])
    counts = count_suspicious_faces(vertices, np.vstack([triangles, extra]))
    assert (counts.degenerate, counts.duplicate) == (2, 2)


def test_obj_vertices_are_its_v_lines_with_seams_unsplit_and_unused_vertices_kept(tmp_path):
    path = tmp_path / "seam.obj"
    path.write_text(SEAM_OBJ)
    (tmp_path / "seam.txt").write_text("0\n1\n2\n3\n4\n")
    mesh = load_labelled_mesh(path, tmp_path / "seam.txt")
    np.testing.assert_array_equal(mesh.vertices, [[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1],
                                                  [5, 5, 5]])
    np.testing.assert_array_equal(mesh.triangles, [[0, 1, 2], [0, 1, 3]])
    np.testing.assert_array_equal(mesh.labels, [0, 1, 2, 3, 4])  # label i stays on `v` line i
    assert [4, 4] in mesh.edges.tolist()  # the unused vertex keeps its self-edge


def test_a_label_count_that_only_matches_a_split_vertex_list_is_refused(tmp_path):
    path = tmp_path / "seam.obj"
    path.write_text(SEAM_OBJ.replace("v 5 5 5\n", ""))  # 4 `v` lines, 5 after a seam split
    (tmp_path / "seam.txt").write_text("0\n1\n2\n3\n4\n")
    with pytest.raises(InvalidMeshError, match="5 labels for 4 vertices"):
        load_labelled_mesh(path, tmp_path / "seam.txt")


def test_far_from_the_origin_the_stored_float32_mesh_keeps_every_vertex_and_face(tmp_path):
    xs, ys = np.meshgrid(np.arange(4) * 0.02, np.arange(4) * 0.02)  # 2 cm grid
    vertices = np.stack([xs.ravel() + 512345, ys.ravel() + 5412345, np.zeros(16)], axis=1)
    faces = [[a, a + 1, a + 5] for a in (0, 1, 2, 4, 5, 6, 8, 9, 10)]
    faces += [[a, a + 5, a + 4] for a in (0, 1, 2, 4, 5, 6, 8, 9, 10)]
    path = tmp_path / "patch.off"
    path.write_text("OFF\n16 18 0\n" + "".join(f"{x:.4f} {y:.4f} {z}\n" for x, y, z in vertices)
                    + "".join(f"3 {a} {b} {c}\n" for a, b, c in faces))
    (tmp_path / "patch.txt").write_text("0\n" * 16)
    assert len(np.unique(vertices.astype(np.float32), axis=0)) < 16  # a plain cast merges
    mesh = load_labelled_mesh(path, tmp_path / "patch.txt")
    assert mesh.vertices.dtype == np.float32
    assert len(np.unique(mesh.vertices, axis=0)) == 16 and mesh.face_counts.degenerate == 0
    np.testing.assert_allclose(mesh.vertices + mesh.origin, vertices, atol=1e-3)
    np.testing.assert_allclose(mesh.origin, [512345.03, 5412345.03, 0])


@pytest.mark.parametrize("suffix, text", [
    (".off", "OFF\n3 1 0\n0 0 0\n1 0 0\n0 1 1e39\n3 0 1 2\n"),
    (".ply", "ply\nformat ascii 1.0\nelement vertex 3\nproperty double x\nproperty double y\n"
             "property double z\nelement face 1\nproperty list uchar int vertex_indices\n"
             "end_header\n0 0 0\n1 0 0\n0 1 -1e39\n3 0 1 2\n"),
])
def test_a_coordinate_beyond_float32_is_refused_naming_the_vertex_and_value(
        tmp_path, suffix, text):
    """A position read in float64 that a record's float32 would store as infinity (an OFF
    text, a double-precision PLY) is refused before any cast, with no NumPy warning."""
    path = tmp_path / f"far{suffix}"
    path.write_text(text)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(InvalidMeshError, match=r"vertex 2 has z = -?1e\+39, beyond float32's "
                                                   r"range \(±3.4e\+38; 1 vertices lie beyond it\)"):
            load_geometry(path)


def test_a_float32_ply_that_overflows_names_the_vertex_holding_infinity(tmp_path):
    path = tmp_path / "far.ply"
    path.write_text("ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nproperty float y\n"
                    "property float z\nelement face 1\nproperty list uchar int vertex_indices\n"
                    "end_header\n0 0 0\n1 0 0\n0 inf 0\n3 0 1 2\n")
    with pytest.raises(InvalidMeshError, match=r"NaN or infinity \(vertex 2 has y = inf\)"):
        load_geometry(path)

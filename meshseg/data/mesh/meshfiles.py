"""Reads one labelled mesh file into validated arrays (NumPy + trimesh, no TensorFlow).

Meshes (OBJ, OFF, PLY, STL, GLB/GLTF and anything else trimesh reads) are
loaded with `trimesh.load(path, process=False)`, so the file's vertex list, in
file order and with vertices no face uses, is the mesh's vertex list, and with it
the vertex-to-label alignment is kept. Faces of more than three corners (OFF, PLY, OBJ)
are triangulated by ear clipping (`meshseg.data.mesh.polygons`), not by trimesh's fans, which
are wrong for non-convex polygons: each face in file order, its triangles together (a
convex quad becomes (0, 1, 2), (2, 3, 0)); a self-intersecting polygon is refused naming
the face.
STL stores no shared vertices, so an STL mesh has three vertices per triangle and
its 1-ring is the triangle itself.

OBJ needs care: its faces index positions, texture coordinates and normals
separately, and trimesh splits a position used with two texture coordinates (a
seam) into two vertices and drops positions no face uses. So an OBJ is read for
its geometry only (`v` and `f` lines, each face corner reduced to its position
index), and its vertex count must equal its number of `v` lines.

Formats that declare their element counts (OFF, PLY, binary STL) are checked against
them before trimesh reads the file (`meshseg.data.mesh.declared_counts`), since trimesh
reads a file cut short (or padded) without complaint; a disagreement is refused naming
both counts, e.g. "80 faces declared, 40 read".

A file that loads as a Scene (GLB, multi-object files) is concatenated: its
geometries are taken in sorted geometry-name order, each transformed by the
scene-graph node that places it, and their vertices and faces appended in that
order, so per-vertex labels must follow the same order. A scene is refused when
a geometry is not a triangle mesh or is placed by more than one node.

Labels come from a `.txt` file (one integer per line) or a `.npy` array.
Per-vertex labels give one label per vertex. Per-face labels give one label per
triangle as loaded (after the triangulation above) and are turned into
per-vertex labels by majority vote of the faces incident to each vertex, ties
going to the lowest class id (see `face_to_vertex_labels`).
"""

import hashlib
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import trimesh

from meshseg.data.mesh.adjacency import mesh_edges
from meshseg.data.mesh.declared_counts import check_declared_counts, off_header
from meshseg.data.mesh.foreign import off_data_lines, read_label_file, text_lines
from meshseg.data.mesh.polygons import triangulate
from meshseg.data.mesh.validate import (FaceCounts, InvalidMeshError, float32_positions,
                                        validate_geometry, validate_labels)

LABEL_KINDS = ("vertex", "face")


@dataclass
class LabelledMesh:
    """One validated mesh, ready to be written as a record.

    Attributes:
      vertices: float32 [V, 3]; triangles: int32 [T, 3]; labels: int32 [V].
      face_counts: degenerate and duplicate faces of the stored (float32) positions
        (see `validate.FaceCounts`).
      sha256: hex digest of the mesh file.
      edges, edge_weights: int32 [E, 2] / float32 [E] 1-ring adjacency (`mesh_edges`).
      origin: float64 [3], the point the stored positions are relative to (zeros unless
        float32 needed centring, `validate.float32_positions`).
    """

    vertices: np.ndarray
    triangles: np.ndarray
    labels: np.ndarray
    face_counts: FaceCounts
    sha256: str
    edges: np.ndarray
    edge_weights: np.ndarray
    origin: np.ndarray

    @property
    def max_degree(self) -> int:
        """K: the largest 1-ring size, self-edge included."""
        return int(np.bincount(self.edges[:, 0]).max())


def file_sha256(path: str | Path) -> str:
    """Hex SHA-256 digest of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _concatenate_scene(scene: trimesh.Scene) -> tuple[np.ndarray, np.ndarray]:
    """Vertices float64 [V, 3] and faces int64 [T, 3] of a scene's geometries, in sorted
    geometry-name order, each in scene coordinates. Raises InvalidMeshError (see module)."""
    vertices, faces, offset = [], [], 0
    for name in sorted(scene.geometry):
        geometry = scene.geometry[name]
        if not isinstance(geometry, trimesh.Trimesh):
            raise InvalidMeshError(
                f"scene geometry {name!r} is a {type(geometry).__name__}, not a triangle mesh")
        nodes = scene.graph.geometry_nodes.get(name, [])
        if len(nodes) > 1:
            raise InvalidMeshError(
                f"scene geometry {name!r} is placed by {len(nodes)} nodes; instanced "
                "geometry has no single vertex order for per-vertex labels")
        transform = scene.graph.get(nodes[0])[0] if nodes else np.eye(4)
        vertices.append(trimesh.transform_points(np.asarray(geometry.vertices), transform))
        faces.append(np.asarray(geometry.faces, np.int64) + offset)
        offset += len(geometry.vertices)
    if not vertices:
        return np.zeros([0, 3]), np.zeros([0, 3], np.int64)
    return np.concatenate(vertices), np.concatenate(faces)


def _obj_logical_lines(lines: list[str]) -> list[str]:
    """An OBJ file's statements: a line ending in a backslash continues on the next."""
    statements, pending = [], ""
    for line in lines:
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        statements.append(pending + line)
        pending = ""
    return statements + ([pending] if pending else [])


def _obj_geometry(path: str | Path) -> tuple[io.StringIO, int, list[np.ndarray]]:
    """An OBJ file reduced to its geometry: its `v` lines, and its `f` lines with every
    corner reduced to the position index ("7/3/5" -> "7"); plus its number of `v` lines and
    its faces as 0-based position indices (negative ones count back from the last `v`).
    The text is strict UTF-8 (`foreign.text_lines`); `#` starts a comment and a trailing
    backslash continues a statement on the next line."""
    lines, positions, polygons = [], 0, []
    for line in _obj_logical_lines(text_lines(path)):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        if fields[0] == "v":
            lines.append(" ".join(fields))
            positions += 1
        elif fields[0] == "f":
            corners = [corner.split("/")[0] for corner in fields[1:]]
            lines.append(" ".join(["f"] + corners))
            try:
                indices = np.array([int(corner) for corner in corners], np.int64)
            except ValueError as error:
                raise InvalidMeshError(f"face {len(polygons)} of the OBJ: {error}") from None
            polygons.append(np.where(indices < 0, positions + indices, indices - 1))
    return io.StringIO("\n".join(lines) + "\n"), positions, polygons


def _read_off(path: str | Path) -> tuple[trimesh.Trimesh, list[np.ndarray]]:
    """An OFF file (whose counts `check_declared_counts` checked): strict UTF-8, `#`
    comments and blank lines skipped (`foreign.off_data_lines`), the counts on the keyword
    line or the next data line, x y z the first three fields of a vertex line, and its
    faces kept as polygons (trimesh's reader fails on faces of different corner counts).
    Returns (its vertices as a Trimesh without faces, its faces' corner indices).
    Raises InvalidMeshError naming the line that is not as the format needs."""
    vertices, polygons = [], []
    header, body = off_header(off_data_lines(text_lines(path)))
    num_vertices, num_faces = header
    number = 0
    try:
        for number, fields in body[:num_vertices]:
            if len(fields) < 3:
                raise ValueError(f"a vertex needs x y z, found {len(fields)} values")
            vertices.append([float(value) for value in fields[:3]])
        for number, fields in body[num_vertices:num_vertices + num_faces]:
            polygons.append(np.array([int(i) for i in fields[1:1 + int(fields[0])]], np.int64))
    except ValueError as error:
        raise InvalidMeshError(f"line {number} of the OFF file: {error}") from None
    vertices = np.array(vertices, np.float64).reshape(-1, 3)
    return trimesh.Trimesh(vertices=vertices, process=False), polygons


def _ply_polygons(loaded: trimesh.Trimesh) -> list[np.ndarray] | None:
    """The faces of a PLY file trimesh read, from the raw elements it keeps in
    `metadata["_ply_raw"]` (ASCII: a dict of per-property arrays; binary: a structured
    array); None when it has no face element."""
    face = loaded.metadata.get("_ply_raw", {}).get("face")
    if face is None:
        return None
    data = face["data"]
    names = data.keys() if isinstance(data, dict) else data.dtype.names
    name = next((n for n in ("vertex_indices", "vertex_index") if n in names), None)
    if name is None:
        return None
    indices = data[name] if isinstance(data, dict) else data[name]["f1"]
    if np.ndim(indices) == 2 and np.shape(indices)[1] == 3:
        return None  # triangles only: trimesh's faces are the file's
    return [np.asarray(polygon, np.int64) for polygon in indices]


def _load(path: str | Path):
    """(`trimesh.load` without processing, keeping the file's vertex list (see the module
    docstring for OBJ), after checking the counts the file declares; the file's faces as
    polygons, or None when only trimesh's triangles are known). Raises InvalidMeshError."""
    check_declared_counts(path)
    suffix = Path(path).suffix.lower()
    if suffix == ".off":
        return _read_off(path)
    if suffix != ".obj":
        loaded = trimesh.load(path, process=False)
        if not isinstance(loaded, trimesh.Trimesh):
            return loaded, None
        return loaded, _ply_polygons(loaded) if suffix == ".ply" else None
    geometry, positions, polygons = _obj_geometry(path)
    loaded = trimesh.load(geometry, file_type="obj", process=False, maintain_order=True,
                          skip_materials=True)
    if isinstance(loaded, trimesh.Trimesh) and len(loaded.vertices) != positions:
        raise InvalidMeshError(f"{positions} `v` lines but {len(loaded.vertices)} vertices read")
    return loaded, polygons


def _faces(vertices: np.ndarray, loaded_faces: np.ndarray,
           polygons: list[np.ndarray] | None) -> np.ndarray:
    """The mesh's triangles: the file's faces triangulated in file order
    (`polygons.triangulate`), or trimesh's when the faces are not known (formats of
    triangles only, a PLY of triangles only)."""
    if polygons is None:
        return np.asarray(loaded_faces, np.int64)
    corners = np.concatenate(polygons) if polygons else np.zeros(0, np.int64)
    outside = (corners < 0) | (corners >= len(vertices))
    if outside.any():
        face = int(np.searchsorted(np.cumsum([len(p) for p in polygons]),
                                   np.flatnonzero(outside)[0], side="right"))
        raise InvalidMeshError(f"face {face} indexes vertex {int(corners[outside][0])}, "
                               f"outside [0, {len(vertices)})")
    return triangulate(vertices, polygons)


def load_mesh(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Loads a mesh file without trimesh's processing; its vertex list is the file's.

    Returns:
      vertices float64 [V, 3] and faces int64 [T, 3] (scenes concatenated; see the
      module docstring).

    Raises:
      InvalidMeshError: if trimesh cannot read the file, its data disagree with the
        element counts it declares (e.g. "80 faces declared, 40 read"), it is not a mesh,
        or it is a scene that cannot be concatenated.
    """
    try:
        loaded, polygons = _load(path)
    except InvalidMeshError:
        raise
    except Exception as error:  # trimesh raises many types for unreadable files
        raise InvalidMeshError(f"cannot load mesh: {type(error).__name__}: {error}") from error
    if isinstance(loaded, trimesh.Scene):
        return _concatenate_scene(loaded)
    if not isinstance(loaded, trimesh.Trimesh):
        raise InvalidMeshError(f"file holds a {type(loaded).__name__}, not a triangle mesh")
    vertices = np.asarray(loaded.vertices, np.float64)
    return vertices, _faces(vertices, loaded.faces, polygons)


def load_label_file(path: str | Path) -> np.ndarray:
    """Reads labels from `.npy` (any integer dtype, or floats holding integers) or UTF-8
    text (integers separated by white space, `#` comments allowed), every value within
    int32 (`meshseg.data.mesh.foreign.read_label_file`). Returns int64 [N].

    Raises:
      InvalidMeshError: naming the file, and the line or index and value, if the file
        cannot be read or holds a value that is not an int32 integer.
    """
    return read_label_file(path)


def face_to_vertex_labels(
    triangles: np.ndarray, face_labels: np.ndarray, num_vertices: int
) -> np.ndarray:
    """Per-vertex labels from per-face labels: the majority label of the faces incident
    to each vertex, ties to the lowest label. A face counts once per distinct corner.

    Args:
      triangles: int [T, 3] indices in [0, V); face_labels: int [T], all >= 0.
      num_vertices: V.

    Returns:
      int64 [V] labels.

    Raises:
      InvalidMeshError: if the label count differs from T or a vertex has no
        incident face (it would get no label).
    """
    if face_labels.shape[0] != triangles.shape[0]:
        raise InvalidMeshError(
            f"{face_labels.shape[0]} per-face labels for {triangles.shape[0]} faces")
    face_ids = np.repeat(np.arange(triangles.shape[0]), 3)
    pairs = np.unique(np.stack([triangles.reshape(-1), face_ids], axis=1), axis=0)
    vertex, label = pairs[:, 0], face_labels[pairs[:, 1]]
    (vertex, label), votes = np.unique(np.stack([vertex, label]), axis=1, return_counts=True)
    # Sort by vertex, then most votes, then lowest label; keep each vertex's first row.
    order = np.lexsort((label, -votes, vertex))
    vertex, label = vertex[order], label[order]
    first = np.concatenate([[True], vertex[1:] != vertex[:-1]])
    result = np.full(num_vertices, -1, np.int64)
    result[vertex[first]] = label[first]
    if np.any(result < 0):
        missing = int(np.flatnonzero(result < 0)[0])
        raise InvalidMeshError(
            f"vertex {missing} has no incident face, so per-face labels give it no label")
    return result


@dataclass
class Geometry:
    """A mesh's geometry as a record stores it, validated (`load_geometry`).

    Attributes:
      vertices: float32 [V, 3] positions, relative to `origin`.
      triangles: int32 [T, 3].
      origin: float64 [3], zeros unless float32 needed centring
        (`validate.float32_positions`).
      face_counts: degenerate and duplicate faces of the stored positions.
    """

    vertices: np.ndarray
    triangles: np.ndarray
    origin: np.ndarray
    face_counts: FaceCounts


def load_geometry(path: str | Path) -> Geometry:
    """Loads a mesh file (`load_mesh`), checks its geometry (`validate_geometry`) and
    converts its positions to float32 as a record stores them (`float32_positions`). The
    converter and prediction both read meshes through this function.

    Raises:
      InvalidMeshError: for an unreadable file or a broken geometry rule; the message
        does not name the file.
    """
    vertices, triangles = load_mesh(path)
    counts = validate_geometry(vertices, triangles)
    stored, origin, counts = float32_positions(vertices, triangles, counts)
    return Geometry(stored, triangles.astype(np.int32), origin, counts)


def load_labelled_mesh(
    mesh_path: str | Path,
    label_path: str | Path,
    label_offset: int = 0,
    num_classes: int | None = None,
    label_kind: str = "vertex",
) -> LabelledMesh:
    """Loads, labels and validates one mesh, and computes its 1-ring adjacency.

    Args:
      mesh_path: mesh file (see the module docstring for formats and scenes).
      label_path: `.txt` or `.npy` label file.
      label_offset: added to every label (e.g. 1 maps the RNA data's -1 to 0).
      num_classes: labels must lie in [0, num_classes); None checks only >= 0.
      label_kind: "vertex" (one label per vertex) or "face" (one per triangle).

    Returns:
      The `LabelledMesh`.

    Raises:
      InvalidMeshError: for an unreadable file or a broken validation rule
        (see `meshseg.data.mesh.validate`); the message does not name the file.
      ValueError: for an unknown `label_kind`.
    """
    if label_kind not in LABEL_KINDS:
        raise ValueError(f"label_kind must be one of {LABEL_KINDS}, got {label_kind!r}")
    geometry = load_geometry(mesh_path)
    num_vertices = len(geometry.vertices)
    labels = load_label_file(label_path) + label_offset
    if label_kind == "face":
        if labels.size and labels.min() < 0:
            raise InvalidMeshError(f"per-face label {labels.min()} < 0 after offset")
        labels = face_to_vertex_labels(geometry.triangles, labels, num_vertices)
    validate_labels(labels, num_vertices, num_classes)
    edges, edge_weights = mesh_edges(geometry.triangles, num_vertices)
    return LabelledMesh(geometry.vertices, geometry.triangles, labels.astype(np.int32),
                        geometry.face_counts, file_sha256(mesh_path), edges, edge_weights,
                        geometry.origin)

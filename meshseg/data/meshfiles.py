"""Reads one labelled mesh file into validated arrays (NumPy + trimesh, no TensorFlow).

Meshes (OBJ, OFF, PLY, STL, GLB/GLTF and anything else trimesh reads) are
loaded with `trimesh.load(path, process=False)`, so the file's vertex list, in
file order and with vertices no face uses, is the mesh's vertex list, and with it
the vertex-to-label alignment is kept; polygons with more than three corners are
triangulated by trimesh's loaders (a quad becomes two triangles, in face order).
STL stores no shared vertices, so an STL mesh has three vertices per triangle and
its 1-ring is the triangle itself.

OBJ needs care: its faces index positions, texture coordinates and normals
separately, and trimesh splits a position used with two texture coordinates (a
seam) into two vertices and drops positions no face uses. So an OBJ is read for
its geometry only (`v` and `f` lines, each face corner reduced to its position
index), and its vertex count must equal its number of `v` lines.

Formats that declare their element counts are checked against them before trimesh
reads the file, since trimesh reads a file cut short (or padded) without complaint: an
OFF file's vertex and face lines against its count line, a PLY file's elements against
its `element <name> <count>` lines (ASCII: lines; binary: bytes, list lengths taken from
each element's first item, as trimesh assumes), and a binary STL's size against its
triangle count (84 + 50 * count bytes). A disagreement is refused naming both counts,
e.g. "80 faces declared, 40 read".

A file that loads as a Scene (GLB, multi-object files) is concatenated: its
geometries are taken in sorted geometry-name order, each transformed by the
scene-graph node that places it, and their vertices and faces appended in that
order, so per-vertex labels must follow the same order. A scene is refused when
a geometry is not a triangle mesh or is placed by more than one node.

Labels come from a `.txt` file (one integer per line) or a `.npy` array.
Per-vertex labels give one label per vertex. Per-face labels give one label per
triangle as loaded (after trimesh's triangulation) and are turned into
per-vertex labels by majority vote of the faces incident to each vertex, ties
going to the lowest class id (see `face_to_vertex_labels`).
"""

import hashlib
import io
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import trimesh

from meshseg.data.adjacency import mesh_edges
from meshseg.data.validate import (FaceCounts, InvalidMeshError, float32_positions,
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


def _obj_geometry(path: str | Path) -> tuple[io.StringIO, int]:
    """An OBJ file reduced to its geometry: its `v` lines, and its `f` lines with every
    corner reduced to the position index ("7/3/5" -> "7"); plus its number of `v` lines."""
    lines, positions = [], 0
    with open(path, encoding="utf-8", errors="replace") as stream:
        for line in stream:
            fields = line.split()
            if not fields:
                continue
            if fields[0] == "v":
                lines.append(line.rstrip("\n"))
                positions += 1
            elif fields[0] == "f":
                lines.append(" ".join(["f"] + [corner.split("/")[0] for corner in fields[1:]]))
    return io.StringIO("\n".join(lines) + "\n"), positions


def _check_counts(declared: list[tuple[str, int]], read: list[int]) -> None:
    """Raises InvalidMeshError "<n> <element> declared, <m> read" for the first element
    whose count read differs from the count declared ((element, n) pairs)."""
    for (element, count), present in zip(declared, read):
        if count != present:
            raise InvalidMeshError(f"{count} {element} declared, {present} read")


def _is_off_face(line: str) -> bool:
    """Whether an OFF data line is a face: a corner count n >= 3, then n vertex indices
    (colour values may follow). A vertex line (x y z) never is one."""
    fields = line.split()
    corners = int(fields[0]) if fields[0].isdigit() else 0
    return corners >= 3 and len(fields) > corners and all(
        index.isdigit() for index in fields[1:corners + 1])


def _check_off_counts(path: str | Path) -> None:
    """Raises InvalidMeshError if an OFF file's vertex or face lines (non-empty lines after
    the count line, comments removed, as trimesh reads them) disagree with its counts."""
    text = trimesh.util.comment_strip(trimesh.util.decode_text(Path(path).read_bytes()))
    try:
        _, _, rest = re.split("(COFF|OFF)", text, maxsplit=1)
        lines = [line for line in rest.splitlines() if line.strip()]
        vertices, faces = (int(count) for count in lines[0].split()[:2])
    except (IndexError, ValueError):
        return  # no OFF keyword or count line: trimesh's reader reports it
    body = lines[1:]
    if len(body) != vertices + faces:
        vertex_lines = next((i for i, line in enumerate(body) if _is_off_face(line)), len(body))
        _check_counts([("vertices", vertices), ("faces", faces)],
                      [vertex_lines, len(body) - vertex_lines])


PLY_TYPES = {"char": "i1", "uchar": "u1", "short": "i2", "ushort": "u2", "int": "i4",
             "uint": "u4", "float": "f4", "double": "f8", "int8": "i1", "uint8": "u1",
             "int16": "i2", "uint16": "u2", "int32": "i4", "uint32": "u4", "float32": "f4",
             "float64": "f8"}


@dataclass
class PlyElement:
    """One `element <name> <count>` of a PLY header and its properties, each a NumPy type
    code for a scalar or a (length type, item type) pair for a list."""

    name: str
    count: int
    properties: list


def _ply_header(data: bytes) -> tuple[str, list[PlyElement], int] | None:
    """(format, elements, offset of the data) of a PLY file's bytes; None when the header
    cannot be parsed (trimesh's reader then reports it)."""
    end = data.find(b"end_header")
    start = data.find(b"\n", end) + 1
    if not data.startswith(b"ply") or end < 0 or start == 0:
        return None
    fields = [line.split() for line in data[:end].decode("ascii", "replace").splitlines()]
    file_format, elements = "", []
    try:
        for line in fields:
            if line[:1] == ["format"]:
                file_format = line[1]
            elif line[:1] == ["element"]:
                elements.append(PlyElement(line[1], int(line[2]), []))
            elif line[:2] == ["property", "list"]:
                elements[-1].properties.append((PLY_TYPES[line[2]], PLY_TYPES[line[3]]))
            elif line[:1] == ["property"]:
                elements[-1].properties.append(PLY_TYPES[line[1]])
    except (IndexError, KeyError, ValueError):
        return None
    return file_format, elements, start


def _fits_ply_element(line: str, element: PlyElement) -> bool:
    """Whether an ASCII data line has the shape of one item of `element`."""
    fields, position = line.split(), 0
    try:
        for prop in element.properties:
            position += 1 + (int(fields[position]) if isinstance(prop, tuple) else 0)
    except (IndexError, ValueError):
        return False
    return position == len(fields)


def _ply_ascii_read(elements: list[PlyElement], data: bytes) -> list[int]:
    """Items per element in the non-empty lines of an ASCII PLY's data: when their number
    is not the declared total, each element takes the lines of its shape that follow, the
    last one the rest."""
    lines = [line for line in data.decode("utf-8", "replace").splitlines() if line.strip()]
    if len(lines) == sum(element.count for element in elements):
        return [element.count for element in elements]
    read, start = [], 0
    for element in elements[:-1]:
        end = start
        while end < len(lines) and _fits_ply_element(lines[end], element):
            end += 1
        read.append(end - start)
        start = end
    return read + [len(lines) - start]


def _ply_item_bytes(element: PlyElement, data: bytes, offset: int, endian: str) -> int:
    """Bytes of one item of `element` in binary data, with list lengths read from the item
    at `offset`; 0 if the data ends before them."""
    size = 0
    for prop in element.properties:
        if not isinstance(prop, tuple):
            size += np.dtype(prop).itemsize
            continue
        length_type, item_type = np.dtype(endian + prop[0]), np.dtype(prop[1])
        if offset + size + length_type.itemsize > len(data):
            return 0
        length = int(np.frombuffer(data, length_type, 1, offset + size)[0])
        size += length_type.itemsize + length * item_type.itemsize
    return size


def _ply_binary_read(elements: list[PlyElement], data: bytes, endian: str) -> list[int]:
    """Whole items per element in a binary PLY's data bytes, each element's list lengths
    those of its first item; the last element takes the bytes left."""
    read, offset = [], 0
    for index, element in enumerate(elements):
        size = _ply_item_bytes(element, data, offset, endian)
        available = (len(data) - offset) // size if size else 0
        read.append(available if index == len(elements) - 1 else min(element.count, available))
        offset += read[-1] * size
    return read


def _check_ply_counts(path: str | Path) -> None:
    """Raises InvalidMeshError if a PLY file's data disagree with its element counts."""
    data = Path(path).read_bytes()
    header = _ply_header(data)
    if header is None:
        return
    file_format, elements, start = header
    if file_format == "ascii":
        read = _ply_ascii_read(elements, data[start:])
    else:
        read = _ply_binary_read(elements, data[start:], ">" if "big" in file_format else "<")
    plural = {"vertex": "vertices"}
    _check_counts([(plural.get(e.name, e.name + "s"), e.count) for e in elements], read)


def _check_stl_counts(path: str | Path) -> None:
    """Raises InvalidMeshError if a binary STL's size is not 84 + 50 * its triangle count.
    It is binary when its first 84 bytes hold a NUL byte, as its uint32 triangle count
    (bytes 80-83) does below 2**24 triangles; an ASCII STL declares no count."""
    with open(path, "rb") as stream:
        head = stream.read(84)
    if len(head) < 84 or b"\0" not in head:
        return
    declared, size = int.from_bytes(head[80:], "little"), os.path.getsize(path)
    if size != 84 + 50 * declared:
        raise InvalidMeshError(f"{declared} triangles declared, {(size - 84) // 50} read (a "
                               f"binary STL of {size} bytes, {84 + 50 * declared} expected)")


COUNT_CHECKS = {".off": _check_off_counts, ".ply": _check_ply_counts, ".stl": _check_stl_counts}


def _load(path: str | Path):
    """`trimesh.load` without processing, keeping the file's vertex list (see the module
    docstring for OBJ), after checking the counts the file declares. Raises
    InvalidMeshError."""
    suffix = Path(path).suffix.lower()
    if suffix in COUNT_CHECKS:
        COUNT_CHECKS[suffix](path)
    if suffix != ".obj":
        return trimesh.load(path, process=False)
    geometry, positions = _obj_geometry(path)
    loaded = trimesh.load(geometry, file_type="obj", process=False, maintain_order=True,
                          skip_materials=True)
    if isinstance(loaded, trimesh.Trimesh) and len(loaded.vertices) != positions:
        raise InvalidMeshError(f"{positions} `v` lines but {len(loaded.vertices)} vertices read")
    return loaded


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
        loaded = _load(path)
    except InvalidMeshError:
        raise
    except Exception as error:  # trimesh raises many types for unreadable files
        raise InvalidMeshError(f"cannot load mesh: {type(error).__name__}: {error}") from error
    if isinstance(loaded, trimesh.Scene):
        return _concatenate_scene(loaded)
    if not isinstance(loaded, trimesh.Trimesh):
        raise InvalidMeshError(f"file holds a {type(loaded).__name__}, not a triangle mesh")
    return np.asarray(loaded.vertices, np.float64), np.asarray(loaded.faces, np.int64)


def load_label_file(path: str | Path) -> np.ndarray:
    """Reads labels from `.npy` (any integer dtype, or floats holding integers) or text
    (one integer per line). Returns int64 [N].

    Raises:
      InvalidMeshError: if the file cannot be read or holds non-integer values.
    """
    try:
        if Path(path).suffix == ".npy":
            labels = np.load(path, allow_pickle=False)
        else:
            labels = np.loadtxt(path, dtype=np.float64, ndmin=1)
    except (OSError, ValueError) as error:
        raise InvalidMeshError(f"cannot read labels {path}: {error}") from error
    labels = np.asarray(labels).reshape(-1)
    if not np.issubdtype(labels.dtype, np.integer):
        if not np.all(np.isfinite(labels)) or np.any(labels != np.round(labels)):
            raise InvalidMeshError(f"labels in {path} are not all integers")
    return labels.astype(np.int64)


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
        (see `meshseg.data.validate`); the message does not name the file.
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


def convert_job(job: dict) -> tuple[bool, LabelledMesh | str]:
    """Process-pool entry point: `load_labelled_mesh(**job)`.

    Returns:
      (True, LabelledMesh) or (False, reason) for an `InvalidMeshError`.
    """
    try:
        return True, load_labelled_mesh(**job)
    except InvalidMeshError as error:
        return False, str(error)

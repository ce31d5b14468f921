"""Checks a labelled mesh before it is written to a shard (NumPy only).

Rules, in the order they are checked (the first failure is reported):

1. the mesh has at least one vertex and one triangle ("empty mesh");
2. faces are triangles, i.e. shape [T, 3];
3. every coordinate is finite ("NaN or infinity");
4. every face index lies in [0, V);
5. there is exactly one label per vertex;
6. every label lies in [0, num_classes) (only the lower bound when
   `num_classes` is None).

Degenerate faces (a repeated vertex index, or zero area) and duplicate faces
(the same vertex set as an earlier face, in any order) are legal but counted, on
the positions as they are stored (float32, `float32_positions`).
"""

from dataclasses import dataclass

import numpy as np


class InvalidMeshError(ValueError):
    """A mesh (or its labels) breaks a validation rule; the message says which."""


@dataclass(frozen=True)
class FaceCounts:
    """Legal but suspicious faces of a mesh.

    Attributes:
      degenerate: faces with a repeated vertex index or zero area.
      duplicate: faces whose vertex set equals that of an earlier face.
    """

    degenerate: int
    duplicate: int


def count_suspicious_faces(vertices: np.ndarray, triangles: np.ndarray) -> FaceCounts:
    """Counts degenerate and duplicate faces.

    Args:
      vertices: float [V, 3]; triangles: int [T, 3] with indices in [0, V).

    Returns:
      The `FaceCounts`.
    """
    corners = vertices[triangles]
    normals = np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0])
    repeated = (
        (triangles[:, 0] == triangles[:, 1])
        | (triangles[:, 1] == triangles[:, 2])
        | (triangles[:, 0] == triangles[:, 2])
    )
    zero_area = ~np.any(normals != 0, axis=1)
    distinct = np.unique(np.sort(triangles, axis=1), axis=0).shape[0]
    return FaceCounts(degenerate=int(np.sum(repeated | zero_area)),
                      duplicate=int(triangles.shape[0] - distinct))


def validate_geometry(vertices: np.ndarray, triangles: np.ndarray) -> FaceCounts:
    """Checks rules 1-4 (see the module docstring) of a mesh's geometry.

    Args:
      vertices: float [V, 3] positions; triangles: integer [T, 3] vertex indices.

    Returns:
      The mesh's `FaceCounts`.

    Raises:
      InvalidMeshError: for the first broken rule, e.g. "empty mesh (0 vertices, 0
        triangles)", "vertex coordinates contain NaN or infinity", "face vertex indices
        span [0, 9], outside [0, 5)".
    """
    vertices, triangles = np.asarray(vertices), np.asarray(triangles)
    num_vertices = vertices.shape[0] if vertices.ndim else 0
    num_triangles = triangles.shape[0] if triangles.ndim else 0
    if num_vertices == 0 or num_triangles == 0:
        raise InvalidMeshError(
            f"empty mesh ({num_vertices} vertices, {num_triangles} triangles)")
    if vertices.ndim != 2 or vertices.shape[1] != 3:
        raise InvalidMeshError(f"vertices must have shape [V, 3], got {vertices.shape}")
    if triangles.ndim != 2 or triangles.shape[1] != 3:
        raise InvalidMeshError(f"faces must be triangles, got shape {triangles.shape}")
    finite = np.isfinite(vertices)
    if not finite.all():
        vertex, axis = (int(index[0]) for index in np.nonzero(~finite))
        raise InvalidMeshError(f"vertex coordinates contain NaN or infinity (vertex {vertex} "
                               f"has {'xyz'[axis]} = {vertices[vertex, axis]})")
    if triangles.min() < 0 or triangles.max() >= num_vertices:
        raise InvalidMeshError(
            f"face vertex indices span [{triangles.min()}, {triangles.max()}], "
            f"outside [0, {num_vertices})")
    return count_suspicious_faces(vertices, triangles)


def validate_labels(labels: np.ndarray, num_vertices: int,
                    num_classes: int | None = None) -> None:
    """Checks rules 5-6: one label per vertex, each in [0, num_classes).

    Raises:
      InvalidMeshError: e.g. "4 labels for 5 vertices", "labels span [0, 8], outside
        [0, 8) (num_classes=8)".
    """
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.shape[0] != num_vertices:
        raise InvalidMeshError(f"{labels.size} labels for {num_vertices} vertices")
    upper = num_classes if num_classes is not None else np.iinfo(np.int32).max
    if labels.min() < 0 or labels.max() >= upper:
        bound = f"[0, {num_classes}) (num_classes={num_classes})" if num_classes else "[0, inf)"
        raise InvalidMeshError(f"labels span [{labels.min()}, {labels.max()}], outside {bound}")


def _distinct(vertices: np.ndarray) -> int:
    return int(np.unique(vertices, axis=0).shape[0])


def float32_positions(vertices: np.ndarray, triangles: np.ndarray,
                      counts: FaceCounts) -> tuple[np.ndarray, np.ndarray, FaceCounts]:
    """The positions as a record stores them (float32), without losing what the file held.

    Far from the origin (map-grid coordinates, say) float32 cannot tell nearby vertices
    apart: the cast merges them and faces lose their area. When the plain cast loses
    anything, the positions are first centred (in float64) at their bounding-box centre,
    which is then the stored mesh's `origin`.

    Args:
      vertices: float64 [V, 3] positions as read; triangles: int [T, 3], valid indices.
      counts: the `FaceCounts` of the float64 positions.

    Returns:
      (float32 [V, 3] stored positions, float64 [3] origin subtracted (zeros unless
      needed), `FaceCounts` of the stored positions).

    Raises:
      InvalidMeshError: naming the vertex, axis and value if a coordinate lies beyond
        float32's range (about 3.4e38: the cast would store infinity), or if even the
        centred positions merge vertices or collapse faces in float32.
    """
    beyond = np.abs(vertices) > np.finfo(np.float32).max
    if beyond.any():
        vertex, axis = (int(index[0]) for index in np.nonzero(beyond))
        raise InvalidMeshError(
            f"vertex {vertex} has {'xyz'[axis]} = {vertices[vertex, axis]:g}, beyond float32's "
            f"range (±{np.finfo(np.float32).max:.3g}; {int(beyond.any(axis=1).sum())} "
            "vertices lie beyond it)")
    distinct = _distinct(vertices)
    origin = np.zeros(3)
    for attempt in range(2):
        stored = (vertices - origin).astype(np.float32)
        stored_counts = count_suspicious_faces(stored, triangles)
        if _distinct(stored) == distinct and stored_counts.degenerate == counts.degenerate:
            return stored, origin, stored_counts
        origin = (vertices.min(axis=0) + vertices.max(axis=0)) / 2
    raise InvalidMeshError(
        f"coordinates lose precision in float32 even after centring: {distinct} distinct "
        f"vertices become {_distinct(stored)}, {counts.degenerate} degenerate faces become "
        f"{stored_counts.degenerate}")


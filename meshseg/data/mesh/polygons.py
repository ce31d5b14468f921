"""Triangulating a mesh file's polygons by ear clipping (NumPy, no TensorFlow).

trimesh's loaders cut a quad along its 0-2 diagonal and any larger polygon into a fan from
its first corner, which is wrong for a non-convex polygon: the triangles leave the polygon,
overlap, and can have no area. Here each polygon of V >= 4 corners becomes V - 2 triangles
inside it, as mesh libraries do (ear clipping, as in Eberly, "Triangulation by Ear
Clipping", 2002): the polygon is projected onto the plane of its Newell normal and an ear
(a convex corner whose triangle holds no other corner) is cut off until a triangle is
left. A convex quad keeps trimesh's two triangles, so quad meshes load as before.

A polygon whose corners all lie on one line has no area; it is fanned into zero-area
triangles, which validation counts as degenerate as it does in a triangle file. A
self-intersecting polygon (two of its edges cross: a bowtie, a star drawn through itself)
has no triangulation inside it and is refused naming the face.
"""

import numpy as np

from meshseg.data.mesh.validate import InvalidMeshError

# A polygon whose doubled area is at most this fraction of its longest edge squared is
# flat (all corners on one line), in float64.
FLAT = 1e-12


def _newell_normal(points: np.ndarray) -> np.ndarray:
    """float64 [..., 3]: the Newell normal of polygons [..., V, 3], twice their area
    vector (Newell's method, exact for planar polygons and stable for others)."""
    following = np.roll(points, -1, axis=-2)
    return np.cross(points, following).sum(axis=-2)


def _is_flat(points: np.ndarray) -> bool:
    """Whether all corners of one polygon [V, 3] lie on one line."""
    spread = points - points[0]
    scale = max(float(np.square(spread).sum(axis=1).max()), np.finfo(np.float64).tiny)
    products = np.cross(spread[:, None], spread[None, :])
    return float(np.abs(products).max()) <= FLAT * scale


def _plane_coordinates(points: np.ndarray, normal: np.ndarray) -> np.ndarray:
    """float64 [V, 2]: the corners in a basis (e1, e2) of the plane with e1 x e2 along
    `normal`, so a polygon counter-clockwise about its normal is counter-clockwise here."""
    normal = normal / np.linalg.norm(normal)
    helper = np.eye(3)[np.argmin(np.abs(normal))]
    e1 = np.cross(helper, normal)
    e1 /= np.linalg.norm(e1)
    e2 = np.cross(normal, e1)
    return np.stack([points @ e1, points @ e2], axis=1)


def _cross2(o: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """z of (a - o) x (b - o) for 2D points (broadcasting): > 0 for a left turn."""
    return (a[..., 0] - o[..., 0]) * (b[..., 1] - o[..., 1]) - (
        a[..., 1] - o[..., 1]) * (b[..., 0] - o[..., 0])


def _crossing_edges(plane: np.ndarray, scale: float) -> tuple[int, int] | None:
    """The first pair (i, j) of edges (edge i from corner i to corner i + 1) of a polygon
    [V, 2] that cross each other properly (touching is allowed); None for a simple one."""
    start, end = plane, np.roll(plane, -1, axis=0)
    a, b = start[:, None], end[:, None]  # edge i along axis 0, edge j along axis 1
    c, d = start[None], end[None]

    def opposite(first, second):
        return ((first > scale) & (second < -scale)) | ((first < -scale) & (second > scale))

    crosses = opposite(_cross2(a, b, c), _cross2(a, b, d)) & opposite(_cross2(c, d, a),
                                                                      _cross2(c, d, b))
    pairs = np.argwhere(np.triu(crosses, k=2))
    return (int(pairs[0, 0]), int(pairs[0, 1])) if pairs.size else None


def ear_clip(points: np.ndarray) -> np.ndarray:
    """Triangles inside one polygon, by ear clipping (see the module docstring).

    Args:
      points: float64 [V, 3] corner positions, V >= 3, in the face's corner order.

    Returns:
      int64 [V - 2, 3] corner indices (into `points`), each triangle wound as the polygon.

    Raises:
      InvalidMeshError: if the polygon is self-intersecting: two of its edges cross, its
        area is zero while its corners are not on one line, or no ear is left.
    """
    count = len(points)
    normal = _newell_normal(points)
    longest = float(np.square(points - np.roll(points, -1, axis=0)).sum(axis=1).max())
    if np.linalg.norm(normal) <= FLAT * longest:
        if _is_flat(points):
            return np.stack([np.zeros(count - 2, np.int64), np.arange(1, count - 1),
                             np.arange(2, count)], axis=1)
        raise InvalidMeshError("is self-intersecting (its signed area is zero)")
    plane = _plane_coordinates(points, normal)
    scale = FLAT * longest
    crossing = _crossing_edges(plane, scale)
    if crossing is not None:
        raise InvalidMeshError(f"is self-intersecting (its edges {crossing[0]} and "
                               f"{crossing[1]} cross)")
    remaining, triangles = list(range(count)), []
    while len(remaining) > 3:
        for position, corner in enumerate(remaining):
            before = remaining[position - 1]
            after = remaining[(position + 1) % len(remaining)]
            a, b, c = plane[before], plane[corner], plane[after]
            if _cross2(a, b, c) <= scale:
                continue  # reflex or straight: not an ear
            others = plane[[i for i in remaining if i not in (before, corner, after)]]
            # A corner repeated at the same place (a repeated index) is no obstacle.
            others = others[np.all(np.abs(others[:, None] - np.stack([a, b, c])).max(axis=2)
                                   > scale, axis=1)]
            inside = ((_cross2(a, b, others) >= -scale) & (_cross2(b, c, others) >= -scale)
                      & (_cross2(c, a, others) >= -scale))
            if not inside.any():
                triangles.append((before, corner, after))
                remaining.pop(position)
                break
        else:
            raise InvalidMeshError("is self-intersecting (no corner can be cut off inside it)")
    triangles.append(tuple(remaining))
    return np.asarray(triangles, np.int64)


def _convex_quads(points: np.ndarray) -> np.ndarray:
    """bool [Q]: which quads [Q, 4, 3] turn the same way at every corner (trimesh's 0-2
    diagonal is then inside them)."""
    normal = _newell_normal(points)
    previous, following = np.roll(points, 1, axis=1), np.roll(points, -1, axis=1)
    turns = np.einsum("qvk,qk->qv", np.cross(points - previous, following - points), normal)
    return np.all(turns > 0, axis=1)


def triangulate(vertices: np.ndarray, polygons: list[np.ndarray]) -> np.ndarray:
    """The triangles of a mesh's faces: each face in file order, its triangles together
    (a triangle as it is, a convex quad as (0, 1, 2), (2, 3, 0), any other polygon by
    `ear_clip`).

    Args:
      vertices: float64 [V, 3].
      polygons: one int array of corner indices in [0, V) per face, each of >= 3 corners.

    Returns:
      int64 [T, 3] triangles, T = sum over faces of (corners - 2).

    Raises:
      InvalidMeshError: naming the face (its index in the file and its corner count) for
        a self-intersecting polygon or a face of fewer than 3 corners.
    """
    vertices = np.asarray(vertices, np.float64)
    sizes = np.array([len(polygon) for polygon in polygons], np.int64)
    if sizes.size and np.all(sizes == 3):
        return np.asarray(polygons, np.int64).reshape(-1, 3)
    pieces: list[np.ndarray] = [np.zeros([0, 3], np.int64)] * len(polygons)
    quads = np.flatnonzero(sizes == 4)
    if quads.size:
        corners = np.stack([polygons[i] for i in quads]).astype(np.int64)
        convex = _convex_quads(vertices[corners])
        for index, quad in zip(quads[convex], corners[convex]):
            pieces[index] = quad[[[0, 1, 2], [2, 3, 0]]]
    for index, polygon in enumerate(polygons):
        polygon = np.asarray(polygon, np.int64)
        if sizes[index] < 3:
            raise InvalidMeshError(f"face {index} has {sizes[index]} corners; a face needs "
                                   "at least 3")
        if sizes[index] == 3:
            pieces[index] = polygon[None]
        elif not pieces[index].size:
            try:
                pieces[index] = polygon[ear_clip(vertices[polygon])]
            except InvalidMeshError as error:
                raise InvalidMeshError(f"face {index} ({sizes[index]} corners) {error}; "
                                       "split it into triangles where the mesh was made"
                                       ) from None
    return np.concatenate(pieces) if pieces else np.zeros([0, 3], np.int64)

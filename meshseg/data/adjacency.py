"""Row-normalised 1-ring adjacency of a triangle mesh, with self-edges (NumPy only).

For a mesh with V vertices, the directed edge (i, j) exists when i == j (the
self-edge) or when i and j share a triangle (j is in the 1-ring of i). Edge
(i, j) has weight 1 / degree(i), where degree(i) counts the self-edge, so every
row of the adjacency sums to 1; this is the neighbourhood that FeaStNet's
feature-steered convolution averages over.

Unlike the tensorflow-graphics demo, which only gives a self-edge to vertices
that some triangle references, every vertex 0..V-1 gets one, so isolated
vertices keep their own features instead of having an empty row.

This module imports no TensorFlow, so converter worker processes start fast; the
tf.data wrapper lives in `meshseg.data.pipeline`.
"""

import numpy as np


def mesh_edges(triangles: np.ndarray, num_vertices: int) -> tuple[np.ndarray, np.ndarray]:
    """Builds the row-normalised 1-ring adjacency with self-edges of a mesh.

    Args:
      triangles: integer array of shape [T, 3], vertex indices of each triangle;
        T may be 0.
      num_vertices: V, the number of vertices; vertices that no triangle
        references still get a self-edge.

    Returns:
      edges: int32 [E, 2] unique directed edges (row i, neighbour j), sorted by
        (i, j); contains (i, i) for every i in [0, V) and both (i, j) and (j, i)
        for each triangle side.
      edge_weights: float32 [E], weight 1 / degree(i) of edge (i, j), so the
        weights of each row sum to 1.

    Raises:
      ValueError: if `triangles` is not [T, 3], `num_vertices` < 1, or a
        triangle references a vertex outside [0, V).
    """
    triangles = np.asarray(triangles)
    if triangles.ndim != 2 or triangles.shape[1] != 3:
        raise ValueError(f"triangles must have shape [T, 3], got {triangles.shape}")
    if num_vertices < 1:
        raise ValueError(f"num_vertices must be >= 1, got {num_vertices}")
    triangles = triangles.astype(np.int64)
    if triangles.size and (triangles.min() < 0 or triangles.max() >= num_vertices):
        raise ValueError(
            f"triangle vertex indices must lie in [0, {num_vertices}), got "
            f"[{triangles.min()}, {triangles.max()}]"
        )
    sides = np.concatenate([triangles[:, [0, 1]], triangles[:, [1, 2]], triangles[:, [2, 0]]])
    self_edges = np.repeat(np.arange(num_vertices, dtype=np.int64)[:, None], 2, axis=1)
    candidates = np.concatenate([sides, sides[:, ::-1], self_edges])
    # One int64 key per edge: np.unique on it sorts by (row, col) and drops the
    # self-edges that degenerate triangles already produced.
    keys = np.unique(candidates[:, 0] * num_vertices + candidates[:, 1])
    edges = np.stack([keys // num_vertices, keys % num_vertices], axis=1).astype(np.int32)
    degree = np.bincount(edges[:, 0], minlength=num_vertices)
    edge_weights = (1.0 / degree[edges[:, 0]]).astype(np.float32)
    return edges, edge_weights


def neighbor_table(
    edges: np.ndarray, edge_weights: np.ndarray, num_vertices: int
) -> tuple[np.ndarray, np.ndarray]:
    """Packs edges sorted by row into a padded neighbour table (ELL layout).

    Equals `meshseg.ops.neighbor_table.table_from_edges` with the default width.

    Args:
      edges: int32 [E, 2] (row i, neighbour j), sorted by row (as `mesh_edges`
        returns them); every row i in [0, V) has at least one edge.
      edge_weights: float32 [E].
      num_vertices: V.

    Returns:
      neighbors: int32 [V, K], K = the largest degree; row i lists the
        neighbours of i in edge order, unused slots hold i itself.
      neighbor_weights: float32 [V, K], the edge weights, 0 in unused slots.

    Raises:
      ValueError: if `edges` is not sorted by row.
    """
    rows = edges[:, 0].astype(np.int64)
    if rows.size and np.any(np.diff(rows) < 0):
        raise ValueError("edges must be sorted by row")
    degree = np.bincount(rows, minlength=num_vertices)
    width = int(degree.max()) if degree.size else 0
    slot = np.arange(rows.size) - np.repeat(np.cumsum(degree) - degree, degree)
    neighbors = np.repeat(np.arange(num_vertices, dtype=np.int32)[:, None], width, axis=1)
    weights = np.zeros([num_vertices, width], np.float32)
    neighbors[rows, slot] = edges[:, 1]
    weights[rows, slot] = edge_weights
    return neighbors, weights

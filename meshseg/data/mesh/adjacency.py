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
tf.data wrapper lives in `meshseg.data.pipeline.dataset` and the neighbour table (ELL layout) in
`meshseg.batch.table_from_edges`.
"""

import numpy as np

# The record fields of each stored adjacency level (`meshseg.config.ADJACENCY_LEVELS`):
# "table" holds the neighbour table of `meshseg.batch` too.
ADJACENCY_FIELDS = {"none": (), "edges": ("edges", "edge_weights"),
                    "table": ("edges", "edge_weights", "neighbors", "neighbor_weights",
                              "overflow_neighbors", "overflow_weights", "overflow_centers")}


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

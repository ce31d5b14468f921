"""Row-normalised 1-ring adjacency of a triangle mesh, with self-edges.

For a mesh with V vertices, the directed edge (i, j) exists when i == j (the
self-edge) or when i and j share a triangle (j is in the 1-ring of i). Edge
(i, j) has weight 1 / degree(i), where degree(i) counts the self-edge, so every
row of the adjacency sums to 1; this is the neighbourhood that FeaStNet's
feature-steered convolution averages over.

Unlike the tensorflow-graphics demo, which only gives a self-edge to vertices
that some triangle references, every vertex 0..V-1 gets one, so isolated
vertices keep their own features instead of having an empty row.
"""

import numpy as np
import tensorflow as tf
from tensorflow_graphics.geometry.representation.mesh import utils as mesh_utils


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
    triangles = triangles.astype(np.int32)
    if triangles.size and (triangles.min() < 0 or triangles.max() >= num_vertices):
        raise ValueError(
            f"triangle vertex indices must lie in [0, {num_vertices}), got "
            f"[{triangles.min()}, {triangles.max()}]"
        )
    ring_edges = mesh_utils.extract_unique_edges_from_triangular_mesh(
        triangles, directed_edges=True
    )
    self_edges = np.repeat(np.arange(num_vertices, dtype=np.int32)[:, None], 2, axis=1)
    # np.unique drops self-edges that degenerate triangles already produced and
    # sorts the rows lexicographically, i.e. by (row, col).
    edges = np.unique(np.concatenate([ring_edges, self_edges], axis=0), axis=0)
    edge_weights = mesh_utils.get_degree_based_edge_weights(edges, dtype=np.float32)
    return edges.astype(np.int32), edge_weights.astype(np.float32)


def mesh_edges_tf(triangles: tf.Tensor, num_vertices: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """TF wrapper of `mesh_edges`, usable inside `tf.data.Dataset.map`.

    Args:
      triangles: int32 tensor [T, 3] of vertex indices.
      num_vertices: int32 scalar tensor V.

    Returns:
      edges: int32 tensor [E, 2], static shape [None, 2].
      edge_weights: float32 tensor [E], static shape [None].

    Raises:
      tf.errors.InvalidArgumentError: at run time, for the inputs `mesh_edges`
        rejects with ValueError.
    """
    edges, edge_weights = tf.numpy_function(
        lambda t, v: mesh_edges(t, int(v)),
        [triangles, num_vertices],
        [tf.int32, tf.float32],
        stateful=False,
        name="mesh_edges",
    )
    edges.set_shape([None, 2])
    edge_weights.set_shape([None])
    return edges, edge_weights


"""The adjacency as a padded neighbour table (ELL layout), and its conversion from COO."""

from typing import NamedTuple, Optional, Tuple

import tensorflow as tf


class NeighborTable(NamedTuple):
    """Row i lists the neighbours j of vertex i and their adjacency values a_ij.

    Attributes:
      neighbors: int32 [V, K], K = the table width (at least the largest degree).
        Unused slots may hold any valid vertex index.
      weights: float [V, K] adjacency values a_ij; 0 in unused slots.
    """

    neighbors: tf.Tensor
    weights: tf.Tensor


def table_from_edges(rows: tf.Tensor, cols: tf.Tensor, weights: tf.Tensor, num_vertices,
                     width: Optional[int] = None) -> Tuple[NeighborTable, tf.Tensor]:
    """Packs COO edges, in any order, into a `NeighborTable`.

    Args:
      rows, cols: int32 [E] vertex i and neighbour j of each edge.
      weights: float [E] adjacency values.
      num_vertices: V (int or int32 scalar).
      width: table width K; default: the largest degree (dynamic). Edges past slot K-1 of
        their row are dropped; callers compare the returned degree with K.

    Returns:
      (table, degree int32 [V]); edges keep their order within a row, unused slots point
      at the vertex itself with weight 0.
    """
    order = tf.argsort(rows, stable=True)
    rows, cols, weights = (tf.gather(a, order) for a in (rows, cols, weights))
    degree = tf.math.unsorted_segment_sum(tf.ones_like(rows), rows, num_vertices)
    slot = tf.range(tf.shape(rows)[0]) - tf.gather(tf.cumsum(degree, exclusive=True), rows)
    width = tf.reduce_max(degree) if width is None else width
    # Edges past the table width land in one extra scratch column, sliced off below.
    index = tf.stack([rows, tf.minimum(slot, width)], axis=-1)
    own = tf.tile(tf.range(num_vertices)[:, tf.newaxis], [1, width + 1])
    neighbors = tf.tensor_scatter_nd_update(own, index, cols)[:, :width]
    table_weights = tf.scatter_nd(index, weights, tf.stack([num_vertices, width + 1]))[:, :width]
    return NeighborTable(neighbors, table_weights), degree

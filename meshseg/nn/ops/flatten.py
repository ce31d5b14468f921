"""Batched graph-convolution inputs flattened to one 2-D graph, without sparse reshape ops.

tensorflow-graphics flattens padded batches with `SparseReshape`, which has no XLA kernel.
These helpers do the same with gathers and index arithmetic, so every implementation in
`meshseg.nn.ops` accepts the library's `[A1, ..., An, V, C]` inputs with `sizes` and still
compiles under `jit_compile=True`.
"""

from typing import Callable, NamedTuple, Optional

import tensorflow as tf


class FlatGraph(NamedTuple):
    """A batch of graphs as one block-diagonal graph.

    Attributes:
      data: float tensor [N, C], N = A1 * ... * An * V vertices.
      rows: int32 [E], the vertex i (row) of each edge, in [0, N).
      cols: int32 [E], the neighbour j (column) of each edge, in [0, N).
      weights: float tensor [E], the adjacency value a_ij of each edge.
      unflatten: maps a [N, D] tensor back to [A1, ..., An, V, D], with the rows of
        padded vertices (i >= sizes) set to zero as tensorflow-graphics does.
    """

    data: tf.Tensor
    rows: tf.Tensor
    cols: tf.Tensor
    weights: tf.Tensor
    unflatten: Callable[[tf.Tensor], tf.Tensor]


def flatten_graph(data: tf.Tensor, neighbors: tf.SparseTensor,
                  sizes: Optional[tf.Tensor]) -> FlatGraph:
    """Flattens `data` [A1..An, V, C] and `neighbors` [A1..An, V, V'] into one graph.

    Args:
      data: float tensor [A1, ..., An, V, C].
      neighbors: SparseTensor [A1, ..., An, V, V'] with V' <= V; its column indices refer to
        rows of `data` in the same batch element.
      sizes: optional int tensor [A1, ..., An]: the true vertex count of each padded graph.
        Ignored for 2-D inputs, as in tensorflow-graphics.

    Returns:
      A `FlatGraph`. Edge indices are int32.

    Raises:
      ValueError: if `data` has rank < 2 or the ranks of `data` and `neighbors` differ.
    """
    data = tf.convert_to_tensor(data)
    rank = data.shape.rank
    if rank is None or rank < 2:
        raise ValueError(f"data must have rank >= 2 ([A1..An, V, C]), got shape {data.shape}")
    if neighbors.shape.rank != rank:
        raise ValueError(f"neighbors must have the rank of data ({rank}), got {neighbors.shape}")
    indices = tf.cast(neighbors.indices, tf.int32)
    if rank == 2:
        return FlatGraph(data, indices[:, 0], indices[:, 1], neighbors.values, lambda y: y)

    data_shape = tf.shape(data)
    batch_shape = data_shape[:-2]
    num_vertices = data_shape[-2]
    flat_data = tf.reshape(data, [-1, data_shape[-1]])
    # Row-major linear index of each edge's batch element.
    strides = tf.math.cumprod(batch_shape, exclusive=True, reverse=True)
    graph = tf.reduce_sum(indices[:, :-2] * strides, axis=-1)
    offset = graph * num_vertices
    rows = offset + indices[:, -2]
    cols = offset + indices[:, -1]

    def unflatten(flat: tf.Tensor) -> tf.Tensor:
        out = tf.reshape(flat, tf.concat([data_shape[:-1], tf.shape(flat)[-1:]], axis=0))
        if sizes is None:
            return out
        valid = tf.sequence_mask(sizes, num_vertices, dtype=out.dtype)
        return out * valid[..., tf.newaxis]

    return FlatGraph(flat_data, rows, cols, neighbors.values, unflatten)

"""The reference: tensorflow-graphics' `feature_steered_convolution`, called from the library."""

from typing import Optional

import tensorflow as tf
from tensorflow_graphics.geometry.convolution import graph_convolution

from meshseg.nn.ops.flatten import flatten_graph


def gather_sum(data: tf.Tensor, neighbors: tf.SparseTensor, sizes: Optional[tf.Tensor],
               var_u: tf.Tensor, var_v: tf.Tensor, var_c: tf.Tensor, var_w: tf.Tensor,
               var_b: tf.Tensor, xla: bool = False) -> tf.Tensor:
    """FeaStNet convolution by `tensorflow_graphics...graph_convolution.feature_steered_convolution`.

    Per edge it gathers x_j, scales it by each q_m and segment-sums per vertex (one
    [E, C] tensor per weight matrix). Its softmax is not max-shifted: logits above ~88
    overflow float32 to inf and give NaN.

    Args:
      data, neighbors, sizes, var_u, var_v, var_c, var_w, var_b: as in the library
        (data [A1..An, V, C], neighbors SparseTensor [A1..An, V, V'], sizes [A1..An] or
        None, var_u and var_v [C, W], var_c [W], var_w [W, C, D], var_b [D]). The
        library refuses non-square neighbourhoods [V, V'] (ValueError) unless they are
        flattened here (`xla` with batched input).
      xla: when True, batched inputs are flattened to 2-D here first: the library's own
        batch flattening uses SparseReshape, which has no XLA kernel.

    Returns:
      float tensor [A1, ..., An, V, D].
    """
    data = tf.convert_to_tensor(data)
    if not xla or data.shape.rank == 2:
        return graph_convolution.feature_steered_convolution(
            data, neighbors, sizes, var_u, var_v, var_c, var_w, var_b)
    graph = flatten_graph(data, neighbors, sizes)
    indices = tf.cast(tf.stack([graph.rows, graph.cols], axis=-1), tf.int64)
    num_vertices = tf.shape(graph.data, out_type=tf.int64)[0]
    flat_neighbors = tf.SparseTensor(indices, graph.weights, tf.stack([num_vertices, num_vertices]))
    out = graph_convolution.feature_steered_convolution(
        graph.data, flat_neighbors, None, var_u, var_v, var_c, var_w, var_b)
    return graph.unflatten(out)

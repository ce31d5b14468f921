"""FeaStNet convolution over a padded neighbour table: gather, then small batched matmuls."""

from typing import Optional

import tensorflow as tf

from meshseg.ops.flatten import flatten_graph


def gather_matmul(data: tf.Tensor, neighbors: tf.SparseTensor, sizes: Optional[tf.Tensor],
                  var_u: tf.Tensor, var_v: tf.Tensor, var_c: tf.Tensor, var_w: tf.Tensor,
                  var_b: tf.Tensor, xla: bool = False,
                  max_degree: Optional[int] = None) -> tf.Tensor:
    """FeaStNet convolution (Verma et al., CVPR 2018) in the ELL (neighbour table) layout.

    Mesh 1-rings have a small, bounded degree K, so the neighbourhood fits a dense
    [V, K] table. Per vertex i the W weight matrices' inputs are one tiny matrix product:
    z_i = Q_i^T X_i with Q_i [K, W] = a_ik q_m(x_i, x_k) and X_i [K, C] the gathered
    neighbour features; then y = b + [V, W*C] x [W*C, D] as one dense matmul. The largest
    per-edge tensors are [V, K, C] and [V, K, W]: nothing of size [E, W, C] or [E, W, D]
    exists, forward or backward (gradients by TensorFlow's autodiff). The softmax is
    max-shifted (`tf.nn.softmax`), so any input magnitude gives finite results.

    Args:
      data: float tensor [A1, ..., An, V, C].
      neighbors: SparseTensor [A1, ..., An, V, V'] of adjacency weights a_ij, in any order.
        Entries stored explicitly count towards a vertex's degree even when zero.
      sizes: optional int tensor [A1, ..., An] of true vertex counts (padded batches).
      var_u, var_v: [C, W]; var_c: [W]; var_w: [W, C, D]; var_b: [D].
      xla: the computation is the same either way (all ops have XLA kernels), but under
        XLA the table width must be static: pass `max_degree`.
      max_degree: table width K; default: the largest degree, computed at run time. If
        a vertex has more than `max_degree` neighbours, the output is NaN (never a
        silently truncated neighbourhood).

    Returns:
      float tensor [A1, ..., An, V, D]; rows of padded vertices are zero.

    Raises:
      ValueError: if `xla` is True and `max_degree` is None.
    """
    if xla and max_degree is None:
        raise ValueError("gather_matmul under XLA needs a static max_degree (neighbour table width)")
    graph = flatten_graph(data, neighbors, sizes)
    x = graph.data
    table, table_weights, degree = _neighbor_table(graph.rows, graph.cols, graph.weights,
                                                   tf.shape(x)[0], max_degree)
    num_weights, num_in = var_w.shape[0], var_w.shape[1]
    s = tf.matmul(x, var_u) + var_c  # [V, W]
    t = tf.matmul(x, var_v)  # [V, W]
    q = tf.nn.softmax(s[:, tf.newaxis, :] + tf.gather(t, table))  # [V, K, W]
    coef = table_weights[..., tf.newaxis] * q  # [V, K, W]
    z = tf.matmul(coef, tf.gather(x, table), transpose_a=True)  # [V, W, C]
    y = tf.matmul(tf.reshape(z, [-1, num_weights * num_in]),
                  tf.reshape(var_w, [num_weights * num_in, -1])) + var_b
    if max_degree is not None:
        y = tf.where(tf.reduce_max(degree) > max_degree, tf.constant(float("nan"), y.dtype), y)
    return graph.unflatten(y)


def _neighbor_table(rows, cols, weights, num_vertices, max_degree):
    """COO edges -> (table int32 [V, K], table weights [V, K], degree int32 [V]).

    Edges are stably sorted by row; unused slots point at the vertex itself with weight 0.
    """
    order = tf.argsort(rows, stable=True)
    rows, cols, weights = (tf.gather(a, order) for a in (rows, cols, weights))
    degree = tf.math.unsorted_segment_sum(tf.ones_like(rows), rows, num_vertices)
    slot = tf.range(tf.shape(rows)[0]) - tf.gather(tf.cumsum(degree, exclusive=True), rows)
    width = tf.reduce_max(degree) if max_degree is None else max_degree
    index = tf.stack([rows, slot], axis=-1)
    own = tf.tile(tf.range(num_vertices)[:, tf.newaxis], [1, width])
    table = tf.tensor_scatter_nd_update(own, index, cols)
    table_weights = tf.scatter_nd(index, weights, tf.stack([num_vertices, width]))
    return table, table_weights, degree

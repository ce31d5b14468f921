"""FeaStNet convolution in factorised form: one sparse-dense matmul, max-shifted exponents."""

from typing import Optional

import tensorflow as tf

from meshseg.nn.ops.flatten import flatten_graph

# Largest exponent allowed for the per-edge rescaling factor; exp(80) ~ 5.5e34 < float32 max.
MAX_EDGE_LOG_SCALE = 80.0


def sparse_matmul(data: tf.Tensor, neighbors: tf.SparseTensor, sizes: Optional[tf.Tensor],
                  var_u: tf.Tensor, var_v: tf.Tensor, var_c: tf.Tensor, var_w: tf.Tensor,
                  var_b: tf.Tensor, xla: bool = False) -> tf.Tensor:
    """FeaStNet convolution (Verma et al., CVPR 2018) as a sparse-dense matrix product.

    With s_im = u_m.x_i + c_m and t_jm = v_m.x_j, the softmax weight factorises:
    q_m(i, j) = exp(s_im) exp(t_jm) / Z_ij, so

        y_i = b + sum_m exp(s_im) W_m^T sum_j (a_ij / Z_ij) exp(t_jm) x_j,

    and the inner sum over j is one sparse [V, V'] x dense [V', W*C] product. Exponents are
    shifted by the per-vertex maxima S_i = max_m s_im and T_j = max_m t_jm, so exp(s - S)
    and exp(t - T) lie in (0, 1]; log Z_ij is a per-edge logsumexp, and the per-edge factor
    a_ij exp(S_i + T_j - log Z_ij) is evaluated in the log domain. That factor is capped at
    exp(80): the factorised form stays exact while the gap S_i + T_j - max_m(s_im + t_jm)
    is below ~80 nats (it is 0 whenever one m maximises both s_i and t_j). Beyond it, the
    edge's weight is underestimated but finite; `block_sparse` has no such limit.

    Args:
      data: float tensor [A1, ..., An, V, C].
      neighbors: SparseTensor [A1, ..., An, V, V'] of adjacency weights a_ij.
      sizes: optional int tensor [A1, ..., An] of true vertex counts (padded batches).
      var_u, var_v: [C, W]; var_c: [W]; var_w: [W, C, D]; var_b: [D].
      xla: when True the sparse product is written as gather + unsorted_segment_sum
        (SparseTensorDenseMatMul has no XLA kernel); the algebra is the same.

    Returns:
      float tensor [A1, ..., An, V, D]; rows of padded vertices are zero.
    """
    graph = flatten_graph(data, neighbors, sizes)
    x = graph.data
    num_weights = tf.shape(var_w)[0]
    num_in = tf.shape(var_w)[1]
    s = tf.matmul(x, var_u) + var_c  # [V, W]
    t = tf.matmul(x, var_v)  # [V, W]
    s_max = tf.reduce_max(s, axis=-1, keepdims=True)
    t_max = tf.reduce_max(t, axis=-1, keepdims=True)
    edge_logits = tf.gather(s, graph.rows) + tf.gather(t, graph.cols)  # [E, W]
    log_z = tf.reduce_logsumexp(edge_logits, axis=-1)  # [E]
    log_scale = tf.gather(s_max[:, 0], graph.rows) + tf.gather(t_max[:, 0], graph.cols) - log_z
    edge_factor = graph.weights * tf.exp(tf.minimum(log_scale, MAX_EDGE_LOG_SCALE))  # [E]

    steered = tf.exp(t - t_max)[:, :, tf.newaxis] * x[:, tf.newaxis, :]  # [V, W, C]
    steered = tf.reshape(steered, [-1, num_weights * num_in])
    num_vertices = tf.shape(x)[0]
    if xla:
        aggregated = tf.math.unsorted_segment_sum(
            edge_factor[:, tf.newaxis] * tf.gather(steered, graph.cols), graph.rows, num_vertices)
    else:
        indices = tf.cast(tf.stack([graph.rows, graph.cols], axis=-1), tf.int64)
        size = tf.cast(num_vertices, tf.int64)
        adjacency = tf.SparseTensor(indices, edge_factor, tf.stack([size, size]))
        aggregated = tf.sparse.sparse_dense_matmul(adjacency, steered)  # [V, W*C]
    aggregated = tf.reshape(aggregated, [-1, num_weights, num_in]) * tf.exp(s - s_max)[..., tf.newaxis]
    out = tf.matmul(tf.reshape(aggregated, [-1, num_weights * num_in]),
                    tf.reshape(var_w, [num_weights * num_in, -1])) + var_b
    return graph.unflatten(out)

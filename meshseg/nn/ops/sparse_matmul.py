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
    f_ij = a_ij exp(S_i + T_j - log Z_ij) is evaluated in the log domain. That factor is
    capped at exp(80): the factorised form stays exact while the gap
    S_i + T_j - max_m(s_im + t_jm) is below ~80 nats (it is 0 whenever one m maximises both
    s_i and t_j). Beyond it, the edge's weight is underestimated but finite; `block_sparse`
    has no such limit.

    Without `xla`, the product after the edge factors is one op with a hand-written
    gradient: (x, steer = exp(t - T), gate = exp(s - S), F, var_w) -> sum_m (gate_m *
    (F @ (steer_m * x))) W_m, computed in the forward as before (one sparse [V, V'] x
    [V', W*C] product and one [V, W*C] x [W*C, D] matmul). Its backward keeps only its
    inputs (x [V, C], steer and gate [V, W], F's [E] values, var_w) and recomputes, one
    weight matrix m at a time and each m after the previous one, steered_m = steer_m * x and
    z_m = F @ steered_m ([V, C]), then dL/dW_m, dL/dgate_m, dL/dsteered_m = F^T @ dL/dz_m
    and dL/df_ij += dL/dz_im . steered_jm (two [E, C] gathers): no [V, W*C] tensor is kept
    for the backward or formed in it, and no [E, W*C] tensor exists, where TensorFlow's own
    gradient of SparseTensorDenseMatMul gathers both sides of each edge's dot product as
    [E, W*C]. The cost is one more sparse product per step. The backward through log Z, the
    maxima and the cap is TensorFlow's, on tensors of [E, W] and [V, W].

    Under `xla` (gather + segment sum; per-m recomputation measured worse there) the
    aggregation z = F @ steered (steered [V, W, C]) alone has a hand-written gradient that
    keeps steered and F and computes dL/dsteered with one gather + segment sum of [E, C]
    per m and dL/df with [E, C] products, the m in sequence; the forward still scales the
    gathered [E, W*C] rows before the segment sum (a temporary the backward does not keep).

    Args:
      data: float tensor [A1, ..., An, V, C].
      neighbors: SparseTensor [A1, ..., An, V, V'] of adjacency weights a_ij.
      sizes: optional int tensor [A1, ..., An] of true vertex counts (padded batches).
      var_u, var_v: [C, W]; var_c: [W]; var_w: [W, C, D]; var_b: [D]. W must be static
        (the backward loops over the weight matrices).
      xla: when True the sparse products are written as gather + unsorted_segment_sum
        (SparseTensorDenseMatMul has no XLA kernel); the algebra is the same.

    Returns:
      float tensor [A1, ..., An, V, D]; rows of padded vertices are zero. Gradients flow to
      data, the adjacency values and every variable.

    Raises:
      ValueError: if the number of weight matrices W (var_w's first axis) is not static.
    """
    num_weights = tf.TensorShape(var_w.shape)[0]
    if num_weights is None:
        raise ValueError(f"var_w must have a static number of weight matrices, got {var_w.shape}")
    graph = flatten_graph(data, neighbors, sizes)
    x = graph.data
    num_in = tf.shape(var_w)[1]
    s = tf.matmul(x, var_u) + var_c  # [V, W]
    t = tf.matmul(x, var_v)  # [V, W]
    s_max = tf.reduce_max(s, axis=-1, keepdims=True)
    t_max = tf.reduce_max(t, axis=-1, keepdims=True)
    edge_logits = tf.gather(s, graph.rows) + tf.gather(t, graph.cols)  # [E, W]
    log_z = tf.reduce_logsumexp(edge_logits, axis=-1)  # [E]
    log_scale = tf.gather(s_max[:, 0], graph.rows) + tf.gather(t_max[:, 0], graph.cols) - log_z
    edge_factor = graph.weights * tf.exp(tf.minimum(log_scale, MAX_EDGE_LOG_SCALE))  # [E]

    steer = tf.exp(t - t_max)  # [V, W]
    gate = tf.exp(s - s_max)  # [V, W]
    if not xla:
        out = _steer_aggregate_project(graph.rows, graph.cols, edge_factor, x, steer, gate,
                                       tf.convert_to_tensor(var_w))
        return graph.unflatten(out + var_b)
    steered = steer[:, :, tf.newaxis] * x[:, tf.newaxis, :]
    steered = tf.reshape(steered, [-1, num_weights, num_in])  # [V, W, C], W static
    aggregated = _aggregate_xla(graph.rows, graph.cols, edge_factor, steered)  # [V, W, C]
    aggregated = aggregated * gate[..., tf.newaxis]
    out = tf.matmul(tf.reshape(aggregated, [-1, num_weights * num_in]),
                    tf.reshape(var_w, [num_weights * num_in, -1])) + var_b
    return graph.unflatten(out)


def _sparse_product(rows, cols, edge_factor, dense, num_vertices, adjoint=False):
    """F @ dense, or F^T @ dense with `adjoint`: F [V, V] has the entries f_ij (float [E])
    at (rows, cols) (int32 [E]); dense float [V, K] -> float [V, K]."""
    indices = tf.cast(tf.stack([rows, cols], axis=-1), tf.int64)
    size = tf.cast(num_vertices, tf.int64)
    adjacency = tf.SparseTensor(indices, edge_factor, tf.stack([size, size]))
    return tf.sparse.sparse_dense_matmul(adjacency, dense, adjoint_a=adjoint)


@tf.custom_gradient
def _steer_aggregate_project(rows, cols, edge_factor, x, steer, gate, var_w):
    """y = sum_m (gate_m * (F @ (steer_m * x))) W_m, with a backward that recomputes.

    Args: rows, cols int32 [E]; edge_factor float [E] (F's entries f_ij); x [V, C];
    steer, gate [V, W]; var_w [W, C, D], W static. Returns float [V, D] (without the bias).
    """
    num_vertices = tf.shape(x)[0]
    num_weights = var_w.shape[0]
    num_in = tf.shape(var_w)[1]
    steered = tf.reshape(steer[:, :, tf.newaxis] * x[:, tf.newaxis, :],
                         [num_vertices, num_weights * num_in])  # [V, W*C]
    aggregated = _sparse_product(rows, cols, edge_factor, steered, num_vertices)
    aggregated = tf.reshape(aggregated, [num_vertices, num_weights, num_in]) * gate[..., tf.newaxis]
    out = tf.matmul(tf.reshape(aggregated, [num_vertices, num_weights * num_in]),
                    tf.reshape(var_w, [num_weights * num_in, -1]))

    def grad(dout):
        dfactor = dx = None
        dsteer, dgate, dvar_w = [], [], []
        previous = [dout]
        for m in range(num_weights):
            # Every op of weight matrix m after all of m - 1's (without it, TensorFlow's
            # executor runs the m's side by side as soon as dout exists and their [E, C]
            # gathers pile up): the temporaries of one m at a time.
            with tf.control_dependencies(previous):
                steer_m, gate_m = steer[:, m:m + 1], gate[:, m:m + 1]  # [V, 1]
                steered_m = steer_m * x  # [V, C]
                z_m = _sparse_product(rows, cols, edge_factor, steered_m, num_vertices)
                daggregated_m = tf.matmul(dout, var_w[m], transpose_b=True)  # [V, C]
                dgate.append(tf.reduce_sum(daggregated_m * z_m, axis=-1))
                dvar_w.append(tf.matmul(z_m * gate_m, dout, transpose_a=True))  # [C, D]
                dz_m = daggregated_m * gate_m
                dsteered_m = _sparse_product(rows, cols, edge_factor, dz_m, num_vertices,
                                             adjoint=True)  # [V, C]
                dfactor_m = tf.reduce_sum(
                    tf.gather(dz_m, rows) * tf.gather(steered_m, cols), axis=-1)  # [E]
                dsteer.append(tf.reduce_sum(dsteered_m * x, axis=-1))
                dx_m = dsteered_m * steer_m
                dfactor = dfactor_m if dfactor is None else dfactor + dfactor_m
                dx = dx_m if dx is None else dx + dx_m
            previous = [dfactor, dx, dvar_w[-1], dgate[-1], dsteer[-1]]
        return (None, None, dfactor, dx, tf.stack(dsteer, axis=1), tf.stack(dgate, axis=1),
                tf.stack(dvar_w, axis=0))

    return out, grad


@tf.custom_gradient
def _aggregate_xla(rows, cols, edge_factor, steered):
    """z = F @ steered as gather + segment sum, with its gradient (the `xla` formulation).

    Maps rows, cols (int32 [E]), edge_factor (float [E], F's entries f_ij) and steered
    (float [V, W, C], W static) to z (float [V, W, C]), z_i = sum_j f_ij steered_j.
    """
    num_vertices = tf.shape(steered)[0]
    num_weights = steered.shape[1]
    steered_shape = tf.shape(steered)
    steered_flat = tf.reshape(steered, [num_vertices, -1])  # [V, W*C]
    z_flat = tf.math.unsorted_segment_sum(
        edge_factor[:, tf.newaxis] * tf.gather(steered_flat, cols), rows, num_vertices)
    z = tf.reshape(z_flat, steered_shape)

    def grad(dz):
        dz = tf.reshape(dz, steered_shape)
        dfactor = tf.zeros_like(edge_factor)  # [E]: sum_m dz_im . steered_jm
        dsteered = []
        for m in range(num_weights):
            # One weight matrix at a time, after the previous one: [E, C] temporaries.
            with tf.control_dependencies([dfactor] + dsteered[-1:]):
                dz_rows = tf.gather(dz[:, m], rows)  # [E, C]
            dfactor += tf.reduce_sum(dz_rows * tf.gather(steered[:, m], cols), axis=-1)
            dsteered.append(tf.math.unsorted_segment_sum(
                edge_factor[:, tf.newaxis] * dz_rows, cols, num_vertices))  # [V, C]
        return None, None, dfactor, tf.stack(dsteered, axis=1)  # [V, W, C]

    return z, grad

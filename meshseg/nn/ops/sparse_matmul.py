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

    The aggregation z = F @ steered (F the sparse matrix of the f_ij over the E edges,
    steered_jm = exp(t_jm - T_j) x_j, [V, W, C], z [V, W, C]) has a hand-written gradient
    that forms no [E, W*C] tensor, where TensorFlow's own gradients of SparseTensorDenseMatMul
    and of gather + unsorted_segment_sum gather both sides of each edge's dot product as
    [E, W*C]. The backward keeps steered and F ([E] values) and computes
    dL/dsteered = F^T @ dL/dz as one transposed sparse matmul ([V, W*C]; under `xla`, one
    gather + segment sum of [E, C] per weight matrix m) and dL/df_ij = sum_m dL/dz_im .
    steered_jm from one [E, C] product per m, the m in sequence. The rest of the backward
    (through log Z, the maxima, the cap and the [V, W*C] x [W*C, D] matmul) is TensorFlow's,
    on tensors of [E, W] and [V, W, C]. Under `xla` the forward still scales the gathered
    [E, W*C] rows before the segment sum (a temporary the backward does not keep).

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

    steered = tf.exp(t - t_max)[:, :, tf.newaxis] * x[:, tf.newaxis, :]
    steered = tf.reshape(steered, [-1, num_weights, num_in])  # [V, W, C], W static
    aggregate = _aggregate_xla if xla else _aggregate_sparse
    aggregated = aggregate(graph.rows, graph.cols, edge_factor, steered)  # [V, W, C]
    aggregated = aggregated * tf.exp(s - s_max)[..., tf.newaxis]
    out = tf.matmul(tf.reshape(aggregated, [-1, num_weights * num_in]),
                    tf.reshape(var_w, [num_weights * num_in, -1])) + var_b
    return graph.unflatten(out)


def _make_aggregate(xla: bool):
    """Builds z = F @ steered with its gradient; `xla` picks gather/segment-sum or sparse matmul.

    The op maps rows, cols (int32 [E]), edge_factor (float [E], F's entries f_ij) and
    steered (float [V, W, C], W static) to z (float [V, W, C]), z_i = sum_j f_ij steered_j.
    """

    @tf.custom_gradient
    def aggregate(rows, cols, edge_factor, steered):
        num_vertices = tf.shape(steered)[0]
        num_weights = steered.shape[1]
        steered_shape = tf.shape(steered)
        steered_flat = tf.reshape(steered, [num_vertices, -1])  # [V, W*C]
        if xla:
            z_flat = tf.math.unsorted_segment_sum(
                edge_factor[:, tf.newaxis] * tf.gather(steered_flat, cols), rows, num_vertices)
        else:
            indices = tf.cast(tf.stack([rows, cols], axis=-1), tf.int64)
            size = tf.cast(num_vertices, tf.int64)
            adjacency = tf.SparseTensor(indices, edge_factor, tf.stack([size, size]))
            z_flat = tf.sparse.sparse_dense_matmul(adjacency, steered_flat)  # [V, W*C]
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
                if xla:
                    dsteered.append(tf.math.unsorted_segment_sum(
                        edge_factor[:, tf.newaxis] * dz_rows, cols, num_vertices))  # [V, C]
            if xla:
                dsteered = tf.stack(dsteered, axis=1)  # [V, W, C]
            else:
                dsteered = tf.reshape(tf.sparse.sparse_dense_matmul(
                    adjacency, tf.reshape(dz, [num_vertices, -1]), adjoint_a=True),
                    steered_shape)  # [V, W*C] -> [V, W, C]
            return None, None, dfactor, dsteered

        return z, grad

    return aggregate


_aggregate_sparse = _make_aggregate(xla=False)
_aggregate_xla = _make_aggregate(xla=True)

"""FeaStNet convolution with one block-sparse aggregation and a hand-written gradient."""

from typing import Optional

import tensorflow as tf

from meshseg.nn.ops.flatten import flatten_graph


def block_sparse(data: tf.Tensor, neighbors: tf.SparseTensor, sizes: Optional[tf.Tensor],
                 var_u: tf.Tensor, var_v: tf.Tensor, var_c: tf.Tensor, var_w: tf.Tensor,
                 var_b: tf.Tensor, xla: bool = False) -> tf.Tensor:
    """FeaStNet convolution (Verma et al., CVPR 2018) without per-edge feature tensors.

    Computes y_i = b + sum_m W_m^T z_im with z_im = sum_j a_ij q_m(x_i, x_j) x_j:
    1. per-edge weights q = softmax_m(u_m.x_i + v_m.x_j + c_m), [E, W], max-shifted by
       `tf.nn.softmax`, so any input magnitude gives finite results;
    2. z for all W weight matrices at once, as one sparse [V*W, V'] x dense [V', C] product
       whose (i*W + m, j) entry is a_ij q_m(i, j): no [E, W, C] tensor is formed;
    3. y as a single dense [V, W*C] x [W*C, D] matmul.
    The gradient is written by hand: it keeps only x, z [V, W, C] and the per-edge q
    [E, W], reuses the sparse matrix transposed for dL/dx, and forms dL/dq with one
    [E, C] product per weight matrix, instead of the [E, W*C] tensors TensorFlow's
    sparse-matmul gradient builds.

    Args:
      data: float tensor [A1, ..., An, V, C].
      neighbors: SparseTensor [A1, ..., An, V, V'] of adjacency weights a_ij.
      sizes: optional int tensor [A1, ..., An] of true vertex counts (padded batches).
      var_u, var_v: [C, W]; var_c: [W]; var_w: [W, C, D]; var_b: [D].
      xla: when True the sparse products are written as gather + unsorted_segment_sum,
        which XLA compiles and fuses (SparseTensorDenseMatMul has no XLA kernel).

    Returns:
      float tensor [A1, ..., An, V, D]; rows of padded vertices are zero. Gradients flow to
      data, the adjacency values and every variable.
    """
    graph = flatten_graph(data, neighbors, sizes)
    tensors = [tf.convert_to_tensor(v) for v in (var_u, var_v, var_c, var_w, var_b)]
    op = _feast_xla if xla else _feast_sparse
    return graph.unflatten(op(graph.data, graph.rows, graph.cols, graph.weights, *tensors))


def _make_feast(xla: bool):
    """Builds the 2-D op; `xla` picks gather/segment-sum or sparse-matmul aggregation."""

    @tf.custom_gradient
    def feast(x, rows, cols, weights, var_u, var_v, var_c, var_w, var_b):
        num_vertices = tf.shape(x)[0]
        num_weights, num_in = _static_or_dynamic(var_w, 0), _static_or_dynamic(var_w, 1)
        w_flat = tf.reshape(var_w, [num_weights * num_in, -1])
        q = tf.nn.softmax(tf.gather(tf.matmul(x, var_u) + var_c, rows)
                          + tf.gather(tf.matmul(x, var_v), cols))  # [E, W]
        coef = weights[:, tf.newaxis] * q  # [E, W]
        if xla:
            z = tf.math.unsorted_segment_sum(
                coef[:, :, tf.newaxis] * tf.gather(x, cols)[:, tf.newaxis, :], rows, num_vertices)
            z_flat = tf.reshape(z, [-1, num_weights * num_in])
        else:
            blocks = _block_adjacency(coef, rows, cols, num_vertices, num_weights)
            z_flat = tf.reshape(tf.sparse.sparse_dense_matmul(blocks, x), [-1, num_weights * num_in])
        y = tf.matmul(z_flat, w_flat) + var_b

        def grad(dy):
            dz = tf.reshape(tf.matmul(dy, w_flat, transpose_b=True), [-1, num_weights, num_in])
            x_cols = tf.gather(x, cols)  # [E, C]
            if xla:
                dz_rows = tf.gather(dz, rows)  # [E, W, C], fused away by XLA
                dx = tf.math.unsorted_segment_sum(
                    tf.einsum("ew,ewc->ec", coef, dz_rows), cols, num_vertices)
                dots = tf.einsum("ewc,ec->ew", dz_rows, x_cols)
            else:
                dx = tf.sparse.sparse_dense_matmul(
                    blocks, tf.reshape(dz, [-1, num_in]), adjoint_a=True)
                dots = tf.stack([tf.reduce_sum(tf.gather(dz[:, m], rows) * x_cols, axis=-1)
                                 for m in range(num_weights)], axis=-1)  # [E, W]: dz_im . x_j
            dq = weights[:, tf.newaxis] * dots
            dlogits = q * (dq - tf.reduce_sum(q * dq, axis=-1, keepdims=True))
            ds = tf.math.unsorted_segment_sum(dlogits, rows, num_vertices)  # [V, W]
            dt = tf.math.unsorted_segment_sum(dlogits, cols, num_vertices)  # [V, W]
            dx += tf.matmul(ds, var_u, transpose_b=True) + tf.matmul(dt, var_v, transpose_b=True)
            return (dx, None, None, tf.reduce_sum(q * dots, axis=-1),
                    tf.matmul(x, ds, transpose_a=True), tf.matmul(x, dt, transpose_a=True),
                    tf.reduce_sum(ds, axis=0),
                    tf.reshape(tf.matmul(z_flat, dy, transpose_a=True), tf.shape(var_w)),
                    tf.reduce_sum(dy, axis=0))

        return y, grad

    return feast


def _block_adjacency(coef, rows, cols, num_vertices, num_weights) -> tf.SparseTensor:
    """SparseTensor [V*W, V] with entry (i*W + m, j) = coef[e, m] for edge e = (i, j)."""
    block_rows = rows[:, tf.newaxis] * num_weights + tf.range(num_weights)[tf.newaxis, :]
    block_cols = tf.broadcast_to(cols[:, tf.newaxis], tf.shape(block_rows))
    indices = tf.cast(tf.stack([tf.reshape(block_rows, [-1]), tf.reshape(block_cols, [-1])], -1),
                      tf.int64)
    shape = tf.cast(tf.stack([num_vertices * num_weights, num_vertices]), tf.int64)
    return tf.SparseTensor(indices, tf.reshape(coef, [-1]), shape)


def _static_or_dynamic(tensor: tf.Tensor, axis: int):
    """The static size of `axis` when known (needed for the per-m loop), else a tensor."""
    size = tensor.shape[axis]
    return size if size is not None else tf.shape(tensor)[axis]


_feast_sparse = _make_feast(xla=False)
_feast_xla = _make_feast(xla=True)

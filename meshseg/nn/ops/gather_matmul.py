"""FeaStNet convolution over a padded neighbour table: gather, then small batched matmuls."""

from typing import Optional, Union

import tensorflow as tf

from meshseg.batch import NeighborTable, table_from_edges
from meshseg.nn.ops.flatten import flatten_graph


def gather_matmul(data: tf.Tensor, neighbors: Union[tf.SparseTensor, NeighborTable],
                  sizes: Optional[tf.Tensor], var_u: tf.Tensor, var_v: tf.Tensor,
                  var_c: tf.Tensor, var_w: tf.Tensor, var_b: tf.Tensor, xla: bool = False,
                  max_degree: Optional[int] = None) -> tf.Tensor:
    """FeaStNet convolution (Verma et al., CVPR 2018) in the ELL (neighbour table) layout.

    Mesh 1-rings have a small, bounded degree K, so the neighbourhood fits a dense
    [V, K] table; the few vertices with far more neighbours continue on overflow rows
    whose sums are added to their vertex (`meshseg.batch.NeighborTable`), so the cost
    grows with the edges. Per vertex i the inputs of the W weight matrices are one tiny
    matrix product z_i = Q_i^T X_i, with Q_i [K, W] = a_ik q_m(x_i, x_k) and X_i [K, C]
    the gathered neighbour features; then y = b + [V, W*C] x [W*C, D] as one dense
    matmul. The largest per-edge tensors are [V, K, C] and [V, K, W]: nothing of size [E, W, C]
    or [E, W, D] exists, forward or backward (gradients by TensorFlow's autodiff). The
    softmax is max-shifted (`tf.nn.softmax`), so any input magnitude gives finite results,
    and computed in at least float32 whatever the dtype of `data` (mixed precision).

    Args:
      data: float tensor [A1, ..., An, V, C]; [V, C] when `neighbors` is a table.
      neighbors: SparseTensor [A1, ..., An, V, V'] of adjacency weights a_ij, in any
        order (entries stored explicitly count towards a vertex's degree, even zeros);
        or a `NeighborTable` ([V, K], with its overflow rows), used as it is.
      sizes: optional int tensor [A1, ..., An] of true vertex counts (padded batches).
      var_u, var_v: [C, W]; var_c: [W]; var_w: [W, C, D]; var_b: [D].
      xla: the ops are the same either way (all have XLA kernels), but under XLA a
        SparseTensor needs a static table width: pass `max_degree`.
      max_degree: a fixed table width K for a SparseTensor, without overflow rows (XLA
        needs static shapes); if a vertex has more neighbours, the output is NaN (never
        a silently truncated neighbourhood). Default: `meshseg.batch.table_width`, found
        at run time, with overflow rows.

    Returns:
      float tensor [A1, ..., An, V, D]; rows of padded vertices are zero.

    Raises:
      ValueError: under `xla` with a SparseTensor and no `max_degree`, or for a table
        with `data` that is not 2-D.
    """
    if isinstance(neighbors, NeighborTable):
        if tf.convert_to_tensor(data).shape.rank != 2:
            raise ValueError("gather_matmul with a NeighborTable takes 2-D data [V, C]")
        return _feast(tf.convert_to_tensor(data), neighbors, var_u, var_v, var_c, var_w, var_b)
    if xla and max_degree is None:
        raise ValueError("gather_matmul under XLA needs a static max_degree (neighbour table width)")
    graph = flatten_graph(data, neighbors, sizes)
    table, degree = table_from_edges(graph.rows, graph.cols, graph.weights,
                                     tf.shape(graph.data)[0], max_degree)
    y = _feast(graph.data, table, var_u, var_v, var_c, var_w, var_b)
    if max_degree is not None:
        y = tf.where(tf.reduce_max(degree) > max_degree, tf.constant(float("nan"), y.dtype), y)
    return graph.unflatten(y)


def _feast(x, table: NeighborTable, var_u, var_v, var_c, var_w, var_b):
    """The convolution of x [V, C] over `table` (and its overflow rows), [V, D]."""
    num_weights, num_in = var_w.shape[0], var_w.shape[1]
    s = tf.matmul(x, var_u) + var_c  # [V, W]
    t = tf.matmul(x, var_v)  # [V, W]
    z = _aggregate(x, s, t, table.neighbors, table.weights)  # [V, W, C]
    if table.overflow_centers is not None:
        centers = table.overflow_centers
        z_overflow = _aggregate(x, tf.gather(s, centers), t, table.overflow_neighbors,
                                table.overflow_weights)  # [O, W, C]
        z = z + tf.math.unsorted_segment_sum(z_overflow, centers, tf.shape(x)[0])
    return tf.matmul(tf.reshape(z, [-1, num_weights * num_in]),
                     tf.reshape(var_w, [num_weights * num_in, -1])) + var_b


def _aggregate(x, s_rows, t, neighbors, weights):
    """z_r = sum_k a_rk q(x_i, x_k) x_k^T of each table row r, [R, W, C]: `s_rows` [R, W]
    holds u.x_i + c of the row's vertex i, `t` [V, W] v.x_k, `neighbors` and `weights`
    [R, K] the row's neighbours and their a_ik."""
    softmax_dtype = tf.float32 if x.dtype in (tf.float16, tf.bfloat16) else x.dtype
    logits = tf.cast(s_rows[:, tf.newaxis, :] + tf.gather(t, neighbors), softmax_dtype)
    q = tf.cast(tf.nn.softmax(logits), x.dtype)  # [R, K, W], normalised in >= float32
    coef = tf.cast(weights, x.dtype)[..., tf.newaxis] * q  # [R, K, W]
    return tf.matmul(coef, tf.gather(x, neighbors), transpose_a=True)  # [R, W, C]

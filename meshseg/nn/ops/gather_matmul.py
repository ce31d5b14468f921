"""FeaStNet convolution over a padded neighbour table: gather, then small batched matmuls."""

from typing import Optional, Union

import tensorflow as tf

from meshseg.batch import NeighborTable, table_from_edges, with_reverse_slots
from meshseg.nn.ops.flatten import flatten_graph
from meshseg.nn.ops.vertex_matmul import add_bias, vertex_matmul


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
    matmul; overflow rows go through W on their own ([O, D]) and are added to their
    vertex. The largest per-edge tensors are [V, K, C] and [V, K, W]: nothing of size
    [E, W, C] or [E, W, D] exists, forward or backward. The backward of the table's own
    rows is written by hand: dL/dx and dL/dt are sums over the slots that point at each
    vertex, which a symmetric table (mesh 1-rings) turns into a sum over the reverse slots
    of the vertex's own row (`meshseg.batch.reverse_slots`): a gather and a sum over K
    (which XLA fuses) instead of the scatter (`UnsortedSegmentSum`, serial on CPU) of the
    gather's gradient; a table whose slots do not pair (asymmetric, duplicate edges,
    overflow rows) scatters. The
    softmax is max-shifted (`tf.nn.softmax`), so any input magnitude gives finite results,
    and computed in at least float32 whatever the dtype of `data` (mixed precision).

    Args:
      data: float tensor [A1, ..., An, V, C]; [V, C] when `neighbors` is a table.
      neighbors: SparseTensor [A1, ..., An, V, V'] of adjacency weights a_ij, in any
        order (entries stored explicitly count towards a vertex's degree, even zeros);
        or a `NeighborTable` ([V, K], with its overflow rows), used as it is.
      sizes: optional int tensor [A1, ..., An] of true vertex counts (padded batches).
      var_u, var_v: [C, W]; var_c: [W]; var_w: [W, C, D]; var_b: [D].
      xla: the formulation for `tf.function(jit_compile=True)`: the per-vertex
        [W, K] x [K, C] products become a product summed over K (`_combine`); a
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
        return _feast(tf.convert_to_tensor(data), neighbors, var_u, var_v, var_c, var_w, var_b,
                      xla)
    if xla and max_degree is None:
        raise ValueError("gather_matmul under XLA needs a static max_degree (neighbour table width)")
    graph = flatten_graph(data, neighbors, sizes)
    table, degree = table_from_edges(graph.rows, graph.cols, graph.weights,
                                     tf.shape(graph.data)[0], max_degree)
    y = _feast(graph.data, table, var_u, var_v, var_c, var_w, var_b, xla)
    if max_degree is not None:
        y = tf.where(tf.reduce_max(degree) > max_degree, tf.constant(float("nan"), y.dtype), y)
    return graph.unflatten(y)


def _feast(x, table: NeighborTable, var_u, var_v, var_c, var_w, var_b, xla: bool):
    """The convolution of x [V, C] over `table` (and its overflow rows), [V, D]."""
    num_weights, num_in = var_w.shape[0], var_w.shape[1]
    w_flat = tf.reshape(var_w, [num_weights * num_in, -1])
    s = tf.matmul(x, var_u) + var_c  # [V, W]
    t = tf.matmul(x, var_v)  # [V, W]
    if table.reverse is None:
        table = with_reverse_slots(table)
    z = _aggregate_main_rows(x, s, t, table, xla)
    y = add_bias(vertex_matmul(tf.reshape(z, [-1, num_weights * num_in]), w_flat), var_b)
    if not _may_have_overflow_rows(table):
        return y
    # Overflow rows go through W before they are added to their vertex: [O, D], not [V, W, C].
    centers = table.overflow_centers
    z_overflow = _aggregate(x, tf.gather(s, centers), t, table.overflow_neighbors,
                            table.overflow_weights, xla)  # [O, W, C]
    y_overflow = tf.matmul(tf.reshape(z_overflow, [-1, num_weights * num_in]), w_flat)
    return tf.tensor_scatter_nd_add(y, centers[:, tf.newaxis], y_overflow)


def _may_have_overflow_rows(table: NeighborTable) -> bool:
    """False where the table has no overflow rows, or none by its static shape ([0, K]; mesh
    1-rings never need them, `meshseg.batch.SPLIT_FACTOR`): their ops are then left out.
    With zero rows they would still cost a copy of y [V, D] and a zero [V, C] gradient
    per layer. An overflow count known only at run time keeps them."""
    centers = table.overflow_centers
    return centers is not None and centers.shape[0] != 0


def _sum_over_reverse_slots(per_slot, table: NeighborTable):
    """sum_{(i, k): neighbors[i, k] = j} per_slot[i, k] for every vertex j, [V, ...], for a
    `per_slot` [V, K, ...] that is 0 in the unused slots. With the table's slots paired
    (`meshseg.batch.reverse_slots`) that is a sum over j's own row of the reverse slots:
    a gather and a sum over K, which XLA fuses into one pass; without XLA that too beat
    `tf.sparse.segment_sum` on this CPU
    (docs/experiments/2026-12-05-backward-sums-bias-gradient-reverse-slots.md).
    Else a scatter."""
    num_vertices = tf.shape(per_slot)[0]
    flat = tf.reshape(per_slot, tf.concat([[-1], tf.shape(per_slot)[2:]], axis=0))

    def gather():
        return tf.reduce_sum(tf.gather(flat, table.reverse), axis=1)

    def scatter():
        return tf.math.unsorted_segment_sum(per_slot, table.neighbors, num_vertices)

    return tf.cond(table.paired, gather, scatter)


def _aggregate_main_rows(x, s, t, table: NeighborTable, xla: bool):
    """`_aggregate` over the table's own rows (row i is vertex i), with a hand-written
    backward that sums over the reverse slots instead of scattering: z [V, W, C]."""
    neighbors = table.neighbors

    @tf.custom_gradient
    def aggregate(x, s, t, weights):
        softmax_dtype = _softmax_dtype(x)
        q, coef = _coefficients(x, s, t, neighbors, weights)
        x_neighbors = tf.gather(x, neighbors)  # [V, K, C]
        z = _combine(coef, x_neighbors, xla)  # [V, W, C]

        def grad(dz):
            with tf.name_scope("feast_gradient"):
                dcoef = tf.cast(tf.matmul(x_neighbors, dz, transpose_b=True), softmax_dtype)
                dx_neighbors = tf.matmul(tf.cast(coef, x.dtype), dz)  # [V, K, C]
                dq = tf.cast(weights, softmax_dtype)[..., tf.newaxis] * dcoef  # [V, K, W]
                dlogits = q * (dq - tf.reduce_sum(q * dq, axis=-1, keepdims=True))
                dweights = tf.cast(tf.reduce_sum(q * dcoef, axis=-1), weights.dtype)
                dlogits = tf.cast(dlogits, x.dtype)
                # Unused slots (a = 0) have coef = 0, so their dx_neighbors and dlogits are 0.
                dt = _sum_over_reverse_slots(dlogits, table)
                dx = _sum_over_reverse_slots(dx_neighbors, table)
                return dx, tf.reduce_sum(dlogits, axis=1), dt, dweights

        return z, grad

    return aggregate(x, s, t, table.weights)


def _softmax_dtype(x):
    """float32 for low-precision x (the softmax is normalised in >= float32), else x's."""
    return tf.float32 if x.dtype in (tf.float16, tf.bfloat16) else x.dtype


def _coefficients(x, s_rows, t, neighbors, weights):
    """(q, coef) [R, K, W] of each table row r in the softmax dtype: q_m(x_i, x_k), the
    max-shifted softmax over m of u_m.x_i + c_m + v_m.x_k, and coef = a_ik q. `s_rows`
    [R, W] holds u.x_i + c of the row's vertex i, `t` [V, W] v.x_k, `neighbors` and
    `weights` [R, K] the row's neighbours and their a_ik."""
    softmax_dtype = _softmax_dtype(x)
    logits = tf.cast(s_rows[:, tf.newaxis, :] + tf.gather(t, neighbors), softmax_dtype)
    q = tf.nn.softmax(logits)
    return q, tf.cast(weights, softmax_dtype)[..., tf.newaxis] * q


def _aggregate(x, s_rows, t, neighbors, weights, xla: bool):
    """z_r = sum_k a_rk q(x_i, x_k) x_k^T of each table row r, [R, W, C] (arguments as
    `_coefficients`)."""
    _, coef = _coefficients(x, s_rows, t, neighbors, weights)
    return _combine(coef, tf.gather(x, neighbors), xla)


def _combine(coef, x_neighbors, xla: bool):
    """z[r, m] = sum_k coef[r, k, m] x_neighbors[r, k], [R, W, C] of x_neighbors' dtype, for
    coef [R, K, W] (in the softmax dtype) and x_neighbors [R, K, C]: per row a [W, K] x
    [K, C] product. TensorFlow runs it as a batched matmul. XLA's CPU dot is slow for
    products that contract over so few terms (K is about 7), and a broadcast product
    summed over K, which XLA emits as one fused loop, is 2-6x faster
    (docs/experiments/2026-12-01-xla-sum-over-k.md), so under XLA it is that, summed in
    coef's dtype (at least float32)."""
    if xla:
        products = coef[..., tf.newaxis] * tf.cast(x_neighbors, coef.dtype)[:, :, tf.newaxis, :]
        return tf.cast(tf.reduce_sum(products, axis=1), x_neighbors.dtype)
    return tf.matmul(tf.cast(coef, x_neighbors.dtype), x_neighbors, transpose_a=True)

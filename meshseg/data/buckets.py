"""Bucketing by mesh size, so an XLA step compiles once per bucket instead of per batch.

A bucket is one padded shape (V, E, K, O): vertices, edges, neighbour-table width
and overflow rows (`meshseg.batch.NeighborTable`). Each mesh goes to the first
bucket (smallest V first) that it fits in all four sizes, and batches are formed
within a bucket and padded to exactly its shape. Bucket shapes come from
`data.bucket_boundaries` (vertex-count upper bounds) or, when that is null, from
`data.num_buckets` quantiles of the vertex counts (`auto_boundaries`); E, K and O
of each bucket are the largest of the meshes that fall in it, E and O rounded up
(`bucket_shapes`).
"""

import numpy as np
import tensorflow as tf

# Overflow rows of a bucket are rounded up to a multiple of this (most meshes have none).
OVERFLOW_MULTIPLE = 8


def round_up(value: int, multiple: int) -> int:
    """The smallest multiple of `multiple` >= value (value itself when multiple <= 1)."""
    return int(value) if multiple <= 1 else -(-int(value) // multiple) * multiple


def auto_boundaries(vertex_counts: np.ndarray, num_buckets: int, multiple: int) -> list[int]:
    """Vertex-count bucket boundaries at the 1/n, 2/n, ..., 1 quantiles, rounded up.

    The q quantile is the smallest count with at least a fraction q of meshes at or
    below it, so meshes of equal size never straddle a boundary.

    Args:
      vertex_counts: int [N] vertex count of each mesh, N >= 1.
      num_buckets: n >= 1, the most buckets to make (equal quantiles merge).
      multiple: boundaries are rounded up to a multiple of this.

    Returns:
      Increasing boundaries; the last is >= max(vertex_counts).

    Raises:
      ValueError: if `vertex_counts` is empty or `num_buckets` < 1.
    """
    counts = np.asarray(vertex_counts)
    if counts.size == 0:
        raise ValueError("auto_boundaries needs at least one vertex count")
    if num_buckets < 1:
        raise ValueError(f"num_buckets must be >= 1, got {num_buckets}")
    quantiles = np.quantile(counts, np.arange(1, num_buckets + 1) / num_buckets, method="inverted_cdf")
    return sorted({round_up(q, multiple) for q in quantiles})


def bucket_shapes(sizes: np.ndarray, boundaries: list[int], multiple: int) -> list[tuple]:
    """Padded shapes (V, E, K, O) of the buckets given by vertex-count boundaries.

    Bucket i holds the meshes with boundaries[i-1] < V <= boundaries[i]; meshes
    above the last boundary get one more bucket, V rounded up. E is the largest
    edge count in the bucket rounded up to `multiple`, K its widest table, O its most
    overflow rows rounded up to `OVERFLOW_MULTIPLE`; E, K and O are made non-decreasing
    over the buckets, so a mesh that fits a smaller bucket also fits every larger one.
    Buckets that no mesh falls in are dropped.

    Args:
      sizes: int [N, 4], (num_vertices, num_edges, table_width, overflow_rows) of each
        mesh.
      boundaries: increasing vertex-count upper bounds.
      multiple: rounding of E (and of V for the overflow bucket).

    Returns:
      List of (V, E, K, O) int tuples, V increasing.

    Raises:
      ValueError: if `sizes` is empty or `boundaries` is not increasing.
    """
    sizes = np.asarray(sizes, np.int64).reshape(-1, 4)
    if sizes.shape[0] == 0:
        raise ValueError("bucket_shapes needs at least one mesh size")
    if list(boundaries) != sorted(set(boundaries)):
        raise ValueError(f"bucket_boundaries must be strictly increasing, got {list(boundaries)}")
    limits = [int(b) for b in boundaries]
    if not limits or sizes[:, 0].max() > limits[-1]:
        limits.append(round_up(sizes[:, 0].max(), multiple))
    shapes, lower, largest = [], 0, (0, 0, 0)
    for limit in limits:
        inside = sizes[(sizes[:, 0] > lower) & (sizes[:, 0] <= limit)]
        lower = limit
        if inside.shape[0] == 0:
            continue
        bucket = (round_up(inside[:, 1].max(), multiple), int(inside[:, 2].max()),
                  round_up(inside[:, 3].max(), OVERFLOW_MULTIPLE))
        largest = tuple(max(a, b) for a, b in zip(largest, bucket))
        shapes.append((limit, *largest))
    return shapes


def _padded_shapes(shape):
    """padded_shapes of one (features, labels) element for bucket shape (V, E, K, O)."""
    num_vertices, num_edges, width, overflow = shape[0], shape[1], shape[2], shape[3]
    return (
        {"vertices": [num_vertices, 3], "num_vertices": [], "edges": [num_edges, 2],
         "edge_weights": [num_edges], "num_edges": [], "neighbors": [num_vertices, width],
         "neighbor_weights": [num_vertices, width], "overflow_neighbors": [overflow, width],
         "overflow_weights": [overflow, width], "overflow_centers": [overflow], "mesh_id": []},
        [num_vertices],
    )


def bucket_batch(examples: tf.data.Dataset, batch_size: int, shapes: list[tuple],
                 padding_values, drop_remainder: bool) -> tf.data.Dataset:
    """Batches `(features, labels)` examples within buckets, padded to the bucket shapes.

    Args:
      examples: unbatched elements of the `meshseg.data.pipeline` layout.
      batch_size: meshes per batch B.
      shapes: bucket shapes (V, E, K, O) as from `bucket_shapes`, V increasing.
      padding_values: the pipeline's padding values, same structure as an element.
      drop_remainder: drop a bucket's last, smaller batch.

    Returns:
      Dataset of batches whose padded shapes are exactly one of `shapes`
      (static shape known when there is one bucket, [B or None, None, ...] otherwise).

    Raises:
      tf.errors.InvalidArgumentError: during iteration, for a mesh larger than the
        largest bucket (the message gives its sizes).
    """
    if len(shapes) == 1:
        return examples.padded_batch(batch_size, padded_shapes=_padded_shapes(shapes[0]),
                                     padding_values=padding_values, drop_remainder=drop_remainder)
    table = tf.constant(shapes, tf.int64)

    def bucket_of(features, labels):
        size = tf.cast(tf.stack([features["num_vertices"], features["num_edges"],
                                 tf.shape(features["neighbors"])[1],
                                 tf.shape(features["overflow_centers"])[0]]), tf.int64)
        fits = tf.reduce_all(size[tf.newaxis] <= table, axis=1)
        check = tf.debugging.Assert(
            tf.reduce_any(fits),
            ["mesh with (vertices, edges, table width, overflow rows) =", size,
             "fits no bucket; largest is", table[-1], "- raise data.bucket_boundaries"])
        with tf.control_dependencies([check]):
            return tf.argmax(tf.cast(fits, tf.int32), output_type=tf.int64)

    def batch_bucket(key, window):
        return window.padded_batch(batch_size, padded_shapes=_padded_shapes(tf.gather(table, key)),
                                   padding_values=padding_values, drop_remainder=drop_remainder)

    return examples.group_by_window(bucket_of, batch_bucket, window_size=batch_size)

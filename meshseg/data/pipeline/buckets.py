"""Bucketing by mesh size, so an XLA step compiles once per bucket instead of per batch.

A bucket is one padded shape (V, E, K, O): vertices, edges, neighbour-table width
and overflow rows (`meshseg.batch.NeighborTable`). Each mesh goes to the first
bucket (smallest V first) that it fits in all four sizes, and batches are formed
within a bucket and padded to exactly its shape. Bucket shapes come from
`data.bucket_boundaries` (vertex-count upper bounds) or, when that is null, from
`data.num_buckets` quantiles of the vertex counts (`auto_boundaries`), whose buckets are
then split while one pads more than `data.max_padding` of its vertices, up to
`data.max_buckets` (`split_outlier_buckets`: a far larger mesh gets a bucket of its own
instead of padding every batch to its size); E, K and O of each bucket are the largest of
the meshes that fall in it, E and O rounded up (`bucket_shapes`).

With a mesh hierarchy (`data.levels` = L), a bucket's shape continues with (V_l, E_l, K_l,
O_l) for each coarser level l = 1..L: the largest of the bucket's meshes, V_l and E_l
rounded up like E, O_l like O, so every level of every batch has one static shape per
bucket. A mesh fits a bucket when it fits at every level.
"""

import numpy as np
import tensorflow as tf

from meshseg.batch import level_key, num_levels

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


def _bucket_index(rounded: np.ndarray, limits: list[int]) -> np.ndarray:
    """int [N]: the bucket (first limit >= the count) of each rounded vertex count."""
    return np.searchsorted(np.asarray(limits), rounded, side="left")


def padding_fractions(vertex_counts: np.ndarray, limits: list[int], multiple: int
                      ) -> list[float]:
    """Per bucket, the fraction of its padded vertices that is padding beyond what rounding
    to `multiple` costs anyway: 1 - sum(round_up(V_i)) / (n * V_bucket) over its n meshes
    (0 for a bucket no mesh falls in). A bucket at 0.5 does twice the vertex work its
    meshes need.

    Args:
      vertex_counts: int [N] vertex count of each mesh.
      limits: increasing bucket vertex counts V_bucket (the V of `bucket_shapes`), the last
        >= max(vertex_counts).
      multiple: the rounding of vertex counts (`data.pad_multiple`).
    """
    rounded = np.asarray([round_up(v, multiple) for v in vertex_counts], np.int64)
    bucket = _bucket_index(rounded, limits)
    fractions = []
    for index, limit in enumerate(limits):
        inside = rounded[bucket == index]
        fractions.append(float(1 - inside.sum() / (inside.size * limit)) if inside.size else 0.0)
    return fractions


def split_outlier_buckets(vertex_counts: np.ndarray, boundaries: list[int], multiple: int,
                          max_padding: float, max_buckets: int) -> list[int]:
    """Boundaries with buckets split until none pads more than `max_padding`, so that no
    batch pays for a few far larger meshes: those get a bucket of their own.

    While there are fewer than `max_buckets` buckets, the bucket with the most padded
    vertices among those above `max_padding` (`padding_fractions`) is split in two at the
    vertex count that leaves the fewest padded vertices (n_low * V_low + n_high * V_high
    least). Boundaries whose buckets are within `max_padding` come back unchanged.

    Args:
      vertex_counts: int [N] vertex count of each mesh, N >= 1.
      boundaries: increasing boundaries as from `auto_boundaries` (the last >= every count).
      multiple: the rounding of vertex counts (`data.pad_multiple`).
      max_padding: the largest padding fraction wanted, in [0, 1].
      max_buckets: the most buckets (compilations per step function) to end with.

    Returns:
      Increasing boundaries, each a rounded vertex count.
    """
    rounded = np.sort([round_up(v, multiple) for v in vertex_counts]).astype(np.int64)
    limits = [int(b) for b in boundaries]
    while len(limits) < max_buckets:
        best = None  # (padded vertices, new boundary)
        for index, fraction in enumerate(padding_fractions(rounded, limits, 1)):
            inside = rounded[_bucket_index(rounded, limits) == index]
            cuts = np.flatnonzero(inside[1:] > inside[:-1]) + 1  # split before position j
            if fraction <= max_padding or not cuts.size:
                continue
            excess = inside.size * limits[index] - inside.sum()
            cost = cuts * inside[cuts - 1] + (inside.size - cuts) * limits[index]
            if best is None or excess > best[0]:
                best = (excess, int(inside[cuts[np.argmin(cost)] - 1]))
        if best is None:
            break
        limits = sorted(limits + [best[1]])
    return limits


def bucket_shapes(sizes: np.ndarray, boundaries: list[int], multiple: int) -> list[tuple]:
    """Padded shapes (V, E, K, O[, V_1, E_1, K_1, O_1, ...]) of the buckets given by
    vertex-count boundaries.

    Bucket i holds the meshes with boundaries[i-1] < V <= boundaries[i]; meshes
    above the last boundary get one more bucket, V rounded up. E is the largest
    edge count in the bucket rounded up to `multiple`, K its widest table, O its most
    overflow rows rounded up to `OVERFLOW_MULTIPLE`; each coarser level's V_l and E_l are
    its largest rounded up to `multiple`, K_l and O_l as K and O. Every size but V is made
    non-decreasing over the buckets, so a mesh that fits a smaller bucket also fits every
    larger one. Buckets that no mesh falls in are dropped.

    Args:
      sizes: int [N, 4 * (1 + L)], (num_vertices, num_edges, table_width, overflow_rows)
        of each mesh, then of each of its L coarser levels.
      boundaries: increasing vertex-count upper bounds.
      multiple: rounding of E (and of V for the overflow bucket, and of V_l, E_l).

    Returns:
      List of int tuples of length 4 * (1 + L), V increasing.

    Raises:
      ValueError: if `sizes` is empty or `boundaries` is not increasing.
    """
    sizes = np.asarray(sizes, np.int64)
    sizes = sizes.reshape(-1, sizes.shape[-1] if sizes.ndim == 2 else 4)
    if sizes.shape[0] == 0:
        raise ValueError("bucket_shapes needs at least one mesh size")
    if list(boundaries) != sorted(set(boundaries)):
        raise ValueError(f"bucket_boundaries must be strictly increasing, got {list(boundaries)}")
    limits = [int(b) for b in boundaries]
    if not limits or sizes[:, 0].max() > limits[-1]:
        limits.append(round_up(sizes[:, 0].max(), multiple))
    rounding = [multiple, 1, OVERFLOW_MULTIPLE]  # of E, K, O
    rounding += [multiple, multiple, 1, OVERFLOW_MULTIPLE] * (sizes.shape[1] // 4 - 1)
    shapes, lower, largest = [], 0, (0,) * (sizes.shape[1] - 1)
    for limit in limits:
        inside = sizes[(sizes[:, 0] > lower) & (sizes[:, 0] <= limit)]
        lower = limit
        if inside.shape[0] == 0:
            continue
        bucket = [round_up(value, step) for value, step in zip(inside[:, 1:].max(axis=0),
                                                               rounding)]
        largest = tuple(max(a, b) for a, b in zip(largest, bucket))
        shapes.append((limit, *largest))
    return shapes


def _padded_shapes(shape, num_inputs: int):
    """padded_shapes of one (features, labels) element for bucket shape (V, E, K, O, ...)
    with F = `num_inputs` input channels."""
    features = {"vertices": [shape[0], 3], "inputs": [shape[0], num_inputs], "mesh_id": []}
    for level in range(len(shape) // 4):
        num_vertices, num_edges, width, overflow = (shape[4 * level + i] for i in range(4))
        level_shapes = {
            "num_vertices": [], "edges": [num_edges, 2], "edge_weights": [num_edges],
            "num_edges": [], "neighbors": [num_vertices, width],
            "neighbor_weights": [num_vertices, width], "overflow_neighbors": [overflow, width],
            "overflow_weights": [overflow, width], "overflow_centers": [overflow],
            "reverse_slots": [num_vertices, width], "paired": []}
        if level:
            level_shapes["parents"] = [shape[4 * (level - 1)]]
        features |= {level_key(level, name): value for name, value in level_shapes.items()}
    return features, [shape[0]]


def _sizes(features) -> tf.Tensor:
    """int64 [4 * (1 + L)]: (V, E, K, O) of the mesh and of each level in `features`."""
    sizes = []
    for level in range(num_levels(features) + 1):
        sizes += [features[level_key(level, "num_vertices")],
                  features[level_key(level, "num_edges")],
                  tf.shape(features[level_key(level, "neighbors")])[1],
                  tf.shape(features[level_key(level, "overflow_centers")])[0]]
    return tf.cast(tf.stack(sizes), tf.int64)


def bucket_batch(examples: tf.data.Dataset, batch_size: int, shapes: list[tuple],
                 padding_values, drop_remainder: bool) -> tf.data.Dataset:
    """Batches `(features, labels)` examples within buckets, padded to the bucket shapes.

    Args:
      examples: unbatched elements of the `meshseg.data.pipeline.dataset` layout.
      batch_size: meshes per batch B.
      shapes: bucket shapes (V, E, K, O, ...) as from `bucket_shapes`, V increasing, one
        (V, E, K, O) per level the elements hold.
      padding_values: the pipeline's padding values, same structure as an element.
      drop_remainder: drop a bucket's last, smaller batch.

    Returns:
      Dataset of batches whose padded shapes are exactly one of `shapes`
      (static shape known when there is one bucket, [B or None, None, ...] otherwise).

    Raises:
      tf.errors.InvalidArgumentError: during iteration, for a mesh larger than the
        largest bucket (the message gives its sizes).
    """
    num_inputs = examples.element_spec[0]["inputs"].shape[-1]
    if len(shapes) == 1:
        return examples.padded_batch(batch_size,
                                     padded_shapes=_padded_shapes(shapes[0], num_inputs),
                                     padding_values=padding_values, drop_remainder=drop_remainder)
    table = tf.constant(shapes, tf.int64)

    @tf.autograph.experimental.do_not_convert  # no Python control flow on tensors
    def bucket_of(features, labels):
        size = _sizes(features)
        fits = tf.reduce_all(size[tf.newaxis] <= table, axis=1)
        check = tf.debugging.Assert(
            tf.reduce_any(fits),
            ["mesh with (vertices, edges, table width, overflow rows) per level =", size,
             "fits no bucket; largest is", table[-1], "- raise data.bucket_boundaries"])
        with tf.control_dependencies([check]):
            return tf.argmax(tf.cast(fits, tf.int32), output_type=tf.int64)

    @tf.autograph.experimental.do_not_convert
    def batch_bucket(key, window):
        shape = tf.gather(table, key)
        return window.padded_batch(batch_size, padded_shapes=_padded_shapes(
                                       [shape[i] for i in range(len(shapes[0]))], num_inputs),
                                   padding_values=padding_values, drop_remainder=drop_remainder)

    return examples.group_by_window(bucket_of, batch_bucket, window_size=batch_size)

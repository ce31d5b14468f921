"""Pooling and unpooling between the levels of a padded batch of mesh hierarchies.

A mesh hierarchy (`meshseg.batch`, "level<l>/parents") maps every vertex of level l-1 to
the level-l vertex it is merged into, as quadric-decimation edge collapses merge vertices
(Garland & Heckbert, SIGGRAPH 1997). Pooling averages a coarse vertex's children, and
unpooling copies a coarse vertex's features back to each child: the graph pooling of
FeaStNet (Verma et al., CVPR 2018, Sec. 4.3) and the unpooling of graph U-Nets (Gao & Ji,
ICML 2019), over a precomputed clustering instead of a learned one.

Both take features flattened over the batch, as the graph convolutions take them: row
b*V + i is vertex i of mesh b. Padded vertices (parent -1, `meshseg.batch.PARENT_PADDING`)
contribute to no coarse vertex, so they never change a real vertex's output; XLA compiles
both (no op depends on a negative segment id being dropped).
"""

from typing import Sequence

import tensorflow as tf


def batch_parents(parents: tf.Tensor, num_coarse_padded) -> tf.Tensor:
    """The parents of a padded batch as indices into the flattened coarse level.

    Args:
      parents: int32 [B, V] the level-l vertex (local to its mesh) of each vertex of the
        finer level, padded with -1.
      num_coarse_padded: V_l, the padded vertex count of the coarse level (int or scalar).

    Returns:
      int32 [B*V]: b*V_l + parents[b, i] for a real vertex, B*V_l (one past the last coarse
      row) for a padded one.
    """
    batch_size = tf.shape(parents)[0]
    offsets = tf.range(batch_size)[:, tf.newaxis] * num_coarse_padded
    flat = tf.where(parents >= 0, parents + offsets, batch_size * num_coarse_padded)
    return tf.reshape(flat, [-1])


def mean_pool(data: tf.Tensor, parents: tf.Tensor, num_coarse_padded) -> tf.Tensor:
    """Each coarse vertex gets the mean of its children's features.

    Args:
      data: float [B*V, C] features of the finer level, flattened over the batch.
      parents: int32 [B, V] (see `batch_parents`), padded with -1.
      num_coarse_padded: V_l, the padded vertex count of the coarse level.

    Returns:
      float [B*V_l, C] in the dtype of `data`; a coarse vertex without children (a padded
      one) gets 0. The sum is one `unsorted_segment_sum` into B*V_l + 1 segments, the last
      collecting the padded vertices, and is dropped.
    """
    data = tf.convert_to_tensor(data)
    segments = batch_parents(parents, num_coarse_padded)
    num_coarse = tf.shape(parents)[0] * num_coarse_padded
    sums = tf.math.unsorted_segment_sum(data, segments, num_coarse + 1)[:num_coarse]
    counts = tf.math.unsorted_segment_sum(tf.ones_like(segments, data.dtype), segments,
                                          num_coarse + 1)[:num_coarse]
    return sums / tf.maximum(counts, tf.ones_like(counts))[:, tf.newaxis]


def unpool(data: tf.Tensor, parents: tf.Tensor) -> tf.Tensor:
    """Each vertex of the finer level gets its parent's features.

    Args:
      data: float [B*V_l, C] features of the coarse level, flattened over the batch.
      parents: int32 [B, V] the parent of each finer vertex, padded with -1.

    Returns:
      float [B*V, C]. A padded vertex gets the features of coarse row 0 of its mesh (any
      valid row would do: padded outputs are masked by the losses and metrics).
    """
    batch_size = tf.shape(parents)[0]
    num_coarse_padded = tf.shape(data)[0] // batch_size
    offsets = tf.range(batch_size)[:, tf.newaxis] * num_coarse_padded
    return tf.gather(data, tf.reshape(tf.maximum(parents, 0) + offsets, [-1]))


def carry_back(data: tf.Tensor, parents: Sequence[tf.Tensor]) -> tf.Tensor:
    """Features of a coarse level carried back to the mesh: every vertex of level 0 gets the
    features of its ancestor on level P (`unpool` from P down to 1), e.g. the logits of a
    classifier that runs on level P, so that it is scored on the original vertices.

    Args:
      data: float [B, V_P, C] features of level P.
      parents: the "level<l>/parents" of l = 1..P, int32 [B, V_{l-1}] each, padded with -1
        (empty for P = 0: `data` is returned as it is).

    Returns:
      float [B, V_0, C]; padded vertices get some real vertex's features (`unpool`).
    """
    channels = data.shape[-1]
    for level_parents in reversed(parents):
        data = tf.reshape(unpool(tf.reshape(data, [-1, channels]), level_parents),
                          [tf.shape(level_parents)[0], tf.shape(level_parents)[1], channels])
    return data


def vertex_mask(num_vertices: tf.Tensor, num_vertices_padded) -> tf.Tensor:
    """bool [B, V]: True for the real vertices (i < num_vertices[b]) of a padded batch."""
    return tf.sequence_mask(num_vertices, num_vertices_padded)


def global_pool(data: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
    """Mean and maximum of each mesh's real vertices, concatenated.

    Args:
      data: float [B, V, C] per-vertex features, padded.
      mask: bool [B, V] the real vertices (`vertex_mask`).

    Returns:
      float [B, 2C]: [mean | max] over the real vertices of each mesh (0 for a mesh with
      none); padded vertices take no part.
    """
    data = tf.convert_to_tensor(data)
    weights = tf.cast(mask, data.dtype)[..., tf.newaxis]  # [B, V, 1]
    count = tf.reduce_sum(weights, axis=1)  # [B, 1]
    mean = tf.reduce_sum(data * weights, axis=1) / tf.maximum(count, tf.ones_like(count))
    lowest = tf.constant(data.dtype.min, data.dtype)
    maximum = tf.reduce_max(tf.where(mask[..., tf.newaxis], data, lowest), axis=1)
    maximum = tf.where(count > 0, maximum, tf.zeros_like(maximum))
    return tf.concat([mean, maximum], axis=-1)

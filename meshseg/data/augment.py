"""Random geometric augmentation of one mesh's vertex positions, in TF ops.

Applied by the training pipeline only (`make_dataset(..., training=True)`), after
mean centring and unit scaling, so rotations turn the mesh about its centre.
Edges, weights and labels are untouched. Randomness is stateless: each mesh gets
a seed from `tf.data.Dataset.random(seed)`, so a seeded run is reproducible.

Configured by `data.augment` (`meshseg.config.AugmentConfig`): a rotation about the
up axis or uniform over all rotations (from a normalised Gaussian quaternion), and
one isotropic scale factor per mesh.
"""

import math

import tensorflow as tf

from meshseg.config import AugmentConfig


def rotation_about_axis(angle: tf.Tensor, axis: int) -> tf.Tensor:
    """float32 [3, 3] rotation by `angle` (scalar, radians) about coordinate axis 0/1/2."""
    cos, sin = tf.cos(angle), tf.sin(angle)
    one, zero = tf.ones_like(angle), tf.zeros_like(angle)
    i, j = [a for a in range(3) if a != axis]
    rows = [[None] * 3 for _ in range(3)]
    for a in range(3):
        for b in range(3):
            rows[a][b] = one if a == b == axis else zero
    rows[i][i], rows[i][j], rows[j][i], rows[j][j] = cos, -sin, sin, cos
    return tf.stack([tf.stack(row) for row in rows])


def rotation_from_quaternion(quaternion: tf.Tensor) -> tf.Tensor:
    """float32 [3, 3] rotation of a quaternion [4] (w, x, y, z); normalised first."""
    w, x, y, z = tf.unstack(quaternion / tf.norm(quaternion))
    return tf.stack([
        tf.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)]),
        tf.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)]),
        tf.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]),
    ])


def augment_vertices(vertices: tf.Tensor, seed: tf.Tensor, config: AugmentConfig) -> tf.Tensor:
    """Randomly rotates and scales one mesh.

    Args:
      vertices: float32 [V, 3].
      seed: int64 [2] stateless seed of this mesh.
      config: what to draw.

    Returns:
      float32 [V, 3]: vertices @ R^T * s.
    """
    rotation_seed, scale_seed = tf.unstack(
        tf.random.experimental.stateless_split(seed, num=2))
    if config.rotation == "up":
        angle = tf.random.stateless_uniform([], rotation_seed, 0.0, 2 * math.pi)
        vertices = tf.linalg.matmul(vertices, rotation_about_axis(angle, config.up_axis),
                                    transpose_b=True)
    elif config.rotation == "so3":
        quaternion = tf.random.stateless_normal([4], rotation_seed)
        vertices = tf.linalg.matmul(vertices, rotation_from_quaternion(quaternion),
                                    transpose_b=True)
    low, high = config.scale
    if (low, high) != (1.0, 1.0):
        vertices = vertices * tf.random.stateless_uniform([], scale_seed, low, high)
    return vertices

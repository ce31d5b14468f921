"""Random geometric augmentation of one mesh's vertex positions (and normals), in TF ops.

Applied by the training pipeline only (`make_dataset(..., training=True)`), after
centring and scaling, so rotations turn the mesh about its centre.
Edges, weights and labels are untouched. Randomness is stateless: each mesh gets
a seed from `tf.data.Dataset.random(seed)`, so a seeded run is reproducible.

Configured by `data.augment` (`meshseg.config.AugmentConfig`), applied in this order: a
rotation about the up axis or uniform over all rotations (from a normalised Gaussian
quaternion); a tilt of the up axis by an angle uniform in [0, tilt_degrees] towards a
uniformly drawn horizontal direction; one isotropic scale factor per mesh; Gaussian
jitter of every position. Normals turn with the rotation and the tilt only.
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


def rotation_about_vector(axis: tf.Tensor, angle: tf.Tensor) -> tf.Tensor:
    """float32 [3, 3] rotation by `angle` (scalar, radians) about the unit vector `axis`
    [3] (Rodrigues' formula)."""
    x, y, z = tf.unstack(axis)
    zero = tf.zeros_like(x)
    cross = tf.stack([tf.stack([zero, -z, y]), tf.stack([z, zero, -x]),
                      tf.stack([-y, x, zero])])
    return (tf.eye(3) + tf.sin(angle) * cross
            + (1.0 - tf.cos(angle)) * tf.linalg.matmul(cross, cross))


def tilt(seed: tf.Tensor, up_axis: int, max_degrees: float) -> tf.Tensor:
    """float32 [3, 3] rotation that tilts the `up_axis` by an angle uniform in
    [0, max_degrees] degrees towards a horizontal direction uniform in [0, 2 pi)."""
    angle_seed, direction_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    angle = tf.random.stateless_uniform([], angle_seed, 0.0, math.radians(max_degrees))
    heading = tf.random.stateless_uniform([], direction_seed, 0.0, 2 * math.pi)
    i, j = [a for a in range(3) if a != up_axis]
    # The axis is horizontal and perpendicular to the heading the up axis leans towards.
    components = [tf.zeros([])] * 3
    components[i], components[j] = -tf.sin(heading), tf.cos(heading)
    return rotation_about_vector(tf.stack(components), angle)


def augment_mesh(vertices: tf.Tensor, seed: tf.Tensor, config: AugmentConfig,
                 normals: tf.Tensor | None = None) -> tuple[tf.Tensor, tf.Tensor | None]:
    """Randomly rotates, tilts, scales and jitters one mesh.

    Args:
      vertices: float32 [V, 3].
      seed: int64 [2] stateless seed of this mesh.
      config: what to draw.
      normals: optional float32 [V, 3] unit normals, turned with the positions.

    Returns:
      (float32 [V, 3] vertices @ R^T * s + noise, normals @ R^T or None), R the rotation
      followed by the tilt.
    """
    rotation_seed, scale_seed = tf.unstack(
        tf.random.experimental.stateless_split(seed, num=2))
    rotation = None
    if config.rotation == "up":
        angle = tf.random.stateless_uniform([], rotation_seed, 0.0, 2 * math.pi)
        rotation = rotation_about_axis(angle, config.up_axis)
    elif config.rotation == "so3":
        quaternion = tf.random.stateless_normal([4], rotation_seed)
        rotation = rotation_from_quaternion(quaternion)
    if config.tilt_degrees > 0:
        tilted = tilt(tf.random.experimental.stateless_fold_in(seed, 2), config.up_axis,
                      config.tilt_degrees)
        rotation = tilted if rotation is None else tf.linalg.matmul(tilted, rotation)
    if rotation is not None:
        vertices = tf.linalg.matmul(vertices, rotation, transpose_b=True)
        if normals is not None:
            normals = tf.linalg.matmul(normals, rotation, transpose_b=True)
    low, high = config.scale
    if (low, high) != (1.0, 1.0):
        vertices = vertices * tf.random.stateless_uniform([], scale_seed, low, high)
    if config.jitter > 0:
        vertices = vertices + config.jitter * tf.random.stateless_normal(
            tf.shape(vertices), tf.random.experimental.stateless_fold_in(seed, 3))
    return vertices, normals


def augment_vertices(vertices: tf.Tensor, seed: tf.Tensor, config: AugmentConfig) -> tf.Tensor:
    """`augment_mesh` of positions alone: float32 [V, 3] vertices @ R^T * s + noise."""
    return augment_mesh(vertices, seed, config)[0]

"""Random geometric augmentation of one mesh's vertex positions, in TF ops.

Applied by the training pipeline only (`make_dataset(..., training=True)`), after
mean centring and unit scaling, so rotations turn the mesh about its centre.
Edges, weights and labels are untouched. Randomness is stateless: each mesh gets
a seed from `tf.data.Dataset.random(seed)`, so a seeded run is reproducible.

Configured by `data.augment` (see conf/data/*.yaml):

- `rotation`: "none", "up" (uniform angle about the `up_axis`) or "so3"
  (uniform over all rotations, from a normalised Gaussian quaternion);
- `up_axis`: 0, 1 or 2 (x, y, z), used by "up";
- `scale`: [low, high], one isotropic factor drawn uniformly per mesh ([1, 1]: off).
"""

import math
from dataclasses import dataclass

import tensorflow as tf

ROTATIONS = ("none", "up", "so3")


@dataclass(frozen=True)
class AugmentConfig:
    """See the module docstring. Raises ValueError on construction for bad values."""

    rotation: str = "none"
    up_axis: int = 1
    scale: tuple[float, float] = (1.0, 1.0)

    def __post_init__(self):
        if self.rotation not in ROTATIONS:
            raise ValueError(f"augment.rotation must be one of {ROTATIONS}, got {self.rotation!r}")
        if self.up_axis not in (0, 1, 2):
            raise ValueError(f"augment.up_axis must be 0, 1 or 2, got {self.up_axis}")
        low, high = self.scale
        if not 0 < low <= high:
            raise ValueError(f"augment.scale must be [low, high] with 0 < low <= high, "
                             f"got {list(self.scale)}")
        object.__setattr__(self, "scale", (float(low), float(high)))

    @property
    def active(self) -> bool:
        return self.rotation != "none" or self.scale != (1.0, 1.0)

    @classmethod
    def from_mapping(cls, mapping) -> "AugmentConfig":
        """From a dict / DictConfig with any of the fields; None gives the default (off)."""
        if mapping is None:
            return cls()
        mapping = dict(mapping)
        if "scale" in mapping:
            mapping["scale"] = tuple(mapping["scale"])
        return cls(**mapping)


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

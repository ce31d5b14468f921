"""A mesh's principal frame (`data.frame=pca`): its positions turned onto the axes of its
area-weighted second moment, in TF ops, so a mesh in any orientation reads the same.

The canonical pose of principal component analysis, as rotation-invariant point-cloud
networks use it (Li et al., "A Closer Look at Rotation-Invariant Deep Point Cloud
Analysis", ICCV 2021, discuss its ambiguities): the axes are the eigenvectors of the
second moment of the surface about the mesh's centre (`data.center`), largest variance
first; each of the first two points where the third moment along it is positive, and the
third is their cross product, so the frame is a rotation (never a reflection). For
positions X [V, 3] turned by any rotation R (X R^T) the axes turn with them (R A), so the
principal-frame positions X A do not change, up to float32 rounding.

The frame is unique only for a shape whose three principal variances differ and whose
third moments along the first two axes are not zero: a symmetric shape (a sphere, a
box, a centrally symmetric ellipsoid) has no unique frame and comes out in one of
several. Measured on the complete RNA set (683 meshes): the principal variances differ by
a factor of 1.29 or more for every mesh, the third moments along the first two axes are
at least 0.088 sigma^3 for 99% of them, and 134 of the 136 test meshes come out within
10 degrees of the frame of their nearest training mesh (median 0.9 degrees, at most 60;
docs/results.md, "The complete set: near-copies and the principal frame").
"""

import tensorflow as tf


def triangle_areas(vertices: tf.Tensor, triangles: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """The areas of a mesh's triangles and their corners.

    Args:
      vertices: float32 [V, 3] positions; triangles: int32 [T, 3] vertex indices.

    Returns:
      (float32 [T] triangle areas, float32 [T, 3, 3] their corners' positions).
    """
    corners = tf.gather(vertices, triangles)
    cross = tf.linalg.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0])
    return 0.5 * tf.norm(cross, axis=-1), corners


def vertex_areas(vertices: tf.Tensor, triangles: tf.Tensor) -> tf.Tensor:
    """float32 [V] area per vertex: a third of the area of each triangle it is a corner of
    (the lumped mass matrix's diagonal; they sum to the surface area). They do not change
    when the mesh turns, so they are computed once per mesh, before any rotation.

    Args:
      vertices: float32 [V, 3] positions; triangles: int32 [T, 3] vertex indices.
    """
    areas, _ = triangle_areas(vertices, triangles)
    return tf.math.unsorted_segment_sum(tf.repeat(areas / 3.0, 3), tf.reshape(triangles, [-1]),
                                        tf.shape(vertices)[0])


def principal_axes(vertices: tf.Tensor, weights: tf.Tensor) -> tf.Tensor:
    """The principal frame of weighted positions, as the columns of a rotation.

    Args:
      vertices: float32 [V, 3] positions about the mesh's centre (the frame's origin).
      weights: float32 [V] non-negative weight per vertex (`vertex_areas`); all zero
        (a mesh without area) counts every vertex alike.

    Returns:
      float32 [3, 3] rotation A (orthonormal columns, determinant +1): column m is the
      m-th principal axis, by decreasing second moment sum_i w_i (x_i . a_m)^2; the first
      two point where sum_i w_i (x_i . a_m)^3 >= 0, the third is their cross product.
    """
    total = tf.reduce_sum(weights)
    weights = tf.where(total > 0, weights / tf.maximum(total, 1e-30),
                       tf.ones_like(weights) / tf.cast(tf.size(weights), weights.dtype))
    second = tf.matmul(vertices * weights[:, tf.newaxis], vertices, transpose_a=True)
    _, eigenvectors = tf.linalg.eigh(second)  # ascending eigenvalues
    axes = tf.reverse(eigenvectors, axis=[1])[:, :2]  # [3, 2], largest variance first
    third = tf.reduce_sum(weights[:, tf.newaxis] * tf.matmul(vertices, axes) ** 3, axis=0)
    axes = axes * tf.where(third < 0, -1.0, 1.0)
    return tf.stack([axes[:, 0], axes[:, 1], tf.linalg.cross(axes[:, 0], axes[:, 1])], axis=1)


def to_principal_frame(vertices: tf.Tensor, weights: tf.Tensor,
                       normals: tf.Tensor | None = None) -> tuple[tf.Tensor, tf.Tensor | None]:
    """One mesh's positions (and normals) in its principal frame (`principal_axes`).

    Args:
      vertices: float32 [V, 3] positions about the mesh's centre.
      weights: float32 [V] vertex areas (`vertex_areas`).
      normals: optional float32 [V, 3] unit normals, turned with the positions.

    Returns:
      (float32 [V, 3] positions X A, normals N A or None).
    """
    axes = principal_axes(vertices, weights)
    turned = tf.matmul(vertices, axes)
    return turned, None if normals is None else tf.matmul(normals, axes)

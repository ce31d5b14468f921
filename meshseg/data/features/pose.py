"""A mesh's canonical pose (`data.frame=pca`), in NumPy, for the converter and predict: the
mesh is centred at its area-weighted centroid, scaled to unit surface area and turned into
its principal frame *before* anything is derived from it (normals, HKS, the hierarchy), so
a mesh file turned by any rotation, moved and scaled gives the same stored positions, the
same hierarchy and the same inputs, up to float rounding.

The frame is that of `meshseg.data.pipeline.principal_frame` (the TF twin the pipeline applies to
positions it reads; on positions already in the frame it is the identity): the axes are
the eigenvectors of the second moment of the surface, each vertex weighted by its area (a
third of its triangles' areas), largest variance first; the first two point where the
third moment along them is positive, the third is their cross product, so the frame is a
rotation, never a reflection. A mirror image (a molecule's enantiomer) therefore does not
come out as the original: its third axis points the other way, as it should for chiral
shapes.

The frame is ambiguous where two principal variances are nearly equal (the axes can turn
in their plane) or a third moment nearly vanishes (the axis' sign flips with rounding):
`ambiguity` names such a mesh, with the thresholds `MIN_VARIANCE_RATIO` and
`MIN_THIRD_MOMENT`.
"""

from typing import NamedTuple, Optional

import numpy as np

# Below these the frame is reported as ambiguous (`ambiguity`). On the complete RNA set
# (683 meshes) consecutive principal variances differ by a factor of 1.29 or more and
# the third moments along the first two axes are at least 0.088 sigma^3 for 99% of them.
MIN_VARIANCE_RATIO = 1.05
MIN_THIRD_MOMENT = 0.02  # |sum_i w_i (x_i . a_m)^3| / sigma_m^3, dimensionless


class Pose(NamedTuple):
    """Where a mesh's canonical pose puts it: canonical = ((x - centre) / scale) @ axes.

    Attributes:
      centre: float64 [3] area-weighted centroid of the surface (file units).
      scale: float64, square root of the surface area (file units).
      axes: float64 [3, 3] rotation (determinant +1); column m is the m-th principal axis.
      variances: float64 [3] area-weighted second moments along the axes, decreasing, of
        the unit-area surface.
      third_moments: float64 [2] area-weighted third moments along the first two axes, in
        units of their standard deviation cubed (>= 0 by the sign choice).
    """

    centre: np.ndarray
    scale: float
    axes: np.ndarray
    variances: np.ndarray
    third_moments: np.ndarray

    def apply(self, vertices: np.ndarray) -> np.ndarray:
        """float32 [V, 3] canonical positions of float [V, 3] positions in file units."""
        return ((np.asarray(vertices, np.float64) - self.centre) / self.scale
                @ self.axes).astype(np.float32)


def _triangle_areas(vertices: np.ndarray, triangles: np.ndarray) -> np.ndarray:
    corners = vertices[triangles]
    cross = np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0])
    return 0.5 * np.linalg.norm(cross, axis=-1)


def principal_pose(vertices: np.ndarray, triangles: np.ndarray) -> Pose:
    """The canonical pose of one mesh.

    Args:
      vertices: float [V, 3] positions (any units); triangles: int [T, 3] indices in [0, V).

    Returns:
      `Pose`.

    Raises:
      ValueError: for a mesh without surface area (no triangle, or all degenerate).
    """
    vertices = np.asarray(vertices, np.float64)
    triangles = np.asarray(triangles, np.int64).reshape(-1, 3)
    areas = _triangle_areas(vertices, triangles)
    total = areas.sum()
    if not total > 0:
        raise ValueError("the mesh has zero surface area, so it has no principal frame")
    centre = (areas[:, None] * vertices[triangles].mean(axis=1)).sum(axis=0) / total
    scale = float(np.sqrt(total))
    positions = (vertices - centre) / scale
    weights = np.bincount(triangles.ravel(), np.repeat(areas / 3.0, 3),
                          minlength=len(vertices)) / total
    second = (positions * weights[:, None]).T @ positions
    eigenvalues, eigenvectors = np.linalg.eigh(second)  # ascending
    variances, axes = eigenvalues[::-1], eigenvectors[:, ::-1][:, :2]
    third = (weights[:, None] * (positions @ axes) ** 3).sum(axis=0)
    axes = axes * np.where(third < 0, -1.0, 1.0)
    axes = np.stack([axes[:, 0], axes[:, 1], np.cross(axes[:, 0], axes[:, 1])], axis=1)
    sigma = np.sqrt(np.maximum(variances[:2], 1e-300))
    return Pose(centre, scale, axes, variances, np.abs(third) / sigma ** 3)


def ambiguity(pose: Pose) -> Optional[str]:
    """Why the mesh's principal frame is not unique, or None.

    A ratio of consecutive principal variances below `MIN_VARIANCE_RATIO` (a sphere, a
    cube, a shape symmetric about an axis) leaves the axes free to turn in their plane; a
    third moment below `MIN_THIRD_MOMENT` (a centrally symmetric shape) leaves an axis'
    sign to rounding. Either way a turned copy of the mesh can come out in another frame,
    and a model that reads positions in the frame can label it differently.
    """
    ratios = pose.variances[:2] / np.maximum(pose.variances[1:], 1e-300)
    problems = [f"principal variances {m + 1} and {m + 2} differ by a factor of only "
                f"{ratios[m]:.3f} (< {MIN_VARIANCE_RATIO})"
                for m in range(2) if ratios[m] < MIN_VARIANCE_RATIO]
    problems += [f"the third moment along axis {m + 1} is only {pose.third_moments[m]:.3f} "
                 f"sigma^3 (< {MIN_THIRD_MOMENT})"
                 for m in range(2) if pose.third_moments[m] < MIN_THIRD_MOMENT]
    if not problems:
        return None
    return ("its principal frame is ambiguous (" + "; ".join(problems) + "), so a turned "
            "copy may be read in another frame and labelled differently")


def turned(vertices: np.ndarray, seed: int, key: str) -> np.ndarray:
    """A mesh's positions turned by a rotation uniform over SO(3), moved and scaled, drawn
    from `seed` and the mesh's own `key` (its file's SHA-256), so a mesh gets the same
    motion whatever split or order it is read in (`data.eval_rotation=so3`,
    `predict --eval-rotation so3`).

    Args:
      vertices: float [V, 3] positions.
      seed: int >= 0; key: a hexadecimal digest of the mesh.

    Returns:
      float32 [V, 3]: x R^T s + t, with R a uniform random rotation (a normalised Gaussian
      4-vector as its unit quaternion), s log-uniform in [0.1, 10] and t uniform in [-10, 10]^3 times the mesh's
      RMS radius.
    """
    rng = np.random.default_rng([seed, int(key[:16], 16)])
    quaternion = rng.normal(size=4)
    w, x, y, z = quaternion / np.linalg.norm(quaternion)
    rotation = np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
                         [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
                         [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]])
    vertices = np.asarray(vertices, np.float64)
    radius = np.sqrt(np.mean(np.sum((vertices - vertices.mean(axis=0)) ** 2, axis=1)))
    scale = np.exp(rng.uniform(np.log(0.1), np.log(10.0)))
    shift = rng.uniform(-10.0, 10.0, size=3) * radius
    return (vertices @ rotation.T * scale + shift).astype(np.float32)

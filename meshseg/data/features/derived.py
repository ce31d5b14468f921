"""What the converter derives from one mesh's geometry besides its adjacency: the stored
positions (in the mesh's canonical pose under `data.frame=pca`, `meshseg.data.features.pose`), the
stored input features (`data.features` other than xyz) and the mesh hierarchy
(`data.levels`), the last two from the posed mesh.

The one implementation for the converter (`meshseg.data.convert`, in its worker
processes) and for `meshseg.tools.predict`, so a mesh given to predict gets exactly the
inputs of the run's records. NumPy only (no TensorFlow).
"""

from typing import NamedTuple, Optional, Sequence

import numpy as np

from meshseg.data.features.descriptor_cache import mesh_descriptors
from meshseg.data.features.hierarchy import mesh_hierarchy
from meshseg.data.features.pose import Pose, principal_pose
from meshseg.data.features.stored import stored_features

class Derived(NamedTuple):
    """The derived fields of one mesh.

    Attributes:
      vertices: float32 [V, 3] the positions to store: the given ones, or under frame
        "pca" the canonical ones (`pose.apply`).
      features: {name: float32 [V, width]} for each stored feature asked for
        ("normals" [V, 3] unit vertex normals, in the frame of `vertices`; "hks" [V, 16]
        heat kernel signature).
      levels: the coarser levels of the hierarchy, finest first (`hierarchy.Level`),
        decimated from `vertices`.
      pose: the `meshseg.data.features.pose.Pose` under frame "pca", else None.
    """

    vertices: np.ndarray
    features: dict
    levels: list
    pose: Optional[Pose] = None


def derive(vertices: np.ndarray, triangles: np.ndarray, features: Sequence[str] = (),
           num_levels: int = 0, coarsening: float = 4.0, mesh_sha256: Optional[str] = None,
           descriptor_cache: Optional[str] = None, frame: str = "none") -> Derived:
    """The stored positions, features and hierarchy of one mesh.

    Args:
      vertices: float [V, 3] positions as read from the file (float32, relative to the
        record's origin); triangles: int [T, 3] indices in [0, V).
      features: names among `meshseg.data.features.stored.STORED_FEATURES` (others, such
        as xyz, are ignored).
      num_levels: L coarser levels (`meshseg.data.features.hierarchy.mesh_hierarchy`).
      coarsening: vertex-count ratio between levels, > 1.
      mesh_sha256, descriptor_cache: the mesh file's SHA-256 and the descriptor cache
        folder (`meshseg.data.features.descriptor_cache`, shared with the baseline); without
        both, the descriptors are computed and not cached.
      frame: "none" keeps the positions; "pca" puts the mesh into its canonical pose
        (`meshseg.data.features.pose.principal_pose`) before the hierarchy is decimated, and turns
        the normals with it (the descriptors are computed, and cached, from the file's
        positions: the HKS does not depend on the pose, the normals turn).

    Returns:
      `Derived`.

    Raises:
      ValueError: for a mesh whose HKS or pose is undefined (no triangle, zero area), or
        bad counts.
    """
    pose = principal_pose(vertices, triangles) if frame == "pca" else None
    positions = np.asarray(vertices, np.float32) if pose is None else pose.apply(vertices)
    computed = {}
    if stored_features(features):
        descriptors = mesh_descriptors(vertices, triangles, mesh_sha256, descriptor_cache)
        computed = {name: descriptors[name] for name in stored_features(features)}
    if pose is not None and "normals" in computed:
        computed["normals"] = (computed["normals"].astype(np.float64)
                               @ pose.axes).astype(np.float32)
    for name, values in computed.items():
        if not np.isfinite(values).all():
            raise ValueError(f"{name} is not finite at {np.sum(~np.isfinite(values))} values")
    levels = mesh_hierarchy(positions, triangles, num_levels, coarsening) if num_levels else []
    return Derived(positions, computed, levels, pose)

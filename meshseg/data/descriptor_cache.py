"""Per-mesh surface descriptors cached on disk, shared by the converter and the baseline.

The heat kernel signature costs seconds per mesh (an eigen-decomposition of the
Laplacian), so each mesh file's descriptors are computed once: `<cache dir>/<key>.npz`,
the key a SHA-256 of the mesh file's SHA-256, `HKS_SETTINGS` and `CACHE_FORMAT`. The
converter (records with `data.features` normals / hks) and the descriptor baseline
(`meshseg.tools.baseline`) read and fill the same cache (`data.descriptor_cache`), so a
data set whose baseline ran converts in seconds and vice versa. NumPy only.
"""

import hashlib
import json
import os
from pathlib import Path
from typing import Optional

import numpy as np

from meshseg.config import feature_widths
from meshseg.data.descriptors import heat_kernel_signature, normalized_positions, vertex_normals

HKS_SETTINGS = {"num_times": feature_widths()["hks"], "t_min": 0.01, "t_max": 2.0,
                "num_eigenpairs": 128}
CACHE_FORMAT = 1  # raised when what a cached .npz holds changes
DESCRIPTORS = ("xyz", "hks", "normals")


def cache_file(cache_dir: Path, mesh_sha256: str) -> Path:
    """The .npz file of the mesh file with SHA-256 `mesh_sha256` in `cache_dir`."""
    settings = json.dumps({"sha256": mesh_sha256, "hks": HKS_SETTINGS,
                           "format": CACHE_FORMAT}, sort_keys=True)
    return Path(cache_dir) / f"{hashlib.sha256(settings.encode()).hexdigest()}.npz"


def mesh_descriptors(vertices: np.ndarray, triangles: np.ndarray,
                     mesh_sha256: Optional[str] = None, cache_dir: Optional[Path] = None
                     ) -> dict[str, np.ndarray]:
    """The descriptors of one mesh, read from `cache_dir` when computed before.

    Args:
      vertices: float [V, 3] positions (any origin: every descriptor is translation
        invariant); triangles: int [T, 3].
      mesh_sha256: SHA-256 of the mesh file (`meshseg.data.meshfiles.file_sha256`).
      cache_dir: the cache folder (created when missing); without it or `mesh_sha256`
        nothing is cached.

    Returns:
      {"xyz": float32 [V, 3] positions centred at the area-weighted centroid of the
      unit-area mesh, "hks": float32 [V, 16] heat kernel signature (`HKS_SETTINGS`),
      "normals": float32 [V, 3] unit vertex normals} (`meshseg.data.descriptors`).

    Raises:
      ValueError: for a mesh whose descriptors are undefined (zero area).
    """
    cached = None if cache_dir is None or mesh_sha256 is None else cache_file(cache_dir,
                                                                             mesh_sha256)
    if cached is not None and cached.is_file():
        with np.load(cached) as stored:
            if all(stored[name].shape[0] == len(vertices) for name in DESCRIPTORS):
                return {name: stored[name] for name in DESCRIPTORS}
    vertices = np.asarray(vertices, np.float64)
    descriptors = {"xyz": normalized_positions(vertices, triangles),
                   "hks": heat_kernel_signature(vertices, triangles, **HKS_SETTINGS),
                   "normals": vertex_normals(vertices, triangles)}
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        partial = partial_file(cached, os.getpid())
        try:
            np.savez(partial, **descriptors)
            os.replace(partial, cached)
        except BaseException:  # a full disk, or a stop signal while writing
            partial.unlink(missing_ok=True)
            raise
    return descriptors


def partial_file(cached: Path, pid: int) -> Path:
    """The name process `pid` writes `cached` under before renaming it."""
    return cached.with_suffix(f".{pid}.partial.npz")


def remove_partial_files(cache_dir: Path, pid: int) -> None:
    """Removes the files process `pid` (a converter worker that was ended) left half
    written in `cache_dir`."""
    for path in Path(cache_dir).glob(partial_file(Path("*.npz"), pid).name):
        path.unlink(missing_ok=True)

"""Per-mesh surface descriptors cached on disk, shared by the converter and the baseline.

The heat kernel signature costs seconds per mesh (an eigen-decomposition of the
Laplacian), so each mesh file's descriptors are computed once: `<cache dir>/<key>.npz`,
the key a SHA-256 of the mesh file's SHA-256, `HKS_SETTINGS` and `CACHE_FORMAT`. Entries
are read and written as every cache is (`meshseg.data.features.cache_entries`): a damaged entry is
named in a warning and computed again; each is replaced atomically. The
converter (records with `data.features` normals / hks) and the descriptor baseline
(`meshseg.tools.baseline`) read and fill the same cache (`data.descriptor_cache`), so a
data set whose baseline ran converts in seconds and vice versa. NumPy only.
"""

import functools
import hashlib
import json
from pathlib import Path
from typing import Optional

import numpy as np

from meshseg.config import feature_widths
from meshseg.data.features.cache_entries import read_entry
from meshseg.data.features.descriptors import (heat_kernel_signature, normalized_positions,
                                               vertex_normals)
from meshseg.outputs import write_atomically

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
      mesh_sha256: SHA-256 of the mesh file (`meshseg.data.mesh.meshfiles.file_sha256`).
      cache_dir: the cache folder (created when missing); without it or `mesh_sha256`
        nothing is cached.

    Returns:
      {"xyz": float32 [V, 3] positions centred at the area-weighted centroid of the
      unit-area mesh, "hks": float32 [V, 16] heat kernel signature (`HKS_SETTINGS`),
      "normals": float32 [V, 3] unit vertex normals} (`meshseg.data.features.descriptors`).

    Raises:
      ValueError: for a mesh whose descriptors are undefined (zero area).
    """
    cached = None if cache_dir is None or mesh_sha256 is None else cache_file(cache_dir,
                                                                             mesh_sha256)
    if cached is not None:
        stored = read_entry(cached, functools.partial(_read_descriptors,
                                                      num_vertices=len(vertices)),
                            "descriptor cache entry")
        if stored is not None:
            return stored
    vertices = np.asarray(vertices, np.float64)
    descriptors = {"xyz": normalized_positions(vertices, triangles),
                   "hks": heat_kernel_signature(vertices, triangles, **HKS_SETTINGS),
                   "normals": vertex_normals(vertices, triangles)}
    if cached is not None:
        write_atomically(str(cached), lambda path: np.savez(path, **descriptors),
                         "the descriptor cache")
    return descriptors


def _read_descriptors(path: Path, num_vertices: int) -> dict[str, np.ndarray]:
    """The `DESCRIPTORS` of a cache entry, each float32 [num_vertices, C].

    Raises:
      ValueError, KeyError, EOFError, zipfile.BadZipFile: for an entry that is not a whole
        .npz of those arrays with that many rows (`cache_entries.DAMAGED`).
    """
    with np.load(path, allow_pickle=False) as stored:
        arrays = {name: stored[name] for name in DESCRIPTORS}
    for name, array in arrays.items():
        if array.dtype != np.float32 or array.ndim != 2 or len(array) != num_vertices:
            raise ValueError(f"{name} is {array.dtype} {list(array.shape)}, not float32 "
                             f"[{num_vertices}, C]")
    return arrays


def remove_partial_files(cache_dir: Path, pid: int) -> None:
    """Removes the entries process `pid` (a converter worker that was ended) left half
    written in `cache_dir`: its temporaries (`meshseg.outputs.temporary_name`)."""
    for path in Path(cache_dir).glob(f".*.{pid}.tmp.npz"):
        path.unlink(missing_ok=True)

"""Small mesh hierarchies for the multi-scale network tests, built by hand.

A rows x cols grid mesh (two triangles per quad) is coarsened by merging each 2 x 2 block of
vertices into one vertex of a ceil(rows/2) x ceil(cols/2) grid, as an edge-collapse
decimation would; every level is again a grid mesh with its own 1-ring (`mesh_edges`).
"""

from typing import Dict, List, Sequence

import numpy as np
import tensorflow as tf

from meshseg.batch import Level, mesh_features, padding_values
from meshseg.data.mesh.adjacency import mesh_edges


def grid_faces(rows: int, cols: int) -> np.ndarray:
    """int32 [2 (rows-1) (cols-1), 3] triangles of a rows x cols vertex grid (row-major)."""
    faces = []
    for r in range(rows - 1):
        for c in range(cols - 1):
            a, b, d, e = r * cols + c, r * cols + c + 1, (r + 1) * cols + c, (r + 1) * cols + c + 1
            faces += [(a, b, e), (a, e, d)]
    return np.asarray(faces, np.int32).reshape(-1, 3)


def grid_hierarchy(rows: int, cols: int, levels: int) -> List[Level]:
    """The `levels` coarser levels of a rows x cols grid, finest first."""
    coarse = []
    for _ in range(levels):
        coarse_rows, coarse_cols = (rows + 1) // 2, (cols + 1) // 2
        r, c = np.divmod(np.arange(rows * cols), cols)
        parents = (r // 2) * coarse_cols + c // 2
        num = coarse_rows * coarse_cols
        edges, weights = mesh_edges(grid_faces(coarse_rows, coarse_cols), num)
        coarse.append(Level(edges, weights, parents.astype(np.int32), num))
        rows, cols = coarse_rows, coarse_cols
    return coarse


def grid_mesh_features(rows: int, cols: int, levels: int, input_width: int = 3,
                       seed: int = 0) -> Dict[str, tf.Tensor]:
    """`mesh_features` of a rows x cols grid (bumpy z, random inputs of `input_width`)
    with `levels` coarser levels."""
    rng = np.random.default_rng(seed)
    r, c = np.divmod(np.arange(rows * cols), cols)
    vertices = np.stack([c, r, 0.3 * rng.normal(size=rows * cols)], axis=1) / max(rows, cols)
    inputs = rng.normal(size=(rows * cols, input_width))
    edges, weights = mesh_edges(grid_faces(rows, cols), rows * cols)
    return mesh_features(vertices.astype(np.float32), edges, weights,
                         inputs=inputs.astype(np.float32),
                         levels=grid_hierarchy(rows, cols, levels))


def padded_batch(meshes: Sequence[Dict[str, tf.Tensor]], levels: int,
                 extra: int = 0) -> Dict[str, tf.Tensor]:
    """The meshes as one batch padded as the pipeline pads it (`padding_values`), each
    feature's first axis (vertices, edges, overflow rows) `extra` entries longer than the
    largest mesh needs."""
    features, _ = padding_values(levels)
    batched = {}
    for key in meshes[0]:
        values = [np.asarray(mesh[key]) for mesh in meshes]
        shape = np.max([v.shape for v in values], axis=0) if values[0].ndim else ()
        if values[0].ndim:
            shape[0] += extra
        pad = np.asarray(features[key]).item()
        rows = []
        for value in values:
            out = np.full(shape, pad, value.dtype)
            out[tuple(slice(0, n) for n in value.shape)] = value
            rows.append(out)
        batched[key] = tf.constant(np.stack(rows))
    return batched

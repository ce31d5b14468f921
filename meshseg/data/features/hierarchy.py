"""A mesh hierarchy for multi-scale networks by quadric edge-collapse decimation (NumPy,
SciPy and `fast_simplification`; no TensorFlow).

Level 0 is the mesh itself; level l (1..L) is level l-1 decimated to about 1/coarsening
of its vertices (Garland & Heckbert quadric error metric, `fast_simplification.simplify`,
replayed with `replay_simplification` to get which coarse vertex each fine one collapsed
into). Each coarser level keeps its own triangles only to build its 1-ring adjacency
(`meshseg.data.mesh.adjacency.mesh_edges`, self-edges included); what the records store is
`Level`: its vertex count, edges, edge weights and the parent of every vertex of the
level below.

Real meshes are messy (the RNA surfaces have many components, coincident vertices,
degenerate triangles and vertices no triangle uses), so:
- a vertex no triangle uses (the decimation gives it no coarse vertex) gets the coarse
  vertex nearest to it in space as its parent;
- coarse vertices that no fine vertex collapsed into are dropped (with the coarse triangles
  that use them), so every coarse vertex has at least one child and pooling never reads an
  empty group;
- a mesh that decimation collapses completely (a tetrahedron) becomes one vertex;
- a level whose mesh has no triangle left is not decimated: it is a copy of the level
  below (parents = identity).

Greedy decimation is chaotic: positions that differ by float rounding (a mesh file turned
and written again) reorder near-tied collapses, and the difference grows level by level
(turned copies of RNA test mesh files: a median 0.3% / 2.5% / 12% of the vertices change
group at levels 1 / 2 / 3).
`jittered_hierarchy` draws other hierarchies of the same mesh from seeded noise far above
float rounding, so a prediction averaged over several of them (`meshseg.tools.predict
--hierarchies`) depends on the noise's distribution, which turns with the mesh, rather
than on one chaotic draw.
"""

from typing import NamedTuple

import fast_simplification
import numpy as np
import scipy.spatial

from meshseg.data.features.descriptors import surface_area
from meshseg.data.mesh.adjacency import mesh_edges


class Level(NamedTuple):
    """One coarser level (NumPy twin of `meshseg.batch.Level`).

    Attributes:
      num_vertices: V_l.
      edges: int32 [E_l, 2], the level's 1-ring with self-edges (`mesh_edges`).
      edge_weights: float32 [E_l], 1 / degree of each edge's row.
      parents: int32 [V_{l-1}], the level-l vertex each vertex of level l-1 merges into;
        every value in [0, V_l) and every level-l vertex occurs (surjective).
    """

    num_vertices: int
    edges: np.ndarray
    edge_weights: np.ndarray
    parents: np.ndarray


def decimate(vertices: np.ndarray, triangles: np.ndarray, coarsening: float
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One level of quadric decimation to about len(vertices) / coarsening vertices.

    Args:
      vertices: float [V, 3]; triangles: int [T, 3] indices in [0, V), T may be 0.
      coarsening: > 1, the vertex-count ratio between the levels.

    Returns:
      (coarse vertices float64 [V_c, 3], coarse triangles int64 [T_c, 3], parents int32
      [V]), with parents surjective onto [0, V_c) (see the module docstring for
      unreferenced vertices and childless coarse vertices).

    Raises:
      ValueError: if coarsening <= 1 or a triangle index is outside [0, V).
    """
    if not coarsening > 1:
        raise ValueError(f"coarsening must be > 1, got {coarsening}")
    vertices = np.ascontiguousarray(vertices, np.float64)
    triangles = np.ascontiguousarray(triangles, np.int64).reshape(-1, 3)
    if triangles.size and (triangles.min() < 0 or triangles.max() >= len(vertices)):
        raise ValueError(f"triangle vertex indices must lie in [0, {len(vertices)})")
    if len(triangles) == 0:
        return vertices, triangles, np.arange(len(vertices), dtype=np.int32)
    _, _, collapses = fast_simplification.simplify(
        vertices, triangles, target_reduction=1.0 - 1.0 / coarsening, return_collapses=True)
    coarse, coarse_triangles, parents = fast_simplification.replay_simplification(
        vertices, triangles, collapses)
    coarse = np.asarray(coarse, np.float64)
    coarse_triangles = np.asarray(coarse_triangles, np.int64).reshape(-1, 3)
    parents = np.asarray(parents, np.int64)
    if len(coarse) == 0:  # everything collapsed (a tiny closed mesh): one vertex
        return (vertices.mean(axis=0, keepdims=True), np.zeros([0, 3], np.int64),
                np.zeros(len(vertices), np.int32))
    orphans = np.flatnonzero((parents < 0) | (parents >= len(coarse)))
    if orphans.size:  # vertices no triangle uses: the nearest coarse vertex
        _, nearest = scipy.spatial.cKDTree(coarse).query(vertices[orphans])
        parents[orphans] = nearest
    used = np.zeros(len(coarse), bool)
    used[parents] = True
    if not used.all():  # coarse vertices without a child: dropped, with their triangles
        index = np.full(len(coarse), -1, np.int64)
        index[used] = np.arange(used.sum())
        coarse, parents = coarse[used], index[parents]
        coarse_triangles = index[coarse_triangles]
        coarse_triangles = coarse_triangles[(coarse_triangles >= 0).all(axis=1)]
    return coarse, coarse_triangles, parents.astype(np.int32)


def mesh_hierarchy(vertices: np.ndarray, triangles: np.ndarray, num_levels: int,
                   coarsening: float = 4.0) -> list[Level]:
    """The `num_levels` coarser levels of a mesh, finest first.

    Args:
      vertices: float [V, 3]; triangles: int [T, 3] indices in [0, V).
      num_levels: L >= 0 levels beyond the mesh itself.
      coarsening: > 1, about V_{l-1} / V_l (a level stops shrinking once decimation can
        collapse no more edges, e.g. a lone triangle).

    Returns:
      L `Level`s; level l's parents index level l's vertices and have V_{l-1} entries.

    Raises:
      ValueError: for num_levels < 0, coarsening <= 1 or a triangle index outside [0, V).
    """
    if num_levels < 0:
        raise ValueError(f"num_levels must be >= 0, got {num_levels}")
    levels = []
    for _ in range(num_levels):
        vertices, triangles, parents = decimate(vertices, triangles, coarsening)
        edges, edge_weights = mesh_edges(triangles, len(vertices))
        levels.append(Level(len(vertices), edges, edge_weights, parents))
    return levels


def jittered_hierarchy(vertices: np.ndarray, triangles: np.ndarray, num_levels: int,
                       coarsening: float, seed: int, jitter: float) -> list[Level]:
    """`mesh_hierarchy` of the positions moved by seeded normal noise.

    Args:
      vertices: float [V, 3]; triangles: int [T, 3] indices in [0, V).
      num_levels, coarsening: as `mesh_hierarchy`.
      seed: >= 0; 0 gives the unmoved positions' hierarchy (`mesh_hierarchy`), each other
        seed its own draw (NumPy's PCG64 stream, by vertex index).
      jitter: >= 0, the noise's standard deviation per coordinate, relative to the square
        root of the surface area (so the noise scales with the mesh).

    Returns:
      L `Level`s, as `mesh_hierarchy`.

    Raises:
      ValueError: as `mesh_hierarchy`; for a negative seed or jitter, or for seed > 0 on a
        mesh without surface area.
    """
    if seed < 0 or not jitter >= 0:
        raise ValueError(f"seed and jitter must be >= 0, got {seed} and {jitter}")
    vertices = np.asarray(vertices, np.float64)
    if seed:
        triangles = np.asarray(triangles, np.int64).reshape(-1, 3)
        area = surface_area(vertices, triangles)
        if not area > 0:
            raise ValueError("the mesh has zero surface area: no scale for the jitter")
        noise = np.random.default_rng(seed).standard_normal(vertices.shape)
        vertices = vertices + jitter * np.sqrt(area) * noise
    return mesh_hierarchy(vertices, triangles, num_levels, coarsening)

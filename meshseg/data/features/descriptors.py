"""Per-vertex surface descriptors of one triangle mesh (NumPy, SciPy, trimesh and
`robust_laplacian`; no TensorFlow).

- `surface_area`, `area_weighted_centroid`: the surface's area and the centroid of its
  area (each triangle's centroid weighted by its area), not the mean of the vertices, so a
  remeshing with uneven vertex density moves neither.
- `normalized_positions`: positions centred at that centroid and scaled to unit area.
- `vertex_normals`: unit normals, the area-weighted mean of the incident faces' normals.
- `heat_kernel_signature`: the heat kernel signature (Sun, Ovsjanikov, Guibas, "A Concise
  and Provably Informative Multi-Scale Signature Based on Heat Diffusion", SGP 2009) of the
  mesh scaled to unit area, from the robust cotangent Laplacian and lumped mass matrix of
  Sharp & Crane ("A Laplacian for Nonmanifold Triangle Meshes", SGP 2020), each channel as
  log minus its area-weighted mean over the mesh.

Meshes may hold vertices no triangle uses, degenerate triangles, non-manifold edges and
small stray components (the RNA surfaces do): every function returns finite values for
them (see each docstring for what an unreferenced vertex gets).
"""

import numpy as np
import robust_laplacian
import scipy.linalg
import scipy.sparse
import scipy.sparse.linalg
import trimesh

# Meshes with at most this many (referenced) vertices are decomposed densely
# (scipy.linalg.eigh); larger ones by shift-invert Lanczos (scipy.sparse.linalg.eigsh).
DENSE_EIGEN_MAX_VERTICES = 400
# The shift of the shift-invert eigensolver: L + EIGEN_SHIFT * I is positive definite, so
# it factorises even with one zero eigenvalue per connected component.
EIGEN_SHIFT = 1e-8
# HKS values below this (vertices of components beyond the computed eigenpairs, when a
# mesh has more components than eigenpairs) are raised to it before the log.
HKS_FLOOR = 1e-12


def face_areas(vertices: np.ndarray, triangles: np.ndarray) -> np.ndarray:
    """float64 [T] area of each triangle (units of `vertices`, squared).

    Args:
      vertices: float [V, 3]; triangles: int [T, 3] indices in [0, V).
    """
    corners = np.asarray(vertices, np.float64)[np.asarray(triangles)]
    return trimesh.triangles.area(corners)


def surface_area(vertices: np.ndarray, triangles: np.ndarray) -> float:
    """Total area of the triangles (units of `vertices`, squared), as a Python float."""
    return float(face_areas(vertices, triangles).sum())


def area_weighted_centroid(vertices: np.ndarray, triangles: np.ndarray) -> np.ndarray:
    """float64 [3] centroid of the surface: the mean of the triangle centroids, each weighted
    by its triangle's area. Unreferenced vertices do not count.

    Raises:
      ValueError: if the surface has zero area.
    """
    areas = face_areas(vertices, triangles)
    if not areas.sum() > 0:
        raise ValueError("the mesh has zero surface area")
    centers = np.asarray(vertices, np.float64)[np.asarray(triangles)].mean(axis=1)
    return (areas[:, None] * centers).sum(axis=0) / areas.sum()


def normalized_positions(vertices: np.ndarray, triangles: np.ndarray) -> np.ndarray:
    """float32 [V, 3] positions centred at `area_weighted_centroid` and divided by the
    square root of `surface_area`, so the surface has unit area (dimensionless).

    Raises:
      ValueError: if the surface has zero area.
    """
    center = area_weighted_centroid(vertices, triangles)
    scale = np.sqrt(surface_area(vertices, triangles))
    return ((np.asarray(vertices, np.float64) - center) / scale).astype(np.float32)


def vertex_normals(vertices: np.ndarray, triangles: np.ndarray) -> np.ndarray:
    """float32 [V, 3] unit vertex normals: the sum of the incident triangles' normals, each
    weighted by its area (the sum of the faces' cross products), normalised. A vertex no
    triangle (of non-zero area) uses gets the zero vector. The direction follows the
    triangles' winding (counter-clockwise seen from outside gives outward normals).

    Args:
      vertices: float [V, 3]; triangles: int [T, 3] indices in [0, V).
    """
    vertices = np.asarray(vertices, np.float64)
    triangles = np.asarray(triangles, np.int64)
    cross = trimesh.triangles.cross(vertices[triangles])  # [T, 3], norm = 2 * area
    incidence = trimesh.geometry.index_sparse(len(vertices), triangles)  # [V, T]
    summed = np.asarray(incidence @ cross)
    lengths = np.linalg.norm(summed, axis=1, keepdims=True)
    normals = np.divide(summed, lengths, out=np.zeros_like(summed), where=lengths > 0)
    return normals.astype(np.float32)


def shifted_inverse(operator: scipy.sparse.csc_matrix) -> scipy.sparse.linalg.LinearOperator:
    """(operator + EIGEN_SHIFT I)^-1 as a linear operator, for shift-invert Lanczos.

    The sparse LU factorisation (SuperLU, `scipy.sparse.linalg.splu`) orders the columns by
    minimum degree on A^T + A with symmetric pivoting, which suits a symmetric Laplacian:
    on 15k-vertex RNA meshes its factors hold a quarter fewer entries than under eigsh's
    own COLAMD ordering and a solve takes a third of the time
    (docs/experiments/2026-12-04-rna-full-2000-steps.md).

    Args:
      operator: float64 [V, V] symmetric sparse matrix (CSC).
    """
    shifted = (operator + EIGEN_SHIFT * scipy.sparse.identity(operator.shape[0])).tocsc()
    factors = scipy.sparse.linalg.splu(shifted, permc_spec="MMD_AT_PLUS_A",
                                       options=dict(SymmetricMode=True))
    return scipy.sparse.linalg.LinearOperator(operator.shape, matvec=factors.solve,
                                              dtype=np.float64)


def laplace_eigenpairs(vertices: np.ndarray, triangles: np.ndarray,
                       num_eigenpairs: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The smallest eigenpairs of the robust Laplacian: L phi = lambda M phi.

    L is the intrinsic-Delaunay cotangent Laplacian of the tufted cover and M the lumped
    (diagonal) mass matrix (`robust_laplacian.mesh_laplacian`, Sharp & Crane 2020), which
    are defined for non-manifold meshes and degenerate triangles. Since M is diagonal, the
    problem is solved in its symmetric standard form M^-1/2 L M^-1/2 psi = lambda psi,
    phi = M^-1/2 psi; eigenvectors are M-orthonormal (phi^T M phi = I).

    Args:
      vertices: float [V, 3] with every vertex used by some triangle; triangles: int [T, 3].
      num_eigenpairs: k; min(k, V) pairs are returned.

    Returns:
      eigenvalues float64 [k] ascending, clamped to >= 0 (units: 1 / length^2);
      eigenvectors float64 [V, k]; mass float64 [V], the diagonal of M (length^2).
    """
    laplacian, mass_matrix = robust_laplacian.mesh_laplacian(
        np.ascontiguousarray(vertices, np.float64), np.ascontiguousarray(triangles, np.int64))
    mass = mass_matrix.diagonal()
    inverse_sqrt_mass = scipy.sparse.diags(1.0 / np.sqrt(mass))
    operator = (inverse_sqrt_mass @ laplacian @ inverse_sqrt_mass).tocsc()
    num_vertices = len(mass)
    count = min(num_eigenpairs, num_vertices)
    if num_vertices <= max(DENSE_EIGEN_MAX_VERTICES, count + 1):
        eigenvalues, vectors = scipy.linalg.eigh(operator.toarray(),
                                                 subset_by_index=[0, count - 1])
    else:
        # A fixed start vector (ARPACK draws a random one), so a mesh's HKS is the same in
        # every process: the converter's records and predict agree bit for bit.
        start = np.random.default_rng(0).uniform(0.5, 1.5, num_vertices)
        eigenvalues, vectors = scipy.sparse.linalg.eigsh(
            operator, count, sigma=-EIGEN_SHIFT, v0=start, OPinv=shifted_inverse(operator))
        order = np.argsort(eigenvalues)
        eigenvalues, vectors = eigenvalues[order], vectors[:, order]
    return np.maximum(eigenvalues, 0.0), vectors / np.sqrt(mass)[:, None], mass


def heat_kernel_signature(vertices: np.ndarray, triangles: np.ndarray, num_times: int = 16,
                          t_min: float = 0.01, t_max: float = 2.0,
                          num_eigenpairs: int = 128) -> np.ndarray:
    """Heat kernel signature of every vertex, normalised for scale and per channel.

    The mesh is scaled to unit area, so the signature does not depend on its size; the
    Laplacian and its eigenpairs are intrinsic, so it does not depend on a rigid motion.
    With the `laplace_eigenpairs` (lambda_k, phi_k) and M's diagonal m:

        HKS_t(i) = sum_k exp(-lambda_k t) phi_k(i)^2          (Sun et al. 2009)
        channel_t(i) = log HKS_t(i) - sum_j m_j log HKS_t(j) / sum_j m_j

    at `num_times` times log-spaced in [t_min, t_max] (units: area of the unit-area mesh).
    The log and the area-weighted mean (rather than a division by the heat trace) keep
    meshes with small stray components comparable: a component's own zero-eigenvalue
    mode raises its vertices' values, but the other vertices' channels stay put.

    Args:
      vertices: float [V, 3]; triangles: int [T, 3] indices in [0, V).
      num_times: number of diffusion times (channels).
      t_min, t_max: the first and last time, 0 < t_min <= t_max.
      num_eigenpairs: eigenpairs of the Laplacian summed (fewer on a mesh of fewer
        vertices).

    Returns:
      float32 [V, num_times], finite. A vertex no triangle uses gets 0 in every channel
      (the area-weighted mean of the others).

    Raises:
      ValueError: if the mesh has no triangle, zero surface area, or bad times or counts.
    """
    if num_times < 1 or num_eigenpairs < 1 or not 0 < t_min <= t_max:
        raise ValueError(f"need num_times >= 1, num_eigenpairs >= 1 and 0 < t_min <= t_max; "
                         f"got {num_times}, {num_eigenpairs}, {t_min}, {t_max}")
    vertices = np.asarray(vertices, np.float64)
    triangles = np.asarray(triangles, np.int64)
    if len(triangles) == 0:
        raise ValueError("the mesh has no triangle")
    used = np.unique(triangles)
    reindex = np.zeros(len(vertices), np.int64)
    reindex[used] = np.arange(len(used))
    area = surface_area(vertices, triangles)
    if not area > 0:
        raise ValueError("the mesh has zero surface area")
    eigenvalues, eigenvectors, mass = laplace_eigenpairs(
        vertices[used] / np.sqrt(area), reindex[triangles], num_eigenpairs)
    times = np.geomspace(t_min, t_max, num_times)
    hks = (eigenvectors ** 2) @ np.exp(-np.outer(eigenvalues, times))  # [V_used, num_times]
    log_hks = np.log(np.maximum(hks, HKS_FLOOR))
    log_hks -= (mass @ log_hks) / mass.sum()
    channels = np.zeros([len(vertices), num_times], np.float32)
    channels[used] = log_hks
    return channels

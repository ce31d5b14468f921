"""Surface descriptors: area-weighted centroid and normals, and a heat kernel signature that
is intrinsic, scale-normalised, equal to a dense eigen-decomposition's, and finite on
messy meshes."""

import numpy as np
import pytest
import robust_laplacian
import scipy.linalg
import trimesh
from scipy.spatial.transform import Rotation

from helpers.runs import PROJECT
from meshseg.data.features import descriptors
from meshseg.data.features.descriptors import (DENSE_EIGEN_MAX_VERTICES, area_weighted_centroid,
                                               heat_kernel_signature, normalized_positions,
                                               surface_area, vertex_normals)


def bumpy_ellipsoid(subdivisions: int = 3):
    """An icosphere stretched to an ellipsoid with a bump: no symmetry, so the Laplacian's
    eigenvalues are distinct. Returns float64 [V, 3], int64 [T, 3]."""
    sphere = trimesh.creation.icosphere(subdivisions)
    vertices = np.asarray(sphere.vertices) * [1.0, 0.7, 0.5]
    vertices *= 1 + 0.3 * np.exp(-8 * np.sum((sphere.vertices - [0, 0, 1]) ** 2, axis=1))[:, None]
    return vertices, np.asarray(sphere.faces, np.int64)


def dense_hks(vertices, triangles, times, num_eigenpairs):
    """The signature from scipy.linalg.eigh of the dense L, M of the unit-area mesh."""
    unit = vertices / np.sqrt(surface_area(vertices, triangles))
    laplacian, mass = robust_laplacian.mesh_laplacian(unit, triangles)
    eigenvalues, eigenvectors = scipy.linalg.eigh(laplacian.toarray(), mass.toarray())
    hks = eigenvectors[:, :num_eigenpairs] ** 2 @ np.exp(
        -np.outer(eigenvalues[:num_eigenpairs], times))
    log_hks = np.log(hks)
    weights = mass.diagonal()
    return log_hks - weights @ log_hks / weights.sum()


def test_area_weighted_centroid_ignores_vertex_density():
    # A unit square: one half split into many thin triangles, the other into two.
    fine_x = np.linspace(0.5, 1.0, 21)
    vertices = np.array([[0, 0, 0], [0.5, 0, 0], [0.5, 1, 0], [0, 1, 0]]
                        + [[x, 0, 0] for x in fine_x] + [[x, 1, 0] for x in fine_x], float)
    triangles = [[0, 1, 2], [0, 2, 3]]
    for i in range(20):
        bottom, top = 4 + i, 25 + i
        triangles += [[bottom, bottom + 1, top + 1], [bottom, top + 1, top]]
    triangles = np.array(triangles)
    assert surface_area(vertices, triangles) == pytest.approx(1.0)
    np.testing.assert_allclose(area_weighted_centroid(vertices, triangles), [0.5, 0.5, 0],
                               atol=1e-12)
    assert vertices.mean(axis=0)[0] > 0.7  # the vertex mean is pulled to the fine half


def test_normalized_positions_have_unit_area_and_centroid_at_origin():
    vertices, triangles = bumpy_ellipsoid(2)
    moved = 3.0 * vertices + [10, -4, 2]
    positions = normalized_positions(moved, triangles).astype(np.float64)
    assert surface_area(positions, triangles) == pytest.approx(1.0, rel=1e-5)
    np.testing.assert_allclose(area_weighted_centroid(positions, triangles), 0, atol=1e-6)


def test_vertex_normals_of_a_sphere_point_outward():
    sphere = trimesh.creation.icosphere(2, radius=2.0)
    normals = vertex_normals(sphere.vertices, sphere.faces)
    outward = sphere.vertices / np.linalg.norm(sphere.vertices, axis=1, keepdims=True)
    assert normals.dtype == np.float32 and normals.shape == (len(sphere.vertices), 3)
    np.testing.assert_allclose(np.linalg.norm(normals, axis=1), 1, rtol=1e-6)
    assert np.min(np.sum(normals * outward, axis=1)) > 0.999


def test_hks_matches_a_dense_eigen_decomposition():
    vertices, triangles = bumpy_ellipsoid(3)  # 642 vertices: the sparse eigensolver
    assert len(vertices) > DENSE_EIGEN_MAX_VERTICES
    hks = heat_kernel_signature(vertices, triangles, num_times=8, num_eigenpairs=64)
    expected = dense_hks(vertices, triangles, np.geomspace(0.01, 2.0, 8), 64)
    assert hks.shape == (len(vertices), 8) and hks.dtype == np.float32
    np.testing.assert_allclose(hks, expected, atol=1e-5)
    assert np.ptp(hks[:, 0]) > 0.1  # the signature tells vertices apart


def test_hks_of_a_small_mesh_uses_every_eigenpair_there_is():
    vertices, triangles = bumpy_ellipsoid(1)  # 42 vertices < 128 eigenpairs
    hks = heat_kernel_signature(vertices, triangles, num_times=4)
    expected = dense_hks(vertices, triangles, np.geomspace(0.01, 2.0, 4), len(vertices))
    np.testing.assert_allclose(hks, expected, atol=1e-5)


def test_hks_is_invariant_to_rotation_translation_and_uniform_scale():
    vertices, triangles = bumpy_ellipsoid(3)
    hks = heat_kernel_signature(vertices, triangles)
    rotation = Rotation.from_euler("xyz", [0.3, -1.1, 2.0]).as_matrix()
    moved = 7.5 * vertices @ rotation.T + [3, -2, 40]
    np.testing.assert_allclose(heat_kernel_signature(moved, triangles), hks, atol=1e-4)


def test_hks_channels_have_zero_area_weighted_mean():
    vertices, triangles = bumpy_ellipsoid(2)
    hks = heat_kernel_signature(vertices, triangles).astype(np.float64)
    _, mass = robust_laplacian.mesh_laplacian(vertices, triangles)
    np.testing.assert_allclose(mass.diagonal() @ hks, 0, atol=1e-5 * mass.diagonal().sum())


def test_hks_is_finite_with_an_unreferenced_vertex_and_a_tiny_stray_component():
    vertices, triangles = bumpy_ellipsoid(3)
    stray = np.array([[5, 5, 5], [5.001, 5, 5], [5, 5.001, 5]])
    messy_vertices = np.concatenate([vertices, stray, [[9.0, 9.0, 9.0]]])
    count = len(vertices)
    messy_triangles = np.concatenate([triangles, [[count, count + 1, count + 2]]])
    hks = heat_kernel_signature(messy_vertices, messy_triangles)
    assert np.all(np.isfinite(hks))
    np.testing.assert_array_equal(hks[-1], 0)  # the unreferenced vertex
    # The body's channels keep their shape: a stray component shifts them by a constant.
    body = heat_kernel_signature(vertices, triangles)
    shift = hks[:count] - body
    assert np.max(np.ptp(shift, axis=0)) < 0.05
    normals = vertex_normals(messy_vertices, messy_triangles)
    assert np.all(np.isfinite(normals))
    np.testing.assert_array_equal(normals[-1], 0)


def test_hks_refuses_a_mesh_without_area():
    with pytest.raises(ValueError, match="zero surface area"):
        heat_kernel_signature(np.zeros([3, 3]), np.array([[0, 1, 2]]))


@pytest.mark.parametrize("name", ["4V7B_BB", pytest.param("3JA1_LB", marks=pytest.mark.slow)])
def test_hks_with_the_symmetric_factorisation_matches_eigsh_s_own_on_real_meshes(
        name, monkeypatch):
    # Two bundled RNA surfaces (14.3k and 14.5k vertices): the minimum-degree LU of
    # `shifted_inverse` against eigsh's default shift-invert factorisation (COLAMD). The
    # second surface repeats the check at the same size, so it runs with the slow tests.
    mesh = trimesh.load(f"{PROJECT}/data/rna_sample/ply/{name}.ply", process=False)
    vertices, triangles = np.asarray(mesh.vertices), np.asarray(mesh.faces)
    fast = heat_kernel_signature(vertices, triangles)
    monkeypatch.setattr(descriptors, "shifted_inverse", lambda operator: None)
    reference = heat_kernel_signature(vertices, triangles)
    # Measured: at most 6e-8 apart (float32 rounding of channels up to 4.7), so cached
    # descriptors of either computation stay valid.
    np.testing.assert_allclose(fast, reference, rtol=0, atol=1e-6)

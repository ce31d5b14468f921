"""Specification of the 1-ring adjacency with self-edges (meshseg.data.mesh.adjacency)."""

import numpy as np
import pytest
import tensorflow as tf
import trimesh

from meshseg.data.mesh.adjacency import mesh_edges
from meshseg.data.pipeline.dataset import mesh_edges_tf


def _brute_force_one_ring(triangles: np.ndarray, num_vertices: int) -> set:
    """All (i, j) with i == j or i, j in a common triangle."""
    edges = {(i, i) for i in range(num_vertices)}
    for triangle in triangles.tolist():
        edges.update((i, j) for i in triangle for j in triangle)
    return edges


def test_rows_sum_to_one_and_every_vertex_has_a_self_edge(tetrahedron):
    edges, edge_weights = mesh_edges(tetrahedron["triangles"], 5)
    assert edges.dtype == np.int32 and edge_weights.dtype == np.float32
    row_sums = np.bincount(edges[:, 0], weights=edge_weights, minlength=5)
    np.testing.assert_allclose(row_sums, np.ones(5), rtol=1e-6)
    self_edges = edges[edges[:, 0] == edges[:, 1], 0]
    np.testing.assert_array_equal(self_edges, np.arange(5))


def test_unreferenced_vertex_gets_only_its_self_edge_with_weight_one(tetrahedron):
    edges, edge_weights = mesh_edges(tetrahedron["triangles"], 5)
    np.testing.assert_array_equal(edges[edges[:, 0] == 4], [[4, 4]])
    np.testing.assert_array_equal(edge_weights[edges[:, 0] == 4], [1.0])


def test_tetrahedron_vertex_weights_are_one_over_four(tetrahedron):
    edges, edge_weights = mesh_edges(tetrahedron["triangles"], 5)
    np.testing.assert_allclose(edge_weights[edges[:, 0] < 4], 0.25)


def test_edges_equal_brute_force_one_ring_sorted_by_row_then_col():
    sphere = trimesh.creation.icosphere(subdivisions=1)
    num_vertices = len(sphere.vertices) + 3
    edges, _ = mesh_edges(np.asarray(sphere.faces), num_vertices)
    expected = sorted(_brute_force_one_ring(np.asarray(sphere.faces), num_vertices))
    np.testing.assert_array_equal(edges, np.array(expected))


def test_degenerate_triangle_does_not_duplicate_the_self_edge():
    edges, edge_weights = mesh_edges(np.array([[0, 0, 1]]), 2)
    np.testing.assert_array_equal(edges, [[0, 0], [0, 1], [1, 0], [1, 1]])
    np.testing.assert_allclose(edge_weights, [0.5, 0.5, 0.5, 0.5])


def test_mesh_without_triangles_has_only_self_edges():
    edges, edge_weights = mesh_edges(np.zeros([0, 3], np.int32), 3)
    np.testing.assert_array_equal(edges, [[0, 0], [1, 1], [2, 2]])
    np.testing.assert_array_equal(edge_weights, [1.0, 1.0, 1.0])


@pytest.mark.parametrize(
    "triangles, num_vertices, message",
    [
        (np.array([[0, 1, 5]]), 3, r"\[0, 3\)"),
        (np.array([[0, -1, 2]]), 3, r"\[0, 3\)"),
        (np.array([[0, 1]]), 3, "shape"),
        (np.array([[0, 1, 2]]), 0, "num_vertices"),
    ],
)
def test_invalid_meshes_raise_value_error(triangles, num_vertices, message):
    with pytest.raises(ValueError, match=message):
        mesh_edges(triangles, num_vertices)


def test_tf_wrapper_matches_numpy_and_sets_static_shapes(tetrahedron):
    @tf.function
    def edges_of(triangles, num_vertices):
        edges, edge_weights = mesh_edges_tf(triangles, num_vertices)
        assert edges.shape.as_list() == [None, 2]
        assert edge_weights.shape.as_list() == [None]
        return edges, edge_weights

    edges, edge_weights = edges_of(tf.constant(tetrahedron["triangles"]), tf.constant(5))
    expected_edges, expected_weights = mesh_edges(tetrahedron["triangles"], 5)
    np.testing.assert_array_equal(edges, expected_edges)
    np.testing.assert_array_equal(edge_weights, expected_weights)

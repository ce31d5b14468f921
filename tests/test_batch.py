"""The batch contract (meshseg.batch): the neighbour table, the one feature builder, padding."""

import numpy as np
import tensorflow as tf
import trimesh

from helpers.graphs import fan_grid
from meshseg.batch import (LABEL_PADDING, MESH_ID, PADDING_VALUES, as_batch, mesh_features,
                           real_vertices, table_from_edges, without_mesh_ids)
from meshseg.data.mesh.adjacency import mesh_edges


def sphere_adjacency():
    """A 42-vertex icosphere plus 2 vertices no triangle uses, and its 1-ring edges."""
    sphere = trimesh.creation.icosphere(subdivisions=1)
    num_vertices = len(sphere.vertices) + 2
    vertices = np.concatenate([sphere.vertices, np.zeros((2, 3))]).astype(np.float32)
    edges, weights = mesh_edges(np.asarray(sphere.faces), num_vertices)
    return vertices, edges, weights


def test_neighbor_table_rows_list_each_vertex_1_ring_in_edge_order():
    _, edges, weights = sphere_adjacency()
    table, degree = table_from_edges(edges[:, 0], edges[:, 1], weights, 44)
    np.testing.assert_array_equal(degree, np.bincount(edges[:, 0], minlength=44))
    assert table.neighbors.shape == (44, 7)  # degree 6 or 5, plus the self-edge
    for i in (0, 17, 42):
        row = edges[edges[:, 0] == i]
        count = len(row)
        np.testing.assert_array_equal(table.neighbors[i, :count], row[:, 1])
        np.testing.assert_array_equal(table.neighbors[i, count:], i)  # unused slots: itself
        np.testing.assert_array_equal(table.weights[i, count:], 0.0)
    np.testing.assert_allclose(tf.reduce_sum(table.weights, axis=1), 1.0, rtol=1e-6)


def test_edges_past_a_fixed_width_are_dropped_and_its_degree_says_so():
    _, edges, weights = sphere_adjacency()
    table, degree = table_from_edges(edges[:, 0], edges[:, 1], weights, 44, width=3)
    assert table.neighbors.shape == (44, 3) and int(tf.reduce_max(degree)) == 7
    assert table.overflow_centers is None


def test_a_few_high_degree_vertices_continue_on_overflow_rows_and_cost_grows_with_edges():
    fan = fan_grid()
    edges, weights = mesh_edges(np.asarray(fan.faces), len(fan.vertices))
    num_vertices, num_edges = 2601, len(edges)
    degree = np.bincount(edges[:, 0])
    assert degree.max() == 1003  # itself, its 2 grid neighbours and 1,000 fan vertices
    table, _ = table_from_edges(edges[:, 0], edges[:, 1], weights, num_vertices)
    width = table.neighbors.shape[1]
    assert width == 2 * int(np.ceil(degree.mean())) + 2 == 18
    assert table.overflow_centers.numpy().tolist() == [0] * (1003 // width)  # 55 rows
    cells = (num_vertices + len(table.overflow_centers)) * width
    assert cells < 3 * (num_vertices + num_edges) < num_vertices * degree.max() / 10
    # Every edge is in the table once: the main rows and the overflow rows hold them all.
    rows = np.concatenate([np.repeat(np.arange(num_vertices), width),
                           np.repeat(table.overflow_centers, width)])
    cols = np.concatenate([np.ravel(table.neighbors), np.ravel(table.overflow_neighbors)])
    values = np.concatenate([np.ravel(table.weights), np.ravel(table.overflow_weights)])
    kept = values > 0
    assert sorted(zip(rows[kept], cols[kept])) == sorted(map(tuple, edges.tolist()))


def test_mesh_features_hold_every_key_of_the_contract_with_its_dtype():
    vertices, edges, weights = sphere_adjacency()
    features = mesh_features(vertices, edges, weights, mesh_id="shard, record 3")
    assert set(features) == set(PADDING_VALUES[0])
    for key, padding in PADDING_VALUES[0].items():
        assert features[key].dtype == padding.dtype, key
    assert int(features["num_vertices"]) == 44 and int(features["num_edges"]) == len(edges)
    assert features["neighbors"].shape == (44, 7)
    batch = as_batch(without_mesh_ids(features))
    assert MESH_ID not in batch and batch["vertices"].shape == (1, 44, 3)


def test_a_stored_neighbour_table_is_used_as_it_is():
    vertices, edges, weights = sphere_adjacency()
    table, _ = table_from_edges(edges[:, 0], edges[:, 1], weights, 44)
    stored = table._replace(neighbors=tf.pad(table.neighbors, [[0, 0], [0, 2]]),
                            weights=tf.pad(table.weights, [[0, 0], [0, 2]]))
    features = mesh_features(vertices, edges, weights, stored)
    assert features["neighbors"].shape == (44, 9) and features["overflow_centers"].shape == (0,)


def test_padded_labels_mark_the_vertices_that_do_not_count():
    labels = tf.constant([[0, 3, LABEL_PADDING]])
    np.testing.assert_array_equal(real_vertices(labels), [[1.0, 1.0, 0.0]])

"""gather_matmul over a neighbour table whose high-degree rows continue on overflow rows
(`meshseg.batch.NeighborTable`): the same convolution as every other implementation, and
the overflow ops left out only where the table's shape says there are no such rows."""

import numpy as np
import pytest
import tensorflow as tf
import trimesh

from helpers.graphs import (VARIABLE_NAMES, assert_close_to_max, feast_numpy, mesh_batch,
                            random_variables)
from meshseg.batch import NeighborTable, table_from_edges
from meshseg.nn.model import MeshSegmentationNet
from meshseg.nn.ops.gather_matmul import gather_matmul

SMALL_NET = dict(num_classes=4, num_weight_matrices=4, input_channels=8, conv_channels=(8, 16),
                 hidden_channels=16)


def star_with_ring(num_leaves: int = 40):
    """Vertex 0 joined to a ring of `num_leaves` vertices: a fan of triangles (0, i, i+1),
    so vertex 0 has degree num_leaves + 1 and every other vertex 4."""
    faces = np.array([[0, i, i % num_leaves + 1] for i in range(1, num_leaves + 1)])
    angles = np.linspace(0, 2 * np.pi, num_leaves, endpoint=False)
    ring = np.stack([np.cos(angles), np.sin(angles), 0.1 * np.sin(3 * angles)], axis=1)
    return trimesh.Trimesh(np.concatenate([[[0, 0, 1]], ring]), faces, process=False)


def test_the_fan_centre_continues_on_overflow_rows():
    batch = mesh_batch([star_with_ring()])
    # Mean degree (40 x 4 + 41) / 41 = 4.9, so the width is 2 x 5 + 2 = 12, and vertex 0's
    # 41 neighbours take its row and 3 overflow rows.
    assert batch["neighbors"].shape == (1, 41, 12)
    np.testing.assert_array_equal(batch["overflow_centers"], [[0, 0, 0]])


def test_gather_matmul_with_overflow_rows_equals_a_float64_evaluation():
    rng = np.random.default_rng(0)
    mesh = star_with_ring()
    edges = np.array(sorted({(i, j) for face in mesh.faces for i in face for j in face}))
    weights = rng.uniform(0.1, 2.0, len(edges))
    data = rng.normal(size=(41, 5))
    variables = random_variables(5, 4, 3)
    table, _ = table_from_edges(edges[:, 0], edges[:, 1], tf.constant(weights), 41)
    assert table.overflow_centers.shape[0] > 0
    output = gather_matmul(tf.constant(data), table, None, *(
        tf.constant(variables[name], tf.float64) for name in VARIABLE_NAMES))
    expected = feast_numpy(data, edges[:, 0], edges[:, 1], weights, **variables)
    assert_close_to_max(output, expected, rtol=1e-12)


@pytest.mark.parametrize("jit", [False, True])
def test_a_net_on_a_batch_with_overflow_rows_matches_the_reference_implementation(jit):
    batch = mesh_batch([star_with_ring(), trimesh.creation.icosphere(subdivisions=1)])
    reference = MeshSegmentationNet(impl="gather_sum", **SMALL_NET)
    expected = reference(batch)
    net = MeshSegmentationNet(impl="gather_matmul", xla=jit, **SMALL_NET)
    net(batch)
    net.set_weights(reference.get_weights())
    logits = tf.function(net, jit_compile=jit)(batch)
    valid = tf.sequence_mask(batch["num_vertices"], batch["vertices"].shape[1])
    assert_close_to_max(tf.boolean_mask(logits, valid), tf.boolean_mask(expected, valid), 1e-5)


def _float32_variables():
    """The convolution's variables (C = 5, W = 4, D = 3) as float32 tensors, in
    gather_matmul's argument order."""
    variables = random_variables(5, 4, 3)
    return [tf.constant(variables[name], tf.float32) for name in VARIABLE_NAMES]


@pytest.mark.parametrize("num_overflow_rows, expected_scatters", [(0, 0), (None, 1), (3, 1)])
def test_the_overflow_ops_are_left_out_only_where_the_shape_says_there_are_none(
        num_overflow_rows, expected_scatters):
    """A table with no overflow rows by its static shape builds no overflow ops; one with
    some, or with a count known only at run time, keeps them."""
    args = _float32_variables()

    def conv(data, neighbors, weights, overflow_neighbors, overflow_weights, overflow_centers):
        table = NeighborTable(neighbors, weights, overflow_neighbors, overflow_weights,
                              overflow_centers)
        return gather_matmul(data, table, None, *args)

    width = 7
    specs = [tf.TensorSpec([None, 5]), tf.TensorSpec([None, width], tf.int32),
             tf.TensorSpec([None, width]),
             tf.TensorSpec([num_overflow_rows, width], tf.int32),
             tf.TensorSpec([num_overflow_rows, width]),
             tf.TensorSpec([num_overflow_rows], tf.int32)]
    graph = tf.function(conv).get_concrete_function(*specs).graph
    scatters = [op for op in graph.get_operations() if op.type == "TensorScatterAdd"]
    assert len(scatters) == expected_scatters


def test_a_table_without_overflow_rows_gives_the_same_values_and_gradients_either_way():
    """The path that leaves the overflow ops out (static [0, K]) and the one that keeps
    them (count unknown until run time, here 0) agree, values and dL/dx."""
    mesh = trimesh.creation.icosphere(subdivisions=1)
    edges = np.array(sorted({(i, j) for face in mesh.faces for i in face for j in face}))
    table, _ = table_from_edges(edges[:, 0], edges[:, 1], tf.ones(len(edges)), len(mesh.vertices))
    assert table.overflow_centers.shape[0] == 0
    variables = _float32_variables()
    data = tf.constant(np.random.default_rng(0).normal(size=(len(mesh.vertices), 5)), tf.float32)

    def values_and_gradient(num_overflow_rows):
        width = table.neighbors.shape[1]

        @tf.function(input_signature=[tf.TensorSpec([num_overflow_rows, width], tf.int32),
                                      tf.TensorSpec([num_overflow_rows, width]),
                                      tf.TensorSpec([num_overflow_rows], tf.int32)])
        def run(overflow_neighbors, overflow_weights, overflow_centers):
            with tf.GradientTape() as tape:
                tape.watch(data)
                y = gather_matmul(data, table._replace(
                    overflow_neighbors=overflow_neighbors, overflow_weights=overflow_weights,
                    overflow_centers=overflow_centers), None, *variables)
                loss = tf.reduce_sum(y * y)
            return y, tape.gradient(loss, data)

        ops = {op.type for op in run.get_concrete_function().graph.get_operations()}
        assert ("TensorScatterAdd" in ops) == (num_overflow_rows is None)
        return run(table.overflow_neighbors, table.overflow_weights, table.overflow_centers)

    for kept, left_out in zip(values_and_gradient(None), values_and_gradient(0)):
        np.testing.assert_allclose(kept.numpy(), left_out.numpy(), rtol=1e-6, atol=1e-6)

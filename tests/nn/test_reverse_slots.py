"""gather_matmul's backward gathers over `meshseg.batch.reverse_slots` (each edge's slot the other way
round) instead of scattering, when the neighbour table pairs its slots; otherwise it
scatters. Both give the gradients of a float64 evaluation of the library op."""

import functools

import numpy as np
import pytest
import tensorflow as tf
import trimesh

from helpers.graphs import VARIABLE_NAMES, assert_close_to_max, mesh_batch, random_variables
from meshseg.batch import (NeighborTable, reverse_slots, table_features, table_from_edges,
                           with_reverse_slots)
from meshseg.data.mesh.adjacency import mesh_edges
from meshseg.nn.model import batch_table
from meshseg.nn.ops.gather_matmul import gather_matmul
from meshseg.nn.ops.gather_sum import gather_sum



def sphere_edges(subdivisions: int = 1):
    """The 1-ring with self-edges of an icosphere, rows and weights 1/degree."""
    mesh = trimesh.creation.icosphere(subdivisions=subdivisions)
    edges, weights = mesh_edges(np.asarray(mesh.faces), len(mesh.vertices))
    return np.asarray(edges), np.asarray(weights, np.float64), len(mesh.vertices)


def table_of(edges, weights, num_vertices):
    table, _ = table_from_edges(edges[:, 0], edges[:, 1], tf.constant(weights), num_vertices)
    return table


def test_every_used_slot_of_a_mesh_table_points_at_its_reverse():
    edges, weights, num_vertices = sphere_edges()
    table = with_reverse_slots(table_of(edges, weights, num_vertices))
    reverse = table.reverse
    assert bool(table.paired)
    neighbors = table.neighbors.numpy()
    width = neighbors.shape[1]
    used = table.weights.numpy() != 0
    rows = np.repeat(np.arange(num_vertices)[:, None], width, axis=1)
    back_rows, back_slots = np.divmod(reverse.numpy()[used], width)
    np.testing.assert_array_equal(back_rows, neighbors[used])  # the reverse lies in row j
    np.testing.assert_array_equal(neighbors[back_rows, back_slots], rows[used])  # and holds i
    np.testing.assert_array_equal(reverse.numpy()[~used], (rows * width + np.arange(width))[~used])


def test_a_batch_table_takes_the_reverse_slots_of_its_meshes():
    """The pipeline computes each mesh's reverse slots once; flattened over a padded batch
    of meshes with different V and K they must be the slots of the batch's own table."""
    batch = mesh_batch([trimesh.creation.icosphere(subdivisions=1),
                        trimesh.creation.box(), trimesh.creation.annulus(0.5, 1.0, 0.3)])
    assert len({int(k) for k in tf.reduce_max(tf.reduce_sum(
        tf.cast(batch["neighbor_weights"] != 0, tf.int32), -1), -1)}) > 1  # widths differ
    table = batch_table(batch)
    flat = table_features(batch)  # the same table flattened, its slots computed anew
    width, num_vertices = flat.neighbors.shape[-1], flat.neighbors.shape[1]
    offsets = (np.arange(len(flat.neighbors)) * num_vertices)[:, None, None]
    expected = with_reverse_slots(NeighborTable(
        tf.reshape(flat.neighbors + offsets, [-1, width]), tf.reshape(flat.weights, [-1, width])))
    assert bool(table.paired) and bool(expected.paired)
    np.testing.assert_array_equal(table.reverse.numpy(), expected.reverse.numpy())


@pytest.mark.parametrize("change", ["drop_one_direction", "duplicate_edge", "zero_one_direction"])
def test_a_table_whose_slots_do_not_pair_is_not_exact(change):
    edges, weights, num_vertices = sphere_edges()
    index = int(np.flatnonzero(edges[:, 0] != edges[:, 1])[0])
    if change == "drop_one_direction":
        edges, weights = np.delete(edges, index, axis=0), np.delete(weights, index)
    elif change == "duplicate_edge":
        edges = np.concatenate([edges, edges[index:index + 1]])
        weights = np.concatenate([weights, weights[index:index + 1]])
    else:
        weights = weights.copy()
        weights[index] = 0.0
    table = table_of(edges, weights, num_vertices)
    assert not bool(reverse_slots(table.neighbors, table.weights)[1])


def gradients(op, edges, weights, num_vertices, xla):
    """float64 output and gradients of sum(y * g) w.r.t. data and every variable."""
    rng = np.random.default_rng(3)
    data = tf.constant(rng.normal(size=(num_vertices, 5)))
    variables = {name: tf.constant(value, tf.float64)
                 for name, value in random_variables(5, 4, 3, seed=3).items()}
    cotangent = tf.constant(rng.normal(size=(num_vertices, 3)))
    indices = tf.constant(edges, tf.int64)
    neighbors = tf.SparseTensor(indices, tf.constant(weights), [num_vertices, num_vertices])

    def run(data, variables):
        with tf.GradientTape() as tape:
            tape.watch([data, variables])
            output = op(data, neighbors, None,
                        *(variables[name] for name in VARIABLE_NAMES))
            loss = tf.reduce_sum(output * cotangent)
        return output, tape.gradient(loss, [data, variables])

    if xla:
        run = tf.function(run, jit_compile=True)
    return run(data, variables)


@pytest.mark.parametrize("xla", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("asymmetric", [False, True], ids=["paired", "scatter_fallback"])
def test_gather_matmul_gradients_equal_the_library_in_float64(asymmetric, xla):
    edges, weights, num_vertices = sphere_edges()
    weights = np.random.default_rng(1).uniform(0.1, 2.0, len(weights))  # not row-normalised
    if asymmetric:  # drop one direction of one edge
        keep = np.arange(len(edges)) != np.flatnonzero(edges[:, 0] != edges[:, 1])[0]
        edges, weights = edges[keep], weights[keep]
    table = table_of(edges, weights, num_vertices)
    assert bool(reverse_slots(table.neighbors, table.weights)[1]) != asymmetric
    expected_output, (expected_data, expected_variables) = gradients(
        gather_sum, edges, weights, num_vertices, xla=False)
    op = functools.partial(gather_matmul, xla=xla, max_degree=table.neighbors.shape[1])
    output, (data_gradient, variable_gradients) = gradients(op, edges, weights, num_vertices, xla)
    assert_close_to_max(output, expected_output, rtol=1e-12)
    assert_close_to_max(data_gradient, expected_data, rtol=1e-10, name="data")
    for name in VARIABLE_NAMES:
        assert_close_to_max(variable_gradients[name], expected_variables[name], rtol=1e-10,
                            name=name)

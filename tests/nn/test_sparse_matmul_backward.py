"""`sparse_matmul`'s hand-written gradients: exact, without [E, W*C] tensors, and (without
xla) without [V, W*C] tensors in the backward, one weight matrix at a time.

TensorFlow's own gradients of SparseTensorDenseMatMul and of gather + unsorted_segment_sum
gather both sides of the per-edge dot product as [E, W*C] tensors. The tests trace the
gradient on a small graph with fixed shapes, where E and V are known statically, and look
for any tensor of E * W * C or more elements with an axis of length E: in the TensorFlow
graph, and for the jit variant in the buffers XLA materialises (the top-level instructions
of the optimised HLO's entry computation). Without xla they also check that the backward
reads and forms no tensor of V * W * C or more elements with an axis of length V (it
recomputes [V, C] slices instead of keeping the forward's), and that its per-edge [E, C]
temporaries of one weight matrix are ordered after those of the previous one.
"""

import re

import numpy as np
import pytest
import tensorflow as tf

from meshseg.nn.ops.sparse_matmul import sparse_matmul
from helpers.graphs import (GraphCase, VARIABLE_NAMES, random_graph,
                            random_variables)

# E = 70 edges; W * C = 20 and D = 5 are not multiples of E, and E > V.
CASE = GraphCase("backward", batch_shape=(2,), num_vertices=9, num_channels=5,
                 num_weight_matrices=4, num_output_channels=5, weighted=True)
GRAPH = random_graph(CASE, seed=1)
VARIABLES = random_variables(CASE.num_channels, CASE.num_weight_matrices,
                             CASE.num_output_channels, seed=1)
NUM_EDGES = len(GRAPH.values)
EDGE_FEATURE_SIZE = NUM_EDGES * CASE.num_weight_matrices * CASE.num_channels
NUM_VERTICES = CASE.batch_shape[0] * CASE.num_vertices  # V of the flattened graph
VERTEX_FEATURE_SIZE = NUM_VERTICES * CASE.num_weight_matrices * CASE.num_channels


def is_edge_feature_shape(dims) -> bool:
    """Whether a static shape has an axis of length E and at least E * W * C elements."""
    return NUM_EDGES in dims and int(np.prod(dims)) >= EDGE_FEATURE_SIZE


def is_vertex_feature_shape(dims) -> bool:
    """Whether a static shape has an axis of length V and at least V * W * C elements."""
    return NUM_VERTICES in dims and int(np.prod(dims)) >= VERTEX_FEATURE_SIZE


def convolution_function(xla: bool, gradient: bool, aggregate=sparse_matmul):
    """tf.function (jit-compiled under `xla`) of data, adjacency values -> the output, or
    the gradients of sum(output) w.r.t. data, the values and the variables."""
    variables = [tf.constant(VARIABLES[name]) for name in VARIABLE_NAMES]

    def forward(data, values):
        return aggregate(data, GRAPH.neighbors(values=values), None, *variables, xla=xla)

    def gradients(data, values):
        with tf.GradientTape() as tape:
            tape.watch([data, values] + variables)
            loss = tf.reduce_sum(forward(data, values))
        return tape.gradient(loss, [data, values] + variables)

    return tf.function(gradients if gradient else forward, jit_compile=xla, autograph=False)


def inputs():
    return tf.constant(GRAPH.data), tf.constant(GRAPH.values)


def graph_shapes(function):
    """Static shapes (tuples, unknown axes as -1) of every op output in the traced graph."""
    graph = function.get_concrete_function(*inputs()).graph
    return [tuple(-1 if d is None else d for d in output.shape.as_list())
            for op in graph.get_operations() for output in op.outputs
            if output.shape.rank is not None]


def materialised_hlo_shapes(function):
    """Array shapes of the top-level instructions of the optimised HLO's entry computation
    (fusions count once, by their result: what XLA allocates)."""
    hlo = function.experimental_get_compiler_ir(*inputs())(stage="optimized_hlo")
    entry = hlo[hlo.index("\nENTRY"):]
    entry = entry[:entry.index("\n}")]
    shapes = []
    for result in re.findall(r"^\s*(?:ROOT )?%\S+ = (\(?[^ ]+)", entry, flags=re.MULTILINE):
        for dims in re.findall(r"[a-z0-9]+\[([0-9,]*)\]", result):
            shapes.append(tuple(int(d) for d in dims.split(",") if d))
    return shapes


def test_graph_shapes_are_static_so_the_search_can_find_edge_tensors():
    shapes = graph_shapes(convolution_function(xla=False, gradient=True))
    assert (NUM_EDGES, CASE.num_weight_matrices) in shapes  # the per-edge logits


def test_the_search_finds_the_tensors_of_tensorflows_own_sparse_matmul_gradient():
    """Control: autodiff of SparseTensorDenseMatMul (the former backward) builds them."""
    rows_cols = GRAPH.indices[:, 1:] + GRAPH.indices[:, :1] * CASE.num_vertices
    size = CASE.num_vertices * CASE.batch_shape[0]
    steered = tf.ones([size, CASE.num_weight_matrices * CASE.num_channels])

    @tf.function
    def autodiff_gradient(values):
        with tf.GradientTape() as tape:
            tape.watch(values)
            adjacency = tf.SparseTensor(rows_cols, values, [size, size])
            loss = tf.reduce_sum(tf.sparse.sparse_dense_matmul(adjacency, steered))
        return tape.gradient(loss, values)

    graph = autodiff_gradient.get_concrete_function(tf.constant(GRAPH.values)).graph
    assert any(is_edge_feature_shape(output.shape.as_list())
               for op in graph.get_operations() for output in op.outputs)


def test_sparse_matmul_graph_holds_no_edge_feature_tensor_forward_or_backward():
    """Eager-graph formulation (SparseTensorDenseMatMul): none anywhere in the graph."""
    offending = [s for s in graph_shapes(convolution_function(xla=False, gradient=True))
                 if is_edge_feature_shape(s)]
    assert offending == []


def test_sparse_matmul_backward_reads_and_forms_no_vertex_feature_tensor():
    """Without xla the forward's [V, W*C] tensors (steered, aggregated) are not kept for
    the backward, which works on [V, C] slices: the gradient graph has the forward's
    vertex-feature tensors and consumers, and no more."""
    def vertex_feature_uses(gradient):
        graph = convolution_function(xla=False, gradient=gradient).get_concrete_function(
            *inputs()).graph
        tensors = [output for op in graph.get_operations() for output in op.outputs
                   if output.shape.rank is not None
                   and is_vertex_feature_shape(output.shape.as_list())]
        consumers = [consumer for tensor in tensors for consumer in tensor.consumers()]
        return len(tensors), len(consumers)

    forward = vertex_feature_uses(gradient=False)
    assert forward[0] > 0  # the search finds the forward's steered and aggregated
    assert vertex_feature_uses(gradient=True) == forward


def test_sparse_matmul_backward_orders_the_edge_temporaries_of_each_weight_matrix():
    """Without xla each of the backward's [E, C] tensors (the gathered dL/dz_m rows and
    steered_m columns and their product) depends on, or is depended on by, every other one
    except its own weight matrix's partner gather: at most two exist at once, however the
    executor schedules the graph."""
    graph = convolution_function(xla=False, gradient=True).get_concrete_function(
        *inputs()).graph
    ancestors = {}
    for op in graph.get_operations():  # in creation order: inputs come first
        ancestors[op] = set().union(*([{i.op for i in op.inputs} | set(op.control_inputs)]
                                      + [ancestors[i.op] for i in op.inputs]
                                      + [ancestors[c] for c in op.control_inputs]))
    edge_ops = [op for op in graph.get_operations() for output in op.outputs
                if output.shape.as_list() == [NUM_EDGES, CASE.num_channels]]
    assert len(edge_ops) == 3 * CASE.num_weight_matrices
    unordered = [sum(other is not op and other not in ancestors[op] and op not in ancestors[other]
                     for other in edge_ops) for op in edge_ops]
    assert max(unordered) == 1


@pytest.mark.parametrize("jit", [False, True], ids=["graph", "jit"])
def test_sparse_matmul_gradient_graph_holds_no_edge_feature_tensor_beyond_the_forward(jit):
    """xla=True formulation: its forward gathers steered as [E, W*C] and scales it before
    the segment sum (two such tensors); the gradient adds none."""
    def count(gradient):
        function = convolution_function(xla=True, gradient=gradient)
        if not jit:
            function = tf.function(function.python_function, autograph=False)
        return sum(is_edge_feature_shape(s) for s in graph_shapes(function))

    assert count(gradient=True) == count(gradient=False)


def test_sparse_matmul_jit_gradient_materialises_no_edge_feature_buffer_beyond_the_forward():
    """XLA fuses the forward's gather and scaling into one [E, W*C] buffer; the gradient
    adds none."""
    def count(gradient):
        shapes = materialised_hlo_shapes(convolution_function(xla=True, gradient=gradient))
        return sum(is_edge_feature_shape(s) for s in shapes)

    assert count(gradient=True) <= count(gradient=False) <= 1



def test_dynamic_number_of_weight_matrices_raises_value_error():
    variables = [tf.constant(VARIABLES[name]) for name in VARIABLE_NAMES]
    var_w_spec = tf.TensorSpec([None, CASE.num_channels, CASE.num_output_channels])

    @tf.function(input_signature=[var_w_spec])
    def convolution(var_w):
        return sparse_matmul(tf.constant(GRAPH.data), GRAPH.neighbors(), None,
                             *variables[:3], var_w, variables[4])

    with pytest.raises(ValueError, match="static number of weight matrices"):
        convolution.get_concrete_function()

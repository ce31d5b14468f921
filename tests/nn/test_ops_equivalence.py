"""Every `meshseg.nn.ops` implementation computes tensorflow-graphics' feature-steered convolution.

The reference is the library op evaluated in float64 on the same (float32-representable)
inputs; the implementations run in float32, eagerly and, with xla=True, inside
`tf.function(jit_compile=True)`. Gradients are those of sum(y * g) for a fixed random
cotangent g, with respect to data, the adjacency values and u, v, c, w, b.
"""

import functools

import numpy as np
import pytest
import tensorflow as tf
from tensorflow_graphics.geometry.convolution import graph_convolution

from meshseg.nn.ops import IMPLEMENTATIONS
from helpers.graphs import (GraphCase, VARIABLE_NAMES, assert_close_to_max, implementation,
                    output_and_gradients, random_graph, random_variables)

# Each case combines several of: 2-D or batched input, padding with sizes, [V, V'] with
# V' < V, weighted (not row-normalised) adjacency, W = 1 or 8, C < D or C > D.
CASES = {case.name: case for case in [
    GraphCase("two_dimensional"),
    GraphCase("batched_padded_weighted", batch_shape=(2, 3), num_vertices=7, padded=True,
              weighted=True),
    GraphCase("batched_without_sizes_eight_weight_matrices", batch_shape=(2,), num_vertices=6,
              num_weight_matrices=8, num_channels=6, num_output_channels=2),
    GraphCase("non_square_weighted", num_vertices=10, num_neighbor_columns=6, weighted=True),
    GraphCase("non_square_batched_padded", batch_shape=(3,), num_vertices=8,
              num_neighbor_columns=5, padded=True),
    GraphCase("one_weight_matrix_batched_padded", batch_shape=(2,), num_vertices=6,
              padded=True, num_weight_matrices=1),
]}
SQUARE_CASES = [name for name, case in CASES.items() if case.num_neighbor_columns is None]
NON_SQUARE_CASES = [name for name in CASES if name not in SQUARE_CASES]
PADDED_CASES = [name for name, case in CASES.items() if case.padded]
# The library checks neighbors is [V, V]; gather_sum is the library op, so it is compared on
# square neighbourhoods only (see test_gather_sum_rejects_non_square_neighbors_like_the_library).
IMPL_CASES = ([(name, impl) for name in SQUARE_CASES for impl in IMPLEMENTATIONS]
              + [(name, impl) for name in NON_SQUARE_CASES for impl in IMPLEMENTATIONS
                 if impl != "gather_sum"])
OUTPUT_RTOL = 1e-5
GRADIENT_RTOL = 1e-4
FLOAT64_RTOL = 1e-10  # float64 against float64: only summation order differs
GRADIENT_SOURCES = ("data", "values") + VARIABLE_NAMES


def library_op(data, neighbors, sizes, var_u, var_v, var_c, var_w, var_b, xla=False):
    """The library op with a square [.., V, V] neighbourhood: a [V, V'] adjacency has the same
    entries in the [V, V] matrix, since its columns index rows of data."""
    del xla
    square = tf.SparseTensor(neighbors.indices, neighbors.values,
                             tf.concat([tf.shape(data, tf.int64)[:-1],
                                        tf.shape(data, tf.int64)[-2:-1]], axis=0))
    return graph_convolution.feature_steered_convolution(
        data, square, sizes, var_u, var_v, var_c, var_w, var_b)


def evaluate(impl: str, case_name: str, dtype, xla: bool, tie: bool = False):
    """`output_and_gradients` of `impl` (a name, or "library") on the random graph and
    variables of `case_name`."""
    case = CASES[case_name]
    graph = random_graph(case, seed=len(case_name))
    op = library_op if impl == "library" else implementation(impl, graph.max_degree)
    variables = random_variables(case.num_channels, case.num_weight_matrices,
                                 case.num_output_channels, seed=len(case_name))
    return output_and_gradients(op, graph, variables, dtype, xla, tie)


@functools.lru_cache(maxsize=None)
def reference(case_name: str, tie: bool = False):
    return evaluate("library", case_name, tf.float64, xla=False, tie=tie)


@functools.lru_cache(maxsize=None)
def float32_result(case_name: str, impl: str, xla: bool):
    return evaluate(impl, case_name, tf.float32, xla)


@pytest.mark.parametrize("xla", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("case_name,impl", IMPL_CASES)
def test_output_matches_float64_library(case_name, impl, xla):
    output, _ = float32_result(case_name, impl, xla)
    expected, _ = reference(case_name)
    assert_close_to_max(output, expected, OUTPUT_RTOL, "output")


@pytest.mark.parametrize("xla", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("case_name,impl", IMPL_CASES)
def test_gradients_match_float64_library(case_name, impl, xla):
    _, gradients = float32_result(case_name, impl, xla)
    _, expected = reference(case_name)
    assert set(gradients) == set(GRADIENT_SOURCES)
    steering = ("var_u", "var_v", "var_c")
    for name in GRADIENT_SOURCES:
        if CASES[case_name].num_weight_matrices == 1 and name in steering:
            continue
        assert_close_to_max(gradients[name], expected[name], GRADIENT_RTOL, f"d/d{name}")


@pytest.mark.parametrize("xla", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("impl", sorted(IMPLEMENTATIONS))
def test_one_weight_matrix_gives_zero_gradient_to_u_v_c(impl, xla):
    """With W = 1 the softmax is identically 1, so u, v and c get a zero gradient; float32
    leaves round-off, bounded relative to the largest gradient (that of w)."""
    _, gradients = float32_result("one_weight_matrix_batched_padded", impl, xla)
    _, expected = reference("one_weight_matrix_batched_padded")
    scale = max(np.max(np.abs(g)) for g in expected.values())
    for name in ("var_u", "var_v", "var_c"):
        assert np.max(np.abs(expected[name])) <= 1e-12 * scale, name
        assert np.max(np.abs(gradients[name])) <= GRADIENT_RTOL * scale, name


@pytest.mark.parametrize("xla", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("case_name,impl", [(name, impl) for name, impl in IMPL_CASES
                                             if name in PADDED_CASES])
def test_padded_rows_of_output_are_exactly_zero(case_name, impl, xla):
    case = CASES[case_name]
    sizes = random_graph(case, seed=len(case_name)).sizes.reshape(-1)
    output, _ = float32_result(case_name, impl, xla)
    expected, _ = reference(case_name)
    output = output.reshape((-1,) + output.shape[-2:])
    assert np.any(sizes < case.num_vertices)
    for graph, size in enumerate(sizes):
        np.testing.assert_array_equal(output[graph, size:], 0.0)
        np.testing.assert_array_equal(expected.reshape(output.shape)[graph, size:], 0.0)


@pytest.mark.parametrize("impl", sorted(IMPLEMENTATIONS))
def test_translation_invariant_tie_gradients_match_library_in_float64(impl):
    """var_v = -var_u is applied outside the op, so eager covers the tie (the jit backward
    of every op is checked above)."""
    case_name = "batched_padded_weighted"
    output, gradients = evaluate(impl, case_name, tf.float64, xla=False, tie=True)
    expected_output, expected = reference(case_name, tie=True)
    assert_close_to_max(output, expected_output, FLOAT64_RTOL, "output")
    assert set(gradients) == set(GRADIENT_SOURCES) - {"var_v"}
    for name in gradients:
        assert_close_to_max(gradients[name], expected[name], FLOAT64_RTOL, f"d/d{name}")


def test_gather_sum_rejects_non_square_neighbors_like_the_library():
    graph = random_graph(CASES["non_square_weighted"])
    variables = random_variables(3, 4, 4)
    with pytest.raises(ValueError, match="neighbors"):
        IMPLEMENTATIONS["gather_sum"](tf.constant(graph.data), graph.neighbors(), None,
                                      **variables)


@pytest.mark.parametrize("xla", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("impl", ["block_sparse", "sparse_matmul", "gather_matmul"])
def test_hand_written_gradients_match_numerical_jacobian(impl, xla):
    """Checks the hand-written gradients (`tf.custom_gradient`) of every input, including the
    adjacency values, against central differences in float64 (delta 1e-6: truncation error
    ~1e-12, round-off ~1e-10 relative), with steering weights large enough that the softmax
    is far from uniform."""
    case = GraphCase("tiny", num_vertices=4, num_channels=2, num_output_channels=2,
                     num_weight_matrices=3, weighted=True)
    graph = random_graph(case, seed=3)
    variables = random_variables(2, 3, 2, seed=3, stddev=1.0)
    args = [graph.data, graph.values] + [variables[name] for name in VARIABLE_NAMES]
    args = [tf.constant(a, tf.float64) for a in args]
    op = implementation(impl, graph.max_degree)

    def convolution(data, values, var_u, var_v, var_c, var_w, var_b):
        return op(data, graph.neighbors(values=values), None, var_u, var_v, var_c, var_w, var_b,
                  xla=xla)

    if xla:
        convolution = tf.function(convolution, jit_compile=True)
    theoretical, numerical = tf.test.compute_gradient(convolution, args, delta=1e-6)
    for name, analytic, numeric in zip(GRADIENT_SOURCES, theoretical, numerical):
        assert np.max(np.abs(numeric)) > 0, name
        assert_close_to_max(analytic, numeric, 1e-7, f"Jacobian w.r.t. {name}")

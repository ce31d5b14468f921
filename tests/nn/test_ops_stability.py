"""Feature-steered convolution at large input magnitudes (coordinates in millimetres).

With vertex coordinates of ~1e3 and variables of stddev 0.5 the softmax logits reach
thousands of nats. The library's softmax is not max-shifted, so exp overflows float32 (and
float64) to inf and the output becomes NaN. `block_sparse` (and every other implementation
that max-shifts its softmax, `EXACT_IMPLS`) stays exact; `sparse_matmul` stays finite everywhere and exact while the gap
S_i + T_j - max_m(s_im + t_jm) of its factorised exponents is below its ~80-nat cap.
Float64 references come from `feast_numpy` (max-shifted softmax) or float64 `block_sparse`.
"""

import functools

import numpy as np
import pytest
import tensorflow as tf

from helpers.graphs import (Graph, GraphCase, assert_close_to_max, feast_numpy, implementation,
                    output_and_gradients, random_graph, random_variables)
from meshseg.nn.ops import IMPLEMENTATIONS
from meshseg.nn.ops.sparse_matmul import MAX_EDGE_LOG_SCALE

MILLIMETRES = 1000.0
CASE = GraphCase("millimetres", batch_shape=(2,), num_vertices=12, num_weight_matrices=8,
                 padded=True)
# Every implementation except the library reference promises finite results at any scale.
STABLE_IMPLS = sorted(set(IMPLEMENTATIONS) - {"gather_sum"})
EXACT_IMPLS = [impl for impl in STABLE_IMPLS if impl != "sparse_matmul"]
XLA = pytest.mark.parametrize("xla", [False, True], ids=["eager", "jit"])


def millimetre_graph():
    """Random coordinates of magnitude ~1e3 with random variables (stddev 0.5)."""
    return (random_graph(CASE, seed=1, data_scale=MILLIMETRES),
            random_variables(CASE.num_channels, CASE.num_weight_matrices,
                             CASE.num_output_channels, seed=1))


@functools.lru_cache(maxsize=None)
def millimetre_result(impl: str, xla: bool):
    """float32 output and gradients of `impl` on `millimetre_graph()`."""
    graph, variables = millimetre_graph()
    return output_and_gradients(implementation(impl, graph.max_degree), graph, variables,
                                tf.float32, xla)


def small_gap_graph():
    """Coordinates 1000 d + N(0, 1) along one direction d, with u = v whose columns differ
    by 1e-3: logits ~1e3 nats, but one m maximises s_i and t_j together (gap 0) and the
    softmax spreads over a few nats, so it is far from one-hot."""
    graph, variables = millimetre_graph()
    rng = np.random.default_rng(5)
    direction = rng.normal(size=3)
    direction /= np.linalg.norm(direction)
    data = MILLIMETRES * direction + rng.normal(size=graph.data.shape)
    common = rng.normal(size=(3, 1))
    var_u = common + 1e-3 * rng.normal(size=(3, CASE.num_weight_matrices))
    variables = dict(variables, var_u=var_u.astype(np.float32), var_v=var_u.astype(np.float32))
    return graph._replace(data=data.astype(np.float32)), variables


def edges_2d(graph: Graph):
    """(data [N, C], rows [E], cols [E]) of the batch flattened to one graph."""
    num_vertices = graph.data.shape[-2]
    offset = graph.indices[:, 0] * num_vertices
    return (graph.data.reshape(-1, graph.data.shape[-1]),
            offset + graph.indices[:, 1], offset + graph.indices[:, 2])


def float64_softmax_reference(graph: Graph, variables):
    """`feast_numpy` on the flattened batch, padded rows zeroed: [B, V, D] float64."""
    data, rows, cols = edges_2d(graph)
    out = feast_numpy(data, rows, cols, graph.values, **variables).reshape(
        graph.data.shape[:-1] + (-1,))
    valid = np.arange(graph.data.shape[-2]) < graph.sizes[:, np.newaxis]
    return out * valid[..., np.newaxis]


def logit_stats(graph: Graph, variables):
    """(max |logit| over edges, max gap of sparse_matmul's factorised exponents)."""
    data, rows, cols = edges_2d(graph)
    s = data @ variables["var_u"] + variables["var_c"]
    t = data @ variables["var_v"]
    logits = s[rows] + t[cols]
    gap = s.max(axis=-1)[rows] + t.max(axis=-1)[cols] - logits.max(axis=-1)
    return np.abs(logits).max(), gap.max()


def logit_rounding_rtol(graph: Graph, variables) -> float:
    """Tolerance for float32 against float64: a float32 logit of size L is off by a few
    eps * L nats, which perturbs each q_m, and so the output, by that much relative."""
    return 8 * np.finfo(np.float32).eps * logit_stats(graph, variables)[0]


@pytest.mark.parametrize("inputs", [millimetre_graph, small_gap_graph])
def test_library_reference_overflows_at_millimetre_scale(inputs):
    graph, variables = inputs()
    output, _ = output_and_gradients(IMPLEMENTATIONS["gather_sum"], graph, variables,
                                     tf.float32, xla=False)
    assert not np.all(np.isfinite(output))
    assert np.all(np.isfinite(float64_softmax_reference(graph, variables)))


def test_millimetre_inputs_exceed_the_sparse_matmul_exact_range():
    max_logit, max_gap = logit_stats(*millimetre_graph())
    assert max_logit > 1000.0
    assert max_gap > MAX_EDGE_LOG_SCALE


@XLA
@pytest.mark.parametrize("impl", STABLE_IMPLS)
def test_outputs_and_gradients_are_finite_at_millimetre_scale(impl, xla):
    output, gradients = millimetre_result(impl, xla)
    assert np.all(np.isfinite(output))
    for name, gradient in gradients.items():
        assert np.all(np.isfinite(gradient)), name
    assert np.max(np.abs(gradients["data"])) > 0


@XLA
@pytest.mark.parametrize("impl", EXACT_IMPLS)
def test_matches_float64_at_millimetre_scale(impl, xla):
    """Output against a max-shifted numpy softmax, gradients against float64 block_sparse
    (itself checked against the library and a numerical Jacobian)."""
    graph, variables = millimetre_graph()
    output, gradients = millimetre_result(impl, xla)
    assert_close_to_max(output, float64_softmax_reference(graph, variables),
                        logit_rounding_rtol(graph, variables), "output")
    _, expected = output_and_gradients(IMPLEMENTATIONS["block_sparse"], graph, variables,
                                       tf.float64, xla=False)
    for name, gradient in gradients.items():
        assert_close_to_max(gradient, expected[name], logit_rounding_rtol(graph, variables),
                            f"d/d{name}")


@XLA
def test_sparse_matmul_is_exact_at_large_magnitude_when_the_exponent_gap_is_small(xla):
    impl = "sparse_matmul"
    graph, variables = small_gap_graph()
    max_logit, max_gap = logit_stats(graph, variables)
    assert max_logit > 1000.0 and max_gap < 1.0
    output, _ = output_and_gradients(implementation(impl, graph.max_degree), graph, variables,
                                     tf.float32, xla)
    assert_close_to_max(output, float64_softmax_reference(graph, variables),
                        logit_rounding_rtol(graph, variables), "output")

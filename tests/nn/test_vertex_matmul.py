"""`meshseg.nn.ops.vertex_matmul`: tf.matmul's values and gradients, and `add_bias` the
broadcast add's, eager and under XLA, in float32 and float16, against a float64 evaluation."""

import numpy as np
import pytest
import tensorflow as tf

from meshseg.nn.ops.vertex_matmul import add_bias, vertex_matmul


def _values_and_gradients(matmul, x, w, dy, jit=False):
    @tf.function(jit_compile=jit)
    def run(x, w):
        with tf.GradientTape() as tape:
            tape.watch([x, w])
            y = matmul(x, w)
            loss = tf.reduce_sum(y * tf.cast(dy, y.dtype))
        return (y, *tape.gradient(loss, [x, w]))

    return [t.numpy().astype(np.float64) for t in run(x, w)]


@pytest.mark.parametrize("dtype, jit, tolerance", [
    (tf.float32, False, 1e-5), (tf.float32, True, 1e-5), (tf.float16, False, 2e-2)])
def test_values_and_gradients_match_a_float64_matmul(dtype, jit, tolerance):
    rng = np.random.default_rng(0)
    x, w, dy = rng.normal(size=(300, 24)), rng.normal(size=(24, 10)), rng.normal(size=(300, 10))
    expected = _values_and_gradients(tf.matmul, tf.constant(x), tf.constant(w), dy)
    got = _values_and_gradients(vertex_matmul, tf.constant(x, dtype), tf.constant(w, dtype),
                                dy, jit)
    assert got[2].shape == (24, 10) and got[1].shape == (300, 24)
    for value, reference in zip(got, expected):
        np.testing.assert_allclose(value, reference,
                                   atol=tolerance * np.abs(reference).max())


def test_the_gradient_ops_are_named_in_the_forward_layer_scope():
    w = tf.Variable(tf.ones([3, 2]))

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            with tf.name_scope("lin_out"):
                y = vertex_matmul(x, w)
            loss = tf.reduce_sum(y)
        with tf.name_scope("backward"):
            return tape.gradient(loss, [x, w])

    graph = step.get_concrete_function(tf.ones([5, 3])).graph
    matmuls = [op.name for op in graph.get_operations() if op.type == "MatMul"]
    assert len(matmuls) == 3  # the product and the two gradients
    assert all(name.startswith("lin_out/") for name in matmuls)


@pytest.mark.parametrize("dtype, jit, tolerance", [
    (tf.float32, False, 1e-5), (tf.float32, True, 1e-5), (tf.float16, False, 2e-3),
    (tf.bfloat16, False, 1e-2)])
def test_add_bias_matches_a_float64_broadcast_add(dtype, jit, tolerance):
    rng = np.random.default_rng(1)
    y, bias, dy = rng.normal(size=(5000, 7)), rng.normal(size=7), rng.normal(size=(5000, 7))
    expected = [y + bias, dy, dy.sum(axis=0)]

    @tf.function(jit_compile=jit)
    def run(y, bias):
        with tf.GradientTape() as tape:
            tape.watch([y, bias])
            out = add_bias(y, bias)  # bias stays float32, as a layer's variable
            loss = tf.reduce_sum(tf.cast(out, tf.float32) * tf.constant(dy, tf.float32))
        return (out, *tape.gradient(loss, [y, bias]))

    got = run(tf.constant(y, dtype), tf.constant(bias, tf.float32))
    assert got[0].dtype == dtype and got[2].dtype == tf.float32 and got[2].shape == (7,)
    for value, reference in zip(got, expected):
        np.testing.assert_allclose(tf.cast(value, tf.float64).numpy(), reference,
                                   atol=tolerance * np.abs(reference).max())


def test_the_bias_gradient_is_named_in_the_forward_layer_scope():
    bias = tf.Variable(tf.zeros([2]))

    @tf.function
    def step(y):
        with tf.GradientTape() as tape:
            with tf.name_scope("lin_out"):
                out = add_bias(y, bias)
            loss = tf.reduce_sum(out)
        with tf.name_scope("backward"):
            return tape.gradient(loss, bias)

    graph = step.get_concrete_function(tf.ones([5, 2])).graph
    matmuls = [op.name for op in graph.get_operations() if op.type == "MatMul"]
    assert len(matmuls) == 1 and matmuls[0].startswith("lin_out/")

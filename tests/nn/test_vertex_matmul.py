"""`meshseg.nn.ops.vertex_matmul`: tf.matmul's values and gradients (with bias and ReLU:
`vertex_dense`), eager and under XLA, in float32, float16 and bfloat16, against a float64
evaluation."""

import numpy as np
import pytest
import tensorflow as tf

from meshseg.nn.ops.vertex_matmul import vertex_dense, vertex_matmul


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


@pytest.mark.parametrize("bias, relu", [(True, True), (True, False), (False, True)],
                         ids=["bias_relu", "bias", "relu"])
@pytest.mark.parametrize("dtype, jit, tolerance", [
    (tf.float32, False, 1e-5), (tf.float32, True, 1e-5), (tf.bfloat16, False, 3e-2)])
def test_dense_values_and_gradients_match_a_float64_dense_layer(bias, relu, dtype, jit,
                                                                 tolerance):
    rng = np.random.default_rng(1)
    x, w, dy = rng.normal(size=(300, 24)), rng.normal(size=(24, 10)), rng.normal(size=(300, 10))
    b = rng.normal(size=10) if bias else None

    def reference(x, w, b):
        y = tf.matmul(x, w) + (b if bias else 0.0)
        return tf.nn.relu(y) if relu else y

    def run(layer, dtype, jit):
        @tf.function(jit_compile=jit)
        def values_and_gradients(x, w, b):
            with tf.GradientTape() as tape:
                tape.watch([x, w, b])
                y = layer(x, w, b if bias else None)
                loss = tf.reduce_sum(y * tf.cast(dy, y.dtype))
            return (y, *tape.gradient(loss, [x, w, b]))

        arguments = [tf.constant(value, dtype)
                     for value in (x, w, np.zeros(10) if b is None else b)]
        return [None if t is None else t.numpy().astype(np.float64)
                for t in values_and_gradients(*arguments)]

    # bfloat16 rounds some pre-activations near 0 to the other side of the ReLU, so its
    # reference is the unfused layer in bfloat16; float32's is the float64 evaluation
    expected = run(reference, tf.float64 if dtype == tf.float32 else dtype, False)
    got = run(lambda x, w, b: vertex_dense(x, w, b, relu=relu), dtype, jit)
    assert (expected[0] <= 0).any() and (expected[0] > 0).any()  # ReLU on and off
    compared = 4 if bias else 3  # y, dL/dx, dL/dw and dL/db
    for value, want in zip(got[:compared], expected[:compared]):
        np.testing.assert_allclose(value, want, atol=tolerance * np.abs(want).max())


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

"""`PointwiseConv1D` is `keras.layers.Conv1D(filters, 1)` with the same variables, computed
as a matmul: same values and gradients, eager and under XLA, and it saves and loads."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from meshseg.nn.layers import PointwiseConv1D


def pair(activation):
    """A Conv1D(5, 1) and a PointwiseConv1D(5) holding the same weights, built on C = 3."""
    conv = keras.layers.Conv1D(5, 1, activation=activation, bias_initializer="random_normal")
    pointwise = PointwiseConv1D(5, activation=activation)
    conv.build((None, None, 3))
    pointwise.build((None, None, 3))
    pointwise.set_weights(conv.get_weights())
    return conv, pointwise


def values_and_gradients(layer, inputs, jit):
    def run(inputs):
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            outputs = layer(inputs)
            loss = tf.reduce_sum(outputs * tf.range(5, dtype=outputs.dtype))
        return outputs, tape.gradient(loss, [inputs] + layer.trainable_variables)

    return tf.function(run, jit_compile=True)(inputs) if jit else run(inputs)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("activation", [None, "relu"])
def test_values_and_gradients_equal_a_1x1_conv1d(activation, jit):
    conv, pointwise = pair(activation)
    assert [w.shape for w in pointwise.weights] == [(1, 3, 5), (5,)]
    inputs = tf.constant(np.random.default_rng(0).normal(size=(2, 7, 3)), tf.float32)
    expected, expected_gradients = values_and_gradients(conv, inputs, jit=False)
    outputs, gradients = values_and_gradients(pointwise, inputs, jit)
    assert outputs.shape == (2, 7, 5)
    np.testing.assert_allclose(outputs, expected, rtol=1e-5, atol=1e-6)
    for gradient, expected_gradient in zip(gradients, expected_gradients):
        np.testing.assert_allclose(gradient, expected_gradient, rtol=1e-5, atol=1e-5)


def test_saves_and_loads_with_its_weights(tmp_path):
    inputs = keras.Input((None, 3))
    model = keras.Model(inputs, PointwiseConv1D(4, activation="relu", name="lin")(inputs))
    path = str(tmp_path / "pointwise.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    data = np.random.default_rng(1).normal(size=(1, 6, 3)).astype(np.float32)
    assert isinstance(loaded.get_layer("lin"), PointwiseConv1D)
    np.testing.assert_array_equal(loaded(data), model(data))

"""PhiloxDropout: Keras' Dropout semantics, with its mask drawn by Philox (fast under XLA)."""

import numpy as np
import pytest
import tensorflow as tf

from meshseg.nn.layers import PhiloxDropout

RATE = 0.25


def test_training_zeroes_about_rate_of_the_entries_and_rescales_the_rest():
    x = tf.random.stateless_uniform([4000, 25], [0, 1], minval=1.0, maxval=2.0)
    y = PhiloxDropout(RATE, seed=3)(x, training=True).numpy()
    dropped = y == 0
    assert abs(dropped.mean() - RATE) < 0.01  # 100,000 entries: sd of the share 0.0014
    np.testing.assert_allclose(y[~dropped], x.numpy()[~dropped] / (1 - RATE), rtol=1e-6)


def test_inference_and_rate_zero_return_the_input_unchanged():
    x = tf.random.normal([50, 8])
    np.testing.assert_array_equal(PhiloxDropout(RATE)(x, training=False), x)
    np.testing.assert_array_equal(PhiloxDropout(0.0)(x, training=True), x)


@pytest.mark.parametrize("xla", [False, True], ids=["eager", "jit"])
def test_the_same_seed_gives_the_same_masks_and_each_call_a_new_one(xla):
    """Reproducible for a seed, eagerly and under XLA (TensorFlow does not promise the same
    Philox stream across the two, so they are not compared with each other)."""
    x = tf.ones([300, 16])
    masks = []
    for _ in range(2):
        layer = PhiloxDropout(RATE, seed=7)
        call = tf.function(lambda t, layer=layer: layer(t, training=True), jit_compile=True) \
            if xla else (lambda t, layer=layer: layer(t, training=True))
        masks.append([call(x).numpy() for _ in range(2)])
    np.testing.assert_array_equal(masks[0], masks[1])
    assert not np.array_equal(masks[0][0], masks[0][1])
    assert abs((masks[0][0] == 0).mean() - RATE) < 0.03


def test_the_gradient_is_the_mask_over_the_keep_probability():
    x = tf.random.normal([200, 10])
    layer = PhiloxDropout(RATE, seed=1)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=True)
    gradient = tape.gradient(y, x).numpy()
    np.testing.assert_allclose(gradient, (y.numpy() != 0) / (1 - RATE), rtol=1e-6)


def test_low_precision_inputs_keep_their_dtype():
    x = tf.ones([64, 4], tf.float16)
    y = PhiloxDropout(RATE, seed=2, dtype="mixed_float16")(x, training=True)
    assert y.dtype == tf.float16
    assert set(np.unique(y.numpy())) <= {0.0, np.float16(1 / (1 - RATE))}


def test_rate_one_zeroes_everything_with_a_zero_gradient():
    x = tf.random.normal([20, 3])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = PhiloxDropout(1.0)(x, training=True)
    np.testing.assert_array_equal(y, np.zeros([20, 3]))
    np.testing.assert_array_equal(tape.gradient(y, x), np.zeros([20, 3]))


def test_a_noise_shape_is_refused():
    with pytest.raises(ValueError, match="noise_shape"):
        PhiloxDropout(RATE, noise_shape=(None, 1))

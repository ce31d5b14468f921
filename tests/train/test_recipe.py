"""The training recipe's options: label smoothing, class weights, AdamW and the cosine schedule."""

import numpy as np
import pytest
import tensorflow as tf

from meshseg.config import OptimizerConfig
from meshseg.train.loop.metrics import MaskedCrossEntropy, class_weights, masked_cross_entropy
from meshseg.train.run import build_optimizer, learning_rate_schedule

LABELS = tf.constant([[0, 2, 1, -1]], tf.int32)
LOGITS = tf.constant([[[2.0, 0.5, -1.0], [0.1, 0.2, 3.0], [1.0, 1.0, 1.0], [9.0, -9.0, 0.0]]])


def reference_loss(labels, logits, smoothing, weights=None):
    """Per-vertex cross-entropy against explicitly smoothed one-hot targets, weighted."""
    labels, logits = labels.numpy()[0], logits.numpy()[0].astype(np.float64)
    real = labels >= 0
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    targets = np.eye(logits.shape[-1])[np.where(real, labels, 0)] * (1 - smoothing)
    targets += smoothing / logits.shape[-1]
    losses = -(targets * log_p).sum(-1)
    w = np.ones_like(losses) if weights is None else np.asarray(weights)[np.where(real, labels, 0)]
    return (losses * w * real).sum() / real.sum()


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.5])
def test_label_smoothing_equals_smoothed_one_hot_targets(smoothing):
    loss = masked_cross_entropy(LABELS, LOGITS, smoothing)
    np.testing.assert_allclose(float(loss), reference_loss(LABELS, LOGITS, smoothing), rtol=1e-5)


def test_class_weights_weigh_each_vertex_by_its_class():
    weights = [0.5, 2.0, 1.0]
    loss = MaskedCrossEntropy(0.1, weights)(LABELS, LOGITS)
    np.testing.assert_allclose(float(loss), reference_loss(LABELS, LOGITS, 0.1, weights),
                               rtol=1e-5)


def test_inverse_sqrt_frequency_weights():
    histogram = np.array([900, 100, 0, 0])
    weights = class_weights(histogram, "inverse_sqrt_frequency")
    # 1 / sqrt(share), normalised so the average training vertex weighs 1.
    np.testing.assert_allclose(weights[1] / weights[0], 3.0, rtol=1e-6)
    np.testing.assert_allclose((weights * histogram).sum() / histogram.sum(), 1.0, rtol=1e-6)
    assert weights[2] == weights[3] == 0.0
    assert class_weights(histogram, "none") is None


def test_cosine_schedule_warms_up_then_decays_to_zero():
    settings = OptimizerConfig(name="adamw", learning_rate=1e-3, schedule="cosine",
                               warmup_steps=10, weight_decay=0.01)
    schedule = learning_rate_schedule(settings, steps=110)
    rates = [float(schedule(step)) for step in (0, 5, 10, 60, 110)]
    np.testing.assert_allclose(rates, [0.0, 5e-4, 1e-3, 5e-4, 0.0], atol=1e-9)


def test_adamw_decays_weights_without_gradient():
    variable = tf.Variable([1.0, -2.0])
    settings = OptimizerConfig(name="adamw", learning_rate=0.1, schedule="exponential",
                               decay_steps=1000, decay_rate=1.0, weight_decay=0.5)

    class Holder:
        trainable_variables = [variable]

    optimizer = build_optimizer(Holder(), settings, "float32", steps=10)
    optimizer.apply_gradients([(tf.zeros(2), variable)])
    # Decoupled decay: w <- w - learning_rate * weight_decay * w; Adam's step is 0 here.
    np.testing.assert_allclose(variable.numpy(), [0.95, -1.9], rtol=1e-6)

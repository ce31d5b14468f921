"""Evaluation on a split: per-vertex accuracy, mean IoU and the majority-class baseline."""

from typing import Dict

import keras
import numpy as np
import tensorflow as tf

from meshseg.data.pipeline import without_mesh_ids
from meshseg.metrics import ConfusionMatrix, majority_baseline


def make_predict_step(model: keras.Model, jit: bool):
    """A `tf.function` (XLA-compiled when `jit`) mapping features to logits [B, V, K]."""
    step = tf.function(lambda features: model(features, training=False), jit_compile=jit)
    return lambda features: step(without_mesh_ids(features))


def evaluate(predict_step, dataset: tf.data.Dataset, num_classes: int,
             train_histogram: np.ndarray) -> Dict[str, float]:
    """Evaluates over one pass of `dataset`.

    Returns:
      dict with `accuracy` and `majority_baseline_accuracy` (fractions of real vertices) and
      `mean_iou` (over classes present in labels or predictions).
    """
    confusion = ConfusionMatrix(num_classes)
    for features, labels in dataset:
        confusion.update_state(labels, predict_step(features))
    matrix = confusion.confusion()
    true_counts = matrix.sum(axis=1)
    return {
        "accuracy": float(np.trace(matrix) / max(true_counts.sum(), 1)),
        "mean_iou": float(confusion.result()),
        "majority_baseline_accuracy": majority_baseline(train_histogram, true_counts),
    }

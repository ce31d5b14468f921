"""Evaluation on a split: per-vertex accuracy, mean IoU, the majority-class baseline and
the accuracy on label boundaries and off them."""

from typing import Callable, Dict, Optional

import keras
import numpy as np
import tensorflow as tf

from meshseg.batch import without_mesh_ids
from meshseg.train.loop.metrics import (BoundaryAccuracy, ConfusionMatrix, majority_baseline,
                                        mean_iou)


def make_predict_step(model: keras.Model, jit: bool,
                      signature: Optional[Dict[str, tf.TensorSpec]] = None) -> Callable:
    """A `tf.function` (XLA-compiled when `jit`) mapping a batch's features to logits
    [B, V, K] (the string mesh ids are dropped first). Without `jit`, a `signature` (the
    features' element spec of the padded batches) makes one trace serve every padded
    shape; else it traces per shape (under XLA: once per bucket)."""
    def predict(features):
        return model(features, training=False)

    if signature is not None and not jit:
        step = tf.function(predict, input_signature=(without_mesh_ids(signature),))
    else:
        step = tf.function(predict, jit_compile=jit, reduce_retracing=not jit)
    return lambda features: step(without_mesh_ids(features))


def confusion_matrix(predict_step: Callable, dataset: tf.data.Dataset, num_classes: int,
                     boundary: Optional[BoundaryAccuracy] = None) -> np.ndarray:
    """int64 [K, K] per-vertex confusion over one pass of `dataset` (rows: true class,
    columns: predicted), padded vertices left out; each batch also added to `boundary`
    when given (accuracy on and off label boundaries)."""
    confusion = ConfusionMatrix(num_classes)
    for features, labels in dataset:
        logits = predict_step(features)
        confusion.update_state(labels, logits)
        if boundary is not None:
            boundary.update_state(labels.numpy(), tf.argmax(logits, axis=-1).numpy(),
                                  features["edges"].numpy())
    return confusion.confusion()


def scores(confusion: np.ndarray, train_histogram: np.ndarray) -> Dict[str, float]:
    """`accuracy` (fraction of vertices right), `mean_iou` (over classes present in labels
    or predictions) and `majority_baseline_accuracy` (always predicting the most frequent
    training class) of a confusion matrix [K, K]."""
    true_counts = confusion.sum(axis=1)
    return {
        "accuracy": float(np.trace(confusion) / max(true_counts.sum(), 1)),
        "mean_iou": mean_iou(confusion),
        "majority_baseline_accuracy": majority_baseline(train_histogram, true_counts),
    }


def evaluate(predict_step: Callable, dataset: tf.data.Dataset, num_classes: int,
             train_histogram: np.ndarray) -> Dict[str, float]:
    """`scores` of one pass of `dataset`, with `boundary_accuracy` and `interior_accuracy`
    (`BoundaryAccuracy`: on label boundaries and off them), as the run logs them to
    `eval/` and `validation/`."""
    boundary = BoundaryAccuracy()
    results = scores(confusion_matrix(predict_step, dataset, num_classes, boundary),
                     train_histogram)
    split = boundary.result()
    return {**results, **{key: split[key] for key in ("boundary_accuracy", "interior_accuracy")}}

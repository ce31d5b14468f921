"""Masked per-vertex loss and metrics: padded vertices carry the label -1 and never count."""

from typing import Optional

import keras
import numpy as np
import tensorflow as tf

from meshseg.batch import LABEL_PADDING, real_vertices


def masked_cross_entropy(labels: tf.Tensor, logits: tf.Tensor, label_smoothing: float = 0.0,
                         class_weights=None) -> tf.Tensor:
    """Mean softmax cross-entropy over real vertices, with optional label smoothing and
    class weights.

    With smoothing e the target is (1 - e) one-hot + e / K uniform, computed without a
    one-hot tensor: (1 - e) CE + e (logsumexp(logits) - mean(logits)) (Szegedy et al.,
    "Rethinking the Inception Architecture", CVPR 2016).

    Args:
      labels: int32 [B, V], -1 on padded vertices.
      logits: float [B, V, K].
      label_smoothing: e in [0, 1).
      class_weights: optional float32 [K] weight of each class's vertices
        (`class_weights`); the sum stays divided by the number of real vertices.

    Returns:
      float32 scalar: sum of (weighted) per-vertex losses / number of real vertices (0 if
      none).
    """
    labels = tf.cast(labels, tf.int32)
    logits = tf.cast(logits, tf.float32)
    valid = labels != LABEL_PADDING
    safe_labels = tf.where(valid, labels, 0)
    losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=safe_labels, logits=logits)
    if label_smoothing:
        uniform = tf.reduce_logsumexp(logits, axis=-1) - tf.reduce_mean(logits, axis=-1)
        losses = (1.0 - label_smoothing) * losses + label_smoothing * uniform
    weights = tf.cast(valid, tf.float32)
    weighted = weights
    if class_weights is not None:
        weighted = weights * tf.gather(tf.constant(class_weights, tf.float32), safe_labels)
    return tf.math.divide_no_nan(tf.reduce_sum(losses * weighted), tf.reduce_sum(weights))


def class_weights(histogram: np.ndarray, kind: str) -> Optional[np.ndarray]:
    """Per-class loss weights from the training split's class histogram (`loss.class_weights`).

    Args:
      histogram: int [K] training vertices of each class.
      kind: "none" or "inverse_sqrt_frequency": class c weighs 1 / sqrt(share of c),
        scaled so the average training vertex weighs 1; classes absent from the training
        split weigh 0 (they have no vertices to weigh).

    Returns:
      float32 [K], or None for "none".
    """
    if kind == "none":
        return None
    counts = np.asarray(histogram, np.float64)
    weights = np.zeros_like(counts)
    present = counts > 0
    weights[present] = 1.0 / np.sqrt(counts[present] / counts.sum())
    weights *= counts.sum() / (weights * counts).sum()
    return weights.astype(np.float32)


def correct_vertices(labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
    """Number of real vertices whose argmax class is their label (float32 scalar)."""
    hits = tf.cast(tf.argmax(logits, -1, output_type=tf.int32) == labels, tf.float32)
    return tf.reduce_sum(hits * real_vertices(labels))


def batch_accuracy(labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
    """Per-vertex accuracy of one batch over real vertices (float32 scalar)."""
    return tf.math.divide_no_nan(correct_vertices(labels, logits),
                                 tf.reduce_sum(real_vertices(labels)))


@keras.saving.register_keras_serializable(package="meshseg")
class MaskedCrossEntropy(keras.losses.Loss):
    """`masked_cross_entropy` as a loss object (y_true [B, V], y_pred [B, V, K]): the custom
    loop's train step calls it, and it is `Model.fit`'s loss.

    Args:
      label_smoothing: e in [0, 1) (`loss.label_smoothing`).
      class_weights: optional list of K per-class weights (`class_weights`).
    """

    def __init__(self, label_smoothing: float = 0.0, class_weights=None,
                 name="masked_cross_entropy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.label_smoothing = float(label_smoothing)
        self.class_weights = None if class_weights is None else [float(w) for w in class_weights]

    def call(self, y_true, y_pred):
        return masked_cross_entropy(y_true, y_pred, self.label_smoothing, self.class_weights)

    def get_config(self):
        return {**super().get_config(), "label_smoothing": self.label_smoothing,
                "class_weights": self.class_weights}


@keras.saving.register_keras_serializable(package="meshseg")
class ConfusionMatrix(keras.metrics.Metric):
    """Per-vertex confusion matrix [K, K] (rows: true class, columns: predicted) over real vertices.

    `result()` is the mean IoU over classes that occur in the labels or the predictions;
    `confusion()` returns the matrix as int64 numpy for per-class IoU.
    """

    def __init__(self, num_classes: int, name="mean_iou", **kwargs):
        super().__init__(name=name, **kwargs)
        self.num_classes = num_classes
        self.matrix = self.add_variable(shape=(num_classes, num_classes), initializer="zeros",
                                        name="matrix", dtype="float64")

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true = tf.reshape(tf.cast(y_true, tf.int32), [-1])
        y_pred = tf.reshape(tf.argmax(y_pred, axis=-1, output_type=tf.int32), [-1])
        valid = y_true != LABEL_PADDING
        self.matrix.assign_add(tf.math.confusion_matrix(
            tf.boolean_mask(y_true, valid), tf.boolean_mask(y_pred, valid),
            num_classes=self.num_classes, dtype=tf.float64))

    def result(self):
        return tf.constant(mean_iou(self.confusion()), tf.float32)

    def confusion(self) -> np.ndarray:
        return np.asarray(self.matrix.numpy(), dtype=np.int64)

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes}


def per_class_iou(confusion: np.ndarray) -> np.ndarray:
    """float64 [K] IoU of each class of a confusion matrix [K, K] (rows true, columns
    predicted): TP / (TP + FP + FN); NaN for a class absent from labels and predictions."""
    confusion = np.asarray(confusion, np.float64)
    true_pos = np.diag(confusion)
    union = confusion.sum(0) + confusion.sum(1) - true_pos
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(union > 0, true_pos / union, np.nan)


def mean_iou(confusion: np.ndarray) -> float:
    """Mean of `per_class_iou` over the classes that occur in labels or predictions (0 when
    none does)."""
    iou = per_class_iou(confusion)
    present = ~np.isnan(iou)
    return float(iou[present].mean()) if present.any() else 0.0


def iou_by_frequency(confusion: np.ndarray, groups: int = 4) -> list[dict]:
    """How rare classes fare: the classes that occur in the labels, sorted by their vertex
    count (the confusion matrix's row sums) and cut into `groups` groups of (nearly)
    equal size, rarest first.

    Args:
      confusion: int [K, K] confusion matrix (rows true class, columns predicted).
      groups: number of groups (fewer when fewer classes occur).

    Returns:
      one dict per group: "classes" (count), "min_vertices" and "max_vertices" (the
      group's range of true vertex counts), "mean_iou" (mean `per_class_iou` of the group);
      none for a matrix without labels.
    """
    confusion = np.asarray(confusion)
    support = confusion.sum(axis=1)
    present = np.flatnonzero(support > 0)
    if not len(present):
        return []
    order = present[np.argsort(support[present], kind="stable")]
    iou = per_class_iou(confusion)
    return [{"classes": len(part), "min_vertices": int(support[part].min()),
             "max_vertices": int(support[part].max()), "mean_iou": float(iou[part].mean())}
            for part in np.array_split(order, min(groups, len(present)))]


def boundary_vertices(labels: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Which vertices lie on a label boundary: those with a 1-ring neighbour of another
    true class.

    Args:
      labels: int [B, V] true classes, `LABEL_PADDING` on padded vertices.
      edges: int [B, E, 2] local (row i, neighbour j) pairs of each mesh's 1-ring, padded
        with (0, 0) (`meshseg.batch`), so padding marks nothing.

    Returns:
      bool [B, V]; False on padded vertices.
    """
    labels, edges = np.asarray(labels), np.asarray(edges)
    mesh = np.broadcast_to(np.arange(len(labels))[:, None], edges.shape[:2])
    rows, neighbours = edges[..., 0], edges[..., 1]
    differ = labels[mesh, rows] != labels[mesh, neighbours]
    boundary = np.zeros(labels.shape, bool)
    boundary[mesh[differ], rows[differ]] = True
    boundary[mesh[differ], neighbours[differ]] = True
    return boundary


class BoundaryAccuracy:
    """Per-vertex accuracy on label boundaries (`boundary_vertices`) and off them, summed
    over batches: where a segmentation's errors are. Segmentation errors gather where
    regions meet; this split tells a network that misses boundaries from one that misses
    regions."""

    def __init__(self):
        self.correct = np.zeros(2, np.int64)  # [interior, boundary]
        self.total = np.zeros(2, np.int64)

    def update_state(self, labels: np.ndarray, predictions: np.ndarray,
                     edges: np.ndarray) -> None:
        """Adds one batch: labels and predictions int [B, V] (`LABEL_PADDING` on padded
        vertices), edges int [B, E, 2] as `boundary_vertices` takes them."""
        labels, predictions = np.asarray(labels), np.asarray(predictions)
        real = labels != LABEL_PADDING
        on_boundary = boundary_vertices(labels, edges)[real].astype(np.int64)
        right = (predictions == labels)[real]
        self.total += np.bincount(on_boundary, minlength=2)
        self.correct += np.bincount(on_boundary, weights=right, minlength=2).astype(np.int64)

    def result(self) -> dict:
        """The split so far: a dict of "boundary_fraction" (of the vertices),
        "boundary_accuracy", "interior_accuracy" and "boundary_error_fraction" (of the
        errors), each in [0, 1]; 0 for an empty group."""
        errors = self.total - self.correct

        def fraction(part, whole) -> float:
            return float(part / whole) if whole else 0.0

        return {"boundary_fraction": fraction(self.total[1], self.total.sum()),
                "boundary_accuracy": fraction(self.correct[1], self.total[1]),
                "interior_accuracy": fraction(self.correct[0], self.total[0]),
                "boundary_error_fraction": fraction(errors[1], errors.sum())}


def majority_baseline(train_histogram: np.ndarray, confusion_true_counts: np.ndarray) -> float:
    """Accuracy of always predicting the most frequent training class.

    Args:
      train_histogram: int [K] vertex count per class in the training split.
      confusion_true_counts: int [K] vertex count per class in the evaluated split.

    Returns:
      fraction in [0, 1].
    """
    total = confusion_true_counts.sum()
    return float(confusion_true_counts[int(np.argmax(train_histogram))] / total) if total else 0.0

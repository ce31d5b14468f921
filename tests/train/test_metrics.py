"""meshseg.train.metrics: IoU of a known confusion matrix."""

import numpy as np

from meshseg.train.metrics import mean_iou, per_class_iou


def test_per_class_iou_of_a_known_confusion_matrix():
    confusion = np.array([[2, 1, 0], [0, 3, 0], [0, 0, 0]])
    iou = per_class_iou(confusion)
    np.testing.assert_allclose(iou[:2], [2 / 3, 3 / 4])
    assert np.isnan(iou[2])


def test_mean_iou_averages_the_classes_present_and_is_zero_without_any():
    assert mean_iou(np.array([[2, 1, 0], [0, 3, 0], [0, 0, 0]])) == (2 / 3 + 3 / 4) / 2
    assert mean_iou(np.zeros((3, 3), np.int64)) == 0.0

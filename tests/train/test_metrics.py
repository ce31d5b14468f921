"""meshseg.train.metrics: IoU of a known confusion matrix."""

import numpy as np

from meshseg.train.metrics import iou_by_frequency, mean_iou, per_class_iou


def test_per_class_iou_of_a_known_confusion_matrix():
    confusion = np.array([[2, 1, 0], [0, 3, 0], [0, 0, 0]])
    iou = per_class_iou(confusion)
    np.testing.assert_allclose(iou[:2], [2 / 3, 3 / 4])
    assert np.isnan(iou[2])


def test_mean_iou_averages_the_classes_present_and_is_zero_without_any():
    assert mean_iou(np.array([[2, 1, 0], [0, 3, 0], [0, 0, 0]])) == (2 / 3 + 3 / 4) / 2
    assert mean_iou(np.zeros((3, 3), np.int64)) == 0.0


def test_iou_by_frequency_groups_the_classes_present_rarest_first():
    # true vertex counts: class 0 absent, 1: 2, 2: 10, 3: 4, 4: 6 (classes 1 and 3 never right)
    confusion = np.zeros([5, 5], np.int64)
    confusion[1, 2] = 2
    confusion[2, 2] = 10
    confusion[3, 4] = 4
    confusion[4, 4] = 6
    groups = iou_by_frequency(confusion, groups=2)
    assert groups == [
        {"classes": 2, "min_vertices": 2, "max_vertices": 4, "mean_iou": 0.0},
        {"classes": 2, "min_vertices": 6, "max_vertices": 10,
         "mean_iou": (10 / 12 + 6 / 10) / 2}]
    assert len(iou_by_frequency(confusion, groups=8)) == 4  # no more groups than classes
    assert iou_by_frequency(np.zeros([3, 3], np.int64)) == []  # no labels, no groups

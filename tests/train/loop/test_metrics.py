"""meshseg.train.loop.metrics: IoU of a known confusion matrix; accuracy on and off label
boundaries of a known padded batch."""

import numpy as np

from meshseg.batch import LABEL_PADDING
from meshseg.train.loop.metrics import (BoundaryAccuracy, boundary_vertices, iou_by_frequency,
                                        mean_iou, per_class_iou)


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


def padded_batch():
    """Two meshes as a padded batch: a path 0-1-2-3 of classes [0, 0, 1, 1] and a triangle
    of one class (class 5; its fourth vertex and tenth edge are padding)."""
    path = [(i, i) for i in range(4)] + [(0, 1), (1, 0), (1, 2), (2, 1), (2, 3), (3, 2)]
    triangle = [(i, j) for i in range(3) for j in range(3)] + [(0, 0)]
    labels = np.array([[0, 0, 1, 1], [5, 5, 5, LABEL_PADDING]])
    return labels, np.array([path, triangle])


def test_boundary_vertices_are_those_with_a_neighbour_of_another_class():
    labels, edges = padded_batch()
    np.testing.assert_array_equal(boundary_vertices(labels, edges),
                                  [[False, True, True, False], [False, False, False, False]])
    # one direction of an edge marks both ends; every class different: every vertex
    one_way = np.array([[(0, 0), (1, 2), (2, 2)]])
    np.testing.assert_array_equal(boundary_vertices(np.array([[0, 0, 1, 1]]), one_way),
                                  [[False, True, True, False]])
    np.testing.assert_array_equal(boundary_vertices(np.array([[0, 1, 2, 3]]), edges[:1]),
                                  [[True, True, True, True]])


def test_boundary_accuracy_splits_the_errors_of_a_batch():
    labels, edges = padded_batch()
    predictions = np.array([[0, 1, 1, 0],   # vertex 1 (boundary) and 3 (interior) wrong
                            [5, 5, 4, 7]])  # vertex 2 (interior) wrong, padding ignored
    split = BoundaryAccuracy()
    split.update_state(labels, predictions, edges)
    assert split.result() == {"boundary_fraction": 2 / 7, "boundary_accuracy": 1 / 2,
                              "interior_accuracy": 3 / 5, "boundary_error_fraction": 1 / 3}
    split.update_state(labels, labels, edges)  # a second batch, all right
    assert split.result()["boundary_accuracy"] == 3 / 4
    assert BoundaryAccuracy().result()["boundary_accuracy"] == 0.0  # nothing added yet

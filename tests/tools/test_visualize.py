"""meshseg.tools.visualize: the evaluation notebook's tables and colours."""

import numpy as np

from meshseg.tools.visualize import face_labels, iou_table


def test_iou_table_lists_the_classes_present():
    confusion = np.array([[2, 1, 0], [0, 3, 0], [0, 0, 0]])
    assert "| 1 | 3 | 4 | 0.7500 |" in iou_table(confusion) and "\n| 2 |" not in iou_table(confusion)


def test_a_triangle_takes_the_label_of_the_majority_of_its_corners():
    labels = np.array([0, 1, 1, 2])
    triangles = np.array([[0, 1, 2], [1, 0, 3], [3, 0, 1], [0, 3, 3]])
    np.testing.assert_array_equal(face_labels(triangles, labels), [1, 1, 2, 2])

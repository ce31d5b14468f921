"""Specification of training-time augmentation (meshseg.data.pipeline.augment)."""

import numpy as np
import pytest
import tensorflow as tf

from meshseg.config import AugmentConfig
from meshseg.data.pipeline.augment import augment_vertices
from meshseg.data.pipeline.dataset import make_dataset
from meshseg.errors import ConfigError

SEED = tf.constant([3, 4], tf.int64)


def _points():
    return tf.constant(np.random.default_rng(0).normal(size=[20, 3]), tf.float32)


def test_up_rotation_keeps_the_up_coordinate_and_distances():
    points = _points()
    rotated = augment_vertices(points, SEED, AugmentConfig(rotation="up", up_axis=1))
    np.testing.assert_allclose(rotated[:, 1], points[:, 1], atol=1e-6)
    np.testing.assert_allclose(tf.norm(rotated, axis=1), tf.norm(points, axis=1), rtol=1e-5)
    assert not np.allclose(rotated, points, atol=1e-3)


def test_so3_rotation_keeps_distances_and_orientation():
    points = _points()
    rotated = augment_vertices(points, SEED, AugmentConfig(rotation="so3"))
    np.testing.assert_allclose(tf.norm(rotated, axis=1), tf.norm(points, axis=1), rtol=1e-5)
    transform, *_ = np.linalg.lstsq(points.numpy(), rotated.numpy(), rcond=None)
    assert np.linalg.det(transform) == pytest.approx(1.0, abs=1e-4)


def test_scaling_draws_one_factor_within_the_range():
    points = _points()
    scaled = augment_vertices(points, SEED, AugmentConfig(scale=[0.5, 0.6]))
    factor = scaled.numpy() / points.numpy()
    np.testing.assert_allclose(factor, factor[0, 0], rtol=1e-5)
    assert 0.5 <= factor[0, 0] <= 0.6


@pytest.mark.parametrize("fields, message", [
    ({"rotation": "spin"}, "rotation must be one of"),
    ({"up_axis": 3}, "up_axis must be 0, 1 or 2"),
    ({"scale": [1.2, 1.1]}, "0 < low <= high"),
])
def test_bad_settings_are_refused(fields, message):
    with pytest.raises(ConfigError, match=message):
        AugmentConfig(**fields).check()


def test_augmentation_keeps_shapes_edges_and_labels_and_is_off_for_evaluation(
        write_records, tetrahedron):
    augment = AugmentConfig(rotation="so3", scale=[0.5, 2.0])
    files = [write_records("one.tfrecords", [tetrahedron])]
    plain = next(iter(make_dataset(files, batch_size=1, training=False)))
    evaluated = next(iter(make_dataset(files, batch_size=1, training=False, augment=augment)))
    trained = next(iter(make_dataset(files, batch_size=1, training=True, seed=0,
                                     augment=augment)))
    for name in plain[0]:
        np.testing.assert_array_equal(evaluated[0][name], plain[0][name])
        assert trained[0][name].shape == plain[0][name].shape
        if name not in ("vertices", "inputs"):
            np.testing.assert_array_equal(trained[0][name], plain[0][name])
    np.testing.assert_array_equal(trained[1], plain[1])
    np.testing.assert_array_equal(trained[0]["inputs"], trained[0]["vertices"])  # xyz
    assert not np.allclose(trained[0]["vertices"], plain[0]["vertices"])

"""Fourier features of vertex positions (`meshseg.data.pipeline.positional`, data.features
xyz_fourier): values, width (data.fourier_octaves), and that a run computes them from the
augmented positions."""

import math

import numpy as np
import pytest
import tensorflow as tf
import trimesh

from meshseg.config import (FOURIER_OCTAVES, AugmentConfig, DataConfig, composed_config,
                            feature_widths)
from meshseg.data.features.stored import stored_features
from meshseg.data.pipeline.dataset import model_inputs, with_adjacency
from meshseg.data.pipeline.inputs import MeshInputs
from meshseg.data.pipeline.positional import fourier_features
from meshseg.data.records.parse import parse_mesh_record
from meshseg.data.records.schema import mesh_to_example
from meshseg.errors import ConfigError


@pytest.mark.parametrize("octaves", [FOURIER_OCTAVES, 8])
def test_each_octave_holds_sin_then_cos_of_x_y_z_at_pi_times_two_to_the_k(octaves):
    positions = np.array([[0.25, 0.0, -0.5], [0.1, 0.3, 0.7]], np.float32)
    encoded = fourier_features(tf.constant(positions), octaves).numpy()
    assert encoded.shape == (2, 6 * octaves) == (2, feature_widths(octaves)["xyz_fourier"])
    for k in range(octaves):
        angles = math.pi * 2 ** k * positions
        np.testing.assert_allclose(encoded[:, 6 * k:6 * k + 3], np.sin(angles), atol=1e-5)
        np.testing.assert_allclose(encoded[:, 6 * k + 3:6 * k + 6], np.cos(angles), atol=1e-5)
    assert encoded[0, 0] == np.float32(np.sin(math.pi / 4))


def test_the_width_is_static_for_any_leading_shape():
    spec = tf.TensorSpec([None, None, 3], tf.float32)
    traced = tf.function(fourier_features).get_concrete_function(spec)
    assert traced.output_shapes.as_list() == [None, None, feature_widths()["xyz_fourier"]]


def test_records_need_no_stored_field_and_a_run_encodes_the_augmented_positions():
    assert stored_features(["xyz", "xyz_fourier"]) == ()
    sphere = trimesh.creation.icosphere(subdivisions=2)
    vertices = np.asarray(sphere.vertices, np.float32)
    record = mesh_to_example(vertices, np.asarray(sphere.faces, np.int32),
                             np.zeros(len(vertices), np.int32))
    inputs = MeshInputs(features=("xyz_fourier", "xyz"), center="area_centroid",
                        scale="unit_area", fourier_octaves=7)
    features, _ = with_adjacency(parse_mesh_record(tf.constant(record)), inputs)
    augmented = model_inputs(features, inputs,
                             AugmentConfig(rotation="so3", scale=[0.8, 1.2], jitter=0.01),
                             tf.constant([5, 6], tf.int64))
    width = 6 * 7
    assert augmented["inputs"].shape == (len(vertices), width + 3)
    assert inputs.width == width + 3
    moved = augmented["vertices"]
    assert not np.allclose(moved, features["vertices"], atol=1e-3)
    np.testing.assert_allclose(augmented["inputs"][:, width:], moved)
    np.testing.assert_allclose(augmented["inputs"][:, :width], fourier_features(moved, 7))


def test_the_input_width_sums_the_feature_widths_at_the_runs_octaves():
    assert MeshInputs(features=("xyz",)).width == 3
    assert MeshInputs(features=("normals", "xyz", "hks")).width == 22
    assert MeshInputs(features=("xyz", "xyz_fourier", "hks")).width == 3 + 36 + 16
    eight = DataConfig(name="t", source="tfrecords", num_classes=2,
                       features=["xyz", "xyz_fourier", "hks"], fourier_octaves=8)
    assert MeshInputs.of(eight).width == 3 + 48 + 16


@pytest.mark.parametrize("octaves", [0, 17])
def test_octaves_outside_one_to_sixteen_are_refused_naming_the_setting(octaves):
    with pytest.raises(ConfigError, match="data.fourier_octaves"):
        composed_config([f"data.fourier_octaves={octaves}"])

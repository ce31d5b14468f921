"""Without XLA the train and predict steps trace once for the batches' element spec, not
once per padded shape (each trace of the multi-scale network took 20-30 s in a run)."""

import keras
import numpy as np
import pytest
import tensorflow as tf
import trimesh

from helpers.records import derived_record
from meshseg.data.pipeline.dataset import make_dataset
from meshseg.data.pipeline.inputs import MeshInputs
from meshseg.nn.unet import FeaStUNet
from meshseg.train.loop.evaluate import make_predict_step
from meshseg.train.loop.step import TrainStep

LEVELS = 2
INPUTS = MeshInputs(features=("xyz", "hks"), levels=LEVELS)


@pytest.fixture(scope="module")
def spheres(tmp_path_factory) -> tf.data.Dataset:
    """Unshuffled batches of one sphere each (42, 162 and 642 vertices) with xyz, HKS and
    2 coarser levels."""
    path = tmp_path_factory.mktemp("tracing") / "spheres.tfrecords"
    with tf.io.TFRecordWriter(str(path)) as writer:
        for subdivisions in (1, 2, 3):
            sphere = trimesh.creation.icosphere(subdivisions=subdivisions)
            vertices = np.asarray(sphere.vertices, np.float32)
            triangles = np.asarray(sphere.faces, np.int32)
            writer.write(derived_record(vertices, triangles,
                                        (vertices[:, 2] > 0).astype(np.int32), ("hks",), LEVELS))
    return make_dataset([str(path)], 1, training=False, inputs=INPUTS)


def _net():
    keras.utils.set_random_seed(0)
    return FeaStUNet(num_classes=2, impl="gather_matmul", num_weight_matrices=3,
                     input_channels=8, conv_channels=(8, 12, 16), hidden_channels=16,
                     convs_per_level=1, input_width=3 + 16)


def test_the_train_step_traces_once_for_the_element_spec_and_gives_the_same_losses(spheres):
    batches = list(spheres)
    assert len({int(features["num_vertices"][0]) for features, _ in batches}) == 3
    losses = {}
    for signature in (spheres.element_spec, None):
        step = TrainStep(_net(), keras.optimizers.SGD(0.0), jit=False,
                         strategy=tf.distribute.get_strategy(), signature=signature)
        losses[signature is None] = [float(step(*batches[0])[0])]
        first_call = step.traces  # 2 when the first call builds the optimizer's variables
        losses[signature is None] += [float(step(*batch)[0]) for batch in batches[1:]]
        if signature is not None:
            assert step.traces == first_call
        else:
            assert step.traces > first_call  # what the signature saves
    np.testing.assert_allclose(losses[False], losses[True], rtol=1e-6)


def test_the_predict_step_traces_once_for_the_element_spec(spheres):
    traces = []

    def model(features, training):
        traces.append(training)
        return features["inputs"][..., :2]

    predict = make_predict_step(model, jit=False, signature=spheres.element_spec[0])
    for features, _ in spheres:
        np.testing.assert_array_equal(predict(features), features["inputs"][..., :2])
    assert traces == [False]

"""`FeatureSteeredConvolution` and `MeshSegmentationNet`: variables, configs, saving, impls, XLA."""

import functools

import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers.graphs import GraphCase, assert_close_to_max, random_graph, two_spheres
from meshseg.nn.layers import FeatureSteeredConvolution
from meshseg.nn.model import MeshSegmentationNet
from meshseg.nn.ops import IMPLEMENTATIONS, get_implementation

IMPLS = sorted(IMPLEMENTATIONS)
CASE = GraphCase("layer", batch_shape=(2,), num_vertices=7, num_channels=3, padded=True)
RTOL = 1e-5  # float32 implementations against each other, relative to the largest value
SMALL_NET = dict(num_classes=4, num_weight_matrices=4, input_channels=8, conv_channels=(8, 16),
                 hidden_channels=16)


def layer_inputs():
    """(data [2, 7, 3], neighbors [2, 7, 7], sizes [2]) of a padded random batch."""
    graph = random_graph(CASE, seed=2)
    return tf.constant(graph.data), graph.neighbors(), tf.constant(graph.sizes)


def weights_by_name(layer) -> dict:
    return {weight.name: weight.numpy() for weight in layer.weights}


@pytest.mark.parametrize("translation_invariant,names", [
    (True, {"var_u", "var_c", "var_w", "var_b"}),
    (False, {"var_u", "var_v", "var_c", "var_w", "var_b"}),
])
def test_builds_the_documented_variable_shapes(translation_invariant, names):
    layer = FeatureSteeredConvolution(4, 5, impl="block_sparse", translation_invariant=translation_invariant)
    layer(*layer_inputs())
    shapes = {"var_u": (3, 4), "var_v": (3, 4), "var_c": (4,), "var_w": (4, 3, 5), "var_b": (5,)}
    assert {w.name: tuple(w.shape) for w in layer.weights} == {n: shapes[n] for n in names}
    assert (layer.var_v is None) == translation_invariant


def test_get_config_and_from_config_round_trip():
    layer = FeatureSteeredConvolution(
        3, 2, impl="sparse_matmul", translation_invariant=False, initializer="glorot_uniform",
        regularizer={"class_name": "L1", "config": {"l1": 0.5}}, xla=True, name="feast")
    layer(*layer_inputs())
    config = layer.get_config()
    clone = FeatureSteeredConvolution.from_config(config)
    clone(*layer_inputs())
    clone.set_weights(layer.get_weights())
    assert clone.get_config() == config
    assert (config["num_weight_matrices"], config["num_output_channels"], config["impl"],
            config["translation_invariant"], config["xla"], config["name"]) == (
        3, 2, "sparse_matmul", False, True, "feast")
    np.testing.assert_array_equal(clone(*layer_inputs()), layer(*layer_inputs()))


@pytest.mark.parametrize("initializer,value", [
    ("zeros", 0.0),
    ("ones", 1.0),
    ({"class_name": "Constant", "config": {"value": 0.25}}, 0.25),
])
def test_initializer_accepts_strings_and_dicts(initializer, value):
    layer = FeatureSteeredConvolution(2, 2, impl="block_sparse", translation_invariant=False, initializer=initializer)
    layer(*layer_inputs())
    for name, weight in weights_by_name(layer).items():
        np.testing.assert_array_equal(weight, np.full_like(weight, value), err_msg=name)


def test_default_initializer_is_truncated_normal_with_stddev_0_1():
    layer = FeatureSteeredConvolution(8, 16, impl="block_sparse", translation_invariant=False)
    layer(*layer_inputs())
    values = np.concatenate([w.ravel() for w in weights_by_name(layer).values()])
    assert np.max(np.abs(values)) <= 0.2 + 1e-6
    assert 0.06 < np.std(values) < 0.1


@pytest.mark.parametrize("regularizer,penalty", [
    ("l2", lambda w: 0.01 * np.sum(w ** 2)),
    ({"class_name": "L1", "config": {"l1": 0.1}}, lambda w: 0.1 * np.sum(np.abs(w))),
    (keras.regularizers.L2(0.5), lambda w: 0.5 * np.sum(w ** 2)),
])
def test_regularizer_accepts_strings_and_dicts_and_adds_a_loss_on_u_v_w(regularizer, penalty):
    layer = FeatureSteeredConvolution(2, 3, impl="block_sparse", translation_invariant=False, regularizer=regularizer)
    layer(*layer_inputs())
    weights = weights_by_name(layer)
    expected = sum(penalty(weights[name]) for name in ("var_u", "var_v", "var_w"))
    assert len(layer.losses) == 3
    np.testing.assert_allclose(float(tf.add_n(layer.losses)), expected, rtol=1e-5)


def test_no_regularizer_adds_no_loss():
    layer = FeatureSteeredConvolution(2, 3, impl="block_sparse")
    layer(*layer_inputs())
    assert layer.losses == []


def test_translation_invariant_keeps_v_equal_to_minus_u_after_adam_steps():
    layer = FeatureSteeredConvolution(4, 5, impl="block_sparse", translation_invariant=True)
    data, neighbors, sizes = layer_inputs()
    layer(data, neighbors, sizes)
    initial_u = layer.var_u.numpy()
    optimizer = keras.optimizers.Adam(learning_rate=0.05)
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(layer(data, neighbors, sizes) - 1.0))
        optimizer.apply_gradients(zip(tape.gradient(loss, layer.trainable_weights),
                                      layer.trainable_weights))
    assert {w.name for w in layer.trainable_weights} == {"var_u", "var_c", "var_w", "var_b"}
    assert np.max(np.abs(layer.var_u.numpy() - initial_u)) > 0.01
    u = layer.var_u.numpy()
    expected = IMPLEMENTATIONS["gather_sum"](data, neighbors, sizes, u, -u, layer.var_c.numpy(),
                                             layer.var_w.numpy(), layer.var_b.numpy())
    assert_close_to_max(layer(data, neighbors, sizes), expected, RTOL)


@pytest.mark.parametrize("translation_invariant", [True, False])
@pytest.mark.parametrize("impl", IMPLS)
def test_every_impl_gives_the_same_output(impl, translation_invariant):
    inputs = layer_inputs()
    reference = FeatureSteeredConvolution(4, 5, impl="gather_sum",
                                          translation_invariant=translation_invariant)
    expected = reference(*inputs)
    layer = FeatureSteeredConvolution(4, 5, impl=impl, translation_invariant=translation_invariant)
    layer(*inputs)
    layer.set_weights(reference.get_weights())
    assert_close_to_max(layer(*inputs), expected, RTOL)


def test_unknown_impl_raises_value_error_naming_the_choices():
    for make in (lambda: FeatureSteeredConvolution(2, 2, impl="dense"),
                 lambda: get_implementation("dense")):
        with pytest.raises(ValueError, match="dense") as error:
            make()
        for name in IMPLEMENTATIONS:
            assert name in str(error.value)


# --- MeshSegmentationNet on a padded batch of two spheres (42 and 12 vertices) -------------

@functools.lru_cache(maxsize=None)
def features():
    return two_spheres()


def built_net(impl: str = "gather_sum", xla: bool = False, weights=None) -> MeshSegmentationNet:
    """A small net called once on `features()`; `weights` from get_weights are copied in."""
    net = MeshSegmentationNet(impl=impl, xla=xla, **SMALL_NET)
    net(features())
    if weights is not None:
        net.set_weights(weights)
    return net


def test_net_logits_have_one_row_per_padded_vertex():
    logits = built_net()(features())
    assert logits.shape == (2, 42, SMALL_NET["num_classes"])
    assert np.all(np.isfinite(logits))


def test_keras_save_and_load_gives_identical_logits(tmp_path):
    net = built_net(impl="block_sparse")
    path = tmp_path / "m.keras"
    net.save(path)
    loaded = keras.models.load_model(path)
    assert isinstance(loaded, MeshSegmentationNet)
    assert loaded.get_config() == net.get_config()
    assert len(loaded.weights) == len(net.weights), "the loaded net was not built with weights"
    np.testing.assert_array_equal(loaded(features()), net(features()))


@pytest.mark.parametrize("impl", IMPLS)
def test_every_impl_gives_the_same_logits_for_the_same_weights(impl):
    reference = built_net("gather_sum")
    net = built_net(impl, weights=reference.get_weights())
    assert_close_to_max(net(features()), reference(features()), RTOL)


@pytest.mark.parametrize("impl", IMPLS)
def test_xla_net_under_jit_gives_the_eager_logits(impl):
    eager = built_net(impl)
    net = built_net(impl, xla=True, weights=eager.get_weights())
    compiled = tf.function(net, jit_compile=True)
    assert_close_to_max(compiled(features()), eager(features()), RTOL)


def test_net_reads_the_inputs_of_its_width_not_the_positions(tmp_path):
    hks = np.random.default_rng(0).normal(size=(2, 42, 16)).astype(np.float32)
    wide = {**features(), "inputs": tf.concat([features()["inputs"], hks], axis=-1)}
    net = MeshSegmentationNet(impl="gather_matmul", input_width=19, **SMALL_NET)
    net.build_from_config({})
    moved = {**wide, "vertices": wide["vertices"] + 5.0}
    np.testing.assert_array_equal(net(moved), net(wide))
    net.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    assert loaded.get_config()["input_width"] == 19
    np.testing.assert_array_equal(loaded(wide), net(wide))

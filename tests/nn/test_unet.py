"""`FeaStUNet` on a padded batch of two grid hierarchies (63 and 30 vertices, 2 coarser
levels): every implementation, eager and under XLA, against a float64 evaluation;
padding; compilation per shape; saving; dropout; a few training steps."""

import functools

import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers.graphs import DEFAULT_IMPL, assert_close_to_max, slow_unless
from helpers.hierarchy import grid_mesh_features, padded_batch
from meshseg.batch import level_key
from meshseg.nn.ops import IMPLEMENTATIONS
from meshseg.nn.unet import FeaStUNet

IMPLS = sorted(IMPLEMENTATIONS)
# The whole network under every impl re-checks, at a larger size, what
# tests/nn/test_ops_equivalence.py checks of each impl's convolution without `slow`: here
# the default impl runs in `-m "not slow"`, the others in the full suite.
NETWORK_IMPLS = [slow_unless(impl == DEFAULT_IMPL, impl) for impl in IMPLS]
LEVELS = 2
WIDTH = 5  # input channels, e.g. xyz and two more
SMALL_NET = dict(num_classes=4, num_weight_matrices=3, input_channels=8,
                 conv_channels=(8, 12, 16), hidden_channels=16, convs_per_level=1,
                 input_width=WIDTH)  # blocks with and without a projection shortcut
OUTPUT_RTOL = 1e-5  # float32 against float64, relative to the largest logit (measured ~1e-6)
GRADIENT_RTOL = 1e-4  # per variable, relative to its largest gradient (measured <= 2e-5)
# mixed_bfloat16 (8-bit significands; FeaSt softmax, normalisation and logits in float32)
# against float64, at the weights of seeds 0, 1 and 2. Measured (2026-12-07), every impl,
# eager and XLA, on hosts with and without avx512_bf16 (their CPU kernels round
# differently): logits within 0.84-1.91% of the largest; single variables' gradients are
# off by up to 30-140% (the FeaSt weights and biases of the encoder, the LayerNorm scales;
# mixed_float16: 0.4%), yet the whole gradient points the same way: cosine 0.923-0.9998
# with float64's on avx512_bf16 hosts, 0.764-0.9998 on AVX2-only hosts (lowest: eager at
# seed 1, every impl), norm 0.976-1.155. Each variable's gradient is checked in float32
# (to 1e-4, above); this test checks that the mixed-precision casts keep the step's direction.
BFLOAT16_SEEDS = (0, 1, 2)
BFLOAT16_OUTPUT_RTOL = 3e-2
BFLOAT16_GRADIENT_COSINE = 0.7
BFLOAT16_GRADIENT_NORM_RTOL = 0.25


def two_grids(extra: int = 0, levels: int = LEVELS):
    """A 9 x 7 and a 5 x 6 grid with `levels` coarser levels, padded (+`extra`)."""
    return padded_batch([grid_mesh_features(9, 7, levels, WIDTH),
                         grid_mesh_features(5, 6, levels, WIDTH, seed=1)], levels, extra)


@functools.lru_cache(maxsize=None)
def batch():
    return two_grids()


def built_net(impl: str = "gather_matmul", xla: bool = False, weights=None, **settings):
    net = FeaStUNet(impl=impl, xla=xla, **{**SMALL_NET, **settings})
    net.build_from_config({})
    if weights is not None:
        net.set_weights(weights)
    return net


def forward_and_backward(net, xla: bool = False):
    """`features -> (float64 numpy logits [B, V, K], the gradients of sum(logits * g) for
    a fixed random g, one per trainable weight)`; under `xla`, one compiled function that
    reads the net's current weights."""
    def forward(features, cotangent):
        with tf.GradientTape() as tape:
            logits = net(features)
            loss = tf.reduce_sum(tf.cast(logits, tf.float64) * cotangent)
        return logits, tape.gradient(loss, net.trainable_weights)

    if xla:
        forward = tf.function(forward, jit_compile=True)

    def evaluate(features):
        cotangent = np.random.default_rng(3).normal(size=features["inputs"].shape[:2] + (4,))
        logits, gradients = forward(features, cotangent)
        return (logits.numpy().astype(np.float64),
                [g.numpy().astype(np.float64) for g in gradients])

    return evaluate


def logits_and_gradients(net, features, xla: bool = False):
    """`forward_and_backward(net, xla)` of `features`."""
    return forward_and_backward(net, xla)(features)


@functools.lru_cache(maxsize=None)
def float32_weights(seed: int = 0):
    keras.utils.set_random_seed(seed)
    return built_net().get_weights()


@functools.lru_cache(maxsize=None)
def float64_reference(seed: int = 0):
    """The float32 weights of `seed` evaluated in float64 by gather_matmul, which the op
    tests check against the tensorflow-graphics op in float64 (test_ops_equivalence)."""
    net = built_net(precision="float64", weights=float32_weights(seed))
    return logits_and_gradients(net, batch())


@pytest.mark.parametrize("xla", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("impl", NETWORK_IMPLS)
def test_every_impl_matches_a_float64_evaluation_with_its_gradients(impl, xla):
    net = built_net(impl, xla, weights=float32_weights())
    logits, gradients = logits_and_gradients(net, batch(), xla)
    expected_logits, expected_gradients = float64_reference()
    assert_close_to_max(logits, expected_logits, OUTPUT_RTOL, "logits")
    assert len(gradients) == len(expected_gradients) == len(net.trainable_weights)
    for weight, gradient, expected in zip(net.trainable_weights, gradients, expected_gradients):
        assert np.max(np.abs(expected)) > 0, weight.path
        assert_close_to_max(gradient, expected, GRADIENT_RTOL, weight.path)


@pytest.mark.parametrize("xla", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("impl", NETWORK_IMPLS)
def test_every_impl_in_mixed_bfloat16_follows_a_float64_evaluation(impl, xla):
    net = built_net(impl, xla, precision="mixed_bfloat16")
    assert all(weight.dtype == "float32" for weight in net.trainable_weights)
    evaluate = forward_and_backward(net, xla)
    for seed in BFLOAT16_SEEDS:
        net.set_weights(float32_weights(seed))
        logits, gradients = evaluate(batch())
        expected_logits, expected_gradients = float64_reference(seed)
        assert_close_to_max(logits, expected_logits, BFLOAT16_OUTPUT_RTOL, f"logits, seed {seed}")
        got = np.concatenate([gradient.ravel() for gradient in gradients])
        expected = np.concatenate([gradient.ravel() for gradient in expected_gradients])
        norm, expected_norm = np.linalg.norm(got), np.linalg.norm(expected)
        assert got @ expected / (norm * expected_norm) >= BFLOAT16_GRADIENT_COSINE, seed
        assert abs(norm / expected_norm - 1) <= BFLOAT16_GRADIENT_NORM_RTOL, seed


@pytest.mark.parametrize("impl", ["gather_matmul", "block_sparse"])
def test_more_padding_does_not_change_the_logits_of_real_vertices(impl):
    net = built_net(impl, weights=float32_weights())
    padded = two_grids(extra=7)  # 7 more vertices, edges and parents at every level
    logits, more_padded = net(batch()).numpy(), net(padded).numpy()
    for mesh, count in enumerate(batch()["num_vertices"].numpy()):
        assert_close_to_max(more_padded[mesh, :count], logits[mesh, :count], 1e-6)


def test_the_logits_of_one_mesh_do_not_depend_on_the_other_meshes_of_the_batch():
    net = built_net(weights=float32_weights())
    alone = padded_batch([grid_mesh_features(5, 6, LEVELS, WIDTH, seed=1)], LEVELS)
    assert_close_to_max(net(alone).numpy()[0], net(batch()).numpy()[1, :30], 1e-6)


def test_compiles_once_per_padded_shape():
    net = built_net(xla=True, weights=float32_weights())
    compiled = tf.function(net, jit_compile=True)
    other_values = {**batch(), "inputs": batch()["inputs"] + 1.0}
    for features in (batch(), other_values, two_grids(extra=2), batch()):
        assert np.all(np.isfinite(compiled(features)))
    assert compiled.experimental_get_tracing_count() == 2


def test_keras_save_and_load_gives_identical_logits(tmp_path):
    net = built_net("block_sparse", dropout=0.2, convs_per_level=2, input_skip=True,
                    hidden_layers=3, global_skip=True, global_scale=True)
    path = tmp_path / "unet.keras"
    net.save(path)
    loaded = keras.models.load_model(path)
    assert isinstance(loaded, FeaStUNet)
    assert loaded.get_config() == net.get_config()
    assert len(loaded.weights) == len(net.weights), "the loaded net was not built with weights"
    np.testing.assert_array_equal(loaded(batch()), net(batch()))


def test_dropout_acts_in_training_only():
    net = built_net(dropout=0.5)
    inference = net(batch(), training=False).numpy()
    np.testing.assert_array_equal(net(batch()).numpy(), inference)
    assert np.max(np.abs(net(batch(), training=True).numpy() - inference)) > 1e-3


def test_one_level_network_needs_no_hierarchy():
    net = built_net(conv_channels=(8,))
    features = two_grids(levels=0)
    assert net(features).shape == (2, 63, 4)
    assert sum("encoder" in w.path for w in net.weights) > 0
    assert not any("decoder" in w.path or "fuse" in w.path for w in net.weights)


def test_reads_only_the_levels_it_uses():
    net = built_net(conv_channels=(8, 12), weights=None)
    assert_close_to_max(net(batch()), net(two_grids(levels=1)), 1e-6)


@pytest.mark.parametrize("output_level", [1, 2])
def test_output_level_classifies_a_coarse_level_and_gives_every_mesh_vertex_its_logits(
        output_level):
    net = built_net(output_level=output_level)
    logits = net(batch()).numpy()
    assert logits.shape == (2, 63, 4)
    assert_close_to_max(tf.function(net, jit_compile=True)(batch()), logits, 1e-5)
    ancestors = batch()[level_key(1, "parents")].numpy()
    if output_level == 2:
        coarse = batch()[level_key(2, "parents")].numpy()
        ancestors = np.stack([coarse[mesh][ancestors[mesh]] for mesh in range(2)])
    for mesh, count in enumerate(batch()["num_vertices"].numpy()):
        for ancestor in np.unique(ancestors[mesh, :count]):
            group = logits[mesh, :count][ancestors[mesh, :count] == ancestor]
            np.testing.assert_array_equal(group, np.broadcast_to(group[0], group.shape))
        assert len(np.unique(logits[mesh, :count], axis=0)) == len(np.unique(ancestors[mesh, :count]))
    decoded = {int(w.path.split("/")[1][len("decoder"):].split("_")[0])
               for w in net.weights if w.path.split("/")[1].startswith("decoder")}
    assert decoded == set(range(output_level, LEVELS))  # no decoder below the output level


@pytest.mark.parametrize("settings", [dict(conv_channels=()), dict(convs_per_level=0),
                                      dict(dropout=1.0), dict(output_level=3),
                                      dict(output_level=-1), dict(hidden_layers=0),
                                      dict(fine_head_channels=4),
                                      dict(output_level=1, fine_head_channels=-1),
                                      dict(output_level=1, fine_head_convs=1),
                                      dict(output_level=1, fine_head_channels=4,
                                           fine_head_convs=-1)])
def test_refuses_empty_levels_no_blocks_dropout_one_a_missing_output_level_and_no_head(
        settings):
    with pytest.raises(ValueError, match="FeaStUNet"):
        FeaStUNet(impl="gather_matmul", **{**SMALL_NET, **settings})


# Without a fine block (0) the head is the same path less one convolution: full suite only.
@pytest.mark.parametrize("convs", [pytest.param(0, marks=pytest.mark.slow), 1])
def test_the_fine_head_starts_at_the_carried_back_logits_and_then_separates_siblings(convs):
    coarse = built_net(output_level=1, input_skip=True)
    fine = built_net(output_level=1, input_skip=True, fine_head_channels=8,
                     fine_head_convs=convs)
    fine_only = {"fine_from_coarse", "fine_hidden", "fine_out", "fine_block0"}
    assert any(w.path.split("/")[1] == "fine_block0" for w in fine.weights) == bool(convs)
    shared = [w for w in fine.weights if w.path.split("/")[1] not in fine_only]
    def local(weight):  # the path inside the network
        return weight.path.split("/", 1)[1]

    assert [local(w) for w in shared] == [local(w) for w in coarse.weights]
    coarse.set_weights([w.numpy() for w in shared])
    assert_close_to_max(fine(batch()), coarse(batch()), 1e-6)  # fine_out starts at zero
    features = batch()
    labels = tf.constant(np.tile((np.arange(63) % 2).astype(np.int32), (2, 1)))  # siblings differ
    optimizer = keras.optimizers.Adam(0.01)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, fine(features, training=True))
        optimizer.apply_gradients(zip(tape.gradient(loss, fine.trainable_weights),
                                      fine.trainable_weights))

    for _ in range(30):
        step()
    logits = fine(features).numpy()
    parents = features[level_key(1, "parents")].numpy()
    count = int(features["num_vertices"][0])
    siblings = [logits[0, :count][parents[0, :count] == p] for p in np.unique(parents[0, :count])]
    assert any(np.ptp(group, axis=0).max() > 1e-3 for group in siblings if len(group) > 1)
    reference = built_net(output_level=1, input_skip=True, fine_head_channels=8,
                          fine_head_convs=convs, precision="float64",
                          weights=fine.get_weights())
    logits, gradients = logits_and_gradients(fine, batch())
    expected, expected_gradients = logits_and_gradients(reference, batch())
    assert_close_to_max(logits, expected, OUTPUT_RTOL)
    for got, want in zip(gradients, expected_gradients):
        assert_close_to_max(got, want, GRADIENT_RTOL)
    assert_close_to_max(tf.function(fine, jit_compile=True)(batch()), fine(batch()), 1e-5)


def test_a_few_adam_steps_lower_the_loss_on_one_mesh():
    features = padded_batch([grid_mesh_features(9, 7, LEVELS, WIDTH)], LEVELS)
    labels = tf.constant((np.arange(63) % 7 < 3).astype(np.int32)[np.newaxis])  # stripes
    net = built_net(dropout=0.1)
    optimizer = keras.optimizers.Adam(0.01)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, net(features, training=True))
        optimizer.apply_gradients(zip(tape.gradient(loss, net.trainable_weights),
                                      net.trainable_weights))
        return loss

    losses = [float(step()) for _ in range(20)]
    final = float(loss_fn(labels, net(features, training=False)))
    assert final < 0.5 * losses[0], (losses[0], final)


@pytest.mark.parametrize("output_level", [0, 1])
def test_input_skip_feeds_the_inputs_pooled_to_the_output_level_to_the_head(output_level):
    net = built_net(input_skip=True, output_level=output_level)
    head = next(w for w in net.weights if "lin_hidden" in w.path and "kernel" in w.path)
    assert head.shape == (1, SMALL_NET["conv_channels"][output_level] + WIDTH,
                          SMALL_NET["hidden_channels"])
    assert_close_to_max(tf.function(net, jit_compile=True)(batch()), net(batch()), 1e-5)
    reference = built_net(input_skip=True, output_level=output_level, precision="float64",
                          weights=net.get_weights())
    assert_close_to_max(net(batch()).numpy(), reference(batch()).numpy(), OUTPUT_RTOL)


def test_hidden_layers_stack_hidden_convolutions_in_the_head():
    net = built_net(input_skip=True, hidden_layers=3, global_skip=True)
    head = {w.path.split("/")[1]: w.shape for w in net.weights
            if "lin_hidden" in w.path and "kernel" in w.path}
    hidden = SMALL_NET["hidden_channels"]
    assert head == {"lin_hidden": (1, SMALL_NET["conv_channels"][0] + WIDTH, hidden),
                    "lin_hidden2": (1, hidden, hidden), "lin_hidden3": (1, hidden, hidden)}
    assert not any("lin_hidden2" in w.path for w in built_net().weights)
    reference = built_net(input_skip=True, hidden_layers=3, global_skip=True,
                          precision="float64", weights=net.get_weights())
    assert_close_to_max(net(batch()).numpy(), reference(batch()).numpy(), OUTPUT_RTOL)


def test_global_skip_adds_a_per_mesh_term_to_the_heads_first_hidden_layer():
    net = built_net(global_skip=True, hidden_layers=2)
    kernel = next(w for w in net.weights if "global_head" in w.path)
    assert kernel.shape == (SMALL_NET["conv_channels"][-1], SMALL_NET["hidden_channels"])
    logits, gradients = logits_and_gradients(net, batch())
    reference = built_net(global_skip=True, hidden_layers=2, precision="float64",
                          weights=net.get_weights())
    expected, expected_gradients = logits_and_gradients(reference, batch())
    assert_close_to_max(logits, expected, OUTPUT_RTOL)
    for got, want in zip(gradients, expected_gradients):
        assert_close_to_max(got, want, GRADIENT_RTOL)
    assert np.max(np.abs(gradients[[w.path for w in net.trainable_weights].index(
        kernel.path)])) > 0, "the global term gets no gradient"
    assert_close_to_max(tf.function(net, jit_compile=True)(batch()), logits, 1e-5)
    kernel.assign(tf.zeros_like(kernel))  # without the global term: the plain head
    plain = built_net(hidden_layers=2, weights=[w.numpy() for w in net.weights
                                                 if w.path != kernel.path])
    assert_close_to_max(net(batch()).numpy(), plain(batch()).numpy(), 1e-6)


def test_global_scale_modulates_the_heads_first_hidden_layer_per_mesh():
    net = built_net(global_skip=True, global_scale=True)
    kernel = next(w for w in net.weights if "global_scale_head" in w.path)
    assert kernel.shape == (SMALL_NET["conv_channels"][-1], SMALL_NET["hidden_channels"])
    additive = built_net(global_skip=True, weights=[w.numpy() for w in net.weights
                                                    if w.path != kernel.path])
    assert_close_to_max(net(batch()).numpy(), additive(batch()).numpy(), 1e-6)  # starts at 0
    kernel.assign(np.random.default_rng(5).normal(scale=0.3, size=kernel.shape))
    logits, gradients = logits_and_gradients(net, batch())
    assert np.max(np.abs(logits - additive(batch()).numpy())) > 1e-3, "the scale changes nothing"
    reference = built_net(global_skip=True, global_scale=True, precision="float64",
                          weights=net.get_weights())
    expected, expected_gradients = logits_and_gradients(reference, batch())
    assert_close_to_max(logits, expected, OUTPUT_RTOL)
    for got, want in zip(gradients, expected_gradients):
        assert_close_to_max(got, want, GRADIENT_RTOL)
    assert_close_to_max(tf.function(net, jit_compile=True)(batch()), logits, 1e-5)

"""`meshseg.nn.pooling` on a padded batch of two grid hierarchies: mean pooling over the
children, unpooling to the parents, the global pool, carrying a coarse level back to the
mesh (and how its labels score there); padded vertices take no part."""

import numpy as np
import pytest
import tensorflow as tf

from helpers.hierarchy import grid_mesh_features, padded_batch
from meshseg.batch import LABEL_PADDING, level_key
from meshseg.nn.pooling import carry_back, global_pool, mean_pool, unpool, vertex_mask
from meshseg.train.loop.evaluate import scores
from meshseg.train.loop.metrics import ConfusionMatrix


def two_grids(extra: int = 0):
    """9 x 7 and 5 x 6 grids with 2 coarser levels (20 and 9 vertices at level 1)."""
    return padded_batch([grid_mesh_features(9, 7, 2), grid_mesh_features(5, 6, 2, seed=1)],
                        levels=2, extra=extra)


def level_sizes(batch, level):
    """(V_{l-1} padded, V_l padded, real counts of level l [B])."""
    parents = batch[level_key(level, "parents")]
    coarse = batch[level_key(level, "neighbors")].shape[1]
    return parents.shape[1], coarse, batch[level_key(level, "num_vertices")].numpy()


def run(function, jit: bool, *args):
    return (tf.function(function, jit_compile=True) if jit else function)(*args).numpy()


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("level", [1, 2])
def test_pooling_a_constant_field_gives_that_constant_on_real_coarse_vertices(level, jit):
    batch = two_grids(extra=3)
    fine, coarse, counts = level_sizes(batch, level)
    data = tf.fill([2 * fine, 4], 2.5)  # padded fine rows too: they must not count
    pooled = run(lambda d: mean_pool(d, batch[level_key(level, "parents")], coarse), jit, data)
    pooled = pooled.reshape(2, coarse, 4)
    for mesh, count in enumerate(counts):
        np.testing.assert_allclose(pooled[mesh, :count], 2.5, rtol=1e-6)
        np.testing.assert_array_equal(pooled[mesh, count:], 0.0)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_pooling_averages_the_children_and_ignores_padded_vertices(jit):
    batch = two_grids(extra=3)
    fine, coarse, counts = level_sizes(batch, 1)
    parents = batch[level_key(1, "parents")].numpy()
    data = np.random.default_rng(0).normal(size=(2 * fine, 3)).astype(np.float32)
    data.reshape(2, fine, 3)[parents < 0] = 1e6  # padded fine vertices: huge values
    pooled = run(lambda d: mean_pool(d, parents, coarse), jit, data).reshape(2, coarse, 3)
    for mesh in range(2):
        for vertex in range(counts[mesh]):
            children = data.reshape(2, fine, 3)[mesh][parents[mesh] == vertex]
            np.testing.assert_allclose(pooled[mesh, vertex], children.mean(axis=0), rtol=1e-5)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("level", [1, 2])
def test_unpooling_gives_each_vertex_its_parent_and_pooling_undoes_it(level, jit):
    batch = two_grids(extra=3)
    fine, coarse, counts = level_sizes(batch, level)
    parents = batch[level_key(level, "parents")]
    coarse_data = np.random.default_rng(1).normal(size=(2 * coarse, 5)).astype(np.float32)
    unpooled = run(lambda d: unpool(d, parents), jit, coarse_data)
    assert unpooled.shape == (2 * fine, 5)
    unpooled = unpooled.reshape(2, fine, 5)
    for mesh in range(2):
        real = parents[mesh].numpy() >= 0
        np.testing.assert_array_equal(unpooled[mesh][real],
                                      coarse_data.reshape(2, coarse, 5)[mesh][parents[mesh][real]])
    round_trip = run(lambda d: mean_pool(unpool(d, parents), parents, coarse), jit, coarse_data)
    for mesh, count in enumerate(counts):
        np.testing.assert_allclose(round_trip.reshape(2, coarse, 5)[mesh, :count],
                                   coarse_data.reshape(2, coarse, 5)[mesh, :count], rtol=1e-6)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_global_pool_is_mean_and_max_over_real_vertices_only(jit):
    data = np.array([[[1.0, -4.0], [3.0, -2.0], [50.0, 60.0]],
                     [[-7.0, 2.0], [99.0, 99.0], [99.0, 99.0]]], np.float32)
    mask = vertex_mask(tf.constant([2, 1]), 3)
    pooled = run(global_pool, jit, data, mask)
    np.testing.assert_array_equal(pooled, [[2.0, -3.0, 3.0, -2.0], [-7.0, 2.0, -7.0, 2.0]])


def test_global_pool_of_a_mesh_without_vertices_is_zero():
    pooled = global_pool(tf.ones([1, 2, 3]), vertex_mask(tf.constant([0]), 2))
    np.testing.assert_array_equal(pooled, np.zeros((1, 6)))


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_carry_back_gives_every_mesh_vertex_its_level_2_ancestors_features(jit):
    batch = two_grids(extra=3)
    parents = [batch[level_key(level, "parents")] for level in (1, 2)]
    coarse = batch[level_key(2, "neighbors")].shape[1]
    data = np.random.default_rng(2).normal(size=(2, coarse, 5)).astype(np.float32)
    carried = run(lambda d: carry_back(d, parents), jit, data)
    assert carried.shape == (2, parents[0].shape[1], 5)
    for mesh, count in enumerate(batch["num_vertices"].numpy()):
        ancestors = parents[1][mesh].numpy()[parents[0][mesh].numpy()[:count]]
        np.testing.assert_array_equal(carried[mesh, :count], data[mesh, ancestors])
    np.testing.assert_array_equal(carry_back(tf.constant(data), []), data)


def carried_back_accuracy(coarse_classes, parents, labels, num_classes=3):
    """Per-vertex accuracy, on the mesh, of one class per coarse vertex carried back."""
    logits = carry_back(tf.one_hot(coarse_classes, num_classes), parents)
    confusion = ConfusionMatrix(num_classes)
    confusion.update_state(labels, logits)
    return scores(confusion.confusion(), np.ones(num_classes))["accuracy"]


def test_labels_carried_back_are_scored_on_the_original_vertices():
    batch = two_grids()
    parents = batch[level_key(1, "parents")]
    rng = np.random.default_rng(4)
    coarse_classes = rng.integers(0, 3, size=(2, batch[level_key(1, "neighbors")].shape[1]))
    labels = rng.integers(0, 3, size=parents.shape).astype(np.int32)
    counts = batch["num_vertices"].numpy()
    labels[1, counts[1]:] = LABEL_PADDING
    # Direct count: every real mesh vertex is right when its parent's class is its label.
    right = sum(int(np.sum(coarse_classes[mesh][parents[mesh].numpy()[:count]]
                           == labels[mesh, :count])) for mesh, count in enumerate(counts))
    assert carried_back_accuracy(coarse_classes, [parents], labels) == pytest.approx(
        right / counts.sum(), abs=1e-12)


def test_labels_carried_back_from_a_level_that_is_the_mesh_itself_score_as_the_mesh_does():
    rng = np.random.default_rng(5)
    classes = rng.integers(0, 3, size=(2, 30))
    labels = rng.integers(0, 3, size=(2, 30)).astype(np.int32)
    itself = tf.constant(np.tile(np.arange(30, dtype=np.int32), (2, 1)))  # parent of i: i
    direct = np.mean(classes == labels)
    assert carried_back_accuracy(classes, [itself], labels) == pytest.approx(direct, abs=1e-12)
    assert carried_back_accuracy(classes, [itself, itself], labels) == pytest.approx(direct,
                                                                                    abs=1e-12)

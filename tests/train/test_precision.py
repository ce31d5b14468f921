"""Mixed precision: layers compute in float16/bfloat16, the FeaSt softmax stays float32."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers.runs import scalars, tiny_config, train_tiny
from meshseg.nn.layers import FeatureSteeredConvolution
from meshseg.nn.ops import IMPLEMENTATIONS, NEIGHBOR_TABLE_IMPLS
from meshseg.batch import table_from_edges

TOLERANCE = {"mixed_float16": 2e-2, "mixed_bfloat16": 6e-2}


@pytest.fixture
def ring_graph():
    """A 12-vertex ring with self-edges, row-normalised, and 8 input channels."""
    rows = np.repeat(np.arange(12), 3)
    cols = (rows + np.tile([-1, 0, 1], 12)) % 12
    weights = np.full(36, 1.0 / 3.0, np.float32)
    data = np.random.default_rng(0).normal(size=(12, 8)).astype(np.float32)
    sparse = tf.sparse.reorder(tf.SparseTensor(np.stack([rows, cols], 1), weights, [12, 12]))
    table, _ = table_from_edges(tf.constant(rows, tf.int32), tf.constant(cols, tf.int32), weights, 12)
    return data, sparse, table


@pytest.mark.parametrize("policy", sorted(TOLERANCE))
@pytest.mark.parametrize("impl", sorted(IMPLEMENTATIONS))
def test_a_mixed_precision_layer_matches_float32(impl, policy, ring_graph):
    data, sparse, table = ring_graph
    neighbors = table if impl in NEIGHBOR_TABLE_IMPLS else sparse
    reference = FeatureSteeredConvolution(4, 6, impl=impl)
    expected = reference(data, neighbors)
    mixed = FeatureSteeredConvolution(4, 6, impl=impl, dtype=policy)
    mixed(data, neighbors)
    mixed.set_weights(reference.get_weights())
    got = mixed(data, neighbors)
    assert mixed.var_u.dtype == "float32"
    assert got.dtype == policy.split("_")[1]
    error = np.max(np.abs(tf.cast(got, tf.float32) - expected)) / np.max(np.abs(expected))
    assert error < TOLERANCE[policy]


@pytest.mark.parametrize("precision", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_runs_train_and_stay_finite(precision, tiny_dataset, tmp_path):
    summary = train_tiny(tiny_config(tiny_dataset, f"precision={precision}", "steps=6", "eval_every=6"),
                  str(tmp_path))
    losses = [value for _, value in scalars(tmp_path, "train")["loss"]]
    assert len(losses) == 6 and np.all(np.isfinite(losses))
    assert np.isfinite(summary.eval_accuracy)
    assert keras.mixed_precision.global_policy().name == "float32"  # restored after the build

"""Mixed precision: layers compute in float16/bfloat16, the FeaSt softmax stays float32;
precision=auto chooses bfloat16 on CPUs that compute it natively."""

import logging
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers.runs import scalars, tiny_config, train_tiny
from meshseg.batch import table_from_edges
from meshseg.nn.layers import FeatureSteeredConvolution
from meshseg.nn.ops import IMPLEMENTATIONS, NEIGHBOR_TABLE_IMPLS
from meshseg.train.precision import resolved_precision

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


def mixed_against_eager_float32(impl, policy, ring_graph, xla):
    """(mixed layer, its output, its largest error relative to the largest float32 value):
    a `policy` layer with the weights of an eager float32 one, called eagerly, or under
    `tf.function(jit_compile=True)` with its XLA formulation for `xla`."""
    data, sparse, table = ring_graph
    neighbors = table if impl in NEIGHBOR_TABLE_IMPLS else sparse
    reference = FeatureSteeredConvolution(4, 6, impl=impl)
    expected = reference(data, neighbors)
    mixed = FeatureSteeredConvolution(4, 6, impl=impl, xla=xla, dtype=policy)
    mixed(data, neighbors)
    mixed.set_weights(reference.get_weights())
    got = (tf.function(mixed, jit_compile=True) if xla else mixed)(data, neighbors)
    error = np.max(np.abs(tf.cast(got, tf.float32) - expected)) / np.max(np.abs(expected))
    return mixed, got, error


@pytest.mark.parametrize("policy", sorted(TOLERANCE))
@pytest.mark.parametrize("impl", sorted(IMPLEMENTATIONS))
def test_a_mixed_precision_layer_matches_float32(impl, policy, ring_graph):
    mixed, got, error = mixed_against_eager_float32(impl, policy, ring_graph, xla=False)
    assert mixed.var_u.dtype == "float32"
    assert got.dtype == policy.split("_")[1]
    assert error < TOLERANCE[policy]


@pytest.mark.parametrize("policy", sorted(TOLERANCE))
def test_a_mixed_precision_table_layer_under_xla_matches_eager_float32(policy, ring_graph):
    """gather_matmul's XLA formulation (the per-vertex products summed over K, in float32)
    in low precision stays as close to the eager float32 layer (a batched matmul) as the
    eager low-precision layer does."""
    _, got, error = mixed_against_eager_float32("gather_matmul", policy, ring_graph, xla=True)
    assert got.dtype == policy.split("_")[1]
    assert error < TOLERANCE[policy]


@pytest.mark.parametrize("precision", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_runs_train_and_stay_finite(precision, tiny_dataset, tmp_path):
    summary = train_tiny(tiny_config(tiny_dataset, f"precision={precision}", "steps=6",
                                     "eval_every=6"), tmp_path)
    losses = [value for _, value in scalars(tmp_path, "train")["loss"]]
    assert len(losses) == 6 and np.all(np.isfinite(losses))
    assert np.isfinite(summary.eval_accuracy)
    assert keras.mixed_precision.global_policy().name == "float32"  # other code unaffected


LOAD_AND_REPORT = """
import sys
import keras
import meshseg.nn
model = keras.models.load_model(sys.argv[1])
print(type(model).__name__, model.graph_convs[0].dtype_policy.name, model.lin_out.dtype_policy.name)
"""


@pytest.mark.slow
def test_a_saved_model_loads_in_a_fresh_process_with_its_precision(tiny_dataset, tmp_path):
    train_tiny(tiny_config(tiny_dataset, "precision=mixed_float16", "steps=1"), tmp_path)
    result = subprocess.run([sys.executable, "-c", LOAD_AND_REPORT, str(tmp_path / "model.keras")],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["MeshSegmentationNet", "mixed_float16", "float32"]


def cpuinfo(tmp_path, flags: str):
    path = tmp_path / "cpuinfo"
    path.write_text("processor\t: 0\nmodel name\t: AMD EPYC\n"
                    f"flags\t\t: fpu sse2 avx2 {flags}\n\nprocessor\t: 1\n")
    return path


@pytest.mark.parametrize("flags, expected", [
    ("avx512f avx512_bf16 avx512_vnni", ("mixed_bfloat16", "the CPU has avx512_bf16")),
    ("amx_tile amx_bf16 amx_int8", ("mixed_bfloat16", "the CPU has amx_bf16")),
    ("avx512f avx512_vnni", ("float32", "the CPU has no native bfloat16 (avx512_bf16 or amx_bf16)")),
])
def test_auto_precision_is_bfloat16_only_on_a_cpu_that_computes_it_natively(tmp_path, flags,
                                                                          expected):
    assert resolved_precision("auto", gpus=0, cpuinfo=cpuinfo(tmp_path, flags)) == expected


def test_auto_precision_is_float32_with_a_gpu_or_unknown_flags_and_a_set_one_is_kept(tmp_path):
    native = cpuinfo(tmp_path, "avx512_bf16")
    assert resolved_precision("auto", gpus=1, cpuinfo=native)[0] == "float32"
    assert resolved_precision("auto", gpus=0, cpuinfo=tmp_path / "missing")[0] == "float32"
    assert resolved_precision("mixed_float16", gpus=0, cpuinfo=native) == ("mixed_float16",
                                                                          "as set")


def test_an_auto_precision_run_says_which_it_chose_and_trains_in_it(tiny_dataset, tmp_path,
                                                                   caplog):
    caplog.set_level(logging.INFO, logger="meshseg.train.run")
    train_tiny(tiny_config(tiny_dataset, "precision=auto", "steps=2", "eval_every=2"), tmp_path)
    chosen, why = resolved_precision("auto", gpus=len(tf.config.list_physical_devices("GPU")))
    assert f"precision {chosen} ({why})" in caplog.messages
    model = keras.models.load_model(tmp_path / "model.keras", compile=False)
    assert model.graph_convs[0].dtype_policy.name == chosen

"""Mixed precision: layers compute in float16/bfloat16, the FeaSt softmax stays float32;
precision=auto chooses by the GPU's compute capability, and bfloat16 on CPUs that compute
it natively."""

import logging
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers.runs import scalars, tiny_config, train_tiny
from meshseg.config import checked_config
from meshseg.batch import table_from_edges
from meshseg.nn.layers import FeatureSteeredConvolution
from meshseg.nn.ops import IMPLEMENTATIONS, NEIGHBOR_TABLE_IMPLS
from meshseg.train.device.precision import Gpu, resolved_precision, visible_gpus

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
    assert resolved_precision("auto", (), cpuinfo=cpuinfo(tmp_path, flags)) == expected


def test_auto_precision_is_float32_with_unknown_flags_and_a_set_one_is_kept(tmp_path):
    native = cpuinfo(tmp_path, "avx512_bf16")
    assert resolved_precision("auto", (), cpuinfo=tmp_path / "missing")[0] == "float32"
    assert resolved_precision("mixed_float16", (), cpuinfo=native) == ("mixed_float16",
                                                                      "as set")
    assert resolved_precision("float32", (Gpu("NVIDIA A100", (8, 0)),)) == ("float32", "as set")


@pytest.mark.parametrize("capability, expected", [
    ((6, 1), ("float32", "NVIDIA GeForce GTX 1070 has compute capability 6.1, without tensor "
                         "cores (< 7.0)")),
    ((7, 0), ("mixed_float16", "NVIDIA GeForce GTX 1070 has compute capability 7.0 (7.x)")),
    ((7, 5), ("mixed_float16", "NVIDIA GeForce GTX 1070 has compute capability 7.5 (7.x)")),
    ((8, 0), ("mixed_bfloat16", "NVIDIA GeForce GTX 1070 has compute capability 8.0 (>= 8.0)")),
    ((9, 0), ("mixed_bfloat16", "NVIDIA GeForce GTX 1070 has compute capability 9.0 (>= 8.0)")),
])
def test_auto_precision_on_a_gpu_follows_its_compute_capability_not_the_cpu(
        tmp_path, capability, expected):
    native = cpuinfo(tmp_path, "avx512_bf16")  # the CPU's flags do not count with a GPU
    gpu = Gpu("NVIDIA GeForce GTX 1070", capability)
    assert resolved_precision("auto", (gpu,), cpuinfo=native) == expected


def test_auto_precision_with_several_gpus_takes_the_lowest_capability_or_float32_if_unknown():
    a100, t4 = Gpu("NVIDIA A100", (8, 0)), Gpu("Tesla T4", (7, 5))
    assert resolved_precision("auto", (a100, t4)) == (
        "mixed_float16", "Tesla T4 has compute capability 7.5 (7.x)")
    assert resolved_precision("auto", (a100, Gpu("GPU:1", None))) == (
        "float32", "the compute capability of GPU:1 is unknown")


def test_visible_gpus_reads_name_and_capability_from_tensorflow(monkeypatch):
    device = tf.config.PhysicalDevice("/physical_device:GPU:0", "GPU")
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: [device])
    monkeypatch.setattr(tf.config.experimental, "get_device_details", lambda d: {
        "device_name": "NVIDIA L4", "compute_capability": (8, 9)})
    assert visible_gpus() == (Gpu("NVIDIA L4", (8, 9)),)


def test_an_auto_precision_run_says_which_it_chose_and_trains_in_it(tiny_dataset, tmp_path,
                                                                   caplog):
    caplog.set_level(logging.INFO, logger="meshseg.train.run")
    train_tiny(tiny_config(tiny_dataset, "precision=auto", "steps=2", "eval_every=2"), tmp_path)
    chosen, why = resolved_precision("auto", visible_gpus())
    assert f"precision {chosen} ({why})" in caplog.messages
    model = keras.models.load_model(tmp_path / "model.keras", compile=False)
    assert model.graph_convs[0].dtype_policy.name == chosen


def test_with_a_gpu_the_run_log_gives_the_gpus_precision_and_says_threads_are_the_cpus(
        tiny_dataset, monkeypatch, caplog):
    from meshseg.train import run

    monkeypatch.setattr(run, "visible_gpus", lambda: (Gpu("Tesla T4", (7, 5)),))
    caplog.set_level(logging.INFO, logger="meshseg.train.run")
    config = run.typed_config(checked_config(tiny_config(tiny_dataset, "precision=auto",
                                                           "threads=2")))
    assert config.precision == "mixed_float16"
    assert "precision mixed_float16 (Tesla T4 has compute capability 7.5 (7.x))" in caplog.messages
    assert ("threads=2, inter_op_threads=0 size TensorFlow's CPU thread pools only: the "
            "step's GPU kernels do not use them") in caplog.messages

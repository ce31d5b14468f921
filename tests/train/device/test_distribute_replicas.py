"""Two replicas in one process: the CPU split into two logical devices
(`strategy.cpu_devices=2`) under `strategy=mirrored`, with XLA, and the non-finite guard.

The split must happen before TensorFlow starts, so each case runs in a fresh process."""

import json
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from helpers.records import non_finite_tetrahedron_record
from helpers.runs import PROJECT, scalars, tiny_config, train_py, train_tiny
from meshseg.train.rundir.ownership import OWNER_FILE
from meshseg.train.rundir.summary import RunSummary

TWO_REPLICAS = ("strategy=mirrored", "strategy.cpu_devices=2")
TRAIN_PY_NET = ("model.input_channels=16", "model.conv_channels=[8,8]")  # train_py's network


@pytest.mark.slow
def test_two_cpu_replicas_with_xla_give_the_default_strategys_losses_compiling_once_per_bucket(
        tiny_dataset, tmp_path):
    settings = ("steps=4", "data.num_buckets=2", "deterministic=true")
    result = train_py(tiny_dataset, tmp_path / "mirrored", *settings, *TWO_REPLICAS, "jit=true")
    assert result.returncode == 0, result.stderr[-3000:]
    cfg = tiny_config(tiny_dataset, *settings, *TRAIN_PY_NET, "eval_every=10")
    train_tiny(cfg, tmp_path / "default")

    losses = {name: [v for _, v in scalars(tmp_path / name, "train")["loss"]]
              for name in ("mirrored", "default")}
    np.testing.assert_allclose(losses["mirrored"], losses["default"], rtol=1e-5)
    summary = RunSummary.load(tmp_path / "mirrored")
    assert summary.replicas == 2
    assert 1 <= summary.num_compilations <= 2  # the step, once per bucket
    traces = re.search(r"per-replica pass \(XLA .*\) traced (\d+) times over 2 replicas",
                       (tmp_path / "mirrored" / "train.log").read_text())
    assert traces and 1 <= int(traces[1]) <= 2 * 2  # once per bucket per replica at most


def write_good_then_non_finite(path, good_shard) -> str:
    """A shard holding the first mesh of `good_shard`, then a tetrahedron with an infinite
    coordinate (its loss is NaN)."""
    first = next(iter(tf.data.TFRecordDataset(good_shard))).numpy()
    with tf.io.TFRecordWriter(str(path)) as writer:
        writer.write(first)
        writer.write(non_finite_tetrahedron_record())
    return str(path)


# Replica 0 gets a finite mesh and replica 1 the non-finite one: neither may update.
GUARD_SCRIPT = """
import json, sys
import numpy as np
from meshseg.config import DataConfig, StrategyConfig
from meshseg.train.device.distribute import configure_runtime
strategy = configure_runtime(0, StrategyConfig(name="mirrored", cpu_devices=2))
from meshseg.config import ModelConfig, OptimizerConfig
from meshseg.data.pipeline.sources import build_datasets
from meshseg.train.run import build_model, build_optimizer
from meshseg.train.loop.step import TrainStep
data = DataConfig(name="t", source="tfrecords", num_classes=6, train_files=sys.argv[1],
                  test_files=sys.argv[1], batch_size=2, overlap="warn")
_, batches, _ = build_datasets(data, seed=0, jit=False)
model_settings = ModelConfig(name="demo", num_weight_matrices=4, input_channels=8, conv_channels=[8, 8],
                             hidden_channels=16, translation_invariant=False)
with strategy.scope():
    model = build_model(6, "gather_matmul", model_settings, "float32", False)
    settings = OptimizerConfig(name="adam", schedule="exponential", weight_decay=0.0,
                               learning_rate=1e-2, decay_steps=1000, decay_rate=0.95,
                               beta_1=0.9, epsilon=1e-7)
    optimizer = build_optimizer(model, settings, "float32", 1000)
step = TrainStep(model, optimizer, False, strategy)
before = [w.copy() for w in model.get_weights()]
features, labels = next(iter(strategy.experimental_distribute_dataset(batches)))
loss, accuracy, finite, _, _ = step(features, labels)
print(json.dumps({"replicas": strategy.num_replicas_in_sync, "finite": bool(finite),
                  "unchanged": all(np.array_equal(a, b)
                                   for a, b in zip(before, model.get_weights())),
                  "iterations": int(optimizer.iterations.numpy())}))
"""


@pytest.mark.slow
def test_a_non_finite_mesh_on_one_of_two_replicas_skips_the_update_on_both(tiny_dataset,
                                                                           tmp_path):
    shard = write_good_then_non_finite(tmp_path / "mixed.tfrecords", tiny_dataset["train"])
    result = subprocess.run([sys.executable, "-c", GUARD_SCRIPT, shard], cwd=PROJECT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome == {"replicas": 2, "finite": False, "unchanged": True, "iterations": 0}


@pytest.mark.slow
def test_a_non_finite_step_under_two_replicas_stops_the_run_keeping_the_last_good_checkpoint(
        tiny_dataset, tmp_path):
    checkpoints = tmp_path / "checkpoints"
    train_tiny(tiny_config(tiny_dataset, "steps=2", "checkpoint.every=1",
                           f"checkpoint.dir={checkpoints}", *TRAIN_PY_NET),
               tmp_path / "good")
    # The good run's checkpoints, handed over without its owner record (a run restores
    # only its own or unclaimed checkpoints: meshseg.train.rundir.ownership)
    handed = tmp_path / "handed"
    shutil.copytree(checkpoints, handed, ignore=shutil.ignore_patterns(OWNER_FILE))
    kept = {p.name: p.read_bytes() for p in handed.iterdir()}
    bad = write_good_then_non_finite(tmp_path / "mixed.tfrecords", tiny_dataset["train"])
    result = train_py({**tiny_dataset, "train": bad}, tmp_path / "bad", "steps=4",
                      "checkpoint.every=1", f"checkpoint.dir={handed}", "eval_every=2",
                      *TWO_REPLICAS)
    output = result.stdout + result.stderr
    assert result.returncode == 3, output[-3000:]
    assert re.search(r"step 3: non-finite loss .* no replica applied the update\. Batch: "
                     r".*mixed\.tfrecords, record \d.*Last good checkpoint: .*ckpt-2", output)
    assert "Traceback" not in output
    assert {p.name: p.read_bytes() for p in handed.iterdir()} == kept

"""Data parallelism: a mirrored run in-process and real CPU workers on 127.0.0.1 (two
workers; one killed and the job started again)."""

import signal
import time

import numpy as np
import pytest
import tensorflow as tf

from helpers.runs import (communicate_all, final_weights, free_ports, scalars, start_workers,
                          tiny_config, train_tiny)
from meshseg.errors import ConfigError
from meshseg.train.rundir.checkpoints import checkpoints_on_disk

import meshseg.nn.model  # noqa: F401  (registers the model class for load_model)

# With tiny_config: the network of train_command (helpers.runs).
TRAIN_COMMAND_NET = ("model.input_channels=16", "model.conv_channels=[8,8]")


def test_a_mirrored_run_matches_the_default_strategy(tiny_dataset, tmp_path):
    for strategy in ("default", "mirrored"):
        train_tiny(tiny_config(tiny_dataset, f"strategy={strategy}"), str(tmp_path / strategy))
    losses = {s: [v for _, v in scalars(tmp_path / s, "train")["loss"]] for s in ("default", "mirrored")}
    np.testing.assert_allclose(losses["mirrored"], losses["default"], rtol=1e-5)


@pytest.mark.parametrize("override, message", [
    (["strategy=mirrored", "jit=true", "loop=keras"], "jit=true with strategy=mirrored needs loop=custom"),
    (["strategy=multi_worker", "loop=keras"], "strategy=multi_worker needs loop=custom"),
])
def test_unsupported_strategy_combinations_fail_at_start_up(override, message, tiny_dataset, tmp_path):
    with pytest.raises(ConfigError, match=message):
        train_tiny(tiny_config(tiny_dataset, *override), str(tmp_path))


@pytest.mark.slow
def test_two_workers_end_with_identical_weights_matching_one_worker(tiny_dataset, tmp_path):
    common = ["steps=4", "eval_every=4", "data.batch_size=2", "strategy=multi_worker"]
    workers = start_workers(tiny_dataset, [tmp_path / f"worker{i}" for i in range(2)],
                            free_ports(2), *common[:-1])
    outputs = communicate_all(workers, timeout=240)
    for worker, output in zip(workers, outputs):
        assert worker.returncode == 0, output[-3000:]
    # One worker: train_command's run in this process (its network, deterministic).
    train_tiny(tiny_config(tiny_dataset, "steps=4", "eval_every=4", "data.batch_size=2",
                           *TRAIN_COMMAND_NET, "deterministic=true"), tmp_path / "single")

    for got, want in zip(final_weights(tmp_path / "worker1"), final_weights(tmp_path / "worker0")):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(final_weights(tmp_path / "worker0"), final_weights(tmp_path / "single")):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    two = [v for _, v in scalars(tmp_path / "worker0", "train")["loss"]]
    one = [v for _, v in scalars(tmp_path / "single", "train")["loss"]]
    np.testing.assert_allclose(two, one, rtol=1e-4)
    assert not (tmp_path / "worker1" / "train").exists()  # only the chief writes summaries


def two_shards(train_file, folder) -> str:
    """The records of `train_file` split over two shard files; returns their glob."""
    records = [r.numpy() for r in tf.data.TFRecordDataset(train_file)]
    folder.mkdir()
    for index in range(2):
        with tf.io.TFRecordWriter(str(folder / f"train-{index}.tfrecords")) as writer:
            for record in records[index::2]:
                writer.write(record)
    return str(folder / "train-*.tfrecords")


def run_workers(dataset, run_dirs, *overrides):
    """Two workers to the end; returns their outputs."""
    workers = start_workers(dataset, run_dirs, free_ports(2), *overrides)
    outputs = communicate_all(workers, timeout=300)
    for worker, output in zip(workers, outputs):
        assert worker.returncode == 0, output[-3000:]
    return outputs


@pytest.mark.slow
def test_two_workers_killed_and_started_again_end_with_the_weights_of_an_uninterrupted_run(
        tiny_dataset, tmp_path):
    dataset = {**tiny_dataset, "train": two_shards(tiny_dataset["train"], tmp_path / "shards")}
    steps = 30
    common = (f"steps={steps}", "checkpoint.every=2", f"eval_every={steps}")
    whole = [tmp_path / f"whole{i}" for i in range(2)]
    outputs = run_workers(dataset, whole, *common, f"checkpoint.dir={tmp_path / 'whole-ckpt'}")
    assert "training input sharded by file (2 shard files, 2 workers)" in outputs[0]
    assert "worker 1 of 2:" in outputs[1] and "meshes/s" in outputs[1]

    shared = tmp_path / "shared-ckpt"  # storage both workers read; only the chief writes
    run_dirs = [tmp_path / f"run{i}" for i in range(2)]
    command = (*common, f"checkpoint.dir={shared}")
    workers = start_workers(dataset, run_dirs, free_ports(2), *command)
    try:
        deadline = time.time() + 240
        while not (shared / "ckpt-2.index").exists():
            assert all(w.poll() is None for w in workers) and time.time() < deadline
            time.sleep(0.02)
        workers[1].send_signal(signal.SIGKILL)
        workers[1].wait()
        killed_at = checkpoints_on_disk(str(shared))[0]
        # The job's other worker goes with it, as a scheduler ends a job that lost a task.
        workers[0].send_signal(signal.SIGKILL)
    finally:
        communicate_all(workers, timeout=60)
    assert killed_at < steps and not (run_dirs[0] / "summary.json").exists()

    run_workers(dataset, run_dirs, *command)  # the same command again
    assert [step for step, _ in scalars(run_dirs[0], "train")["loss"]] == list(range(1, steps + 1))
    for got, want in zip(final_weights(run_dirs[0]), final_weights(whole[0])):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    for got, want in zip(final_weights(run_dirs[1]), final_weights(run_dirs[0])):
        np.testing.assert_array_equal(got, want)


@pytest.mark.slow
def test_sigterm_to_one_worker_stops_both_after_the_same_step_with_a_checkpoint(tiny_dataset,
                                                                               tmp_path):
    shared = tmp_path / "shared-ckpt"
    many = ("steps=100000", "checkpoint.every=100000", "eval_every=100000")
    workers = start_workers(tiny_dataset, [tmp_path / "w0", tmp_path / "w1"], free_ports(2),
                            *many, f"checkpoint.dir={shared}")
    try:
        deadline = time.time() + 240
        while not (tmp_path / "w0" / "train").exists():  # the chief's controller is up
            assert all(w.poll() is None for w in workers) and time.time() < deadline
            time.sleep(0.1)
        time.sleep(3)
        workers[1].send_signal(signal.SIGTERM)  # as a scheduler preempting one task
        outputs = communicate_all(workers, timeout=60)
    finally:
        communicate_all(workers, timeout=1)
    assert [w.returncode for w in workers] == [128 + signal.SIGTERM] * 2, outputs[0][-2000:]
    steps = checkpoints_on_disk(str(shared))
    assert len(steps) == 1 and steps[0] >= 1
    for output in outputs:
        assert f"stopped by signal 15 after step {steps[0]};" in output

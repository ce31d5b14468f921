"""Data parallelism: a mirrored run in-process and two real CPU workers on 127.0.0.1."""

import json
import os
import socket
import subprocess

import numpy as np
import pytest

from helpers.runs import (PROJECT, communicate_all, final_weights, scalars, tiny_config,
                          train_command, train_tiny)
from meshseg.errors import ConfigError

import meshseg.nn.model  # noqa: F401  (registers the model class for load_model)


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def test_a_mirrored_run_matches_the_default_strategy(tiny_dataset, tmp_path):
    for strategy in ("default", "mirrored"):
        train_tiny(tiny_config(tiny_dataset, f"strategy={strategy}"), str(tmp_path / strategy))
    losses = {s: [v for _, v in scalars(tmp_path / s, "train")["loss"]] for s in ("default", "mirrored")}
    np.testing.assert_allclose(losses["mirrored"], losses["default"], rtol=1e-5)


@pytest.mark.parametrize("override, message", [
    (["strategy=mirrored", "jit=true"], "jit=true with strategy=mirrored is not supported"),
    (["strategy=multi_worker", "loop=keras"], "strategy=multi_worker needs loop=custom"),
])
def test_unsupported_strategy_combinations_fail_at_start_up(override, message, tiny_dataset, tmp_path):
    with pytest.raises(ConfigError, match=message):
        train_tiny(tiny_config(tiny_dataset, *override), str(tmp_path))


@pytest.mark.slow
def test_two_workers_end_with_identical_weights_matching_one_worker(tiny_dataset, tmp_path):
    common = ["steps=4", "eval_every=4", "data.batch_size=2", "strategy=multi_worker"]
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(2)]}
    workers = []
    for index in range(2):
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": "",
               "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})}
        workers.append(subprocess.Popen(train_command(tiny_dataset, tmp_path / f"worker{index}", *common),
                                        cwd=PROJECT, env=env, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True))
    outputs = communicate_all(workers, timeout=240)
    for worker, output in zip(workers, outputs):
        assert worker.returncode == 0, output[-3000:]
    single = subprocess.run(train_command(tiny_dataset, tmp_path / "single", "steps=4", "eval_every=4",
                                          "data.batch_size=2"),
                            cwd=PROJECT, capture_output=True, text=True, timeout=240)
    assert single.returncode == 0, single.stderr[-3000:]

    for got, want in zip(final_weights(tmp_path / "worker1"), final_weights(tmp_path / "worker0")):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(final_weights(tmp_path / "worker0"), final_weights(tmp_path / "single")):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    two = [v for _, v in scalars(tmp_path / "worker0", "train")["loss"]]
    one = [v for _, v in scalars(tmp_path / "single", "train")["loss"]]
    np.testing.assert_allclose(two, one, rtol=1e-4)
    assert not (tmp_path / "worker1" / "train").exists()  # only the chief writes summaries

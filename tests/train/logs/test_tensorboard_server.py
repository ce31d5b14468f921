"""The dashboard as users see it: `tensorboard --logdir <run>` serves what a run wrote,
read through TensorBoard's HTTP data API on 127.0.0.1."""

import json
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import numpy as np
import pytest
from helpers.runs import tiny_config, train_tiny

from meshseg.train.logs.summaries import read_scalars

START_TIMEOUT_S = 180  # TensorBoard imports TensorFlow before it serves (about 25 s here)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def get_json(url: str):
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


@pytest.fixture
def tensorboard(tiny_dataset, tmp_path):
    """A tiny run in tmp_path/run (3 steps, one test mesh in the Mesh dashboard) and the
    base URL of a TensorBoard serving it; the server is stopped afterwards."""
    run_dir = tmp_path / "run"
    train_tiny(tiny_config(tiny_dataset, "summaries.meshes=1"), run_dir)
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "tensorboard.main", "--logdir", str(run_dir), "--host",
         "127.0.0.1", "--port", str(port), "--load_fast", "false", "--reload_interval", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                if {"train", "eval"} <= set(get_json(f"{base}/data/runs")):
                    break
            except OSError:
                pass
            assert server.poll() is None, "tensorboard exited"
            assert time.monotonic() < deadline, f"tensorboard did not serve within {START_TIMEOUT_S} s"
            time.sleep(1)
        yield base, run_dir
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.slow
def test_tensorboard_serves_the_runs_step_times_accuracy_and_meshes(tensorboard):
    base, run_dir = tensorboard
    for split, tag in (("train", "step_time_ms"), ("train", "accuracy"), ("eval", "accuracy")):
        query = urllib.parse.urlencode({"run": split, "tag": tag})
        served = np.array(get_json(f"{base}/data/plugin/scalars/scalars?{query}"))
        steps, values = read_scalars(str(run_dir / split))[tag]
        np.testing.assert_array_equal(served[:, 1], steps)  # [wall time, step, value] rows
        np.testing.assert_allclose(served[:, 2], values, rtol=1e-6)
    steps, _ = read_scalars(str(run_dir / "train"))["step_time_ms"]
    assert len(steps) >= 1
    mesh_tags = get_json(f"{base}/data/plugin/mesh/tags")
    assert {"test_mesh_0/prediction", "test_mesh_0/ground_truth"} <= set(mesh_tags["eval"])

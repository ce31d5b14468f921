"""Tiny training runs for the tests: the composed config, an in-process run, the train.py
command line, and what a run writes (event-file scalars, saved weights)."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import keras
import tensorflow as tf
from hydra import compose, initialize_config_dir

from meshseg.config import checked_config  # also registers the config schema
from meshseg.nn import model as _registers_keras_classes  # noqa: F401  (for load_model)
from meshseg.train.run import run
from meshseg.train.logs.summaries import read_scalars
from meshseg.train.rundir.summary import RunSummary

PROJECT = Path(__file__).resolve().parents[2]
CONFIG_DIR = str(PROJECT / "conf")


def tiny_config(dataset: dict, *overrides: str):
    """The `train` config on `dataset` (the `tiny_dataset` fixture) with a small demo
    network and the demo's optimizer and loss (Adam, no label smoothing), 3 steps and
    evaluation every 2, plus `overrides`."""
    base = [
        "data=tfrecords",
        f"data.train_files={dataset['train']}",
        f"data.test_files={dataset['test']}",
        f"data.num_classes={dataset['num_classes']}",
        "data.batch_size=2",
        "model=demo",
        "optimizer=adam",
        "loss.label_smoothing=0",
        "model.input_channels=8",
        "model.conv_channels=[8,8,16]",
        "model.hidden_channels=16",
        "model.num_weight_matrices=4",
        "steps=3",
        "eval_every=2",
    ]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose(config_name="train", overrides=base + list(overrides))


def train_tiny(cfg, run_dir) -> RunSummary:
    """`meshseg.train.run.run` of the composed `cfg` (typed and checked as train.py does)
    in this process, on one device (the default strategy)."""
    return run(checked_config(cfg), str(run_dir), tf.distribute.get_strategy())


def train_command(dataset: dict, run_dir, *overrides: str) -> list:
    """`python train.py` on `dataset` with a small deterministic demo network, Adam and no
    label smoothing (run it in PROJECT)."""
    return [sys.executable, "train.py", "data=tfrecords", f"data.train_files={dataset['train']}",
            f"data.test_files={dataset['test']}", f"data.num_classes={dataset['num_classes']}",
            "data.batch_size=2", "model=demo", "optimizer=adam", "loss.label_smoothing=0",
            "model.conv_channels=[8,8]", "model.hidden_channels=16",
            "model.num_weight_matrices=4", "deterministic=true", "eval_every=10",
            f"hydra.run.dir={run_dir}", *overrides]


def train_py(dataset: dict, run_dir, *overrides: str, timeout: float = 300):
    """Runs `train_command` in a child process; returns its `subprocess.CompletedProcess`
    (text stdout and stderr)."""
    return subprocess.run(train_command(dataset, run_dir, *overrides), cwd=PROJECT,
                          capture_output=True, text=True, timeout=timeout)


def default_dir_train_command(dataset: dict, *overrides: str) -> list:
    """`train_command` without `hydra.run.dir`, runnable in any working directory: the run
    writes to the default `outputs/<date>_<time>_...` there."""
    command = [arg for arg in train_command(dataset, None, *overrides)
               if not arg.startswith("hydra.run.dir=")]
    return [command[0], str(PROJECT / "train.py"), *command[2:]]


def communicate_all(processes: list, timeout: float) -> list:
    """The combined output of each `subprocess.Popen` (stdout, with stderr merged), waiting
    up to `timeout` s each; every process still running afterwards is killed, whatever
    happened."""
    try:
        return [process.communicate(timeout=timeout)[0] for process in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()


def scalars(run_dir, split: str) -> dict:
    """{tag: [(step, value), ...]} of the scalars in run_dir/split's event files
    (`meshseg.train.logs.summaries.read_scalars`; mesh summaries are left out)."""
    return {tag: list(zip(steps.tolist(), values.tolist()))
            for tag, (steps, values) in read_scalars(str(Path(run_dir) / split)).items()}


def final_weights(run_dir) -> list:
    """The weights of `<run_dir>/model.keras`."""
    return keras.models.load_model(Path(run_dir) / "model.keras").get_weights()


def free_ports(count: int, consecutive: bool = False) -> list:
    """`count` TCP ports on 127.0.0.1 that are free now (with `consecutive`, a run of
    `count` ports starting at the first)."""
    while True:
        sockets = [socket.socket() for _ in range(count)]
        try:
            sockets[0].bind(("127.0.0.1", 0))
            first = sockets[0].getsockname()[1]
            for offset, s in enumerate(sockets[1:], start=1):
                s.bind(("127.0.0.1", first + offset if consecutive else 0))
            return [s.getsockname()[1] for s in sockets]
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()


def worker_env(ports: list, index: int) -> dict:
    """The environment of worker `index` of a CPU-only cluster on 127.0.0.1 `ports`."""
    cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
    return {**os.environ, "CUDA_VISIBLE_DEVICES": "",
            "TF_CONFIG": json.dumps({"cluster": cluster,
                                     "task": {"type": "worker", "index": index}})}


def start_workers(dataset: dict, run_dirs: list, ports: list, *overrides: str) -> list:
    """Starts one `train.py strategy=multi_worker` process per port (worker i writes to
    `run_dirs[i]`); returns the `subprocess.Popen`s (text stdout with stderr merged)."""
    return [subprocess.Popen(train_command(dataset, run_dir, "strategy=multi_worker", *overrides),
                             cwd=PROJECT, env=worker_env(ports, index), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
            for index, run_dir in enumerate(run_dirs)]

"""The training application end to end on tiny data: configs, event files, loops, padding."""

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from helpers.runs import CONFIG_DIR, PROJECT, scalars, tiny_config, train_tiny
from meshseg.data.mesh.meshfiles import load_labelled_mesh
from meshseg.data.pipeline.dataset import make_dataset
from meshseg.data.records.schema import mesh_to_example
from meshseg.nn.model import MeshSegmentationNet
from meshseg.nn.networks import build_network
from meshseg.nn.ops import IMPLEMENTATIONS
from meshseg.train.loop.metrics import masked_cross_entropy
from meshseg.train.loop.step import TrainStep
from meshseg.train.rundir.summary import RunSummary


def group_options(group):
    return sorted(p.stem for p in (Path(CONFIG_DIR) / group).glob("*.yaml"))


@pytest.mark.parametrize("group", ["impl", "loop", "data", "model", "optimizer"])
def test_every_config_group_option_composes_and_builds_a_model(group, tiny_dataset):
    for option in group_options(group):
        if group == "data":
            with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
                cfg = compose(config_name="train", overrides=[f"data={option}"])
            assert cfg.data.name == option
            continue
        cfg = tiny_config(tiny_dataset, f"{group}={option}")
        impls = cfg.impl.candidates if cfg.impl.name == "auto" else [cfg.impl.name]
        for impl in impls:
            model = build_network(cfg.data.num_classes, impl, OmegaConf.to_container(cfg.model),
                                  input_width=3, xla=False)
            assert model.impl == impl and tuple(model.conv_channels) == (8, 8, 16)


def test_unknown_impl_fails_at_composition():
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        with pytest.raises(Exception, match="impl"):
            compose(config_name="train", overrides=["impl=no_such_impl"])


@pytest.fixture(scope="module")
def tiny_run(tiny_dataset, tmp_path_factory):
    """(run_dir, RunSummary) of `tiny_config` as it is (custom loop, 3 steps, evaluation
    every 2) on `tiny_dataset`, trained in this process. Read-only."""
    run_dir = tmp_path_factory.mktemp("tiny_run")
    return run_dir, train_tiny(tiny_config(tiny_dataset), str(run_dir))


def test_tiny_run_writes_event_files_summary_and_model(tiny_run):
    tmp_path, summary = tiny_run
    train = scalars(tmp_path, "train")
    assert {"loss", "accuracy", "step_time_ms", "vertices_per_second", "compile_time_s"} <= set(train)
    assert [step for step, _ in train["loss"]] == [1, 2, 3]
    assert [step for step, _ in train["step_time_ms"]] == [2, 3]  # step 1 compiled
    assert all(value > 0 for _, value in train["step_time_ms"])
    evaluation = scalars(tmp_path, "eval")
    assert [step for step, _ in evaluation["accuracy"]] == [2, 3]
    assert {"mean_iou", "majority_baseline_accuracy", "boundary_accuracy",
            "interior_accuracy"} <= set(evaluation)
    assert 0 < evaluation["majority_baseline_accuracy"][-1][1] < 1
    saved = RunSummary.load(tmp_path)
    assert saved.eval_accuracy == pytest.approx(evaluation["accuracy"][-1][1])
    assert saved.eval_boundary_accuracy == pytest.approx(evaluation["boundary_accuracy"][-1][1])
    assert saved.eval_interior_accuracy == pytest.approx(evaluation["interior_accuracy"][-1][1])
    assert saved.median_step_time_ms == pytest.approx(np.median([v for _, v in train["step_time_ms"]]))
    assert summary.num_compilations == 1
    assert (tmp_path / "model.keras").exists()


def test_custom_and_keras_loops_agree_on_the_first_steps(tiny_dataset, tiny_run, tmp_path):
    run_dirs = {"custom": tiny_run[0], "keras": tmp_path / "keras"}
    assert OmegaConf.load(run_dirs["custom"] / "run_config.yaml").loop.name == "custom"
    train_tiny(tiny_config(tiny_dataset, "loop=keras"), str(run_dirs["keras"]))
    losses = {loop: [value for _, value in scalars(run_dir, "train")["loss"]]
              for loop, run_dir in run_dirs.items()}
    assert len(losses["keras"]) == 3
    np.testing.assert_allclose(losses["keras"], losses["custom"], rtol=1e-4)
    assert losses["custom"][0] != losses["custom"][2]  # the model did train


def test_jit_run_compiles_the_train_step_once(tiny_dataset, tmp_path):
    summary = train_tiny(tiny_config(tiny_dataset, "jit=true", "steps=4", "impl=gather_matmul"), str(tmp_path))
    assert summary.num_compilations == 1
    assert len(scalars(tmp_path, "train")["step_time_ms"]) == 3


@pytest.mark.parametrize("impl", sorted(IMPLEMENTATIONS))
def test_padded_values_change_neither_loss_nor_accuracy(impl, tiny_dataset):
    features, labels = next(iter(make_dataset([tiny_dataset["train"]], batch_size=4, training=False)))
    padded = ~tf.sequence_mask(features["num_vertices"], tf.shape(labels)[1])
    assert bool(tf.reduce_any(padded)), "the batch must contain padding"
    keras.utils.set_random_seed(0)
    model = MeshSegmentationNet(6, impl=impl, conv_channels=(8, 8), hidden_channels=16)
    noisy = dict(features)
    noise = tf.random.normal(tf.shape(features["vertices"]), stddev=100.0)
    noisy["vertices"] = tf.where(padded[..., None], noise, features["vertices"])
    valid = labels >= 0
    for name, batch in (("clean", features), ("noisy", noisy)):
        logits = model(batch)
        predictions = tf.boolean_mask(tf.argmax(logits, -1, output_type=tf.int32), valid)
        result = (float(masked_cross_entropy(labels, logits)), predictions.numpy())
        if name == "clean":
            reference = result
    assert result[0] == pytest.approx(reference[0], rel=1e-6)
    np.testing.assert_array_equal(result[1], reference[1])


@pytest.mark.slow  # the training tests above on a real RNA surface (15k vertices)
def test_a_few_steps_on_a_real_mesh_lower_the_loss(tmp_path):
    rna = PROJECT / "data" / "rna_sample"
    mesh = load_labelled_mesh(rna / "ply" / "1VQ6_9.ply", rna / "labels" / "1VQ6_9.txt",
                              label_offset=1)
    path = str(tmp_path / "real.tfrecords")
    with tf.io.TFRecordWriter(path) as writer:
        writer.write(mesh_to_example(mesh.vertices, mesh.triangles, mesh.labels))
    features, batch_labels = next(iter(make_dataset([path], batch_size=1, training=False)))
    keras.utils.set_random_seed(0)
    model = MeshSegmentationNet(260, impl="gather_matmul", conv_channels=(16, 16), hidden_channels=32)
    step = TrainStep(model, keras.optimizers.Adam(1e-2), jit=False,
                     strategy=tf.distribute.get_strategy())
    losses = [float(step(features, batch_labels)[0]) for _ in range(6)]
    assert losses[0] == pytest.approx(np.log(260), rel=0.05)  # a fresh net is near uniform
    assert losses[-1] < losses[0] - 0.05


@pytest.mark.slow
def test_multirun_writes_one_logdir_per_job(tiny_dataset, tmp_path):
    command = [sys.executable, "train.py", "-m", "loop=custom,keras", "data=tfrecords",
               f"data.train_files={tiny_dataset['train']}", f"data.test_files={tiny_dataset['test']}",
               "data.num_classes=6", "data.batch_size=2", "model=demo", "model.conv_channels=[8,8]",
               "model.hidden_channels=16", "steps=2", "eval_every=2",
               f"hydra.sweep.dir={tmp_path}"]
    result = subprocess.run(command, cwd=PROJECT, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert result.returncode == 0, result.stderr[-3000:]
    job_dirs = sorted(p for p in tmp_path.iterdir() if (p / "train").is_dir())
    assert [p.name for p in job_dirs] == ["0_demo_gather_matmul_custom_jit-False", "1_demo_gather_matmul_keras_jit-False"]
    for job_dir in job_dirs:
        assert {"loss", "accuracy", "step_time_ms"} <= set(scalars(job_dir, "train"))
    pids = {RunSummary.load(job_dir).pid for job_dir in job_dirs}
    assert len(pids) == 2  # each job trained in its own process
    # it ends with the comparison of its jobs: one table row each, and the report written
    rows = [line for line in result.stdout.splitlines() if line.startswith("| ") and "_jit-" in line]
    assert [row.split(" | ")[0] for row in rows] == [f"| {p.name}" for p in job_dirs]
    assert f"report: {tmp_path / 'report.md'}" in result.stdout
    assert (tmp_path / "report.md").exists()


@pytest.mark.slow
def test_a_sweep_lists_every_job_with_the_failed_ones_and_exits_non_zero_counting_them(
        tiny_dataset, tmp_path):
    # Three jobs: one trains, one is refused by its settings before its run starts
    # (num_classes=0), one by its data after TensorFlow started (labels up to 5 with
    # num_classes=2). Every job runs; the table and report.md list all three, the failed
    # ones with exit status and log; the sweep ends with one line counting them.
    command = [sys.executable, "train.py", "-m", "data.num_classes=6,0,2", "data=tfrecords",
               f"data.train_files={tiny_dataset['train']}",
               f"data.test_files={tiny_dataset['test']}", "data.batch_size=2", "model=demo",
               "model.conv_channels=[8,8]", "model.hidden_channels=16", "steps=1",
               "eval_every=1", f"hydra.sweep.dir={tmp_path}"]
    result = subprocess.run(command, cwd=PROJECT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    jobs = sorted(p for p in tmp_path.iterdir() if p.is_dir() and not p.name.startswith("."))
    assert len(jobs) == 3
    rows = {line.split(" | ")[0][2:]: line for line in result.stdout.splitlines()
            if line.startswith("| ") and "_jit-" in line}
    report = (tmp_path / "report.md").read_text()
    assert sorted(rows) == [job.name for job in jobs]
    assert rows[jobs[0].name].endswith(" | done |") and jobs[0].name in report
    for job in jobs[1:]:
        status = f"failed (exit 2): {job / 'train.log'}"
        assert rows[job.name].endswith(f" | {status} |") and status in report
        record = json.loads((job / "job_failed.json").read_text())
        assert record["exit_status"] == 2 and f"hydra.run.dir={job}" in shlex.split(record["command"])
    assert "error: data.num_classes must be >= 1, got 0" in (jobs[1] / "train.log").read_text()
    assert "data has label 5 but num_classes=2" in (jobs[2] / "train.log").read_text()
    last = [line for line in result.stderr.splitlines() if line.strip()][-1]
    assert last == (f"error: 2 of 3 sweep jobs failed ({jobs[1].name}, {jobs[2].name}); their "
                    f"exit status and log are in the table and in {tmp_path / 'report.md'}")


def test_the_summary_records_test_meshes_that_are_training_meshes(tiny_dataset, tiny_run,
                                                                  tmp_path):
    overlapping = {**tiny_dataset, "test": tiny_dataset["train"]}
    summary = train_tiny(tiny_config(overlapping, "steps=1"), tmp_path)
    assert summary.test_train_overlap == 4 == RunSummary.load(tmp_path).test_train_overlap
    held_out_dir, held_out = tiny_run  # its test meshes are no training meshes
    assert held_out.test_train_overlap == 0 == RunSummary.load(held_out_dir).test_train_overlap

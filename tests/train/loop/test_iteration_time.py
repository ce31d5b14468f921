"""The custom loop times its whole iterations (input, step, logging and summaries), and the
run's summary reports their median."""

import json

import numpy as np
import pytest

from helpers.runs import scalars, tiny_config, train_tiny
from meshseg.train.rundir.claim import SUMMARY_FILE
from meshseg.train.rundir.summary import RunSummary


def test_iterations_are_timed_except_compiling_evaluating_checkpointing_and_last_steps(
        tiny_dataset, tmp_path):
    cfg = tiny_config(tiny_dataset, "steps=7", "eval_every=4", "checkpoint.every=3")
    summary = train_tiny(cfg, tmp_path)

    train = scalars(tmp_path, "train")
    iterations = dict(train["iteration_time_ms"])
    steps = dict(train["step_time_ms"])
    # step 1 compiles, 3 and 6 checkpoint, 4 evaluates, 7 is the last
    assert sorted(iterations) == [2, 5]
    assert all(iterations[step] >= steps[step] for step in iterations)
    assert summary.median_iteration_time_ms == pytest.approx(np.median(list(iterations.values())))
    assert summary.median_iteration_time_ms >= np.median([steps[step] for step in iterations])
    assert RunSummary.load(str(tmp_path)).median_iteration_time_ms == pytest.approx(
        summary.median_iteration_time_ms)


def test_a_summary_written_before_iteration_times_still_loads(tmp_path):
    old = {"impl": "gather_matmul", "replicas": 1, "test_files": [], "steps": 3,
           "wall_time_s": 1.0, "pid": 1, "median_step_time_ms": 2.0, "min_step_time_ms": 1.0,
           "max_step_time_ms": 3.0, "compile_time_s": 0.5, "num_compilations": 1,
           "peak_rss_mib": 100.0, "test_train_overlap": 0, "eval_accuracy": 0.5}
    (tmp_path / SUMMARY_FILE).write_text(json.dumps(old))

    summary = RunSummary.load(str(tmp_path))

    assert summary.median_iteration_time_ms is None
    assert summary.median_step_time_ms == 2.0

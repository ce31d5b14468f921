"""`profile=true`: a TensorBoard profile of the training steps `profile_steps` = [start, stop),
written to `<run dir>/train/plugins/profile/`, with the profiler never left running."""

import subprocess
import sys

import pytest
import tensorflow as tf

from helpers.runs import PROJECT, scalars, tiny_config, train_tiny
from meshseg.config import checked_config, composed_config, save_run_config
from meshseg.errors import ConfigError
from meshseg.tools.profile_summary import (CATEGORIES, format_report, newest_profile, op_times,
                                           step_times, summarize)
from meshseg.train.logs.profiling import StepProfiler
from meshseg.train.rundir.claim import RUN_CONFIG, check_run_dir


def profiler_is_free(tmp_path) -> bool:
    """Whether no profiler session runs in this process (a new one can start)."""
    try:
        tf.profiler.experimental.start(str(tmp_path / "probe"))
    except tf.errors.UnavailableError:
        return False
    tf.profiler.experimental.stop(save=False)
    return True


@pytest.fixture(scope="module")
def profiled_run(tiny_dataset, tmp_path_factory):
    """A 3-step tiny run with profile=true profile_steps=[1,3]: (run dir, RunSummary)."""
    run_dir = tmp_path_factory.mktemp("profiled_run")
    summary = train_tiny(tiny_config(tiny_dataset, "profile=true", "profile_steps=[1,3]"),
                         run_dir)
    return run_dir, summary


@pytest.mark.slow
def test_a_profiled_run_writes_an_xplane_under_its_train_logdir_and_still_trains(
        profiled_run, tmp_path):
    run_dir, summary = profiled_run
    profiles = list((run_dir / "train" / "plugins" / "profile").glob("*/*.xplane.pb"))
    assert len(profiles) == 1 and profiles[0].stat().st_size > 0
    assert summary.steps == 3
    assert [step for step, _ in scalars(run_dir, "train")["loss"]] == [1, 2, 3]
    assert profiler_is_free(tmp_path)


@pytest.mark.slow
def test_the_profile_marks_the_profiled_steps_and_its_summary_attributes_them(profiled_run):
    paths = newest_profile(str(profiled_run[0]))
    steps = step_times(paths)
    assert [name for name, _, _ in steps] == ["train 1", "train 2"]
    ops, _ = op_times(paths)
    totals = summarize(ops, len(steps))
    assert totals["conv"] > 0 and totals["classifier"] > 0 and totals["loss"] > 0
    assert totals["update"] > 0 and totals["guard"] > 0 and totals["metrics"] > 0
    report = format_report(paths, ops, 0.0, steps)
    table = report.split("\n\n")[1].splitlines()[1:1 + len(CATEGORIES)]
    assert [line.split()[0] for line in table] == [name for name, _ in CATEGORIES]
    assert sum(float(line.split()[2]) for line in table) == pytest.approx(100, abs=0.5)


@pytest.mark.slow
def test_a_run_that_ends_inside_the_range_saves_its_profile_and_stops_the_profiler(
        tiny_dataset, tmp_path):
    run_dir = tmp_path / "run"
    train_tiny(tiny_config(tiny_dataset, "loop=keras", "steps=2", "profile=true",
                           "profile_steps=[2,10]"), run_dir)
    assert list((run_dir / "train" / "plugins" / "profile").glob("*/*.xplane.pb"))
    assert [name for name, _, _ in step_times(newest_profile(str(run_dir)))] == ["train 2"]
    assert profiler_is_free(tmp_path)


def test_the_profiler_runs_for_the_steps_start_to_stop_minus_one(tmp_path):
    profiler = StepProfiler(str(tmp_path / "train"), [2, 4])
    running = {}
    for step in range(1, 6):
        profiler.step_begin(step)
        running[step] = profiler.running
        profiler.step_end(step)
    assert running == {1: False, 2: True, 3: True, 4: False, 5: False}
    assert list((tmp_path / "train" / "plugins" / "profile").glob("*/*.xplane.pb"))


def test_a_failure_inside_the_range_stops_the_profiler(tmp_path):
    with pytest.raises(RuntimeError):
        with StepProfiler(str(tmp_path / "train"), [0, 10]) as profiler:
            profiler.step_begin(1)
            raise RuntimeError("the step failed")
    assert not profiler.running and profiler_is_free(tmp_path)


def test_without_profile_steps_nothing_is_profiled(tmp_path):
    profiler = StepProfiler(str(tmp_path / "train"), None)
    profiler.step_begin(1)
    assert not profiler.running
    profiler.close()
    assert not (tmp_path / "train").exists()


@pytest.mark.parametrize("steps, message", [
    ("[5,5]", r"profile_steps must be \[start,stop\] with 0 <= start < stop .*got \[5, 5\]"),
    ("[6,2]", r"profile_steps must be \[start,stop\] .*got \[6, 2\]"),
    ("[3]", r"profile_steps must be \[start,stop\] .*got \[3\]"),
    ("[-1,3]", r"profile_steps must be a non-empty list of integers >= 0, got \[-1, 3\]"),
])
def test_a_bad_profile_steps_is_a_config_error_naming_it(steps, message):
    with pytest.raises(ConfigError, match=message):
        composed_config([f"profile_steps={steps}"])


def test_train_py_reports_a_bad_profile_steps_in_one_line(tmp_path):
    result = subprocess.run([sys.executable, "train.py", "profile=true", "profile_steps=[5,2]",
                             f"hydra.run.dir={tmp_path / 'run'}"], cwd=PROJECT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert "profile_steps must be [start,stop]" in lines[-1] and "got [5, 2]" in lines[-1]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists()


def test_a_run_resumes_with_profiling_switched_on(tiny_dataset, tmp_path):
    save_run_config(checked_config(tiny_config(tiny_dataset)), str(tmp_path / RUN_CONFIG))
    resumed = tiny_config(tiny_dataset, "profile=true", "profile_steps=[4,6]")
    assert check_run_dir(str(tmp_path), checked_config(resumed))

"""A quiet console: no TensorFlow C++ start-up lines from train.py or the converter's
worker processes, and a closing summary that says what happened and where to look."""

import logging
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.runs import PROJECT, train_command

from meshseg.console import (hydra_override, is_native_log_line, runnable_command,
                             shell_command)
from meshseg.train.run import log_results
from meshseg.train.rundir.summary import RunSummary

RNA_SAMPLE = PROJECT / "data" / "rna_sample"


def test_native_log_lines_are_recognised():
    native = [
        "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
        "I0000 00:00:1796040834.275282   20550 cudart_stub.cc:31] Could not find cuda drivers "
        "on your machine, GPU will not be used.",
        "E0000 00:00:1796040844.191824   20550 cuda_platform.cc:52] failed call to cuInit: "
        "INTERNAL: CUDA error",
        "W1130 12:41:07.123456    4242 xla/service/cpu/cpu_compiler.cc:1021] slow op",
    ]
    ours = [
        "[2026-11-30 12:13:53,538][train][INFO] - python train.py steps=2",
        "error: data.batch_size must be >= 1, got 0",
        "Converting train:  25%|██▌       | 4/16 [00:10<00:19,  1.58s/mesh]",
        "I0000 is not a log line without its source location",
    ]
    assert all(is_native_log_line(line) for line in native)
    assert not any(is_native_log_line(line) for line in ours)


@pytest.mark.slow
def test_train_py_converting_a_mesh_folder_prints_no_native_lines_and_a_closing_summary(
        tmp_path):
    root = tmp_path / "rna"
    (root / "ply").mkdir(parents=True)
    (root / "labels").mkdir()
    stems = [line.split(".")[0] for line in (RNA_SAMPLE / "train.txt").read_text().split()]
    for stem in stems[:3]:
        shutil.copy(RNA_SAMPLE / "ply" / f"{stem}.ply", root / "ply")
        shutil.copy(RNA_SAMPLE / "labels" / f"{stem}.txt", root / "labels")
    (root / "train.txt").write_text("".join(f"{stem}.ply\n" for stem in stems[:2]))
    (root / "test.txt").write_text(f"{stems[2]}.ply\n")
    run_dir = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "train.py", f"data.root={root}", f"data.cache_dir={tmp_path / 'cache'}",
         "data.train_shards=1", "data.convert_workers=2", "data.batch_size=2",
         "model.conv_channels=[8,8]", "model.hidden_channels=16", "steps=2", "eval_every=2",
         "summaries.meshes=1", f"hydra.run.dir={run_dir}"],
        cwd=PROJECT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = (result.stdout + result.stderr).replace("\r", "\n").splitlines()
    assert [line for line in lines if is_native_log_line(line)] == []
    assert "Converting train" in result.stderr  # the workers ran
    closing = "\n".join(result.stdout.splitlines()[-5:])
    assert "test accuracy" in closing and "majority-class baseline" in closing
    assert f"run directory: {run_dir}" in closing
    tensorboard = re.search(r"curves and meshes: (\S+) --logdir (\S+)$", closing, re.M)
    assert tensorboard, closing
    assert shutil.which(tensorboard[1], path=os.environ.get("PATH")) or os.access(
        PROJECT / tensorboard[1], os.X_OK), tensorboard[1]  # runs as printed, from PROJECT
    # train.log, the console's log, holds the evaluation lines too
    assert re.search(r"eval @ step 2: accuracy \d", (run_dir / "train.log").read_text())


def test_a_printed_command_names_the_program_as_the_shell_finds_it(tmp_path, monkeypatch):
    installed = Path(sys.executable).parent / "tensorboard"
    assert installed.exists()  # the test extra installs it beside this Python
    monkeypatch.setenv("PATH", str(tmp_path))  # not on PATH: its path
    monkeypatch.chdir(tmp_path)
    assert runnable_command("tensorboard") in (str(installed), os.path.relpath(installed))
    monkeypatch.chdir(installed.parent.parent)
    assert runnable_command("tensorboard") == os.path.join("bin", "tensorboard")
    monkeypatch.setenv("PATH", str(installed.parent))  # the same file on PATH: its name
    assert runnable_command("tensorboard") == "tensorboard"


@pytest.mark.parametrize("median_ms, expected", [
    (None, "1 steps: median step time n/a (every step traced or compiled), compile time 2.5 s"),
    (123.45, "2 steps: median step time 123.5 ms, compile time 2.5 s"),
])
def test_closing_summary_states_the_median_step_time_or_why_there_is_none(
        caplog, median_ms, expected):
    summary = RunSummary(
        impl="gather_matmul", replicas=1, test_files=[], steps=1 if median_ms is None else 2,
        wall_time_s=9.0, pid=1, median_step_time_ms=median_ms, min_step_time_ms=median_ms,
        max_step_time_ms=median_ms, compile_time_s=2.5, num_compilations=1,
        peak_rss_mib=1.0, eval_accuracy=0.5, eval_mean_iou=0.25,
        eval_majority_baseline_accuracy=0.125, eval_boundary_accuracy=0.375,
        eval_interior_accuracy=0.625)
    with caplog.at_level(logging.INFO):
        log_results("/runs/r", summary)
    assert expected in caplog.text
    assert ("test accuracy 0.5000 (majority-class baseline 0.1250), mean IoU 0.2500; accuracy "
            "0.3750 on label boundaries, 0.6250 elsewhere") in caplog.text
    assert "nan" not in caplog.text


VALUES_HYDRA_READS_OTHERWISE = ["outputs/my run", "runs/a,b", "it's", "a=b", "x~y#z", "[1]",
                                "back\\slash\\", "q\\'x", "1.5", "true", "null", "${now:%H}",
                                "outputs/2026-12-07_01-02-03_feastnet_unet_gather_matmul"]


@pytest.mark.parametrize("value", VALUES_HYDRA_READS_OTHERWISE)
def test_a_printed_override_reads_back_as_its_value_in_the_shell_and_in_hydra(value):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    printed = shell_command(["python", "train.py", hydra_override("resume", value)])
    words = shlex.split(printed)  # what the shell hands to train.py
    assert words[:2] == ["python", "train.py"] and len(words) == 3
    override = OverridesParser.create().parse_override(words[2])
    assert override.key_or_group == "resume" and override.value() == value


@pytest.mark.slow
def test_the_resume_command_printed_after_sigterm_runs_as_printed(tiny_dataset, tmp_path):
    # The run directory holds a space and a comma: the printed command, pasted into a
    # shell, resumes the run (Hydra reads the directory back whole, not as a sweep).
    run_dir = tmp_path / "my run, the first"
    command = [arg if arg != "hydra.run.dir=None" else hydra_override("hydra.run.dir", str(run_dir))
               for arg in train_command(tiny_dataset, None, "steps=100000", "checkpoint.every=1000")]
    process = subprocess.Popen(
        command, cwd=PROJECT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 240
    while not list((run_dir / "train").glob("events*")):
        assert process.poll() is None and time.time() < deadline
        time.sleep(0.1)
    time.sleep(1)
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGTERM, output[-3000:]
    printed = re.search(r"resume with: (.*)$", output, re.MULTILINE)[1]
    stopped_at = RunSummary.load(run_dir).steps
    printed = printed.replace("steps=100000", f"steps={stopped_at + 1}")  # one step more
    resumed = subprocess.run(["bash", "-c", printed], cwd=PROJECT, capture_output=True,
                             text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert RunSummary.load(run_dir).steps == stopped_at + 1
    # a neighbour: the closing TensorBoard command names the same directory, whole
    tensorboard = re.search(r"curves and meshes: (.*)$", resumed.stdout + resumed.stderr,
                            re.MULTILINE)[1]
    assert shlex.split(tensorboard)[-2:] == ["--logdir", str(run_dir)]

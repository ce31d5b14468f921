"""SIGTERM and SIGINT in every phase of a command (`meshseg.signals`): one line, exit status
128 + signal, the converter's worker processes ended, half-built caches and shards
removed, and the resume command printed only where there is something to resume."""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.runs import PROJECT, train_command

RNA_SAMPLE = PROJECT / "data" / "rna_sample"


def command_line(pid: int) -> str:
    """The command line of process `pid` ("" once it has ended: a child listed by
    `children` may exit before its command line is read)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_text(errors="replace")
    except OSError:
        return ""


def children(pid: int) -> list[int]:
    """The pids of the live processes whose parent is `pid` (read from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


def alive(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_until(condition, process, seconds: float = 240) -> None:
    deadline = time.time() + seconds
    while not condition():
        assert process.poll() is None, process.communicate()[0][-3000:]
        assert time.time() < deadline, "timed out"
        time.sleep(0.05)


@pytest.fixture
def rna_meshes(tmp_path) -> Path:
    """Six RNA sample meshes (five train, one test) with their labels."""
    source = tmp_path / "rna"
    (source / "ply").mkdir(parents=True)
    (source / "labels").mkdir()
    names = (RNA_SAMPLE / "train.txt").read_text().split()[:6]
    for name in names:
        shutil.copy(RNA_SAMPLE / "ply" / name, source / "ply" / name)
        stem = Path(name).stem
        shutil.copy(RNA_SAMPLE / "labels" / f"{stem}.txt", source / "labels" / f"{stem}.txt")
    (source / "train.txt").write_text("\n".join(names[:5]) + "\n")
    (source / "test.txt").write_text(names[5] + "\n")
    return source


def signalled_when(command: list, ready, signum: int = signal.SIGTERM, cwd: Path = PROJECT,
                   settle_s: float = 0.0, timeout: float = 120) -> tuple[int, str]:
    """Starts `command` in `cwd`, sends it `signum` once `ready(pid)` holds (`wait_until`)
    and `settle_s` s more have passed, and returns (exit status, output); a process that
    outlives `timeout` s after the signal is killed. The command starts with SIGINT's
    default disposition, as from a terminal: pytest run as a background job (`&`) has
    SIGINT ignored, and a child inherits that."""
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        wait_until(lambda: ready(process.pid), process)
        time.sleep(settle_s)
        process.send_signal(signum)
        output, _ = process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return process.returncode, output


def stopped_while_converting(command: list, build_glob: str, signum: int, folder: Path,
                             cwd: Path):
    """Starts `command` in `cwd`, sends `signum` once its two converter workers run and
    `build_glob` matches in `folder` (a half-built output), and returns (exit status,
    output, worker pids)."""
    workers = []

    def converting(pid: int):
        workers[:] = [child for child in children(pid) if "spawn_main" in command_line(child)]
        return len(workers) >= 2 and list(folder.glob(build_glob))

    status, output = signalled_when(command, converting, signum, cwd, settle_s=0.5)
    return status, output, workers


@pytest.mark.slow
def test_sigterm_while_train_py_converts_ends_its_workers_and_removes_the_half_built_cache(
        rna_meshes, tmp_path):
    cache = tmp_path / "cache"
    command = [sys.executable, "train.py", "data=rna_sample", f"data.root={rna_meshes}",
               f"data.cache_dir={cache}", f"data.descriptor_cache={tmp_path / 'descriptors'}",
               "data.convert_workers=2", "data.features=[xyz,hks]",
               "data.levels=0", "model=demo", "steps=2", f"hydra.run.dir={tmp_path / 'run'}"]
    status, output, workers = stopped_while_converting(command, ".cache.build-*",
                                                       signal.SIGTERM, tmp_path, PROJECT)
    assert status == 128 + signal.SIGTERM, output[-3000:]
    assert "stopped by SIGTERM before the run started; nothing to resume" in output
    assert "Traceback" not in output and "resume with" not in output
    time.sleep(0.5)
    assert [pid for pid in workers if alive(pid)] == []  # no orphaned converter
    assert list(tmp_path.glob(".cache.build-*")) == [] and not cache.exists()
    assert list(tmp_path.glob("descriptors/*.partial.npz")) == []


@pytest.mark.slow
def test_ctrl_c_while_the_convert_tool_runs_ends_its_workers_and_leaves_no_shard(
        rna_meshes, tmp_path):
    out = tmp_path / "out"
    command = [sys.executable, "-m", "meshseg.data.convert", "--meshes", str(rna_meshes / "ply"),
               "--labels", str(rna_meshes / "labels"), "--split-file",
               str(rna_meshes / "train.txt"), "--out", str(out / "train"), "--num-shards", "2",
               "--workers", "2", "--features", "hks"]
    out.mkdir()
    (out / "started").write_text("")  # the glob needs a match once the workers run
    status, output, workers = stopped_while_converting(command, "out/started",
                                                       signal.SIGINT, tmp_path, PROJECT)
    assert status == 128 + signal.SIGINT, output[-3000:]
    assert output.strip().splitlines()[-1] == "interrupted by SIGINT"
    assert "Traceback" not in output
    time.sleep(0.5)
    assert [pid for pid in workers if alive(pid)] == []
    assert sorted(p.name for p in out.iterdir()) == ["started"]  # no shard, whole or partial


@pytest.mark.slow
def test_sigterm_after_the_run_is_claimed_and_before_training_prints_the_resume_command(
        tiny_dataset, tmp_path):
    run_dir = tmp_path / "run"
    # Claimed, and building the model, tracing or compiling its first step.
    status, output = signalled_when(train_command(tiny_dataset, run_dir, "steps=2"),
                                    lambda pid: (run_dir / "run_config.yaml").exists())
    assert status == 128 + signal.SIGTERM, output[-3000:]
    assert "Traceback" not in output
    assert "stopped by" in output and f"resume={run_dir}" in output
    assert [p.name for p in run_dir.glob(".*model.keras")] == []
    result = subprocess.run(train_command(tiny_dataset, run_dir, "steps=2"), cwd=PROJECT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (run_dir / "model.keras").exists()


@pytest.mark.slow
def test_sigterm_to_a_sweep_stops_its_running_job_with_a_checkpoint_and_ends_it(tiny_dataset,
                                                                                tmp_path):
    command = [arg for arg in train_command(tiny_dataset, None, "steps=100000",
                                            "checkpoint.every=100000")
               if not arg.startswith("hydra.run.dir=")]
    sweep_dir = tmp_path / "sweep"
    jobs = []

    def training(pid: int):
        # Steps are running once the job has logged an evaluation (every 10 steps); its
        # event files exist earlier, before the signal handler of the training loop is in
        # place (a signal then ends the job before any step, with nothing to checkpoint).
        jobs[:] = children(pid)
        return any("eval @ step" in log.read_text(errors="replace")
                   for log in sweep_dir.glob("*/train.log"))

    status, output = signalled_when([*command[:2], "-m", *command[2:],
                                     f"hydra.sweep.dir={sweep_dir}", "seed=0,1"], training,
                                    timeout=180)
    assert status == 128 + signal.SIGTERM, output[-3000:]
    [job] = jobs
    assert not alive(job)
    [job_dir] = [p for p in sweep_dir.iterdir() if p.is_dir()]
    assert list(job_dir.glob("checkpoints/ckpt-*.index"))  # the job saved its checkpoint
    assert f"resume={job_dir}" in output and output.strip().endswith("interrupted by SIGTERM")
    assert "Traceback" not in output

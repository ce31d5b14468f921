"""A run directory has one owner (`meshseg.train.rundir.runlock`,
`meshseg.train.rundir.ownership`): one live process trains in it, its checkpoints are
restored by no other run, and every refusal comes before Hydra writes into the directory."""

import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from helpers.records import copy_dataset, shuffled_records
from helpers.runs import PROJECT, tiny_config, train_command, train_py, train_tiny
from meshseg.errors import RunDirError


def tree_bytes(root) -> dict:
    """{path: bytes} of every file under `root`."""
    return {p: p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_a_second_process_in_a_live_runs_directory_is_refused_naming_its_pid(tiny_dataset,
                                                                             tmp_path):
    run_dir = tmp_path / "run"
    command = train_command(tiny_dataset, run_dir, "steps=100000", "checkpoint.every=100000")
    first = subprocess.Popen(command, cwd=PROJECT, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 240
        while not list((run_dir / "train").glob("events*")):  # training
            assert first.poll() is None and time.time() < deadline
            time.sleep(0.1)
        hydra_files = tree_bytes(run_dir / ".hydra")
        second = subprocess.run(command, cwd=PROJECT, capture_output=True, text=True,
                                timeout=120)
        assert second.returncode == 2, second.stderr[-2000:]
        assert f"{run_dir} is in use by process {first.pid} on " in second.stderr
        assert len(second.stderr.strip().splitlines()) == 1
        assert tree_bytes(run_dir / ".hydra") == hydra_files  # refused before Hydra wrote
        # The neighbour: the kernel drops the lock of a killed holder; the run resumes.
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    third = train_py(tiny_dataset, run_dir, "steps=2", "checkpoint.every=100000")
    assert third.returncode == 0, third.stderr[-2000:]
    assert (run_dir / "model.keras").exists()


@pytest.fixture(scope="module")
def one_step_run(tiny_dataset, tmp_path_factory):
    """A finished 1-step run trained in this process (`train_tiny`). Read-only: a test
    that changes it takes a copy."""
    run_dir = tmp_path_factory.mktemp("one_step") / "run"
    train_tiny(tiny_config(tiny_dataset, "steps=1"), str(run_dir))
    return run_dir


def test_in_process_runs_hold_the_lock_only_while_they_run(one_step_run):
    from meshseg.train.rundir.runlock import holds_run_dir

    assert not holds_run_dir(str(one_step_run))
    assert (one_step_run / ".lock").is_file()  # the file stays; the lock does not


@pytest.mark.slow
def test_a_run_given_another_runs_checkpoints_is_refused_naming_both_before_any_write(
        tiny_dataset, tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    data = copy_dataset(tiny_dataset, tmp_path / "data")
    tiny_dataset = data  # the last neighbour changes a shard
    assert train_py(tiny_dataset, first, "steps=2").returncode == 0
    before = tree_bytes(first)
    result = train_py(tiny_dataset, second, "steps=2", "model.hidden_channels=8",
                      f"checkpoint.dir={first / 'checkpoints'}")
    assert result.returncode == 2, result.stderr[-2000:]
    assert (f"checkpoint.dir={first / 'checkpoints'} holds the checkpoints of the run in "
            f"{first}, not of this run ({second})") in result.stderr
    assert not second.exists() and tree_bytes(first) == before

    # The neighbour: resuming that run with another model size is refused before Hydra
    # rewrites its .hydra/config.yaml and overrides.yaml.
    result = train_py(tiny_dataset, tmp_path / "unused", "steps=4", "model.hidden_channels=8",
                      f"resume={first}")
    assert result.returncode == 2, result.stderr[-2000:]
    assert "holds a run with different settings (model.hidden_channels)" in result.stderr
    assert tree_bytes(first) == before

    # And one refused once the data are read (a shard changed since the run started):
    # Hydra's record of the refused launch was kept aside and is gone; only train.log grew.
    shuffled_records(Path(data["train"]))
    result = train_py(tiny_dataset, first, "steps=4")
    assert result.returncode == 2, result.stderr[-2000:]
    assert "the data changed since the run started" in result.stdout + result.stderr
    after = tree_bytes(first)
    assert after.pop(first / "train.log").startswith(before.pop(first / "train.log"))
    assert after.pop(first / ".lock") != before.pop(first / ".lock")  # its holder's pid
    assert after == before


def test_a_runs_own_checkpoint_folder_moved_with_it_stays_its_own(tiny_dataset, one_step_run,
                                                                  tmp_path):
    first = tmp_path / "a"
    shutil.copytree(one_step_run, first)
    moved = tmp_path / "moved"
    first.rename(moved)
    summary = train_tiny(tiny_config(tiny_dataset, "steps=2"), str(moved))
    assert summary.steps == 2

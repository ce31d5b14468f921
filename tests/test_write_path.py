"""The one write path (meshseg/outputs.py) through the command lines, with real faults: a
read-only filesystem, another user's folder, a filesystem that is full. Each ends in one
line naming the path and the cause, with the exit status of its kind (2 when refused
before any work, 6 when a write fails), and leaves no partial file."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import trimesh

from helpers.filesystems import fill, run_as_nobody, tmpfs
from helpers.runs import PROJECT, tiny_config, train_command, train_tiny
from meshseg.tools import predict
from meshseg.tools.predict import read_meshes
from meshseg.errors import OutputError
from meshseg.outputs import write_atomically, write_failure_cause, writing

TETRAHEDRON_OFF = "OFF\n4 4 0\n0 0 0\n1 0 0\n0 1 0\n0 0 1\n3 0 1 2\n3 0 1 3\n3 0 2 3\n3 1 2 3\n"


@pytest.fixture(scope="module")
def trained_run(tiny_dataset, tmp_path_factory):
    """A tiny trained run (model, summary, event files)."""
    run_dir = tmp_path_factory.mktemp("run")
    train_tiny(tiny_config(tiny_dataset, "steps=2"), run_dir)
    return run_dir


@pytest.fixture(scope="module")
def inputs(tiny_dataset, tmp_path_factory):
    """A folder with a test mesh `mesh.ply`, and `meshes/`, `labels/` and `train.txt` for
    the converter."""
    root = tmp_path_factory.mktemp("inputs")
    mesh = next(read_meshes([tiny_dataset["test"]]))
    trimesh.Trimesh(mesh["vertices"], mesh["triangles"], process=False).export(root / "mesh.ply")
    (root / "meshes").mkdir()
    (root / "labels").mkdir()
    (root / "meshes" / "good.off").write_text(TETRAHEDRON_OFF)
    (root / "labels" / "good.txt").write_text("0\n1\n0\n1\n")
    (root / "train.txt").write_text("good.off\n")
    return root


def tool(module: str, *args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def last_error(result: subprocess.CompletedProcess) -> str:
    """The one line a failed command ends with; fails the test on a traceback."""
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    line = [line for line in result.stderr.splitlines() if line.strip()][-1]
    assert line.startswith("error: "), result.stderr[-3000:]
    return line


def test_write_failures_are_recognised_by_cause_not_by_class():
    assert write_failure_cause(OSError(28, "No space left on device")) == "No space left on device"
    import tensorflow as tf

    full = tf.errors.ResourceExhaustedError(None, None, "/x/events; No space left on device")
    out_of_memory = tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor")
    assert write_failure_cause(full) == "No space left on device"
    assert write_failure_cause(out_of_memory) is None  # not a write: it keeps its traceback
    with pytest.raises(tf.errors.ResourceExhaustedError):
        with writing("/x"):
            raise out_of_memory


def test_a_full_filesystem_keeps_the_last_good_file_and_leaves_no_temporary():
    with tmpfs("1m") as folder:
        (folder / "summary.json").write_text('{"steps": 1}\n')
        fill(folder)
        with pytest.raises(OutputError) as error:
            write_atomically(str(folder / "summary.json"),
                             lambda path: Path(path).write_text('{"steps": 2}\n' * 100))
        assert str(error.value) == f"{folder / 'summary.json'}: cannot write: No space left on device"
        assert (folder / "summary.json").read_text() == '{"steps": 1}\n'
        assert sorted(os.listdir(folder)) == ["filler", "summary.json"]


@pytest.mark.parametrize("module, args", [
    ("meshseg.tools.report", ["{run}", "--out", "{read_only}/report"]),
    ("meshseg.tools.predict", ["{run}", "{inputs}/mesh.ply", "--out", "{read_only}/predictions"]),
    ("meshseg.data.convert", ["--meshes", "{inputs}/meshes", "--labels", "{inputs}/labels",
                              "--split-file", "{inputs}/train.txt", "--out",
                              "{read_only}/out/train", "--num-shards", "1"]),
], ids=["report", "predict", "convert"])
def test_a_read_only_destination_is_refused_in_one_line_before_any_work(
        module, args, trained_run, inputs):
    with tmpfs("1m", read_only=True) as read_only:
        result = tool(module, *(arg.format(run=trained_run, inputs=inputs, read_only=read_only)
                                for arg in args))
        assert result.returncode == 2, result.stderr[-3000:]
        assert last_error(result).endswith(f"{read_only} is not writable (Read-only file system)")
        assert "--out" in last_error(result)


def test_another_users_folder_is_refused_in_one_line(trained_run):
    # The folder belongs to root and is not writable by others; report runs as nobody.
    with tmpfs("4m") as mounted:
        shutil.copytree(trained_run, mounted / "run")
        (mounted / "theirs").mkdir(mode=0o755)
        result = run_as_nobody("meshseg.tools.report", ["run", "--out", "theirs/report"],
                               cwd=mounted)
        assert result.returncode == 2, result.stderr[-3000:]
        assert last_error(result) == (f"error: --out theirs/report: {mounted / 'theirs'} is not "
                                      "writable (Permission denied)")
        assert os.listdir(mounted / "theirs") == []


def test_a_full_disk_while_predicting_ends_in_one_line_and_leaves_no_partial_file(
        trained_run, inputs):
    with tmpfs("1m") as folder:
        (folder / "predictions").mkdir()
        fill(folder)
        result = tool("meshseg.tools.predict", trained_run, inputs / "mesh.ply", "--out",
                      folder / "predictions")
        assert result.returncode == 6, result.stderr[-3000:]
        assert last_error(result) == (f"error: {folder / 'predictions' / 'mesh.ply'}: cannot "
                                      "write the predicted mesh: No space left on device")
        assert os.listdir(folder / "predictions") == []


def test_a_full_disk_while_writing_a_report_ends_in_one_line(trained_run):
    # a neighbour of the prediction: another tool, another writer (matplotlib's savefig)
    with tmpfs("1m") as folder:
        fill(folder)
        result = tool("meshseg.tools.report", trained_run, "--out", folder)
        assert result.returncode == 6, result.stderr[-3000:]
        assert last_error(result) == (f"error: {folder / 'step_time_vs_accuracy.png'}: cannot "
                                      "write: No space left on device")
        assert os.listdir(folder) == ["filler"]


@pytest.mark.parametrize("setting", ["hydra.run.dir", "hydra.sweep.dir"])
def test_train_py_refuses_a_read_only_run_or_sweep_directory_before_it_starts(
        setting, tiny_dataset):
    with tmpfs("1m", read_only=True) as read_only:
        command = [arg for arg in train_command(tiny_dataset, None, "steps=1")
                   if arg != "hydra.run.dir=None"] + [f"{setting}={read_only}/run"]
        if setting == "hydra.sweep.dir":
            command.insert(2, "-m")
        result = subprocess.run(command, cwd=PROJECT, capture_output=True, text=True,
                                timeout=300)
        assert result.returncode == 2, result.stderr[-3000:]
        assert last_error(result) == (f"error: {setting}={read_only}/run: {read_only} is not "
                                      "writable (Read-only file system)")


def test_a_disk_that_fills_between_a_meshs_ply_and_txt_writes_neither(trained_run, inputs,
                                                                     tmp_path):
    # room for the predicted .ply only: its .txt meets the full disk, and no .ply is left
    # without its labels (`write_atomically_together`); the .ply's size is that of this
    # process' prediction of the same mesh
    predict.main([str(trained_run), str(inputs / "mesh.ply"), "--out", str(tmp_path)])
    page = os.sysconf("SC_PAGE_SIZE")
    ply_pages = -(-(tmp_path / "mesh.ply").stat().st_size // page)
    with tmpfs("1m") as folder:
        (folder / "predictions").mkdir()
        filler = fill(folder)
        os.truncate(filler, filler.stat().st_size // page * page - ply_pages * page)
        result = tool("meshseg.tools.predict", trained_run, inputs / "mesh.ply", "--out",
                      folder / "predictions")
        assert result.returncode == 6, result.stderr[-3000:]
        assert last_error(result) == (f"error: {folder / 'predictions' / 'mesh.txt'}: cannot "
                                      "write the predicted labels: No space left on device")
        assert os.listdir(folder / "predictions") == []

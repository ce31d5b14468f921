"""Reliability: kill and resume, signals, NaN guard, determinism, run directories, config errors."""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Optional

import numpy as np
import pytest
import tensorflow as tf
from hydra.errors import ConfigCompositionException

from helpers.filesystems import fill, tmpfs
from helpers.meshes import write_sphere_folder
from helpers.records import non_finite_tetrahedron_record
from helpers.runs import (PROJECT, final_weights, scalars, tiny_config, train_command,
                          train_py, train_tiny)
from meshseg.config import INTEGER_RANGES, check_overrides, schema_keys
from meshseg.errors import ConfigError, DataError, NonFiniteError, OutputError, RunDirError
from meshseg.train.rundir.summary import RunSummary


@pytest.mark.slow
def test_a_sigkilled_run_resumes_to_the_weights_and_curves_of_an_uninterrupted_run(tiny_dataset, tmp_path):
    # The killed run is stopped a few steps past its checkpoint of step 10 (about a hundred
    # steps before its end); the same command resumes it from there. The runs are
    # deterministic (train_command), so the resumed run matches the uninterrupted one step
    # for step.
    steps = ["steps=120", "checkpoint.every=10"]
    result = train_py(tiny_dataset, tmp_path / "reference", *steps)
    assert result.returncode == 0, result.stderr[-2000:]
    reference_losses = [v for _, v in scalars(tmp_path / "reference", "train")["loss"]]

    killed = tmp_path / "killed"
    process = subprocess.Popen(train_command(tiny_dataset, killed, *steps), cwd=PROJECT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    while not (killed / "checkpoints" / "ckpt-10.index").exists():
        assert process.poll() is None and time.time() < deadline, "no checkpoint at step 10"
        time.sleep(0.05)
    time.sleep(0.3)  # let it log a few steps past the checkpoint: they must not show twice
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert not (killed / "model.keras").exists(), "the run finished before it was killed"

    result = train_py(tiny_dataset, killed, *steps)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "continuing the run" in result.stdout + result.stderr
    for got, want in zip(final_weights(killed), final_weights(tmp_path / "reference")):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    loss = scalars(killed, "train")["loss"]
    assert [step for step, _ in loss] == list(range(1, 121))  # no duplicated or missing step
    np.testing.assert_allclose([v for _, v in loss], reference_losses, rtol=1e-5)


@pytest.mark.slow
def test_sigterm_saves_a_checkpoint_and_says_how_to_resume(tiny_dataset, tmp_path):
    process = subprocess.Popen(train_command(tiny_dataset, tmp_path, "steps=100000", "checkpoint.every=1000"),
                               cwd=PROJECT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 240
    while not list((tmp_path / "train").glob("events*")):
        assert process.poll() is None and time.time() < deadline
        time.sleep(0.1)
    time.sleep(2)  # a few steps
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGTERM
    python = os.path.relpath(sys.executable, PROJECT)  # the interpreter that ran it
    assert f"resume with: {python} train.py" in output and f"resume={tmp_path}" in output
    checkpoints = list((tmp_path / "checkpoints").glob("ckpt-*.index"))
    assert len(checkpoints) == 1 and checkpoints[0].name != "ckpt-1000.index"


CHECKPOINT_EACH_STEP = ("checkpoint.every=1", "checkpoint.keep=5")


@pytest.fixture(scope="module")
def two_step_run(tiny_dataset, tmp_path_factory):
    """A finished in-process run of 2 steps (`tiny_config`) with a checkpoint after each
    step (CHECKPOINT_EACH_STEP). Read-only: a test takes a copy (`copy_run`)."""
    run_dir = tmp_path_factory.mktemp("two_step_run") / "run"
    train_tiny(tiny_config(tiny_dataset, "steps=2", *CHECKPOINT_EACH_STEP), run_dir)
    return run_dir


def copy_run(run_dir, destination):
    """Copies the run directory `run_dir` into the (existing, empty) folder `destination`."""
    shutil.copytree(run_dir, destination, dirs_exist_ok=True)


def write_non_finite_mesh(path) -> str:
    """One tetrahedron record with an infinite coordinate, which makes the loss NaN."""
    with tf.io.TFRecordWriter(str(path)) as writer:
        writer.write(non_finite_tetrahedron_record())
    return str(path)


def test_a_non_finite_loss_stops_the_run_naming_step_and_batch(tiny_dataset, tmp_path):
    path = write_non_finite_mesh(tmp_path / "bad.tfrecords")
    cfg = tiny_config(tiny_dataset, f"data.train_files={path}", "data.batch_size=1")
    with pytest.raises(NonFiniteError, match=r"step 1: non-finite loss .* Batch: .*bad.tfrecords, record 0\. "):
        train_tiny(cfg, str(tmp_path / "run"))
    assert not list((tmp_path / "run").glob("checkpoints/ckpt-*"))


def test_rerunning_in_the_same_directory_resumes_and_a_different_run_is_refused(
        tiny_dataset, two_step_run, tmp_path):
    copy_run(two_step_run, tmp_path)
    summary = train_tiny(tiny_config(tiny_dataset, "steps=4"), str(tmp_path))
    assert [step for step, _ in scalars(tmp_path, "train")["loss"]] == [1, 2, 3, 4]
    assert summary.steps == 4
    before = sorted(p.name for p in tmp_path.rglob("*"))
    with pytest.raises(RunDirError, match=r"different settings \(impl.name\)"):
        train_tiny(tiny_config(tiny_dataset, "impl=gather_sum"), str(tmp_path))
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_a_directory_with_foreign_outputs_is_refused_untouched(tiny_dataset, tmp_path):
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "events.out.tfevents.0").write_bytes(b"someone else's")
    with pytest.raises(RunDirError, match="already holds outputs"):
        train_tiny(tiny_config(tiny_dataset), str(tmp_path))
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["events.out.tfevents.0", "train"]


@pytest.mark.parametrize("override, message", [
    ("steps=0", "steps must be >= 1"),
    ("data.shuffle_buffer=0", "data.shuffle_buffer must be >= 1, got 0"),
    ("model.num_weight_matrices=0", "model.num_weight_matrices must be >= 1, got 0"),
    ("model=feastnet_unet model.hidden_layers=0", "model.hidden_layers must be >= 1, got 0"),
    ("model.conv_channels=[]",
     r"model.conv_channels must be a non-empty list of integers >= 1, got \[\]"),
    ("model.conv_channels=[8,0]", r"model.conv_channels .* >= 1, got \[8, 0\]"),
    ("data.bucket_boundaries=[300,200]",
     r"data.bucket_boundaries must be strictly increasing, got \[300, 200\]"),
    ("data.max_padding=1.5", r"data.max_padding must be a fraction in \[0, 1\], got 1.5"),
    ("data.max_padding=nan", r"data.max_padding must be a fraction in \[0, 1\], got nan"),
    ("data.num_buckets=3 data.max_buckets=2",
     "data.num_buckets=3 is more than data.max_buckets=2; raise data.max_buckets"),
    ("threads=-1", r"threads must be in \[0, 2147483647\], got -1"),
    ("inter_op_threads=-2", r"inter_op_threads must be in \[0, 2147483647\], got -2"),
    ("threads=2147483648", r"threads must be in \[0, 2147483647\], got 2147483648"),
    ("data.features=[]", "data.features must list at least one of xyz, xyz_fourier"),
    ("seed=-1", r"seed must be in \[0, 4294967295\], got -1"),
    ("optimizer.learning_rate=0", "optimizer.learning_rate must be a finite number > 0, got 0.0"),
    ("optimizer.beta_1=1", r"optimizer.beta_1 must be in \[0, 1\), got 1.0"),
    ("data.num_classes=???", r"data.num_classes has no value; set it, e.g. data.num_classes="),
    ("impl.name=bogus", "impl.name: unknown implementation bogus; choose from gather_sum, "),
    ("impl.candidates=[gather_sum,bogus]", "impl.candidates: unknown implementation bogus; "),
    ("impl=auto impl.candidates=[]", r"impl=auto needs impl.candidates, got \[\]"),
    ("loop.name=fit", "loop.name=fit: choose one of custom, keras"),
    ("data.adjacency=full", "data.adjacency=full: choose one of none, edges, table"),
    ("data.frame=pcb", "data.frame=pcb: choose one of none, pca"),
    ("data.train_files=/no/such/*.tfrecords", "data.train_files='/no/such/\\*.tfrecords' matches no file"),
    ("data.num_classes=3", "data has label 5 but num_classes=3"),
    ("resume=/no/such/run", "resume=/no/such/run: no such run directory"),
    ("model.output_level=1", "model.output_level must be a level of model=demo, 0 to 0, got 1"),
    ("model=feastnet_unet data.levels=1",
     r"needs data.levels >= 2, got 1: set data.levels=2 \(records made by "
     r"meshseg.data.convert need --levels 2\), or train model=demo"),
    ("model=feastnet_unet data.levels=2 model.output_level=3",
     "model.output_level must be a level of model=feastnet_unet, 0 to 2, got 3"),
    ("model=feastnet_unet data.levels=2 model.fine_head_channels=8",
     "model.fine_head_channels=8 corrects logits carried back from a coarser level"),
    ("model=feastnet_unet data.levels=2 model.output_level=1 model.fine_head_convs=1",
     r"model.fine_head_convs=1 are the fine head's convolutions: set "
     r"model.fine_head_channels >= 1"),
    ("model=feastnet_unet model.fine_head_convs=-1", "model.fine_head_convs"),
])
def test_config_errors_fail_before_any_output(override, message, tiny_dataset, tmp_path):
    with pytest.raises(ConfigError, match=message):
        train_tiny(tiny_config(tiny_dataset, *override.split()), str(tmp_path / "run"))
    assert not (tmp_path / "run").exists()


# train.py run with an exit hook that reports whether TensorFlow was ever imported.
WITHOUT_TENSORFLOW = """
import atexit, runpy, sys
atexit.register(lambda: print("tensorflow imported:", "tensorflow" in sys.modules))
sys.argv = ["train.py", *sys.argv[1:]]
runpy.run_path("train.py", run_name="__main__")
"""


@pytest.mark.parametrize("overrides, message", [
    (["data=rna_sample", "data.root=/no/such/folder"],
     "error: data.root='/no/such/folder' is not a folder; pass data.root=<path> "
     "(python -m meshseg.data.download --list: the public data sets meshseg fetches)"),
    (["data=rna_sample", "data.root=data/rna_sample/labels/missing"],
     "is not a folder"),
    (["data=tfrecords", "data.train_files=/no/such/*.tfrecords", "data.num_classes=3",
      "data.levels=3"],
     "error: data.train_files='/no/such/*.tfrecords' matches no file"),
])
def test_a_missing_data_path_is_refused_before_tensorflow_starts(overrides, message, tmp_path):
    run_dir = tmp_path / "run"
    result = subprocess.run([sys.executable, "-c", WITHOUT_TENSORFLOW, *overrides,
                             f"hydra.run.dir={run_dir}"], cwd=PROJECT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]  # one line
    assert message in result.stderr
    assert "tensorflow imported: False" in result.stdout
    assert not run_dir.exists()


def test_every_integer_setting_has_a_range():
    integers = {key for key, kind in schema_keys().items()
                if kind in (int, List[int], Optional[List[int]])}
    assert integers - set(INTEGER_RANGES) == {"data.label_offset", "data.augment.up_axis"}
    assert set(INTEGER_RANGES) <= integers


def test_a_boolean_setting_takes_only_true_or_false():
    check_overrides(["jit=true", "data.skip_bad_records=False", "deterministic=TRUE", "steps=3",
                     "data=tfrecords", "hydra.run.dir=out"])
    refused = {"data.skip_bad_records=no": "data.skip_bad_records must be true or false, got 'no'",
               "model.translation_invariant=off":
                   "model.translation_invariant must be true or false, got 'off'",
               "jit=1": "jit must be true or false, got '1'",
               "+deterministic=yes": "deterministic must be true or false, got 'yes'"}
    messages = {}
    for override in refused:
        with pytest.raises(ConfigError) as error:
            check_overrides([override])
        messages[override] = str(error.value)
    assert messages == refused


def test_an_added_key_that_is_no_setting_is_refused_naming_the_closest_one(tmp_path):
    """`+stpes=3`, which Hydra's own error suggests for `stpes=3`, used to warn from the
    callback and train with the key ignored."""
    check_overrides(["+experiment=rna", "+hydra.job.name=x", "+steps=3"])
    for override, closest in {"+stpes=3": "steps", "++data.batch_sise=2": "data.batch_size"
                              }.items():
        with pytest.raises(ConfigError, match=rf"is not a setting \(did you mean {closest}\?\)"):
            check_overrides([override])
    result = subprocess.run([sys.executable, "train.py", "+stpes=3", "steps=1",
                             f"hydra.run.dir={tmp_path / 'run'}"], cwd=PROJECT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: +stpes=3: stpes is not a setting (did you mean steps?); every setting: "
        "python train.py --cfg job"]
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("override, message", [
    ("impl=no_such_impl", "no_such_impl"),
    ("steps=abc", "steps"),
    ("no_such_key=1", "no_such_key"),
])
def test_config_composition_errors_name_the_setting(override, message, tiny_dataset):
    with pytest.raises(ConfigCompositionException, match=message):
        tiny_config(tiny_dataset, override)


@pytest.mark.slow
def test_train_py_reports_a_config_error_in_one_line_without_traceback(tiny_dataset, tmp_path):
    result = train_py(tiny_dataset, tmp_path, "data.num_classes=3")
    assert result.returncode == 2
    assert "data has label 5 but num_classes=3" in result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert not (tmp_path / "train").exists()


@pytest.mark.slow
def test_train_py_refuses_settings_outside_the_schema_in_one_line_before_any_output(
        tiny_dataset, tmp_path):
    cases = [  # overrides, exit status (1: Hydra's composition error), the line naming the key
        (["data.skip_bad_records=no", "model.translation_invariant=off"], 2,
         "data.skip_bad_records must be true or false, got 'no'"),
        (["data.batch_size=abc"], 1, "Error merging override data.batch_size=abc"),
        (["data.batch_size=2.5"], 1, "Error merging override data.batch_size=2.5"),
        (["data.shuffle_buffer=0"], 2, "data.shuffle_buffer must be >= 1, got 0"),
        (["model.num_weight_matrices=0"], 2, "model.num_weight_matrices must be >= 1, got 0"),
        (["model.conv_channels=[]"], 2,
         "model.conv_channels must be a non-empty list of integers >= 1, got []"),
    ]
    for index, (overrides, status, message) in enumerate(cases):
        run_dir = tmp_path / f"run{index}"
        result = train_py(tiny_dataset, run_dir, *overrides)
        output = result.stdout + result.stderr
        assert result.returncode == status, output[-2000:]
        assert message in output and "Traceback" not in output
        hydra_files = {".hydra", "train.log"}  # written before the application starts
        assert not run_dir.exists() or {p.name for p in run_dir.iterdir()} <= hydra_files


@pytest.mark.slow
def test_train_py_refuses_another_runs_directory_before_hydra_writes_into_it(tiny_dataset, tmp_path):
    assert train_py(tiny_dataset, tmp_path, "steps=2").returncode == 0
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    result = train_py(tiny_dataset, tmp_path, "steps=2", "impl=gather_sum")
    assert result.returncode == 2
    assert "holds a run with different settings (impl.name)" in result.stderr
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


@pytest.mark.slow
def test_train_py_exits_with_the_status_of_each_error_class(tiny_dataset, tmp_path):
    cut = tmp_path / "cut.tfrecords"
    cut.write_bytes(Path(tiny_dataset["train"]).read_bytes()[:-10])
    bad = write_non_finite_mesh(tmp_path / "bad.tfrecords")
    cases = [({"train": str(cut)}, [], 4, "cut.tfrecords, record 3: truncated or corrupt shard"),
             ({"train": bad}, ["data.batch_size=1"], 3, "step 1: non-finite loss")]
    for index, (files, overrides, status, message) in enumerate(cases):
        result = train_py({**tiny_dataset, **files}, tmp_path / f"run{index}", *overrides)
        output = result.stdout + result.stderr
        assert result.returncode == status, output[-2000:]
        assert message in output and "Traceback" not in output
    assert not (tmp_path / "run0" / "train").exists()  # a data error stops before training


def _split_in_cp1252(root) -> None:
    (root / "train.txt").write_bytes(b"s0.ply\ns1.ply\npi\xe8ce.ply\n")


def _complex_labels(root) -> None:
    (root / "labels" / "s1.txt").unlink()
    np.save(root / "labels" / "s1.npy", np.ones(42) * 1j)


@pytest.mark.slow
@pytest.mark.parametrize("damage, message", [
    (_split_in_cp1252, "train.txt: line 3: not UTF-8 text (byte 0xe8 at column 3)"),
    (_complex_labels, "s1.npy: labels hold complex numbers (complex128), not integers"),
])
def test_train_py_on_a_mesh_folder_names_a_foreign_file_it_cannot_read(damage, message,
                                                                       tmp_path):
    write_sphere_folder(tmp_path / "spheres")
    damage(tmp_path / "spheres")
    result = subprocess.run(
        [sys.executable, "train.py", "data=rna_sample", f"data.root={tmp_path / 'spheres'}",
         "data.meshes=.", "data.label_offset=0", "data.num_classes=2", "data.features=[xyz]",
         "data.levels=0", f"data.cache_dir={tmp_path / 'cache'}", "data.convert_workers=1",
         "model=demo", "steps=2", f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=PROJECT, capture_output=True, text=True, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == DataError.exit_code, output[-2000:]
    assert "Traceback" not in output
    (line,) = [line for line in output.splitlines() if message in line]  # one line
    assert "ERROR" in line
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())


def test_resume_refuses_a_folder_that_holds_no_run(tiny_dataset, tmp_path):
    (tmp_path / "notes").mkdir()
    with pytest.raises(ConfigError, match="there is no run to resume there"):
        train_tiny(tiny_config(tiny_dataset, f"resume={tmp_path / 'notes'}"), tmp_path / "run")
    assert list((tmp_path / "notes").iterdir()) == [] and not (tmp_path / "run").exists()


def test_a_cut_checkpoint_state_file_resumes_from_the_newest_intact_checkpoint(
        tiny_dataset, two_step_run, tmp_path):
    settings = CHECKPOINT_EACH_STEP
    copy_run(two_step_run, tmp_path)
    state = tmp_path / "checkpoints" / "checkpoint"
    state.write_text(state.read_text()[:25])  # cut mid-line, as a full disk leaves it
    intact = {p.name: p.read_bytes() for p in (tmp_path / "checkpoints").glob("ckpt-*")}
    summary = train_tiny(tiny_config(tiny_dataset, "steps=4", *settings), tmp_path)
    assert summary.steps == 4
    assert [step for step, _ in scalars(tmp_path, "train")["loss"]] == [1, 2, 3, 4]
    for name, content in intact.items():  # nothing deleted or rewritten
        assert (tmp_path / "checkpoints" / name).read_bytes() == content


def test_a_damaged_newest_checkpoint_falls_back_to_the_one_before(tiny_dataset, two_step_run,
                                                                   tmp_path):
    settings = CHECKPOINT_EACH_STEP
    copy_run(two_step_run, tmp_path)
    newest = next((tmp_path / "checkpoints").glob("ckpt-2.data-*"))
    newest.write_bytes(newest.read_bytes()[:100])
    summary = train_tiny(tiny_config(tiny_dataset, "steps=3", *settings), tmp_path)
    assert summary.steps == 3
    loss = scalars(tmp_path, "train")["loss"]
    assert [step for step, _ in loss] == [1, 2, 3]  # step 2 retrained from ckpt-1, logged once


def test_checkpoints_that_all_fail_to_restore_are_refused_and_kept(tiny_dataset, two_step_run,
                                                                   tmp_path):
    copy_run(two_step_run, tmp_path)
    damaged = sorted((tmp_path / "checkpoints").glob("ckpt-*.data-*"))
    assert len(damaged) == 2
    for data in damaged:
        data.write_bytes(b"garbage")
    with pytest.raises(DataError, match=r"no checkpoint in .*checkpoints restores "
                                        r"\(ckpt-2: .*; ckpt-1: "):
        train_tiny(tiny_config(tiny_dataset, "steps=3", *CHECKPOINT_EACH_STEP), tmp_path)
    assert [data.read_bytes() for data in damaged] == [b"garbage", b"garbage"]


def test_a_finished_run_without_its_model_writes_it_from_the_last_checkpoint(
        tiny_dataset, two_step_run, tmp_path):
    # What a stop during the last step (after its checkpoint and summary) or during the
    # model's save leaves: summary.json says finished, the checkpoint holds the last step,
    # model.keras is missing. The re-run (the printed resume command) writes the model
    # from that checkpoint, trains nothing, and keeps the run's summary as it was.
    cfg = tiny_config(tiny_dataset, "steps=2", *CHECKPOINT_EACH_STEP)
    copy_run(two_step_run, tmp_path)
    first = RunSummary.load(tmp_path)
    weights = final_weights(tmp_path)
    summary_bytes = (tmp_path / "summary.json").read_bytes()
    (tmp_path / "model.keras").unlink()
    again = train_tiny(cfg, str(tmp_path))
    assert (tmp_path / "model.keras").exists()
    for got, want in zip(final_weights(tmp_path), weights):
        np.testing.assert_array_equal(got, want)
    assert (tmp_path / "summary.json").read_bytes() == summary_bytes
    assert (again.steps, again.eval_accuracy) == (first.steps, first.eval_accuracy)
    assert [step for step, _ in scalars(tmp_path, "train")["loss"]] == [1, 2]  # no step rerun
    # a neighbour: the checkpoint is behind the summary (the last one was lost): the
    # remaining step is trained again and the model written
    (tmp_path / "model.keras").unlink()
    for path in (tmp_path / "checkpoints").glob("ckpt-2.*"):
        path.unlink()
    (tmp_path / "checkpoints" / "checkpoint").write_text(
        'model_checkpoint_path: "ckpt-1"\nall_model_checkpoint_paths: "ckpt-1"\n')
    third = train_tiny(cfg, str(tmp_path))
    assert (tmp_path / "model.keras").exists() and third.steps == 2


def test_a_full_disk_while_checkpointing_ends_in_one_line_and_the_resume_finishes(
        tiny_dataset, tmp_path, monkeypatch):
    # The disk fills while ckpt-2 is written, and summary.json cannot be written either:
    # the checkpoint's error is the one raised, naming the folder, step and cause; ckpt-1
    # stays and the same command, once there is space, resumes from it.
    cfg = tiny_config(tiny_dataset, "steps=3", "checkpoint.every=1")
    write = tf.train.Checkpoint.write

    def full_at_step_2(self, prefix, *args, **kwargs):
        if prefix.endswith("ckpt-2"):
            Path(f"{prefix}.index").write_bytes(b"partial")
            raise tf.errors.ResourceExhaustedError(None, None,
                                                   f"{prefix}.index; No space left on device")
        return write(self, prefix, *args, **kwargs)

    def no_space(self, run_dir):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tf.train.Checkpoint, "write", full_at_step_2)
    monkeypatch.setattr(RunSummary, "save", no_space)
    with pytest.raises(OutputError, match=r"checkpoints: cannot write the checkpoint of step 2: "
                                          r"No space left on device; the older checkpoints "
                                          r"are intact") as error:
        train_tiny(cfg, str(tmp_path))
    assert "\n" not in str(error.value)
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("ckpt-*")) == [
        "ckpt-1.data-00000-of-00001", "ckpt-1.index"]
    monkeypatch.undo()
    summary = train_tiny(cfg, str(tmp_path))
    assert summary.steps == 3 and (tmp_path / "model.keras").exists()


@pytest.mark.slow
def test_a_filesystem_that_fills_while_training_ends_in_one_line_and_the_same_command_resumes(
        tiny_dataset):
    # A real 16 MB tmpfs holds the run; it is filled once the first checkpoint exists, so
    # the next event-file flush, checkpoint or summary write fails. Whatever writer fails,
    # the run ends with one line naming the run directory and the cause (exit 6), the
    # checkpoints written before stay, and once there is space the same command resumes
    # from them and finishes.
    with tmpfs("16m") as mounted:
        run_dir = mounted / "run"
        command = train_command(tiny_dataset, run_dir, "steps=100", "checkpoint.every=5",
                                "eval_every=5")
        process = subprocess.Popen(command, cwd=PROJECT, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + 240
        while not (run_dir / "checkpoints" / "ckpt-5.index").exists():
            assert process.poll() is None and time.time() < deadline, process.stdout.read()
            time.sleep(0.05)
        filler = fill(mounted)
        output, _ = process.communicate(timeout=240)
        assert process.returncode == 6, output[-3000:]
        assert "Traceback" not in output and "Logging error" not in output, output[-3000:]
        errors = [line for line in output.splitlines() if "[ERROR]" in line]
        assert len(errors) == 1, output[-3000:]
        assert errors[0].endswith(
            f"{run_dir}: cannot write: No space left on device; the checkpoints written "
            "before stay: free space and run the same command to resume") or (
            f"{run_dir / 'checkpoints'}: cannot write the checkpoint of step" in errors[0]
            and errors[0].endswith("No space left on device; the older checkpoints are intact: "
                                   "free space and run the same command to resume")), errors[0]
        kept = sorted(int(p.name[5:-6]) for p in (run_dir / "checkpoints").glob("ckpt-*.index"))
        assert kept and kept[-1] < 100 and not (run_dir / "model.keras").exists()

        filler.unlink()
        resumed = subprocess.run(command, cwd=PROJECT, capture_output=True, text=True,
                                 timeout=600)
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        assert f"resuming from the checkpoint of step {kept[-1]}" in resumed.stdout + resumed.stderr
        assert RunSummary.load(run_dir).steps == 100 and (run_dir / "model.keras").exists()

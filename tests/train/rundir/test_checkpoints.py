"""Checkpoints: run directories whose names hold glob characters (`[`, `]`, `*`, `?`), as
Hydra's override_dirname gives them for list overrides; the state file; size; resume."""

from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from helpers.records import copy_dataset, shuffled_records
from helpers.runs import final_weights, scalars, tiny_config, train_tiny
from meshseg.errors import ConfigError, RunDirError
from meshseg.train.rundir.claim import record_or_check_data
from meshseg.train.rundir.summary import RunSummary


def test_a_run_directory_with_glob_characters_keeps_rotates_and_resumes_checkpoints(
        tiny_dataset, tmp_path):
    run_dir = tmp_path / "model.conv_channels=[8,8,16],run*?"  # every glob character
    settings = ("checkpoint.every=1", "checkpoint.keep=1")
    train_tiny(tiny_config(tiny_dataset, "steps=2", *settings), run_dir)
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == [
        "checkpoint", "ckpt-2.data-00000-of-00001", "ckpt-2.index", "run.json"]

    summary = train_tiny(tiny_config(tiny_dataset, "steps=4", *settings), run_dir)
    assert summary.steps == 4
    assert [step for step, _ in scalars(run_dir, "train")["loss"]] == [1, 2, 3, 4]
    accuracy = scalars(run_dir, "eval")["accuracy"]  # both runs evaluated into one directory
    assert [step for step, _ in accuracy] == [2, 4]
    assert summary.eval_accuracy == pytest.approx(accuracy[-1][1])
    assert RunSummary.load(run_dir) == summary

    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    again = train_tiny(tiny_config(tiny_dataset, "steps=4", *settings), run_dir)
    assert again == summary  # "already completed": nothing runs, nothing changes
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before


def test_the_state_file_lists_the_kept_checkpoints_for_tensorflows_tools(tiny_dataset, tmp_path):
    train_tiny(tiny_config(tiny_dataset, "steps=3", "checkpoint.every=1", "checkpoint.keep=2"),
               tmp_path)
    state = tf.train.get_checkpoint_state(str(tmp_path / "checkpoints"))
    assert [Path(p).name for p in state.all_model_checkpoint_paths] == ["ckpt-2", "ckpt-3"]
    assert tf.train.latest_checkpoint(str(tmp_path / "checkpoints")).endswith("ckpt-3")


DEMO_NET = ("model=demo", "model.input_channels=16", "model.conv_channels=[32,64,128]",
            "model.hidden_channels=256", "model.num_weight_matrices=8")


def checkpoint_bytes(run_dir) -> int:
    """The size of the first checkpoint's data files."""
    return sum(p.stat().st_size for p in (Path(run_dir) / "checkpoints").glob("ckpt-1.data-*"))


def model_and_optimizer_bytes(run_dir) -> int:
    """float32 bytes of the model's weights and Adam's two moments of each."""
    weights = final_weights(run_dir)
    return 3 * 4 * sum(int(np.prod(w.shape)) for w in weights)


def test_a_checkpoint_holds_no_data_and_does_not_grow_with_the_data_set(tiny_dataset, tmp_path):
    doubled = tmp_path / "doubled.tfrecords"
    doubled.write_bytes(Path(tiny_dataset["train"]).read_bytes() * 2)
    sizes = {}
    for name, train in (("plain", tiny_dataset["train"]), ("doubled", str(doubled))):
        train_tiny(tiny_config({**tiny_dataset, "train": train}, "steps=1", *DEMO_NET),
                   tmp_path / name)
        sizes[name] = checkpoint_bytes(tmp_path / name)
    assert sizes["plain"] <= 1.1 * model_and_optimizer_bytes(tmp_path / "plain")
    assert abs(sizes["doubled"] - sizes["plain"]) <= 0.01 * sizes["plain"]


@pytest.mark.parametrize("loop", ["custom", "keras"])
def test_a_resumed_run_sees_the_batches_of_an_uninterrupted_one(tiny_dataset, tmp_path, loop):
    settings = (f"loop={loop}", "checkpoint.every=2", "deterministic=true")
    train_tiny(tiny_config(tiny_dataset, "steps=5", *settings), tmp_path / "whole")
    train_tiny(tiny_config(tiny_dataset, "steps=2", *settings), tmp_path / "resumed")
    train_tiny(tiny_config(tiny_dataset, "steps=5", *settings), tmp_path / "resumed")
    whole, resumed = (scalars(tmp_path / name, "train")["loss"] for name in ("whole", "resumed"))
    assert [step for step, _ in resumed] == [1, 2, 3, 4, 5]
    np.testing.assert_allclose([v for _, v in resumed], [v for _, v in whole], rtol=1e-6)
    for got, want in zip(final_weights(tmp_path / "resumed"), final_weights(tmp_path / "whole")):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    times = [value for _, value in scalars(tmp_path / "resumed", "train")["step_time_ms"]]
    summary = RunSummary.load(tmp_path / "resumed")  # the whole run, both processes
    assert len(times) + summary.num_compilations == 5  # each step timed or compiled, once
    assert summary.median_step_time_ms == pytest.approx(np.median(times))


@pytest.mark.parametrize("change, named", [
    # The examples: a reconverted train shard (records in another order), and a neighbour,
    # a test split that gained a shard (a glob that now matches more files).
    ("reordered_train", "train: {train} changed"),
    ("extra_test_shard", "test: {extra} is new"),
])
def test_a_resume_on_changed_data_is_refused_naming_the_shard(tiny_dataset, tmp_path,
                                                               change, named):
    data = copy_dataset(tiny_dataset, tmp_path / "data")
    extra = tmp_path / "data" / "test-extra.tfrecords"
    overrides = (f"data.test_files={tmp_path / 'data' / 'test*.tfrecords'}",
                 "checkpoint.every=1")
    run_dir = tmp_path / "run"
    train_tiny(tiny_config(data, "steps=2", *overrides), run_dir)
    recorded = (run_dir / "data_files.json").read_bytes()
    if change == "reordered_train":
        shuffled_records(Path(data["train"]))
    else:
        extra.write_bytes(Path(data["test"]).read_bytes())
    with pytest.raises(RunDirError, match="the data changed since the run started") as error:
        train_tiny(tiny_config(data, "steps=4", *overrides), run_dir)
    assert named.format(train=data["train"], extra=extra) in str(error.value)
    assert (run_dir / "data_files.json").read_bytes() == recorded
    assert RunSummary.load(run_dir).steps == 2  # the run is as it was: it resumes on its data


@pytest.mark.parametrize("damage, why", [
    ("cut", "(damaged: "),
    ("utf16", "damaged: line 1: not UTF-8 text (byte 0xff at column 1)"),
    ("list", "damaged: it holds a list, not a dict"),
    ("shards_not_a_list", "damaged: 'train' is not a list of shards with their file"),
])
def test_a_resume_whose_data_record_is_damaged_is_refused_in_one_line(tmp_path, damage, why):
    shard = tmp_path / "train.tfrecords"
    shard.write_bytes(b"records")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    record_or_check_data(str(run_dir), {"train": [str(shard)]}, resumed=False)
    path = run_dir / "data_files.json"
    text = path.read_text()
    damaged = {"cut": text[:len(text) // 2].encode(), "utf16": text.encode("utf-16"),
               "list": b"[]", "shards_not_a_list": b'{"train": 3}'}[damage]
    path.write_bytes(damaged)
    with pytest.raises(ConfigError) as error:
        record_or_check_data(str(run_dir), {"train": [str(shard)]}, resumed=True)
    message = str(error.value)
    assert message.startswith(f"{path} is not a meshseg run's data record (") and why in message
    assert len(message.splitlines()) == 1 and error.value.exit_code == 2
    assert path.read_bytes() == damaged  # nothing written over it

"""meshseg.tools.report and meshseg.train.logs.hparams on a tiny two-run sweep: table,
report, plots, HParams."""

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing.plugin_event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import metadata as hparams_metadata

from helpers.runs import PROJECT, tiny_config, train_tiny
from meshseg.console import is_native_log_line
from meshseg.errors import ConfigError
from meshseg.tools.report import PLOTS, find_runs, load_records, main
from meshseg.train.logs.hparams import METRIC_KEYS, hparam_value, log_hparams, run_hparams
from meshseg.train.rundir.summary import RunSummary, load_run

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def sweep(tiny_dataset, tmp_path_factory):
    """A sweep directory with two tiny jobs, as Hydra names them (custom and keras loop)."""
    root = tmp_path_factory.mktemp("sweep")
    for number, loop in enumerate(("custom", "keras")):
        train_tiny(tiny_config(tiny_dataset, f"loop={loop}"),
                   root / f"{number}_gather_matmul_{loop}_jit-False")
    return root


def test_find_runs_lists_every_job_and_not_its_event_folders(sweep):
    assert [Path(p).name for p in find_runs(str(sweep))] == [
        "0_gather_matmul_custom_jit-False", "1_gather_matmul_keras_jit-False"]
    assert find_runs(str(sweep / "0_gather_matmul_custom_jit-False")) == [
        str(sweep / "0_gather_matmul_custom_jit-False")]


def test_numbers_from_the_event_files_match_summary_json(sweep):
    records = load_records(str(sweep))
    assert [r["loop"] for r in records] == ["custom", "keras"]
    for record in records:
        summary = RunSummary.load(record["run_dir"])
        assert record["median_step_ms"] == pytest.approx(summary.median_step_time_ms)
        assert record["min_step_ms"] == pytest.approx(summary.min_step_time_ms)
        assert record["max_step_ms"] == pytest.approx(summary.max_step_time_ms)
        assert record["compile_s"] == pytest.approx(summary.compile_time_s, rel=1e-6)
        assert record["peak_mib"] == pytest.approx(summary.peak_rss_mib, rel=1e-6)
        assert record["accuracy"] == pytest.approx(summary.eval_accuracy)
        assert record["mean_iou"] == pytest.approx(summary.eval_mean_iou)
        assert len(record["step_times_ms"]) == 2  # 3 steps, the first one compiled
        assert list(record["loss"][0]) == [1, 2, 3]
        assert record["q1_step_ms"] <= record["median_step_ms"] <= record["q3_step_ms"]


def test_cli_prints_the_table_and_writes_report_and_plots(sweep, tmp_path, capsys):
    main([str(sweep), "--out", str(tmp_path)])
    printed = capsys.readouterr().out
    records = load_records(str(sweep))
    for record in records:
        assert f"| {record['accuracy']:.4f} | {record['mean_iou']:.4f} |" in printed
        assert f"| {record['median_step_ms']:.1f} |" in printed
    report = (tmp_path / "report.md").read_text()
    assert report.count("gather_matmul") >= 2 and all(f"]({name})" in report for name in PLOTS)
    for name in PLOTS:
        png = (tmp_path / name).read_bytes()
        assert png.startswith(PNG_MAGIC) and len(png) > 5000


@pytest.mark.slow
def test_the_command_starts_tensorflow_without_its_native_start_up_lines(sweep, tmp_path):
    result = subprocess.run([sys.executable, "-m", "meshseg.tools.report", str(sweep), "--out",
                             str(tmp_path)], cwd=PROJECT, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "| gather_matmul |" in result.stdout
    assert [line for line in result.stderr.splitlines() if is_native_log_line(line)] == []


def test_load_records_refuses_a_directory_without_runs(tmp_path):
    with pytest.raises(ConfigError, match="holds no run"):
        load_records(str(tmp_path))


def test_each_run_dir_holds_its_hparams_session_and_metrics(sweep):
    run_dir = sweep / "1_gather_matmul_keras_jit-False"
    events = EventAccumulator(str(run_dir), size_guidance={"tensors": 0})
    events.Reload()
    tags = set(events.Tags()["tensors"])
    assert {hparams_metadata.EXPERIMENT_TAG, hparams_metadata.SESSION_START_INFO_TAG} <= tags
    session = hparams_metadata.parse_session_start_info_plugin_data(
        events.SummaryMetadata(hparams_metadata.SESSION_START_INFO_TAG).plugin_data.content)
    values = {key: getattr(value, value.WhichOneof("kind")) for key, value in session.hparams.items()}
    assert values["impl"] == "gather_matmul" and values["loop"] == "keras"
    assert values["jit"] is False and values["batch_size"] == 2 and values["data"] == "tfrecords"
    assert session.group_name == str(run_dir.resolve())
    experiment = hparams_metadata.parse_experiment_plugin_data(
        events.SummaryMetadata(hparams_metadata.EXPERIMENT_TAG).plugin_data.content)
    assert [m.name.tag for m in experiment.metric_infos] == list(METRIC_KEYS)
    summary = RunSummary.load(run_dir)
    for key in ("eval_accuracy", "median_step_time_ms", "peak_rss_mib"):
        assert float(tf.make_ndarray(events.Tensors(key)[-1].tensor_proto)) == pytest.approx(
            getattr(summary, key), rel=1e-6)


def session_start(run_dir: Path):
    events = EventAccumulator(str(run_dir), size_guidance={"tensors": 0})
    events.Reload()
    return hparams_metadata.parse_session_start_info_plugin_data(
        events.SummaryMetadata(hparams_metadata.SESSION_START_INFO_TAG).plugin_data.content)


def test_two_sweeps_jobs_of_the_same_name_are_two_rows_of_the_hparams_table(sweep, tmp_path):
    # TensorBoard's HParams plugin merges sessions of one group name into one row: the
    # group must name the run, not its job number, which every sweep repeats.
    run = load_run(str(sweep / "0_gather_matmul_custom_jit-False"))
    for sweep_name, learning_rate in (("lr-0.001", 1e-3), ("lr-0.003", 3e-3)):
        config = dataclasses.replace(run.config, optimizer=dataclasses.replace(
            run.config.optimizer, learning_rate=learning_rate))
        log_hparams(str(tmp_path / sweep_name / "0"), config, run.summary)
    sessions = [session_start(tmp_path / name / "0") for name in ("lr-0.001", "lr-0.003")]
    assert [s.group_name for s in sessions] == [str(tmp_path / name / "0")
                                                for name in ("lr-0.001", "lr-0.003")]
    assert [s.hparams["learning_rate"].number_value for s in sessions] == [1e-3, 3e-3]


def test_hparam_values_are_types_the_plugin_stores():
    assert hparam_value([8, 8, 16]) == "8,8,16"
    assert hparam_value(np.int64(4)) == 4 and isinstance(hparam_value(np.int64(4)), int)
    assert hparam_value(True) is True and hparam_value(1e-3) == 1e-3


def test_run_hparams_take_settings_from_the_config_and_the_impl_from_the_summary(sweep):
    run = load_run(str(sweep / "0_gather_matmul_custom_jit-False"))
    assert run_hparams(run.config, run.summary) == {
        "impl": "gather_matmul", "jit": False, "loop": "custom", "batch_size": 2,
        "learning_rate": 1e-3, "model": "demo", "num_weight_matrices": 4, "input_channels": 8,
        "conv_channels": "8,8,16", "hidden_channels": 16, "hidden_layers": 1,
        "input_skip": False, "global_skip": False, "global_scale": False, "dropout": 0.0,
        "data": "tfrecords", "features": "xyz", "steps": 3}


def _record(name, validation, test):
    return {"run_dir": f"/sweep/{name}", "validation_accuracy": validation, "accuracy": test}


def test_runs_with_a_validation_split_are_ranked_by_it_never_by_test():
    from meshseg.tools.report import rank_records

    records = [_record("a", 0.70, 0.95), _record("b", 0.80, 0.60), _record("c", None, 0.99)]
    ranked, ranking = rank_records(records)
    assert [r["run_dir"][-1] for r in ranked] == ["b", "a", "c"]
    assert ranking == "Runs ranked by validation accuracy, best first."


def test_runs_without_a_validation_split_are_ranked_by_test_and_the_line_says_so():
    from meshseg.tools.report import rank_records

    ranked, ranking = rank_records([_record("a", None, 0.5), _record("b", None, 0.7),
                                    _record("c", None, None)])
    assert [r["run_dir"][-1] for r in ranked] == ["b", "a", "c"]
    assert ranking.startswith("Runs ranked by TEST accuracy")


def test_the_table_names_the_validation_and_test_columns(sweep, capsys):
    main([str(sweep)])
    printed = capsys.readouterr().out
    assert "| validation accuracy | validation mIoU | test accuracy | test mIoU |" in printed
    assert "Runs ranked by TEST accuracy" in printed  # the tiny runs hold out no validation

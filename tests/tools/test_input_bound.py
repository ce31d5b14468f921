"""The input-bound check times the same step fed by the pipeline and from memory, and the
app's own loop iteration."""

import statistics
from types import SimpleNamespace

import pytest

from meshseg.tools import input_bound
from meshseg.tools.input_bound import compare, main, report
from meshseg.train.loop import step as step_module


def test_compare_times_both_feeds_and_the_apps_iteration_on_tiny_data(tiny_dataset,
                                                                     monkeypatch):
    # The step's timer replaced: 10 ms a step on the batches held in memory (a list), 12 ms
    # on those the pipeline feeds (an iterator); the app's iteration is timed for real.
    fed = {}

    def fake_median_step_ms(step, batches):
        source = "memory" if isinstance(batches, list) else "pipeline"
        fed[source] = [features["inputs"].shape[0] for features, _ in batches]
        return 10.0 if source == "memory" else 12.0

    medians = []

    def recorded_median(values):
        medians.append(list(values))
        return statistics.median(values)

    monkeypatch.setattr(step_module, "median_step_ms", fake_median_step_ms)
    monkeypatch.setattr(input_bound, "statistics", SimpleNamespace(median=recorded_median))
    overrides = ["data=tfrecords", f"data.train_files={tiny_dataset['train']}",
                 f"data.test_files={tiny_dataset['test']}", "data.num_classes=6",
                 "data.batch_size=2", "model=demo", "model.conv_channels=[8,8]",
                 "model.hidden_channels=16"]
    result = compare(overrides, steps=3, warmup=2)
    assert fed == {"memory": [2, 2, 2], "pipeline": [2, 2, 2]}  # `steps` batches each way
    assert (result["memory_ms"], result["pipeline_ms"], result["ratio"]) == (10.0, 12.0, 1.2)
    (app_times,) = medians  # the app's iterations after the warm-up: `steps` of them
    assert len(app_times) == 3 and all(ms > 0 for ms in app_times)
    assert result["app_ms"] == statistics.median(app_times)
    assert result["app_ratio"] == pytest.approx(result["app_ms"] / 10.0)
    assert report(result).startswith("in-memory step 10.0 ms, pipeline-fed step 12.0 ms, "
                                     "ratio 1.200: INPUT-BOUND")


def test_report_gives_the_app_overhead_verdict_against_15_percent():
    times = {"memory_ms": 10.0, "pipeline_ms": 10.2, "ratio": 1.02}
    within = report({**times, "app_ms": 11.4, "app_ratio": 1.14})
    over = report({**times, "app_ms": 12.0, "app_ratio": 1.2})
    assert ("in-memory step 10.0 ms, pipeline-fed step 10.2 ms, ratio 1.020: "
            "not input-bound") in within
    assert within.endswith("app iteration 11.4 ms, app/memory 1.140: app overhead within 15%")
    assert "app/memory 1.200: APP OVERHEAD" in over


def test_the_keras_loop_is_refused_with_exit_status_2(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["loop=keras"])
    assert exit_info.value.code == 2
    assert "loop=keras" in capsys.readouterr().err

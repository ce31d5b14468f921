"""The input-bound check times the same step fed by the pipeline and from memory, and the
app's own loop iteration."""

import pytest

from meshseg.tools.input_bound import compare, main, report


def test_compare_times_both_feeds_and_the_apps_iteration_on_tiny_data(tiny_dataset):
    overrides = ["data=tfrecords", f"data.train_files={tiny_dataset['train']}",
                 f"data.test_files={tiny_dataset['test']}", "data.num_classes=6",
                 "data.batch_size=2", "model=demo", "model.conv_channels=[8,8]",
                 "model.hidden_channels=16"]
    result = compare(overrides, steps=3, warmup=2)
    assert result["pipeline_ms"] > 0 and result["memory_ms"] > 0
    assert result["ratio"] == result["pipeline_ms"] / result["memory_ms"]
    assert result["app_ms"] > 0
    assert result["app_ratio"] == result["app_ms"] / result["memory_ms"]

    line = report(result)
    assert f"app iteration {result['app_ms']:.1f} ms" in line
    assert f"app/memory {result['app_ratio']:.3f}" in line
    assert ("app overhead within 15%" in line) != ("APP OVERHEAD" in line)


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

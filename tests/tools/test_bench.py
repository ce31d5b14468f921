"""`meshseg.tools.bench`: the derived comparisons and roofline, the options, and tiny runs
of both networks in two precisions (the step's work itself: tests/tools/test_roofline.py)."""

import csv
import json

import numpy as np
import pytest
import tensorflow as tf
import trimesh

from helpers.records import derived_record
from meshseg.tools.bench import command as bench, report as bench_report, worker as bench_worker


@pytest.fixture(scope="module")
def hierarchy_records(tmp_path_factory) -> list:
    """train.py overrides of a data set of two spheres (42 and 162 vertices, 2 coarser
    levels, 2 classes) and a small U-Net."""
    path = tmp_path_factory.mktemp("bench") / "spheres.tfrecords"
    with tf.io.TFRecordWriter(str(path)) as writer:
        for subdivisions in (1, 2):
            sphere = trimesh.creation.icosphere(subdivisions=subdivisions)
            vertices = np.asarray(sphere.vertices, np.float32)
            writer.write(derived_record(vertices, np.asarray(sphere.faces, np.int32),
                                        (vertices[:, 2] > 0).astype(np.int32), levels=2))
    return ["data=tfrecords", f"data.train_files={path}", f"data.test_files={path}",
            "data.num_classes=2", "data.levels=2", "data.features=[xyz]",
            "model.conv_channels=[8,12,16]", "model.input_channels=8",
            "model.hidden_channels=16", "model.num_weight_matrices=3"]


def test_conv_channels_double_from_32():
    assert bench_worker.conv_channels(3) == (32, 64, 128)
    assert bench_worker.conv_channels(1) == (32,)


def _row(impl, jit, step_ms, memory, **extra):
    return dict(model="demo", precision="float32", impl=impl, jit=jit, num_vertices=642,
                batch_size=1, num_layers=3, mode="train", step_ms=step_ms, gflop=2.0,
                gbyte=0.5, step_peak_increase_mib=memory, **extra)


PEAKS = {"float32": {"gflops": 400.0, "bandwidth_gbs": 10.0},
         "mixed_bfloat16": {"gflops": 800.0, "bandwidth_gbs": 10.0}}


def test_derived_columns_compare_with_gather_sum_at_the_same_and_without_jit():
    rows = bench_report.add_derived_columns([
        _row("gather_sum", False, 100.0, 400.0), _row("block_sparse", False, 50.0, 100.0),
        _row("gather_sum", True, 40.0, 200.0), _row("block_sparse", True, 20.0, 100.0),
        dict(_row("sparse_matmul", True, None, None), error="XlaRuntimeError: boom"),
    ], PEAKS)
    fast = rows[3]
    assert fast["gflop_per_s"] == pytest.approx(100.0)
    # bound: 2 GFLOP at 400 GFLOP/s = 5 ms, plus 0.5 GB at 10 GB/s = 50 ms; 55 of 20 ms
    assert fast["bound_ms"] == pytest.approx(55.0)
    assert fast["pct_roofline"] == pytest.approx(275.0)
    assert fast["speedup"] == pytest.approx(2.0)
    assert fast["speedup_vs_nojit_ref"] == pytest.approx(5.0)
    assert fast["memory_ratio"] == pytest.approx(0.5)
    assert rows[1]["memory_ratio"] == pytest.approx(0.25)
    assert rows[4]["speedup"] is None and rows[4]["gflop_per_s"] is None
    assert rows[4]["bound_ms"] is None


def test_each_precision_has_its_own_roofline_and_reference():
    rows = bench_report.add_derived_columns([
        _row("gather_sum", False, 100.0, 400.0),
        dict(_row("gather_sum", False, 80.0, 400.0), precision="mixed_bfloat16"),
        dict(_row("gather_matmul", False, 40.0, 100.0), precision="mixed_bfloat16"),
        dict(_row("gather_matmul", False, 40.0, 100.0), precision="mixed_float16"),
    ], PEAKS)
    assert rows[0]["bound_ms"] == pytest.approx(55.0)
    assert rows[2]["bound_ms"] == pytest.approx(52.5)  # 2 GFLOP at the bfloat16 peak
    assert rows[2]["speedup"] == pytest.approx(2.0)  # against gather_sum in bfloat16
    assert rows[3]["bound_ms"] is None and rows[3]["pct_roofline"] is None  # not measured


def test_rows_are_compared_with_the_reference_at_the_same_thread_settings():
    rows = bench_report.add_derived_columns([
        dict(_row("gather_sum", False, 100.0, 400.0), threads=2, inter_op_threads=1),
        dict(_row("gather_sum", False, 200.0, 400.0), threads=1, inter_op_threads=1),
        dict(_row("gather_matmul", False, 50.0, 100.0), threads=1, inter_op_threads=1),
    ], {})
    assert rows[2]["speedup"] == pytest.approx(4.0)


def test_table_sorts_by_a_column_and_shows_errors():
    rows = bench_report.add_derived_columns([
        _row("gather_sum", False, 100.0, 400.0), _row("block_sparse", False, 50.0, 100.0),
        dict(_row("sparse_matmul", False, None, None), error="timeout after 5 s"),
    ], {})
    lines = bench_report.format_table(rows, sort="step_ms").splitlines()
    assert lines[0].split()[:5] == ["model", "precision", "impl", "jit", "V"]
    assert [line.split()[2] for line in lines[2:]] == ["block_sparse", "gather_sum",
                                                       "sparse_matmul"]
    assert lines[-1].endswith("timeout after 5 s")


@pytest.mark.parametrize("option, value, named", [
    ("--impl", "gather_sum,nope", "block_sparse"),
    ("--mode", "inference", "forward"),
    ("--jit", "maybe", "false"),
    ("--num_vertices", "1000", "10242"),
    ("--threads", "-1", "whole number in [0, 2147483647]"),
    ("--threads", "2147483648", "whole number in [0, 2147483647]"),
    ("--inter_op_threads", "1,two", "whole number in [0, 2147483647]"),
    ("--sort", "speed", "step_ms"),
    ("--precision", "float32,bfloat16", "mixed_bfloat16"),
    ("--model", "unet", "feastnet_unet"),
])
def test_an_unknown_choice_is_an_argparse_error_naming_the_choices(option, value, named, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.main([option, value])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert value.split(",")[-1] in error and named in error


@pytest.mark.slow  # ~60 s: subprocesses that each import TensorFlow
def test_a_tiny_run_writes_a_row_per_configuration(tmp_path, capsys):
    assert bench.main(["--num_vertices", "642", "--batch_size", "1", "--repeats", "1",
                       "--warmup", "1", "--impl", "gather_sum,block_sparse", "--jit", "false",
                       "--mode", "train", "--threads", "1", "--inter_op_threads", "1",
                       "--precision", "float32,mixed_bfloat16",
                       "--peak_size", "256", "--out", str(tmp_path)]) == 0
    table = capsys.readouterr().out
    with open(tmp_path / "bench.csv") as f:
        csv_rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    with open(tmp_path / "bench.json") as f:
        results = json.load(f)
    expected = [("float32", "gather_sum"), ("float32", "block_sparse"),
                ("mixed_bfloat16", "gather_sum"), ("mixed_bfloat16", "block_sparse")]
    assert [(r["precision"], r["impl"]) for r in csv_rows] == expected
    assert [(r["precision"], r["impl"]) for r in results["rows"]] == expected
    for row in results["rows"]:
        assert row["error"] is None
        assert row["jit"] is False and row["mode"] == "train" and row["num_vertices"] == 642
        assert row["threads"] == 1 and row["inter_op_threads"] == 1
        for key in ("step_ms", "step_ms_min", "step_ms_max", "compile_s", "gflop_per_s",
                    "gflop", "gbyte", "bound_ms", "pct_roofline", "peak_rss_mib",
                    "step_peak_increase_mib"):
            assert row[key] > 0, key
    # the same step's work, with activations of half the bytes in bfloat16
    float32, bfloat16 = results["rows"][0], results["rows"][2]
    assert bfloat16["gflop"] == float32["gflop"] and bfloat16["gbyte"] < float32["gbyte"]
    assert results["rows"][0]["speedup"] == 1.0
    for precision in ("float32", "mixed_bfloat16"):
        assert results["metadata"]["matmul_peak_gflops"][precision] > 0
        assert results["metadata"]["bandwidth_gbs"][precision] > 0
    assert results["metadata"]["cpu_count"] >= 1
    assert float(csv_rows[1]["step_ms"]) > 0
    assert (tmp_path / "bench.png").stat().st_size > 0
    assert "block_sparse" in table and "mixed_bfloat16" in table


@pytest.mark.slow  # ~40 s
def test_the_multi_scale_network_runs_on_a_batch_of_real_meshes(hierarchy_records, tmp_path):
    """--model feastnet_unet takes its network and batch from train.py overrides: here two
    records of 42 and 162 vertices with 2 coarser levels, one batch of both."""
    assert bench.main(["--model", "feastnet_unet", "--batch_size", "2", "--repeats", "1",
                       "--warmup", "0", "--impl", "gather_matmul", "--jit", "false",
                       "--mode", "train", "--peak_size", "256", "--out", str(tmp_path),
                       "--overrides", *hierarchy_records]) == 0
    with open(tmp_path / "bench.json") as f:
        (row,) = json.load(f)["rows"]
    assert row["error"] is None, row["error"]
    assert row["model"] == "feastnet_unet" and row["num_vertices"] == 162
    assert row["step_ms"] > 0 and row["gflop"] > 0 and row["pct_roofline"] > 0


def test_a_configuration_past_its_timeout_becomes_an_error_row():
    result = bench._run_worker({"kind": "peaks", "size": 64, "precision": "float32"},
                               timeout=0.2)
    assert result == {"error": "timeout after 0.2 s"}


def test_a_worker_error_is_reported_by_its_type_and_first_line():
    error = KeyError("Exception encountered when calling Model.call().\n\n\x1b[1mneighbors\x1b[0m")
    assert bench_worker.first_line(error) == "KeyError: Exception encountered when calling Model.call()."
    assert bench_worker.first_line(ValueError("\nbad shape\nmore")) == "ValueError: bad shape"


@pytest.mark.parametrize("jit", [False, True])
def test_the_plot_shows_every_bar_and_names_only_what_ran(jit):
    rows = bench_report.add_derived_columns([
        _row("gather_sum", jit, 2000.0, 400.0), _row("gather_matmul", jit, 45.0, 100.0),
    ], {})
    times = bench_report.bench_figure(rows).axes[0]
    bottom, top = times.get_ylim()
    assert bottom < 45.0 and top > 2000.0  # the fastest bar rises above the axis floor
    legend = [text.get_text() for text in times.get_legend().get_texts()]
    assert legend == ["gather_sum", "gather_matmul"] + (["jit (XLA)"] if jit else [])
    assert {text.get_text() for text in times.texts} == {"2000 ms", "45 ms"}

"""`meshseg.tools.bench`: the FLOP count, the derived comparisons, the options, and a tiny run."""

import csv
import json

import pytest

from meshseg.tools import bench, bench_report, bench_worker


def test_count_flops_of_a_one_vertex_graph_by_hand():
    # lin_in 2*1*3*1 = 6; conv 1 -> 2 with W = 1: s/t 2*1*1*1*2 = 4, aggregation
    # 2*1*1*1 = 2, W*C -> D 2*1*1*1*2 = 4; lin_hidden 2*1*2*1 = 4; lin_out 2*1*1*1 = 2.
    kwargs = dict(num_vertices=1, num_edges=1, batch_size=1, channels=(2,), num_classes=1,
                  num_weight_matrices=1, input_channels=1, hidden_channels=1)
    assert bench.count_flops(mode="forward", **kwargs) == 22
    assert bench.count_flops(mode="backward", **kwargs) == 66
    assert bench.count_flops(mode="train", **kwargs) == 66


def test_count_flops_scales_vertices_and_edges_with_the_batch():
    # N = 4 vertices, 6 edges, W = 2: lin_in 24; conv 1 -> 4: 32 + 24 + 64; hidden 96; out 48.
    assert bench.count_flops(num_vertices=2, num_edges=3, batch_size=2, channels=(4,),
                             num_classes=2, num_weight_matrices=2, input_channels=1,
                             hidden_channels=3) == 288


def test_count_flops_rejects_an_unknown_mode():
    with pytest.raises(ValueError, match="forward"):
        bench.count_flops(1, 1, 1, (2,), 1, mode="inference")


def test_conv_channels_double_from_32():
    assert bench.conv_channels(3) == (32, 64, 128)
    assert bench.conv_channels(1) == (32,)


def _row(impl, jit, step_ms, memory, **extra):
    return dict(impl=impl, jit=jit, num_vertices=642, batch_size=1, num_layers=3, mode="train",
                step_ms=step_ms, gflop=2.0, step_peak_increase_mib=memory, **extra)


def test_derived_columns_compare_with_gather_sum_at_the_same_and_without_jit():
    rows = bench_report.add_derived_columns([
        _row("gather_sum", False, 100.0, 400.0), _row("block_sparse", False, 50.0, 100.0),
        _row("gather_sum", True, 40.0, 200.0), _row("block_sparse", True, 20.0, 100.0),
        dict(_row("sparse_matmul", True, None, None), error="XlaRuntimeError: boom"),
    ], matmul_peak_gflops=400.0)
    fast = rows[3]
    assert fast["gflop_per_s"] == pytest.approx(100.0)
    assert fast["pct_peak"] == pytest.approx(25.0)
    assert fast["speedup"] == pytest.approx(2.0)
    assert fast["speedup_vs_nojit_ref"] == pytest.approx(5.0)
    assert fast["memory_ratio"] == pytest.approx(0.5)
    assert rows[1]["memory_ratio"] == pytest.approx(0.25)
    assert rows[4]["speedup"] is None and rows[4]["gflop_per_s"] is None


def test_rows_are_compared_with_the_reference_at_the_same_thread_settings():
    rows = bench_report.add_derived_columns([
        dict(_row("gather_sum", False, 100.0, 400.0), threads=2, inter_op_threads=1),
        dict(_row("gather_sum", False, 200.0, 400.0), threads=1, inter_op_threads=1),
        dict(_row("gather_matmul", False, 50.0, 100.0), threads=1, inter_op_threads=1),
    ], matmul_peak_gflops=None)
    assert rows[2]["speedup"] == pytest.approx(4.0)


def test_table_sorts_by_a_column_and_shows_errors():
    rows = bench_report.add_derived_columns([
        _row("gather_sum", False, 100.0, 400.0), _row("block_sparse", False, 50.0, 100.0),
        dict(_row("sparse_matmul", False, None, None), error="timeout after 5 s"),
    ], matmul_peak_gflops=None)
    lines = bench_report.format_table(rows, sort="step_ms").splitlines()
    assert lines[0].split()[:3] == ["impl", "jit", "V"]
    assert [line.split()[0] for line in lines[2:]] == ["block_sparse", "gather_sum",
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
])
def test_an_unknown_choice_is_an_argparse_error_naming_the_choices(option, value, named, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.main([option, value])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert value.split(",")[-1] in error and named in error


@pytest.mark.slow  # ~35 s: three subprocesses that each import TensorFlow
def test_a_tiny_run_writes_a_row_per_configuration(tmp_path, capsys):
    assert bench.main(["--num_vertices", "642", "--batch_size", "1", "--repeats", "1",
                       "--warmup", "1", "--impl", "gather_sum,block_sparse", "--jit", "false",
                       "--mode", "train", "--threads", "1", "--inter_op_threads", "1",
                       "--peak_size", "256", "--out", str(tmp_path)]) == 0
    table = capsys.readouterr().out
    with open(tmp_path / "bench.csv") as f:
        csv_rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    with open(tmp_path / "bench.json") as f:
        results = json.load(f)
    assert [r["impl"] for r in csv_rows] == ["gather_sum", "block_sparse"]
    assert [r["impl"] for r in results["rows"]] == ["gather_sum", "block_sparse"]
    for row in results["rows"]:
        assert row["error"] is None
        assert row["jit"] is False and row["mode"] == "train" and row["num_vertices"] == 642
        assert row["threads"] == 1 and row["inter_op_threads"] == 1
        for key in ("step_ms", "step_ms_min", "step_ms_max", "compile_s", "gflop_per_s",
                    "pct_peak", "peak_rss_mib", "step_peak_increase_mib"):
            assert row[key] > 0, key
    assert results["rows"][0]["speedup"] == 1.0
    assert results["metadata"]["matmul_peak_gflops"] > 0
    assert results["metadata"]["cpu_count"] >= 1
    assert float(csv_rows[1]["step_ms"]) > 0
    assert (tmp_path / "bench.png").stat().st_size > 0
    assert "block_sparse" in table and "gather_sum" in table


def test_a_configuration_past_its_timeout_becomes_an_error_row():
    result = bench._run_worker({"kind": "matmul_peak", "size": 64}, timeout=0.2)
    assert result == {"error": "timeout after 0.2 s"}


def test_a_worker_error_is_reported_by_its_type_and_first_line():
    error = KeyError("Exception encountered when calling Model.call().\n\n\x1b[1mneighbors\x1b[0m")
    assert bench_worker.first_line(error) == "KeyError: Exception encountered when calling Model.call()."
    assert bench_worker.first_line(ValueError("\nbad shape\nmore")) == "ValueError: bad shape"


@pytest.mark.parametrize("jit", [False, True])
def test_the_plot_shows_every_bar_and_names_only_what_ran(jit):
    rows = bench_report.add_derived_columns([
        _row("gather_sum", jit, 2000.0, 400.0), _row("gather_matmul", jit, 45.0, 100.0),
    ], matmul_peak_gflops=None)
    times = bench_report.bench_figure(rows).axes[0]
    bottom, top = times.get_ylim()
    assert bottom < 45.0 and top > 2000.0  # the fastest bar rises above the axis floor
    legend = [text.get_text() for text in times.get_legend().get_texts()]
    assert legend == ["gather_sum", "gather_matmul"] + (["jit (XLA)"] if jit else [])
    assert {text.get_text() for text in times.texts} == {"2000 ms", "45 ms"}

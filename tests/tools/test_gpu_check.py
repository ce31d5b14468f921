"""`meshseg.tools.gpu_check`: the host-placement count of a GPU run (from a hand-made
RunMetadata) and the whole check in its CPU smoke mode."""

import os

import pytest
from tensorflow.core.protobuf import config_pb2

from meshseg.nn.ops import IMPLEMENTATIONS
from meshseg.tools import gpu_check

GPU = "/job:localhost/replica:0/task:0/device:GPU:0"
CPU = "/job:localhost/replica:0/task:0/device:CPU:0"


def run_metadata(partitions):
    """RunMetadata of one function with a partition graph per [(device, [op, ...])]; send
    nodes as ("_Send", from_device, to_device)."""
    metadata = config_pb2.RunMetadata()
    function = metadata.function_graphs.add()
    for device, ops in partitions:
        graph = function.partition_graphs.add()
        for index, op in enumerate(ops):
            node = graph.node.add(name=f"n{index}", device=device)
            if isinstance(op, tuple):
                node.op = op[0]
                node.attr["send_device"].s = op[1].encode()
                node.attr["recv_device"].s = op[2].encode()
            else:
                node.op = op
    return metadata


def test_a_gpu_run_counts_the_ops_placed_on_the_host_and_the_copies_between():
    metadata = run_metadata([
        (GPU, ["_Arg", "MatMul", "Sum", "_Recv", "_Retval"]),
        (CPU, ["SparseReshape", "Const", ("_Send", CPU, GPU), ("_HostSend", CPU, CPU)]),
    ])
    assert gpu_check.placement(metadata) == {
        "ops": 4, "host_ops": 2, "copies": 1, "host_op_types": "Const, SparseReshape"}


def test_a_cpu_run_has_no_host_count():
    metadata = run_metadata([(CPU, ["_Arg", "MatMul", "_Retval"])])
    assert gpu_check.placement(metadata) == {"ops": 1, "host_ops": None, "copies": None,
                                             "host_op_types": ""}


@pytest.mark.slow  # ~60-90 s: every implementation, with and without XLA, and a training
def test_the_smoke_mode_writes_one_markdown_table_with_every_impl_and_jit(tiny_dataset,
                                                                         tmp_path, capsys):
    overrides = ["data=tfrecords", f"data.train_files={tiny_dataset['train']}",
                 f"data.test_files={tiny_dataset['test']}",
                 f"data.num_classes={tiny_dataset['num_classes']}",
                 "model.conv_channels=[8]", "model.hidden_channels=8"]
    assert gpu_check.main(["--smoke", "--out", str(tmp_path), "--train_overrides",
                           *overrides]) == 0
    report = (tmp_path / "gpu_check.md").read_text()
    assert capsys.readouterr().out.strip() == report.strip()
    assert "- GPU: none visible (CPU only)" in report
    assert "- precision=auto: " in report
    rows = [line.split("|")[1:-1] for line in report.splitlines()
            if line.startswith("| ") and not line.startswith("| impl")]
    assert [(r[0].strip(), r[1].strip()) for r in rows] == [
        (impl, jit) for impl in IMPLEMENTATIONS for jit in ("false", "true")]
    for cells in rows:
        assert float(cells[6]) > 0, cells  # step ms
        assert cells[-1].strip() == "", cells  # no error
        if cells[1].strip() == "false":
            assert int(cells[2]) > 100 and cells[3].strip() == "0"  # ops; none without kernel
    assert "Smoke run" in report and "steps=2`: impl gather_matmul" in report


def test_a_full_disk_when_writing_the_table_ends_in_one_line_and_leaves_no_partial_file(
        monkeypatch, capsys):
    # the measurements are stood in for; the write of gpu_check.md meets a real full tmpfs
    from helpers.filesystems import fill, tmpfs

    monkeypatch.setattr(gpu_check, "gpu_memory", lambda: None)
    monkeypatch.setattr(gpu_check, "device_lines", lambda: ["- GPU: none"])
    monkeypatch.setattr(gpu_check, "host_check", lambda impl, sizes: {})
    monkeypatch.setattr(gpu_check, "benchmark", lambda *args: [])
    monkeypatch.setattr(gpu_check, "train_default_run", lambda *args: {"error": "skipped"})
    monkeypatch.setattr(gpu_check, "markdown", lambda *args: "| table |\n" * 4096)
    with tmpfs("1m") as folder:
        fill(folder)
        with pytest.raises(SystemExit) as ended:
            gpu_check.main(["--smoke", "--out", str(folder)])
        assert ended.value.code == 6
        assert capsys.readouterr().err.splitlines()[-1] == (
            f"error: {folder / 'gpu_check.md'}: cannot write the check's table: No space "
            "left on device")
        assert os.listdir(folder) == ["filler"]

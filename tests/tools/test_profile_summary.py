"""`python -m meshseg.tools.profile_summary`: ops attributed to the step's parts by name, the
table per step, and one-line errors for a folder without a readable profile. (The summary of
a real profile: tests/train/logs/test_profiling.py.)"""

import subprocess
import sys

import pytest

from meshseg.tools.profile_summary import (CATEGORIES, OpTime, category, format_report,
                                           newest_profile, summarize)

TOOL = [sys.executable, "-m", "meshseg.tools.profile_summary"]


@pytest.mark.parametrize("name, op_type, expected", [
    ("Iterator::Root", "Dataset", "input"),
    ("forward/mesh_segmentation_net_1/feast_8_3/UnsortedSegmentSum", "UnsortedSegmentSum", "conv"),
    ("gradient_tape/forward/mesh_segmentation_net_1/feast_16_1/MatMul_4/MatMul_1", "MatMul",
     "conv"),
    ("forward/fea_st_u_net/encoder0_block1/feast/Softmax", "Softmax", "conv"),
    ("gradient_tape/forward/mesh_segmentation_net_1/lin_out_1/convolution/Conv2DBackpropFilter",
     "Conv2DBackpropFilter", "classifier"),
    ("forward/mesh_segmentation_net_1/lin_hidden_1/convolution", "_FusedConv2D", "layers"),
    ("StatefulPartitionedCall/mesh_segmentation_net_1/Relu", "Relu", "layers"),
    ("loss/masked_cross_entropy/SparseSoftmaxCrossEntropyWithLogits/X", "Sparse", "loss"),
    ("StatefulPartitionedCall/compile_loss/masked_cross_entropy/Sum", "Sum", "loss"),
    ("backward/cond_3/then/_33/backward/cond_3/GatherV2", "GatherV2", "backward"),
    ("backward/feast_gradient/MatMul", "MatMul", "conv"),
    ("guard/All_19/input", "Pack", "guard"),
    ("metrics/ArgMax", "ArgMax", "metrics"),
    ("update/cond/then/_66/update/cond/adam/truediv_7", "RealDiv", "update"),
    ("StatefulPartitionedCall/adam/Sqrt", "Sqrt", "update"),
    ("ParseExample/ParseExampleV2", "ParseExampleV2", "other"),
    ("Sub", "Sub", "other"),
])
def test_an_op_is_attributed_by_its_outermost_named_scope(name, op_type, expected):
    assert category(OpTime(name, op_type, 1, 1.0)) == expected


def test_the_table_gives_ms_per_step_and_shares_that_sum_to_100():
    ops = [OpTime("Iterator::Root", "Dataset", 2, 1000.0),
           OpTime("forward/net/feast_8/MatMul", "MatMul", 2, 6000.0),
           OpTime("update/adam/Sqrt", "Sqrt", 2, 2000.0),
           OpTime("Sub", "Sub", 2, 1000.0)]
    steps = [("train 3", 9.0, 0.5), ("train 4", 11.0, 0.5)]
    assert summarize(ops, len(steps)) == {**{name: 0.0 for name, _ in CATEGORIES}, "input": 0.5,
                                          "conv": 3.0, "update": 1.0, "other": 0.5}
    report = format_report(["/p/plugins/profile/t/host.xplane.pb"], ops, 4000.0, steps, top=2)
    assert "steps: 2 (train 3, train 4), mean wall time 10.0 ms, of which 0.5 ms waiting" in report
    rows = {line.split()[0]: line.split()[1:3] for line in report.splitlines()
            if line.split() and line.split()[0] in dict(CATEGORIES)}
    assert rows["conv"] == ["3.00", "60.0"] and rows["update"] == ["1.00", "20.0"]
    assert "total            5.00  100.0" in report
    assert "pipeline stages, on its own threads, 2.00 ms/step" in report
    top = report.split("top 2 ops by self time\n")[1].splitlines()[1:]
    assert [line.split()[-1] for line in top] == ["forward/net/feast_8/MatMul", "update/adam/Sqrt"]


@pytest.mark.parametrize("folder, written, status, message", [
    ("missing", None, 2, "folder {}: no such folder"),
    (".", None, 2, "{}: no profile (plugins/profile/*/*.xplane.pb) in it"),
    (".", b"not an xspace", 4, "xprof cannot read this profile"),
])
def test_a_folder_without_a_readable_profile_ends_in_one_line(folder, written, status, message,
                                                              tmp_path):
    if written is not None:
        profile = tmp_path / "train/plugins/profile/2026_01_01_00_00_00/host.xplane.pb"
        profile.parent.mkdir(parents=True)
        profile.write_bytes(written)
    path = tmp_path / folder
    result = subprocess.run([*TOOL, str(path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == status
    assert result.stderr.startswith("error: ") and message.format(path) in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and result.stdout == ""


def test_the_newest_profile_is_found_by_its_folders_time_in_any_logdir_below(tmp_path):
    for logdir, session in [("train", "2026_01_02_00_00_00"), ("train", "2026_01_01_00_00_00"),
                            ("other/train", "2025_12_31_23_59_59")]:
        folder = tmp_path / logdir / "plugins" / "profile" / session
        folder.mkdir(parents=True)
        (folder / "host.xplane.pb").write_bytes(b"x")
    assert newest_profile(str(tmp_path)) == [
        str(tmp_path / "train/plugins/profile/2026_01_02_00_00_00/host.xplane.pb")]

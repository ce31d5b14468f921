"""A user's mistake on any command line ends with one line naming it, the exit status of its
kind (`meshseg.errors`; argparse's usage errors exit 2 as well) and no traceback.

Each case runs the tool as a new user does, `python -m <module> <arguments>`, in a folder
that holds a valid mesh, a bad one, split files and two finished runs, one without its
model. The cases of the tests selected run concurrently, once, in the `results` fixture:
about a minute on 2 cores (five cases import TensorFlow), so the module is marked
slow. A case marked `before_tensorflow` must fail before the tool imports TensorFlow
(`-X importtime` lists every import).
"""

import os
import subprocess
import sys
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pytest
import trimesh
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from helpers.runs import CONFIG_DIR, PROJECT
from meshseg.console import is_native_log_line
from meshseg.train.rundir.claim import RUN_CONFIG
from meshseg.train.rundir.summary import RunSummary

CONVERT = "meshseg.data.convert"
PREDICT = "meshseg.tools.predict"
REPORT = "meshseg.tools.report"
BENCH = "meshseg.tools.bench"
INPUT_BOUND = "meshseg.tools.input_bound"
THROUGHPUT = "meshseg.tools.throughput"
DOWNLOAD = "meshseg.data.download"
BASELINE = "meshseg.tools.baseline"
BASELINE_DATA = ("data=rna_sample data.root=. data.meshes=meshes data.labels=labels "
                 "data.label_offset=0 data.num_classes=2")
TETRAHEDRON_OFF = "OFF\n4 4 0\n0 0 0\n1 0 0\n0 1 0\n0 0 1\n3 0 1 2\n3 0 1 3\n3 0 2 3\n3 1 2 3\n"
CONVERT_ARGS = "--meshes meshes --labels labels --out out/train --num-shards 1"

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Case:
    """`python -m <module> <args>` in the workspace; it must exit with `status`, and its
    last stderr line must contain every string of `named`."""

    module: str
    args: str
    status: int
    named: tuple
    before_tensorflow: bool = True

    def command(self) -> list:
        importtime = ["-X", "importtime"] if self.before_tensorflow else []
        return [sys.executable, *importtime, "-m", self.module, *self.args.split()]


def case(case_id: str, module: str, args: str, status: int, *named: str,
         before_tensorflow: bool = True):
    return pytest.param(Case(module, args, status, named, before_tensorflow), id=case_id)


CASES = [
    case("convert-missing-meshes-folder", CONVERT,
         "--meshes nope --labels labels --split-file train.txt --out out/t --num-shards 1",
         2, "--meshes nope", "no such folder"),
    case("convert-missing-labels-folder", CONVERT,
         "--meshes meshes --labels nope --split-file train.txt --out out/t --num-shards 1",
         2, "--labels nope", "no such folder"),
    case("convert-missing-split-file", CONVERT, f"{CONVERT_ARGS} --split-file nope.txt",
         2, "--split-file nope.txt", "no such file"),
    case("convert-split-file-is-a-folder", CONVERT, f"{CONVERT_ARGS} --split-file meshes",
         2, "--split-file meshes", "is a folder"),
    case("convert-empty-split-file", CONVERT, f"{CONVERT_ARGS} --split-file empty.txt",
         2, "--split-file empty.txt lists no mesh"),
    case("convert-glob-matches-nothing", CONVERT,
         f"{CONVERT_ARGS} --split-file train.txt --mesh-glob *.ply",
         2, "lists no mesh matching --mesh-glob '*.ply'"),
    case("convert-zero-shards", CONVERT,
         "--meshes meshes --labels labels --split-file train.txt --out out/t --num-shards 0",
         2, "--num-shards", ">= 1"),
    case("convert-more-shards-than-meshes", CONVERT,
         "--meshes meshes --labels labels --split-file train.txt --out out/t --num-shards 5",
         2, "--num-shards 5", "at most 1"),
    case("convert-zero-classes", CONVERT,
         f"{CONVERT_ARGS} --split-file train.txt --num-classes 0", 2, "--num-classes", ">= 1"),
    case("convert-unknown-adjacency", CONVERT,
         f"{CONVERT_ARGS} --split-file train.txt --adjacency nonsense", 2, "--adjacency",
         "nonsense"),
    case("convert-out-under-a-file", CONVERT,
         "--meshes meshes --labels labels --split-file train.txt --out train.txt/t "
         "--num-shards 1", 2, "--out train.txt/t", "is a file"),
    case("convert-listed-mesh-missing", CONVERT, f"{CONVERT_ARGS} --split-file missing.txt",
         4, "meshes/missing.off does not exist"),
    case("convert-mesh-without-labels", CONVERT, f"{CONVERT_ARGS} --split-file unlabelled.txt",
         4, "meshes/unlabelled.off", "label file"),
    case("convert-no-valid-mesh", CONVERT, f"{CONVERT_ARGS} --split-file bad.txt --workers 1",
         4, "no valid mesh", "bad.off"),

    # Inputs are never outputs, --overwrite or not: the mesh, the label file (by path or
    # through a symlinked folder), a baseline's predictions over its data's labels.
    case("predict-out-replaces-the-mesh", PREDICT,
         "run meshes/good.ply --out meshes --overwrite", 2, "would write meshes/good.ply",
         "the mesh meshes/good.ply"),
    case("predict-out-replaces-the-labels", PREDICT,
         "run meshes/good.off --labels-dir labels --out labels --overwrite", 2,
         "would write labels/good.txt", "the label file labels/good.txt"),
    case("predict-out-links-to-the-labels", PREDICT,
         "run meshes/good.off --labels-dir labels --out labels_link --overwrite", 2,
         "would write labels_link/good.txt", "label file labels/good.txt"),
    case("baseline-predictions-replace-the-labels", BASELINE,
         f"{BASELINE_DATA} --predictions labels", 2, "--predictions: would write "
         "labels/good.txt", "label file", before_tensorflow=False),
    # Foreign files: text that is not UTF-8 (a split file, a label file, an OFF comment),
    # label arrays that are not int32 integers, a damaged model.keras.
    case("convert-split-file-not-utf8", CONVERT, f"{CONVERT_ARGS} --split-file cp1252.txt",
         4, "cp1252.txt: line 2: not UTF-8 text (byte 0xe8 at column 3)"),
    case("convert-label-text-not-utf8", CONVERT,
         f"{CONVERT_ARGS} --split-file latin_labels.txt --strict --workers 1", 4,
         "latin_labels.off", "labels/latin_labels.txt: line 3: not UTF-8 text"),
    case("convert-off-comment-not-utf8", CONVERT,
         f"{CONVERT_ARGS} --split-file latin_mesh.txt --strict --workers 1", 4,
         "latin_mesh.off: line 2: not UTF-8 text (byte 0xe8"),
    case("convert-labels-hold-strings", CONVERT,
         f"{CONVERT_ARGS} --split-file strings.txt --strict --workers 1", 4,
         "labels/strings.npy", "hold strings"),
    case("convert-labels-hold-complex-numbers", CONVERT,
         f"{CONVERT_ARGS} --split-file complex.txt --strict --workers 1", 4,
         "labels/complex.npy", "hold complex numbers"),
    case("convert-labels-beyond-int32", CONVERT,
         f"{CONVERT_ARGS} --split-file huge.txt --strict --workers 1", 4,
         "labels/huge.npy", "label 1e+20 at index 2 is outside int32"),
    case("predict-model-cut-in-half", PREDICT, "run_cut_model meshes/good.off", 4,
         "run_cut_model/model.keras is damaged", "not a whole zip archive"),
    case("predict-model-not-a-zip", PREDICT, "run meshes/good.off --out fresh", 4,
         "run/model.keras is damaged"),
    case("predict-model-missing-its-weights", PREDICT, "run_no_weights meshes/good.off", 4,
         "run_no_weights/model.keras is damaged", "no model.weights.h5"),
    case("predict-test-split-model-cut-in-half", PREDICT, "run_cut_model --test-split", 4,
         "run_cut_model/model.keras is damaged", before_tensorflow=False),

    case("predict-missing-run-dir", PREDICT, "nope meshes/good.off", 2, "run_dir nope",
         "no such folder"),
    case("predict-folder-without-a-run", PREDICT, "empty meshes/good.off", 2,
         "empty holds no finished meshseg run"),
    case("predict-run-without-model", PREDICT, "run_without_model meshes/good.off", 2,
         "run_without_model holds no model.keras"),
    case("predict-missing-mesh", PREDICT, "run meshes/good.off meshes/nope.off", 2,
         "mesh meshes/nope.off", "no such file"),
    case("predict-missing-labels-dir", PREDICT, "run meshes/good.off --labels-dir nope", 2,
         "--labels-dir nope", "no such folder"),
    case("predict-out-is-a-file", PREDICT, "run meshes/good.off --out train.txt", 2,
         "--out train.txt", "is a file"),
    case("predict-no-hierarchy", PREDICT, "run meshes/good.off --hierarchies 0", 2,
         "--hierarchies must be at least 1"),
    case("predict-hierarchies-of-a-network-without-levels", PREDICT,
         "run_demo meshes/good.off --hierarchies 2", 2, "--hierarchies 2",
         "run_demo reads no mesh hierarchy"),
    case("predict-validation-split-of-a-run-that-held-none-out", PREDICT,
         "run --validation-split", 2, "run held out no validation meshes"),
    case("predict-validation-split-with-a-split-file", PREDICT,
         "run_chose --validation-split --split-file train.txt", 2,
         "--split-file replaces the test split"),
    case("predict-two-meshes-one-stem", PREDICT, "run meshes/good.off other/good.off", 2,
         "meshes/good.off and other/good.off", "separate calls"),

    case("report-missing-folder", REPORT, "nope", 2, "root nope", "no such folder"),
    case("report-folder-without-runs", REPORT, "empty", 2, "empty holds no run"),
    case("report-out-is-a-file", REPORT, "run --out train.txt", 2, "--out train.txt",
         "is a file"),
    case("report-bad-summary", REPORT, "bad_summary", 2, "summary.json",
         "not a meshseg run summary"),
    # a run's own files, damaged: named, never a traceback
    case("report-summary-cut-mid-json", REPORT, "run_cut_summary", 2,
         "run_cut_summary/summary.json", "not a meshseg run summary (damaged"),
    case("report-settings-not-utf8", REPORT, "run_utf16_config", 2,
         "run_utf16_config/run_config.yaml", "not UTF-8 text: byte 0xff at offset 0"),
    case("predict-settings-not-yaml", PREDICT, "run_cut_config meshes/good.off", 2,
         "run_cut_config/run_config.yaml", "not YAML: line"),

    case("input-bound-unknown-key", INPUT_BOUND, "stpes=3", 2, "stpes"),
    case("input-bound-unknown-impl", INPUT_BOUND, "impl=nonsense", 2, "impl/nonsense",
         "gather_matmul"),
    case("input-bound-bad-boolean", INPUT_BOUND, "jit=maybe", 2, "jit=maybe"),
    case("input-bound-zero-batch-size", INPUT_BOUND, "data.batch_size=0", 2,
         "data.batch_size", ">= 1"),
    case("input-bound-zero-steps", INPUT_BOUND, "--steps 0", 2, "--steps", ">= 1"),
    case("input-bound-missing-data", INPUT_BOUND,
         "model=demo data=tfrecords data.train_files=nope-* data.test_files=nope-* "
         "data.num_classes=3",
         2, "data.train_files", "nope-*", before_tensorflow=False),

    case("throughput-no-file-matches", THROUGHPUT, "nope-*", 2, "files nope-*",
         "no file matches"),
    case("throughput-zero-batch-size", THROUGHPUT, "shard.tfrecords --batch-size 0", 2,
         "--batch-size", ">= 1"),
    case("throughput-negative-passes", THROUGHPUT, "shard.tfrecords --passes -1", 2,
         "--passes", ">= 1"),
    case("throughput-empty-shard", THROUGHPUT, "empty.tfrecords", 4, "empty.tfrecords",
         "no mesh", before_tensorflow=False),
    case("throughput-not-a-shard", THROUGHPUT, "train.txt", 4, "train.txt",
         before_tensorflow=False),

    case("download-unknown-data-set", DOWNLOAD, "nope --root out", 2, "unknown data set 'nope'"),
    case("download-no-data-set", DOWNLOAD, "--root out", 2, "name a data set", "--list"),
    case("download-terms-not-accepted", DOWNLOAD, "human_seg --root out", 2, "Research use only",
         "--accept-license"),
    case("download-root-is-a-file", DOWNLOAD, "rna --root train.txt", 2, "--root train.txt",
         "is a file"),

    case("bench-unknown-impl", BENCH, "--impl nonsense", 2, "--impl", "nonsense"),
    case("bench-bad-jit", BENCH, "--jit maybe", 2, "--jit", "maybe"),
    case("bench-out-is-a-file", BENCH, "--out train.txt --peak_size 0", 2, "--out train.txt",
         "is a file"),
]


def _write_finished_run(run_dir, with_model: bool, overrides: tuple = ()) -> None:
    """A run directory as a finished run leaves it (settings composed with `overrides`,
    and summary), with an empty `model.keras` when `with_model` (not a zip: a damaged
    model)."""
    os.makedirs(run_dir)
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        OmegaConf.save(compose(config_name="train", overrides=list(overrides)),
                       os.path.join(run_dir, RUN_CONFIG))
    RunSummary(impl="gather_matmul", replicas=1, test_files=[], steps=1, wall_time_s=1.0,
               pid=1, median_step_time_ms=None, min_step_time_ms=None, max_step_time_ms=None,
               compile_time_s=0.0, num_compilations=1, peak_rss_mib=1.0).save(run_dir)
    if with_model:
        open(os.path.join(run_dir, "model.keras"), "w").close()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """The folder the cases run in (see the module docstring)."""
    root = tmp_path_factory.mktemp("cli")
    for folder in ("meshes", "labels", "other", "empty", "bad_summary"):
        (root / folder).mkdir()
    for stem in ("good", "unlabelled"):
        (root / "meshes" / f"{stem}.off").write_text(TETRAHEDRON_OFF)
    (root / "other" / "good.off").write_text(TETRAHEDRON_OFF)
    (root / "meshes" / "bad.off").write_text(TETRAHEDRON_OFF.replace("3 1 2 3", "3 1 2 9"))
    for stem in ("good", "bad"):
        (root / "labels" / f"{stem}.txt").write_text("0\n1\n0\n1\n")
    for split, entry in (("train", "good.off"), ("bad", "bad.off"), ("empty", ""),
                         ("missing", "missing.off"), ("unlabelled", "unlabelled.off")):
        (root / f"{split}.txt").write_text(entry + "\n")
    (root / "empty.tfrecords").write_bytes(b"")
    (root / "shard.tfrecords").write_bytes(b"")
    (root / "bad_summary" / "summary.json").write_text('{"steps": 3}')
    _write_finished_run(root / "run", with_model=True)
    _write_finished_run(root / "run_without_model", with_model=False)
    _write_finished_run(root / "run_demo", with_model=True, overrides=("model=demo",))
    _write_finished_run(root / "run_chose", with_model=True,
                        overrides=("data.validation_meshes=2",))
    _write_foreign_files(root)
    _write_damaged_runs(root)
    return root


def _write_damaged_runs(root) -> None:
    """Finished runs whose summary.json is cut mid-JSON, or whose run_config.yaml is in
    UTF-16 or cut mid-YAML."""
    for name in ("run_cut_summary", "run_utf16_config", "run_cut_config"):
        _write_finished_run(root / name, with_model=True)
    summary = (root / "run_cut_summary" / "summary.json").read_text()
    (root / "run_cut_summary" / "summary.json").write_text(summary[:len(summary) // 2])
    settings = (root / "run_utf16_config" / RUN_CONFIG).read_text()
    (root / "run_utf16_config" / RUN_CONFIG).write_text(settings, encoding="utf-16")
    (root / "run_cut_config" / RUN_CONFIG).write_text("data:\n  root: [cut")


def _write_foreign_files(root) -> None:
    """The workspace's files meshseg did not write (see the cases): a PLY mesh, a symlink to
    the labels, text in cp1252, label arrays that are not int32 integers, and runs whose
    model.keras is the shipped one cut in half or rewritten without its weights."""
    trimesh.load(root / "meshes" / "good.off", process=False).export(root / "meshes" / "good.ply")
    (root / "labels_link").symlink_to(root / "labels")
    (root / "test.txt").write_text("good.off\n")
    (root / "cp1252.txt").write_bytes(b"good.off\npi\xe8ce.off\n")
    (root / "meshes" / "latin_labels.off").write_text(TETRAHEDRON_OFF)
    (root / "labels" / "latin_labels.txt").write_bytes(b"0\n1\n\xe9\n1\n")
    (root / "meshes" / "latin_mesh.off").write_bytes(
        TETRAHEDRON_OFF.replace("OFF\n", "OFF\n# pi\xe8ce\n").encode("cp1252"))
    (root / "labels" / "latin_mesh.txt").write_text("0\n1\n0\n1\n")
    arrays = {"strings": np.array(["0", "1", "0", "1"]), "complex": np.array([0, 1, 0, 1j]),
              "huge": np.array([0.0, 1.0, 1e20, 1.0])}
    for stem, array in arrays.items():
        (root / "meshes" / f"{stem}.off").write_text(TETRAHEDRON_OFF)
        np.save(root / "labels" / f"{stem}.npy", array)
    for stem in ("latin_labels", "latin_mesh", *arrays):
        (root / f"{stem}.txt").write_text(f"{stem}.off\n")
    shipped = PROJECT / "meshseg" / "pretrained" / "rna" / "model.keras"
    for name in ("run_cut_model", "run_no_weights"):
        _write_finished_run(root / name, with_model=False)
    data = shipped.read_bytes()
    (root / "run_cut_model" / "model.keras").write_bytes(data[:len(data) // 2])
    with zipfile.ZipFile(shipped) as source, zipfile.ZipFile(
            root / "run_no_weights" / "model.keras", "w") as target:
        for name in source.namelist():
            if name != "model.weights.h5":
                target.writestr(name, source.read(name))


@pytest.fixture(scope="module")
def results(request, workspace):
    """{Case: CompletedProcess} of the cases of the selected tests, run concurrently."""
    selected = [item.callspec.params["cli_case"] for item in request.session.items
                if item.module is request.module and hasattr(item, "callspec")]

    def run(cli_case: Case):
        return subprocess.run(cli_case.command(), cwd=workspace, capture_output=True,
                              text=True, timeout=300)

    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip(selected, pool.map(run, selected)))


@pytest.mark.parametrize("cli_case", CASES)
def test_a_mistake_ends_with_one_line_naming_it_and_its_exit_status(cli_case, results):
    result = results[cli_case]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if not line.startswith("import time:")]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.returncode == cli_case.status, result.stderr[-3000:]
    assert all(name in errors[-1] for name in cli_case.named), errors[-1]
    assert errors[-1].startswith("error: ") or ": error: argument " in errors[-1]
    assert [line for line in lines if is_native_log_line(line)] == []  # TensorFlow's start-up
    if cli_case.before_tensorflow:
        imported = {line.rsplit("|", 1)[-1].strip() for line in lines
                    if line.startswith("import time:")}
        assert "tensorflow" not in imported

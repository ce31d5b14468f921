"""Shipped models: a run packaged by `meshseg.tools.pretrained` predicts by name
(`predict --pretrained NAME`) and reproduces the sample accuracy it recorded."""

import dataclasses
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import trimesh

from helpers.runs import tiny_config, train_tiny
from meshseg.config import train_config
from meshseg.errors import ConfigError, MeshsegError
from meshseg.tools import predict, pretrained
from meshseg.tools.predict import read_meshes
from meshseg.train.rundir.summary import RunSummary


@pytest.fixture(scope="module")
def run_and_sample(tiny_dataset, tmp_path_factory):
    """A tiny trained run and a sample folder (off/, labels/, test.txt) of two of its test
    meshes."""
    run_dir = tmp_path_factory.mktemp("run")
    train_tiny(tiny_config(tiny_dataset, "steps=4"), run_dir)
    sample = tmp_path_factory.mktemp("sample")
    (sample / "off").mkdir()
    (sample / "labels").mkdir()
    names = []
    for index, mesh in zip(range(2), read_meshes([tiny_dataset["test"]])):
        trimesh.Trimesh(mesh["vertices"], mesh["triangles"], process=False).export(
            sample / "off" / f"m{index}.off")
        np.savetxt(sample / "labels" / f"m{index}.txt", mesh["labels"], fmt="%d")
        names.append(f"m{index}.off")
    (sample / "test.txt").write_text("\n".join(names) + "\n")
    return run_dir, sample


def test_a_packaged_run_predicts_by_name_and_reproduces_its_sample_accuracy(
        run_and_sample, tmp_path, monkeypatch, capsys):
    run_dir, sample = run_and_sample
    monkeypatch.setattr(predict, "PRETRAINED_DIR", tmp_path / "shipped")
    target = pretrained.package(str(run_dir), "tiny", sample, into=tmp_path / "shipped")
    assert sorted(p.name for p in target.iterdir()) == sorted(
        [*pretrained.SHIPPED_FILES, pretrained.RESULTS_FILE])
    results = json.loads((target / pretrained.RESULTS_FILE).read_text())
    counts = results["sample"]["meshes"]
    assert sorted(counts) == ["m0", "m1"]
    assert results["sample"]["accuracy"] == pytest.approx(
        sum(c["correct"] for c in counts.values()) / sum(c["vertices"] for c in counts.values()))
    assert results["test_accuracy"] == pytest.approx(
        json.loads((run_dir / "summary.json").read_text())["eval_accuracy"])
    assert predict.pretrained_names() == ["tiny"]

    out = tmp_path / "predictions"
    predict.main(["--pretrained", "tiny", str(sample / "off" / "m0.off"),
                  "--labels-dir", str(sample / "labels"), "--out", str(out)])
    printed = capsys.readouterr().out
    accuracy = float(printed.split("m0.off: accuracy ")[1].split()[0])
    assert accuracy == pytest.approx(counts["m0"]["correct"] / counts["m0"]["vertices"], abs=1e-4)
    assert sorted(p.name for p in out.iterdir()) == ["m0.ply", "m0.txt"]


def test_an_unknown_name_is_refused_naming_the_shipped_models(tmp_path, monkeypatch):
    (tmp_path / "rna").mkdir()
    monkeypatch.setattr(predict, "PRETRAINED_DIR", tmp_path)
    with pytest.raises(ConfigError, match="--pretrained human: no such model; meshseg ships rna"):
        predict.pretrained_run_dir("human")


def test_a_model_above_the_size_limit_or_a_mesh_list_without_a_run_is_refused(
        run_and_sample, tmp_path, capsys):
    run_dir, sample = run_and_sample
    with pytest.raises(ConfigError, match=r"MiB, above --max-mib 0\.001"):
        pretrained.package(str(run_dir), "tiny", sample, max_mib=0.001, into=tmp_path)
    assert not (tmp_path / "tiny").exists()
    with pytest.raises(SystemExit) as exit_info:
        predict.main([str(sample / "off" / "m0.off")])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == ("error: give a run directory and at least one mesh "
                                       "file, or --pretrained NAME and mesh files\n")


def test_packaging_a_shipped_model_onto_itself_is_refused_and_leaves_it_whole(
        run_and_sample, tmp_path):
    run_dir, sample = run_and_sample
    shipped = tmp_path / "shipped" / "tiny"
    shutil.copytree(run_dir, shipped)
    before = {p.name: p.read_bytes() for p in shipped.iterdir() if p.is_file()}
    with pytest.raises(ConfigError, match=f"--name: would write {shipped}/model.keras, which "
                                          f"is the run file {shipped}/model.keras"):
        pretrained.package(str(shipped), "tiny", sample, into=tmp_path / "shipped")
    assert {p.name: p.read_bytes() for p in shipped.iterdir() if p.is_file()} == before


@pytest.mark.parametrize("damage, why", [
    ("cut", "(damaged: not YAML: line"),
    ("utf16", "(damaged: line 1: not UTF-8 text (byte 0xff at column 1)"),
    ("mapping", "(damaged: it holds a dict, not a list or NoneType)"),
])
def test_a_runs_damaged_overrides_record_is_refused_in_one_line(tmp_path, damage, why):
    path = tmp_path / ".hydra" / "overrides.yaml"
    path.parent.mkdir()
    text = "- steps=4\n- model.conv_channels=[8,8,16]\n- 'data.root=/my data'\n"
    path.write_bytes({"cut": b"- steps=4\n- 'data.root=/my data", "utf16":
                      text.encode("utf-16"), "mapping": b"steps: 4\n"}[damage])
    with pytest.raises(ConfigError) as error:
        pretrained.training_command(str(tmp_path))
    message = str(error.value)
    assert message.startswith(f"{path} is not Hydra's list of a run's overrides ")
    assert why in message and len(message.splitlines()) == 1
    path.write_text(text)
    assert pretrained.training_command(str(tmp_path)) == (
        "python train.py steps=4 'model.conv_channels=[8,8,16]' 'data.root=/my data'")


def test_the_shipped_command_leaves_out_where_the_caches_were_kept(tmp_path):
    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "overrides.yaml").write_text(
        "- experiment=rna_full\n- data.cache_dir=/scratch/me/cache\n- eval.test=final\n"
        "- +data.descriptor_cache=/scratch/me/descriptors\n- hydra.run.dir=/scratch/run\n")
    assert pretrained.training_command(str(tmp_path)) == (
        "python train.py experiment=rna_full eval.test=final")


# pretrained's command line; prints whether TensorFlow was imported when it ended
NAME_CHECK = """\
import sys
from meshseg.tools import pretrained
try:
    pretrained.main(sys.argv[1:])
finally:
    print("tensorflow" in sys.modules)
"""


@pytest.mark.parametrize("name", ["../escaped", "{tmp}/abs", "a/b", ".", "..", ".hidden", ""])
def test_a_name_that_is_not_a_plain_folder_name_is_refused_before_tensorflow(tmp_path, name):
    name = name.format(tmp=tmp_path)
    (tmp_path / "run").mkdir()
    (tmp_path / "sample").mkdir()
    before = sorted(os.listdir(predict.PRETRAINED_DIR.parent))
    result = subprocess.run([sys.executable, "-c", NAME_CHECK, "run", "--name", name,
                             "--sample", "sample"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr == (f"error: --name {name!r}: not a plain folder name (a name such "
                             "as rna: no path separator, not . or .., not hidden); the package "
                             f"is written to {predict.PRETRAINED_DIR}/<name>\n")
    assert result.stdout == "False\n"  # refused before TensorFlow was imported
    assert sorted(os.listdir(tmp_path)) == ["run", "sample"]
    assert sorted(os.listdir(predict.PRETRAINED_DIR.parent)) == before
    with pytest.raises(ConfigError, match="not a plain folder name"):
        pretrained.package(str(tmp_path / "run"), name, tmp_path / "sample",
                           into=tmp_path / "shipped")


@pytest.mark.slow
@pytest.mark.parametrize("name", predict.pretrained_names())
def test_a_shipped_model_reproduces_the_sample_accuracy_it_records(name):
    """The pretrained models in the package (`predict --pretrained NAME`) still predict
    the bundled sample's test meshes as when they were packaged."""
    shipped = predict.PRETRAINED_DIR / name
    recorded = json.loads((shipped / pretrained.RESULTS_FILE).read_text())
    sample = Path(__file__).resolve().parents[2] / recorded["sample"]["folder"]
    measured = pretrained.sample_accuracy(str(shipped), sample)
    assert sorted(measured["meshes"]) == sorted(recorded["sample"]["meshes"])
    # a few vertices may flip on another CPU's arithmetic; none of the figure moves
    assert measured["accuracy"] == pytest.approx(recorded["sample"]["accuracy"], abs=2e-3)


@pytest.mark.slow
def test_the_readmes_pretrained_command_runs_as_written(tmp_path):
    project = Path(__file__).resolve().parents[2]
    line = next(line for line in (project / "README.md").read_text().splitlines()
                if line.startswith(".venv/bin/python") and "--pretrained rna" in line)
    command = shlex.split(line)
    assert command[0] == ".venv/bin/python"
    result = subprocess.run([sys.executable, *command[1:], "--out", str(tmp_path)], cwd=project,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    recorded = json.loads((predict.PRETRAINED_DIR / "rna" / pretrained.RESULTS_FILE).read_text())
    counts = recorded["sample"]["meshes"]["4V83_BB"]
    accuracy = float(result.stdout.split("4V83_BB.ply: accuracy ")[1].split()[0])
    assert accuracy == pytest.approx(counts["correct"] / counts["vertices"], abs=2e-3)


@pytest.mark.parametrize("name", predict.pretrained_names())
def test_a_shipped_models_command_still_composes_its_run_config(name):
    """results.json's "command" is what a user runs to reproduce the model: composed with
    today's presets it gives every setting of the shipped run_config.yaml (settings added
    since take their defaults: `meshseg.config.load_run_config`; compared by
    `meshseg.train.rundir.claim.differing_settings`, the check a resumed run makes, plus the
    settings a resumed run may change, such as steps), so a
    preset that moves fails here until the command pins what the model was trained with."""
    from meshseg.config import load_run_config, train_config
    from meshseg.train.rundir.claim import RESUMABLE_CHANGES, differing_settings

    shipped = predict.PRETRAINED_DIR / name
    command = json.loads((shipped / pretrained.RESULTS_FILE).read_text())["command"]
    assert command.startswith("python train.py")
    today = train_config(shlex.split(command)[2:])
    trained = load_run_config(str(shipped))
    moved = differing_settings(trained, today) + [
        key for key in RESUMABLE_CHANGES if getattr(today, key) != getattr(trained, key)]
    assert not moved, f"{name}: {command} composes other settings: {moved}"


def test_a_shipped_summary_names_the_test_shards_inside_the_project_relative_to_it(
        tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    inside, outside = str(tmp_path / "data" / "cache" / "test-0.tfrecords"), "/elsewhere/t.tfr"
    summary = RunSummary(impl="gather_matmul", replicas=1, test_files=[inside, outside],
                         steps=1, wall_time_s=1.0, pid=1, median_step_time_ms=None,
                         min_step_time_ms=None, max_step_time_ms=None, compile_time_s=0.0,
                         num_compilations=1, peak_rss_mib=1.0)
    assert pretrained.shipped_summary(summary).test_files == [
        os.path.join("data", "cache", "test-0.tfrecords"), outside]
    # a run that kept its cache elsewhere (data.cache_dir=/scratch/c): its shards are named
    # where the shipped command, which leaves that override out, converts them
    moved = dataclasses.replace(summary, test_files=["/scratch/c/test-0.tfrecords", outside])
    assert pretrained.shipped_summary(moved, ("/scratch/c/", "data/cache/rna")).test_files == [
        os.path.join("data", "cache", "rna", "test-0.tfrecords"), outside]


@pytest.mark.parametrize("name", predict.pretrained_names())
def test_a_shipped_model_names_no_path_of_the_machine_that_trained_it(name):
    summary = RunSummary.load(str(predict.PRETRAINED_DIR / name))
    assert summary.test_files and not any(os.path.isabs(p) for p in summary.test_files)


def test_a_sample_mesh_that_fails_leaves_the_earlier_package_and_no_half_built_one(
        run_and_sample, tmp_path):
    run_dir, sample = run_and_sample
    damaged = tmp_path / "sample"
    shutil.copytree(sample, damaged)
    text = (damaged / "off" / "m1.off").read_text()
    (damaged / "off" / "m1.off").write_text(text[:len(text) // 2])  # cut short
    (tmp_path / "shipped" / "tiny").mkdir(parents=True)
    (tmp_path / "shipped" / "tiny" / "results.json").write_text("{}\n")
    with pytest.raises(MeshsegError, match="m1.off"):
        pretrained.package(str(run_dir), "tiny", damaged, into=tmp_path / "shipped")
    assert os.listdir(tmp_path / "shipped") == ["tiny"]
    assert os.listdir(tmp_path / "shipped" / "tiny") == ["results.json"]


def test_a_shipped_models_folder_this_user_may_not_write_is_refused_before_any_work(
        run_and_sample):
    from helpers.filesystems import run_as_nobody, tmpfs

    run_dir, sample = run_and_sample
    with tmpfs("8m") as mounted:
        shutil.copytree(run_dir, mounted / "run")
        shutil.copytree(sample, mounted / "sample")
        result = run_as_nobody("meshseg.tools.pretrained",
                               ["run", "--name", "tiny", "--sample", "sample"], cwd=mounted)
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.splitlines()[-1] == (
        f"error: --name {predict.PRETRAINED_DIR / 'tiny'}: {predict.PRETRAINED_DIR} is not "
        "writable (Permission denied)")
    assert "tiny" not in predict.pretrained_names()


def test_sample_meshes_the_run_trained_on_are_refused_naming_them(tmp_path):
    (tmp_path / "train.txt").write_text("a.ply b.ply\n")
    trained = train_config([f"data.root={tmp_path}", "data.train_split=train.txt"])
    with pytest.raises(ConfigError, match=r"sample test meshes b are training meshes of run"):
        pretrained.check_held_out("run", trained, [Path("sample/meshes/b.ply"),
                                                   Path("sample/meshes/c.ply")])
    pretrained.check_held_out("run", trained, [Path("sample/meshes/c.ply")])  # held out

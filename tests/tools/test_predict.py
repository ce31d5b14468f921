"""meshseg.tools.predict: features as the pipeline builds them, predictions that reproduce the
evaluation, the written .ply/.txt files and the run settings' sources."""

import json
import shutil

import numpy as np
import pytest
import tensorflow as tf
import trimesh
from omegaconf import OmegaConf

from helpers.meshes import SEAM_OBJ
from hydra import compose, initialize_config_dir

from helpers.runs import CONFIG_DIR, PROJECT, tiny_config, train_tiny
from meshseg.batch import without_mesh_ids
from meshseg.config import FOURIER_OCTAVES
from meshseg.data.mesh.meshfiles import load_geometry, load_labelled_mesh
from meshseg.data.pipeline.dataset import make_dataset
from meshseg.data.pipeline.inputs import MeshInputs
from meshseg.data.records.convert import convert_split
from meshseg.data.records.schema import mesh_to_example
from meshseg.errors import ConfigError, DataError
from meshseg.tools.predict import (InputSettings, evaluate_test_split, input_settings, load_model,
                                   main, mesh_inputs, predict_files, read_meshes)
from meshseg.tools.visualize import label_colors
from meshseg.train.loop.evaluate import evaluate, make_predict_step
from meshseg.train.rundir.summary import RunSummary


@pytest.fixture(scope="module")
def trained_run(tiny_dataset, tmp_path_factory):
    """A tiny trained run."""
    run_dir = tmp_path_factory.mktemp("run")
    train_tiny(tiny_config(tiny_dataset, "steps=4"), run_dir)
    return run_dir


@pytest.fixture(scope="module")
def test_mesh_files(tiny_dataset, tmp_path_factory):
    """The first test-split mesh as `mesh.ply` and its labels as `labels/mesh.txt`."""
    root = tmp_path_factory.mktemp("mesh_files")
    mesh = next(read_meshes([tiny_dataset["test"]]))
    trimesh.Trimesh(mesh["vertices"], mesh["triangles"], process=False).export(root / "mesh.ply")
    (root / "labels").mkdir()
    np.savetxt(root / "labels" / "mesh.txt", mesh["labels"], fmt="%d")
    return root / "mesh.ply", root / "labels"


def test_mesh_features_equal_the_pipeline_features(tiny_dataset):
    mesh = next(read_meshes([tiny_dataset["test"]]))
    expected, _ = next(iter(make_dataset([tiny_dataset["test"]], batch_size=1, training=False,
                                         inputs=MeshInputs(center="mean", scale="rms"))))
    settings = InputSettings(6, MeshInputs(center="mean", scale="rms"), 4.0, test_files=[])
    features = mesh_inputs(mesh["vertices"], mesh["triangles"], settings)
    expected = without_mesh_ids(expected)  # a mesh file has no shard and record
    assert set(features) == set(expected)
    for key in expected:
        assert features[key].dtype == expected[key].dtype, key
        np.testing.assert_array_equal(features[key].numpy(), expected[key].numpy(), err_msg=key)


# float32 rounding only (eager here, a traced tf.data graph there): measured 2.4e-7 of the
# largest value for the positions (the principal frame's turn and the unit-area scale) and
# 2.6e-6 for "inputs", whose highest Fourier octave multiplies the positions' rounding
PRESET_FEATURES_RTOL = 1e-5


def test_mesh_features_equal_the_pipeline_features_under_the_rna_presets_settings(tmp_path):
    # The shipped rna model's inputs (experiment=rna_full): principal frame, area-weighted
    # centroid and unit area, xyz Fourier features, normals and HKS, 3 coarser levels; one
    # real mesh of the bundled sample, converted as the run's cache is and read back by the
    # pipeline, against the same file read by predict.
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        data = compose(config_name="train", overrides=["experiment=rna_full"]).data
    inputs = MeshInputs.of(data)
    assert (inputs.frame, inputs.levels, inputs.stored) == ("pca", 3, ("normals", "hks"))
    mesh_path = PROJECT / "data" / "rna_sample" / "ply" / "4V9O_AB.ply"
    shards = convert_split([mesh_path], [PROJECT / "data" / "rna_sample" / "labels" / "4V9O_AB.txt"],
                           tmp_path / "test", 1, label_offset=data.label_offset,
                           num_classes=data.num_classes, adjacency=data.adjacency,
                           features=inputs.stored, levels=inputs.levels,
                           coarsening=data.coarsening, frame=data.frame)
    expected, _ = next(iter(make_dataset(shards, batch_size=1, training=False, inputs=inputs)))
    geometry = load_geometry(mesh_path)
    settings = InputSettings(data.num_classes, inputs, data.coarsening, test_files=[])
    features = mesh_inputs(geometry.vertices, geometry.triangles, settings)
    expected = without_mesh_ids(expected)
    assert set(features) == set(expected)
    for key in expected:
        got, want = features[key].numpy(), expected[key].numpy()
        assert got.dtype == want.dtype, key
        if np.issubdtype(want.dtype, np.floating):
            scale = np.max(np.abs(want), initial=0.0)
            np.testing.assert_allclose(got, want, rtol=0, atol=PRESET_FEATURES_RTOL * scale,
                                       err_msg=key)
        else:
            np.testing.assert_array_equal(got, want, err_msg=key)


def test_prediction_reproduces_the_evaluation_accuracy_of_the_mesh(trained_run, test_mesh_files,
                                                                   tmp_path, capsys):
    mesh_path, labels_dir = test_mesh_files
    main([str(trained_run), str(mesh_path), "--out", str(tmp_path / "out"),
          "--labels-dir", str(labels_dir)])
    printed = capsys.readouterr().out
    predicted_accuracy = float(printed.strip().splitlines()[-1].rsplit(" ", 1)[1])

    mesh = load_labelled_mesh(mesh_path, labels_dir / "mesh.txt")
    labels = mesh.labels
    record = str(tmp_path / "one_mesh.tfrecords")
    with tf.io.TFRecordWriter(record) as writer:
        writer.write(mesh_to_example(mesh.vertices, mesh.triangles, labels))
    settings = input_settings(str(trained_run))
    one_mesh = make_dataset([record], batch_size=1, training=False, inputs=settings.inputs)
    model = load_model(str(trained_run))
    expected = evaluate(make_predict_step(model, jit=False), one_mesh, settings.num_classes,
                        np.ones(settings.num_classes, np.int64))["accuracy"]
    assert predicted_accuracy == pytest.approx(expected, abs=5e-5)  # printed with 4 decimals
    written = np.loadtxt(tmp_path / "out" / "mesh.txt", dtype=np.int64)
    assert np.mean(written == labels) == pytest.approx(expected)


def test_written_ply_is_the_mesh_coloured_by_the_written_labels(trained_run, test_mesh_files, tmp_path):
    mesh_path, _ = test_mesh_files
    main([str(trained_run), str(mesh_path), "--out", str(tmp_path)])
    original = trimesh.load(mesh_path, process=False)
    written = trimesh.load(tmp_path / "mesh.ply", process=False)
    labels = np.loadtxt(tmp_path / "mesh.txt", dtype=np.int64)
    assert len(labels) == len(original.vertices)
    np.testing.assert_allclose(written.vertices, original.vertices, rtol=1e-6)
    np.testing.assert_array_equal(written.faces, original.faces)
    np.testing.assert_array_equal(written.visual.vertex_colors, label_colors(labels))


def test_picture_draws_the_written_labels_beside_the_true_ones(trained_run, test_mesh_files,
                                                              tmp_path, monkeypatch):
    from matplotlib.image import imread

    from meshseg.tools import visualize
    drawn = []
    render = visualize.render_mesh_labels
    monkeypatch.setattr(visualize, "render_mesh_labels",
                        lambda vertices, triangles, panels: drawn.append(panels)
                        or render(vertices, triangles, panels))
    mesh_path, labels_dir = test_mesh_files
    main([str(trained_run), str(mesh_path), "--labels-dir", str(labels_dir), "--picture",
          "--out", str(tmp_path / "both")])
    main([str(trained_run), str(mesh_path), "--picture", "--out", str(tmp_path / "alone")])
    written = np.loadtxt(tmp_path / "both" / "mesh.txt", dtype=np.int64)
    assert [list(panels) for panels in drawn] == [["truth", "prediction"], ["prediction"]]
    np.testing.assert_array_equal(drawn[0]["truth"], np.loadtxt(labels_dir / "mesh.txt"))
    np.testing.assert_array_equal(drawn[0]["prediction"], written)
    both, alone = (imread(tmp_path / folder / "mesh.png") for folder in ("both", "alone"))
    assert both.shape[0] == alone.shape[0] and both.shape[1] == 2 * alone.shape[1]
    with pytest.raises(ConfigError, match="already holds mesh.ply, mesh.txt, mesh.png"):
        predict_files(str(trained_run), [str(mesh_path)], str(tmp_path / "alone"),
                      picture=True)


def test_the_runs_label_offset_shifts_written_and_compared_labels(trained_run, test_mesh_files,
                                                                  tmp_path, capsys):
    """A run trained with data.label_offset=1 (as the RNA data): predict reads its label
    files as class - 1 and writes class - 1, with no option given."""
    mesh_path, labels_dir = test_mesh_files
    offset_run = tmp_path / "offset_run"
    shutil.copytree(trained_run, offset_run)
    config = OmegaConf.load(offset_run / "run_config.yaml")
    config.data.label_offset = 1
    OmegaConf.save(config, offset_run / "run_config.yaml")
    shifted = tmp_path / "shifted"
    shifted.mkdir()
    np.savetxt(shifted / "mesh.txt", np.loadtxt(labels_dir / "mesh.txt", dtype=np.int64) - 1, fmt="%d")
    main([str(trained_run), str(mesh_path), "--out", str(tmp_path / "plain")])
    main([str(offset_run), str(mesh_path), "--out", str(tmp_path / "offset"),
          "--labels-dir", str(shifted)])
    accuracy = float(capsys.readouterr().out.strip().splitlines()[-1].rsplit(" ", 1)[1])
    plain = np.loadtxt(tmp_path / "plain" / "mesh.txt", dtype=np.int64)
    np.testing.assert_array_equal(np.loadtxt(tmp_path / "offset" / "mesh.txt", dtype=np.int64), plain - 1)
    assert accuracy == pytest.approx(np.mean(plain == np.loadtxt(labels_dir / "mesh.txt")), abs=5e-5)


@pytest.mark.parametrize("offset", ["1", "-1"])
def test_a_label_offset_other_than_the_runs_is_refused_before_anything_is_written(
        trained_run, test_mesh_files, tmp_path, capsys, offset):
    mesh_path, labels_dir = test_mesh_files
    with pytest.raises(SystemExit) as exit_info:
        main([str(trained_run), str(mesh_path), "--out", str(tmp_path / "out"),
              "--labels-dir", str(labels_dir), "--label-offset", offset])
    assert exit_info.value.code == 2
    assert (f"--label-offset {offset} differs from the run's data.label_offset 0"
            in capsys.readouterr().err)
    assert not (tmp_path / "out").exists()
    main([str(trained_run), str(mesh_path), "--out", str(tmp_path / "same"), "--label-offset", "0"])
    assert (tmp_path / "same" / "mesh.txt").exists()


def test_test_split_evaluation_equals_the_runs_eval_accuracy(trained_run, tiny_dataset):
    result = evaluate_test_split(str(trained_run), keep_meshes=1)
    summary = RunSummary.load(trained_run)
    assert result["accuracy"] == pytest.approx(summary.eval_accuracy, abs=1e-9)
    assert result["num_meshes"] == 2 and len(result["meshes"]) == 1
    assert result["confusion"].shape == (6, 6)
    assert result["confusion"].sum() == sum(len(m["labels"]) for m in read_meshes([tiny_dataset["test"]]))
    split = result["boundary"]  # the same vertices, on and off label boundaries
    assert 0 < split["boundary_fraction"] < 1
    assert (split["boundary_fraction"] * split["boundary_accuracy"]
            + (1 - split["boundary_fraction"]) * split["interior_accuracy"]
            == pytest.approx(result["accuracy"], abs=1e-9))
    assert split["boundary_accuracy"] == pytest.approx(summary.eval_boundary_accuracy, abs=1e-9)
    assert split["interior_accuracy"] == pytest.approx(summary.eval_interior_accuracy, abs=1e-9)


def test_the_test_split_is_scored_from_the_command_line(trained_run, capsys):
    result = evaluate_test_split(str(trained_run), keep_meshes=0)
    main([str(trained_run), "--test-split"])
    scored, by_frequency, boundary = capsys.readouterr().out.strip().split("\n")
    assert scored == (f"{trained_run}: test split (2 meshes): accuracy {result['accuracy']:.4f}, "
                      f"mean IoU {result['mean_iou']:.4f}")
    assert by_frequency.startswith("mean IoU of the classes by test vertex count, rarest "
                                   "quarter first: ")
    assert by_frequency.count(" classes of ") == 4  # 6 classes in 4 groups
    split = result["boundary"]
    assert boundary == (
        f"label boundaries (a 1-ring neighbour of another class): "
        f"{split['boundary_fraction']:.1%} of the test vertices, accuracy "
        f"{split['boundary_accuracy']:.4f} there and {split['interior_accuracy']:.4f} "
        f"elsewhere; {split['boundary_error_fraction']:.1%} of the errors")


def test_turned_test_files_need_a_mesh_folder_run(trained_run, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([str(trained_run), "--test-split", "--eval-rotation", "so3"])
    assert exit_info.value.code == 2
    assert "evaluating test mesh files needs a mesh-folder run" in capsys.readouterr().err


@pytest.mark.parametrize("arguments, message", [
    (["--test-split"], "--test-split takes a run directory"),
    (["RUN", "mesh.ply", "--test-split"], "--test-split takes a run directory"),
    (["RUN", "--test-split", "--picture"], "leave out --labels-dir"),
    (["RUN", "MESH", "--eval-rotation", "so3"], "--eval-rotation and --split-file: only with"),
    (["RUN", "MESH", "--split-file", "MESH"], "--eval-rotation and --split-file: only with"),
])
def test_test_split_options_that_do_not_fit_are_refused(trained_run, test_mesh_files, arguments,
                                                        message, capsys):
    arguments = [{"RUN": str(trained_run), "MESH": str(test_mesh_files[0])}.get(a, a)
                 for a in arguments]
    with pytest.raises(SystemExit) as exit_info:
        main(arguments)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_a_test_split_whose_shards_are_gone_is_named(trained_run, tmp_path, capsys):
    copy = tmp_path / "run"
    shutil.copytree(trained_run, copy)
    summary = json.loads((copy / "summary.json").read_text())
    summary["test_files"] = [str(tmp_path / "gone.tfrecords")]
    (copy / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(SystemExit) as exit_info:
        main([str(copy), "--test-split"])
    assert exit_info.value.code == DataError.exit_code
    assert f"{tmp_path / 'gone.tfrecords'}: a test shard of the run" in capsys.readouterr().err


def test_input_settings_come_from_the_runs_settings_and_summary(trained_run, tiny_dataset):
    assert input_settings(str(trained_run)) == InputSettings(
        num_classes=6, inputs=MeshInputs(center="mean", scale="none"), coarsening=4.0,
        test_files=[tiny_dataset["test"]], label_offset=0)


def test_input_settings_refuse_a_directory_without_a_finished_run(tmp_path):
    with pytest.raises(ConfigError, match="holds no finished meshseg run"):
        input_settings(str(tmp_path))
    (tmp_path / "summary.json").write_text(json.dumps({"impl": "block_sparse"}))
    with pytest.raises(ConfigError, match=r"summary.json is not a meshseg run summary \(missing "
                                          r"\['compile_time_s'"):
        input_settings(str(tmp_path))


def test_bad_meshes_are_named_and_skipped_and_the_others_predicted(trained_run, test_mesh_files,
                                                                    tmp_path, capsys):
    mesh_path, _ = test_mesh_files
    bad = tmp_path / "bad.off"
    bad.write_text("OFF\n3 1 0\n0 0 0\n1 0 0\n0 1 0\n3 0 1 7\n")  # index 7 of 3 vertices
    more = tmp_path / "more.ply"
    more.write_bytes(mesh_path.read_bytes())
    with pytest.raises(SystemExit) as exit_info:
        main([str(trained_run), str(mesh_path), str(bad), str(more), "--out",
              str(tmp_path / "out")])
    assert exit_info.value.code == DataError.exit_code
    out, err = capsys.readouterr()
    assert "wrote 2 predictions" in out
    assert f"error: {bad}: face 0 indexes vertex 7, outside [0, 3)" in err
    assert err.splitlines()[-1] == (f"error: 1 of 3 meshes failed: {bad} (reasons above); "
                                    f"the others were written to {tmp_path / 'out'}")
    assert "Traceback" not in err
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "mesh.ply", "mesh.txt", "more.ply", "more.txt"]


def test_a_mesh_beyond_float32_is_refused_naming_the_file_and_value(trained_run, tmp_path):
    far = tmp_path / "far.off"
    far.write_text("OFF\n4 2 0\n0 0 0\n1 0 0\n0 1 0\n0 0 1e39\n3 0 1 2\n3 0 1 3\n")
    result = predict_files(str(trained_run), [str(far)], str(tmp_path / "out"))
    assert result.written == [] and not (tmp_path / "out" / "far.txt").exists()
    assert "vertex 3 has z = 1e+39, beyond float32's range" in result.failures[str(far)]


def test_an_obj_with_a_seam_gets_one_predicted_label_per_v_line(trained_run, tmp_path):
    path = tmp_path / "seam.obj"
    path.write_text(SEAM_OBJ)
    result = predict_files(str(trained_run), [str(path)], str(tmp_path / "out"))
    assert result.written == [str(path)] and not result.failures
    assert len(np.loadtxt(tmp_path / "out" / "seam.txt", ndmin=1)) == 5



TETRAHEDRON_OFF = "OFF\n4 4 0\n0 0 0\n1 0 0\n0 1 0\n0 0 1\n3 0 1 2\n3 0 1 3\n3 0 2 3\n3 1 2 3\n"


def test_meshes_with_one_stem_in_two_folders_are_refused_before_writing_naming_both(
        trained_run, tmp_path, capsys):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "part.off").write_text(TETRAHEDRON_OFF)
    (tmp_path / "b" / "part.off").write_text(TETRAHEDRON_OFF.replace("0 0 1\n", "0 0 5\n"))
    a, b = str(tmp_path / "a" / "part.off"), str(tmp_path / "b" / "part.off")
    with pytest.raises(SystemExit) as exit_info:
        main([str(trained_run), a, b, "--out", str(tmp_path / "out")])
    assert exit_info.value.code == ConfigError.exit_code
    assert capsys.readouterr().err == (f"error: {a} and {b} would both be written as part.ply "
                                       "and .txt; predict them in separate calls (--out)\n")
    assert not (tmp_path / "out").exists()
    for name, path in (("a", a), ("b", b)):  # the way out: one call per folder
        main([str(trained_run), path, "--out", str(tmp_path / "out" / name)])
    for name, apex in (("a", [0, 0, 1]), ("b", [0, 0, 5])):
        written = trimesh.load(tmp_path / "out" / name / "part.ply", process=False)
        assert written.vertices[3].tolist() == apex


def test_outputs_of_an_earlier_call_are_replaced_only_with_overwrite(trained_run, tmp_path,
                                                                     capsys):
    (tmp_path / "part.off").write_text(TETRAHEDRON_OFF)
    command = [str(trained_run), str(tmp_path / "part.off"), "--out", str(tmp_path / "out")]
    main(command)
    assert capsys.readouterr().out == f"wrote 1 prediction to {tmp_path / 'out'}\n"
    (tmp_path / "out" / "part.txt").write_text("kept\n")
    with pytest.raises(SystemExit) as exit_info:
        main(command)
    assert exit_info.value.code == ConfigError.exit_code
    assert capsys.readouterr().err == (f"error: {tmp_path / 'out'} already holds part.ply, "
                                       "part.txt; pass --overwrite to replace them\n")
    assert (tmp_path / "out" / "part.txt").read_text() == "kept\n"
    main(command + ["--overwrite"])
    assert capsys.readouterr().out == f"wrote 1 prediction to {tmp_path / 'out'}\n"
    assert len(np.loadtxt(tmp_path / "out" / "part.txt")) == 4
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["part.ply", "part.txt"]


def test_a_run_stored_before_fourier_octaves_reads_the_six_it_was_trained_with(trained_run,
                                                                             tmp_path):
    import shutil

    old = tmp_path / "old_run"
    shutil.copytree(trained_run, old)
    stored = (old / "run_config.yaml").read_text()
    assert f"  fourier_octaves: {FOURIER_OCTAVES}\n" in stored
    (old / "run_config.yaml").write_text(stored.replace(f"  fourier_octaves: {FOURIER_OCTAVES}\n",
                                                        ""))
    assert input_settings(str(old)).inputs.fourier_octaves == FOURIER_OCTAVES == 6
    (old / "run_config.yaml").write_text(stored.replace(f"  fourier_octaves: {FOURIER_OCTAVES}\n",
                                                        "  fourier_octaves: 8\n"))
    assert input_settings(str(old)).inputs.fourier_octaves == 8

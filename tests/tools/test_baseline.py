"""The descriptor baseline: on a mesh folder whose labels are a function of position it
classifies the test meshes well, reports the accuracy of the predictions it writes, reads
its descriptors back from the cache, and ends a user's mistake with one line."""

import json
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import trimesh

from meshseg.data.features import descriptor_cache
from meshseg.data.mesh.meshfiles import file_sha256, load_geometry
from meshseg.data.pipeline.positional import fourier_features
from meshseg.data.pipeline.principal_frame import principal_axes, vertex_areas
from meshseg.data.records.convert import convert_split, split_file_pairs
from meshseg.data.records.decode import decode_mesh_record
from meshseg.data.records.prepare import validation_entries
from meshseg.data.records.reader import open_shard
from meshseg.errors import ConfigError
from meshseg.tools import baseline
from tests.helpers.runs import PROJECT

NUM_CLASSES = 4


def quadrant_labels(vertices: np.ndarray) -> np.ndarray:
    """Class of each vertex: which of the four (x, z) quadrants around the centre it is in."""
    centred = vertices - vertices.mean(axis=0)
    return (centred[:, 0] > 0).astype(int) + 2 * (centred[:, 2] > 0).astype(int)


@pytest.fixture(scope="module")
def mesh_folder(tmp_path_factory):
    """8 ellipsoids (6 train, 2 test) of different sizes and places, labelled by quadrant;
    the layout of conf/data/rna_sample.yaml with labels 0..3 and no offset."""
    root = tmp_path_factory.mktemp("quadrants")
    (root / "labels").mkdir()
    rng = np.random.default_rng(0)
    names = []
    for index in range(8):
        sphere = trimesh.creation.icosphere(2)
        axes = rng.uniform(0.6, 1.4, 3)
        vertices = sphere.vertices * axes
        labels = quadrant_labels(vertices)
        vertices = rng.uniform(0.5, 3.0) * vertices + rng.normal(0, 5, 3)
        trimesh.Trimesh(vertices, sphere.faces, process=False).export(root / f"m{index}.ply")
        np.savetxt(root / "labels" / f"m{index}.txt", labels, fmt="%d")
        names.append(f"m{index}.ply")
    (root / "train.txt").write_text("\n".join(names[:6]) + "\n")
    (root / "test.txt").write_text("\n".join(names[6:]) + "\n")
    return root


def overrides(root) -> list:
    return ["data=rna_sample", "data.name=quadrants", f"data.root={root}", "data.meshes=.",
            "data.label_offset=0", f"data.num_classes={NUM_CLASSES}"]


def test_baseline_learns_position_labels_and_reports_its_predictions_accuracy(
        mesh_folder, tmp_path, capsys):
    out, predictions = tmp_path / "result.json", tmp_path / "predictions"
    baseline.main(overrides(mesh_folder) + [
        "--features", "xyz,normals", "--cache-dir", str(tmp_path / "cache"),
        "--out", str(out), "--predictions", str(predictions)])
    result = json.loads(out.read_text())
    assert result["accuracy"] > 0.9 and result["mean_iou"] > 0.8
    true, predicted = [], []
    for name in ("m6", "m7"):
        true.append(np.loadtxt(mesh_folder / "labels" / f"{name}.txt", dtype=int))
        predicted.append(np.loadtxt(predictions / f"{name}.txt", dtype=int))
    true, predicted = np.concatenate(true), np.concatenate(predicted)
    assert result["accuracy"] == pytest.approx(np.mean(true == predicted), abs=1e-12)
    assert result["split"] == "test" and result["scored_vertices"] == len(true)
    train_labels = np.concatenate([np.loadtxt(mesh_folder / "labels" / f"m{i}.txt", dtype=int)
                                   for i in range(6)])
    majority = np.argmax(np.bincount(train_labels, minlength=NUM_CLASSES))
    assert result["majority_baseline_accuracy"] == pytest.approx(np.mean(true == majority))
    assert result["train_vertices"] == result["all_train_vertices"] == len(train_labels)
    row = capsys.readouterr().out.splitlines()[-1]
    assert row.startswith("| quadrants | xyz+normals | hist_gradient_boosting | ")
    assert f"| {result['accuracy']:.3f} |" in row and "--features xyz,normals" in row


def test_second_run_reads_descriptors_from_the_cache(mesh_folder, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    first = baseline.run_baseline(overrides(mesh_folder), ["hks"], "hist_gradient_boosting",
                                  None, 100, 0, cache)
    assert len(list(cache.glob("*.npz"))) == 8

    def recompute(*_, **__):
        raise AssertionError("descriptors recomputed despite the cache")

    monkeypatch.setattr(descriptor_cache, "heat_kernel_signature", recompute)
    second = baseline.run_baseline(overrides(mesh_folder), ["hks"], "hist_gradient_boosting",
                                   None, 100, 0, cache)
    assert second["accuracy"] == first["accuracy"]  # same seed, same descriptors
    # The converter reads the same cache: records with hks need no eigen-decomposition.
    meshes, labels = split_file_pairs(mesh_folder, mesh_folder / "labels",
                                      mesh_folder / "train.txt")
    shards = convert_split(meshes, labels, tmp_path / "records" / "train", 1,
                           features=("hks",), descriptor_cache=str(cache))
    record = decode_mesh_record(next(iter(open_shard(shards[0]))).numpy(), features=("hks",))
    with np.load(descriptor_cache.cache_file(cache, file_sha256(meshes[0]))) as cached:
        np.testing.assert_array_equal(record["hks"], cached["hks"])


def test_xyz_fourier_columns_are_the_runs_fourier_features_of_xyz(mesh_folder, tmp_path):
    data = baseline.train_config(overrides(mesh_folder)).data
    pairs = baseline.split_pairs(data)["test"]
    inputs, _ = baseline.split_arrays(*pairs, ["xyz", "xyz_fourier"], data, tmp_path / "cache")
    assert inputs[0].shape == (162, 3 + 36)
    np.testing.assert_allclose(inputs[0][:, 3:], fourier_features(inputs[0][:, :3]), atol=1e-6)
    assert np.all(np.abs(inputs[0][:, 3:]) <= 1.0)


def test_under_frame_pca_xyz_and_normals_are_the_runs_principal_frame_ones(mesh_folder,
                                                                             tmp_path):
    cache = tmp_path / "cache"
    plain_data = baseline.train_config(overrides(mesh_folder)).data
    data = baseline.train_config(overrides(mesh_folder) + ["data.frame=pca"]).data
    pairs = baseline.split_pairs(data)["test"]
    plain, _ = baseline.split_arrays(*pairs, ["xyz", "normals"], plain_data, cache)
    turned, _ = baseline.split_arrays(*pairs, ["xyz", "normals"], data, cache)
    for mesh_path, before, after in zip(pairs[0], plain, turned):
        triangles = load_geometry(mesh_path).triangles
        xyz = tf.constant(before[:, :3])
        axes = principal_axes(xyz, vertex_areas(xyz, tf.constant(triangles, tf.int32)))
        np.testing.assert_allclose(after[:, :3], before[:, :3] @ axes.numpy(), atol=1e-5)
        np.testing.assert_allclose(after[:, 3:], before[:, 3:] @ axes.numpy(), atol=1e-5)
        assert not np.allclose(after[:, :3], before[:, :3], atol=1e-2)


def test_mlp_on_a_training_subset(mesh_folder, tmp_path):
    result = baseline.run_baseline(overrides(mesh_folder), ["xyz"], "mlp", 500, 200, 0,
                                   tmp_path / "cache")
    assert result["train_vertices"] == 500 and result["all_train_vertices"] == 6 * 162
    assert result["accuracy"] > 0.9


@pytest.fixture(scope="module")
def twin_folder(tmp_path_factory):
    """3 ellipsoid families with arbitrary per-vertex labels: 2 jittered copies of each
    for training, 1 for testing, all in one frame (as rna_250's repeated structures)."""
    root = tmp_path_factory.mktemp("twins")
    (root / "labels").mkdir()
    rng = np.random.default_rng(1)
    sphere = trimesh.creation.icosphere(2)
    names = {"train": [], "test": []}
    for family in range(3):
        vertices = sphere.vertices * rng.uniform(0.4, 1.6, 3)
        labels = rng.integers(0, NUM_CLASSES, len(vertices))
        for copy, split in enumerate(("train", "train", "test")):
            name = f"f{family}c{copy}"
            jittered = vertices + rng.normal(0, 1e-3, vertices.shape)
            trimesh.Trimesh(jittered, sphere.faces, process=False).export(root / f"{name}.ply")
            np.savetxt(root / "labels" / f"{name}.txt", labels, fmt="%d")
            names[split].append(f"{name}.ply")
    for split, split_names in names.items():
        (root / f"{split}.txt").write_text("\n".join(split_names) + "\n")
    return root


def test_nearest_mesh_copies_the_labels_of_a_co_registered_training_mesh(twin_folder,
                                                                        tmp_path):
    cache = tmp_path / "cache"
    transfer = baseline.run_baseline(overrides(twin_folder), ["xyz"], "nearest_mesh", None,
                                     100, 0, cache)
    assert transfer["accuracy"] == 1.0 and transfer["train_vertices"] == 6 * 162
    with pytest.raises(ConfigError, match="nearest_mesh keeps every training mesh whole"):
        baseline.run_baseline(overrides(twin_folder), ["xyz"], "nearest_mesh", 100, 100, 0,
                              cache)


@pytest.mark.slow  # a subprocess per case (Hydra's start-up)
@pytest.mark.parametrize("mistake, status, message", [
    (["--features", "xyz,curvature"], 2, "argument --features: must be distinct names"),
    (["data.root=/nonexistent/folder"], 2, "data.root='/nonexistent/folder' is not a folder"),
    (["model=demo", "data=tfrecords", "data.train_files=a", "data.test_files=b"], 2,
     "data.source=tfrecords: the baseline reads mesh files"),
    (["data.num_classes=3"], 4, "outside [0, 3) (num_classes=3)"),
])
def test_a_mistake_ends_with_one_line_and_its_exit_status(mesh_folder, tmp_path, mistake,
                                                          status, message):
    command = [sys.executable, "-m", "meshseg.tools.baseline", *overrides(mesh_folder),
               "--cache-dir", str(tmp_path / "cache"), *mistake]
    finished = subprocess.run(command, cwd=PROJECT, capture_output=True, text=True,
                              timeout=120)
    assert finished.returncode == status
    lines = finished.stderr.strip().splitlines()
    assert message in lines[-1] and "Traceback" not in finished.stderr
    if status == 4:
        assert len(lines) == 1 and "m0.txt" in lines[0]


def test_an_empty_test_split_is_refused_naming_the_split_file(mesh_folder, tmp_path, capsys):
    root = tmp_path / "empty_test"
    root.mkdir()
    (root / "labels").symlink_to(mesh_folder / "labels")
    (root / "m0.ply").symlink_to(mesh_folder / "m0.ply")
    (root / "train.txt").write_text("m0.ply\n")
    (root / "test.txt").write_text("\n")
    with pytest.raises(SystemExit) as exit_info:
        baseline.main(overrides(root) + ["--cache-dir", str(tmp_path / "cache")])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == f"error: {root / 'test.txt'} lists no mesh\n"


def test_a_vote_of_meshes_takes_the_majority_and_a_tie_goes_to_the_nearest_mesh():
    points = np.random.default_rng(2).normal(size=(50, 3))
    shifts_and_classes = [(0.001, 0), (0.002, 1), (0.003, 1), (5.0, 2)]  # nearest first
    for meshes, expected in [(1, 0), (2, 0), (3, 1), (4, 1)]:
        model = baseline.NearestMeshTransfer(probe=20, meshes=meshes)
        model.fit([points + shift for shift, _ in reversed(shifts_and_classes)],
                  [np.full(50, label) for _, label in reversed(shifts_and_classes)])
        np.testing.assert_array_equal(model.predict(points), np.full(50, expected))


def test_a_vote_of_meshes_is_refused_for_a_classifier_that_fits_vertices(twin_folder, tmp_path):
    with pytest.raises(ConfigError, match="--meshes 3: only nearest_mesh votes"):
        baseline.run_baseline(overrides(twin_folder), ["xyz"], "mlp", None, 100, 0,
                              tmp_path / "cache", meshes=3)


def test_with_validation_meshes_it_never_trains_on_them_and_scores_them_not_the_test_split(
        mesh_folder, tmp_path, monkeypatch):
    read = []

    def recorded_split_arrays(mesh_paths, *args):
        read.append([path.name for path in mesh_paths])
        return split_arrays(mesh_paths, *args)

    split_arrays = baseline.split_arrays
    monkeypatch.setattr(baseline, "split_arrays", recorded_split_arrays)
    result = baseline.run_baseline(overrides(mesh_folder) + ["data.validation_meshes=2"],
                                   ["xyz"], "nearest_mesh", None, 100, 0, tmp_path / "cache")
    held_out = {f"m{index}.ply" for index in validation_entries(6, 2, seed=0)}
    train, scored = read
    assert len(held_out) == 2 and not held_out & set(train)
    assert sorted(train) == sorted({f"m{index}.ply" for index in range(6)} - held_out)
    assert sorted(scored) == sorted(held_out) and result["split"] == "validation"
    assert result["train_meshes"] == 4 and result["scored_meshes"] == 2


def test_split_test_scores_the_test_split_of_a_config_with_validation_meshes(mesh_folder,
                                                                              tmp_path, capsys):
    baseline.main(overrides(mesh_folder) + ["data.validation_meshes=2", "--split", "test",
                                            "--features", "xyz", "--classifier", "nearest_mesh",
                                            "--cache-dir", str(tmp_path / "cache")])
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("quadrants: test accuracy ")


def test_split_validation_without_validation_meshes_is_refused(mesh_folder, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        baseline.main(overrides(mesh_folder) + ["--split", "validation",
                                                "--cache-dir", str(tmp_path / "cache")])
    assert exit_info.value.code == 2
    assert "add data.validation_meshes=N" in capsys.readouterr().err

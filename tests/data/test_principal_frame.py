"""Specification of the principal frame (`data.frame=pca`, `meshseg.data.principal_frame`):
a turned mesh reads the same, in the functions and through the pipeline."""

from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
import trimesh
from scipy.spatial.transform import Rotation

from meshseg.config import DataConfig
from meshseg.data.inputs import MeshInputs
from meshseg.data.pipeline import make_dataset
from meshseg.data.prepare import MeshFolder, prepare_mesh_folder
from meshseg.data.principal_frame import principal_axes, to_principal_frame, vertex_areas


def _lopsided_mesh(seed: int) -> trimesh.Trimesh:
    """An icosphere stretched to three different widths and bent, so its principal
    variances differ and its third moments along them do not vanish (a unique frame)."""
    sphere = trimesh.creation.icosphere(subdivisions=2)
    rng = np.random.default_rng(seed)
    v = np.asarray(sphere.vertices) * np.array([3.0, 1.6, 0.8]) * rng.uniform(0.9, 1.1, 3)
    v[:, 0] += 0.25 * v[:, 1] ** 2
    v[:, 1] += 0.3 * v[:, 0] ** 2 / 3.0
    v -= v.mean(axis=0)
    return trimesh.Trimesh(v, sphere.faces, process=False)


def _frame(mesh: trimesh.Trimesh, rotation: np.ndarray):
    """(positions, normals) of `mesh` turned by `rotation`, then put in its principal frame."""
    vertices = tf.constant(mesh.vertices @ rotation.T, tf.float32)
    normals = tf.constant(mesh.vertex_normals @ rotation.T, tf.float32)
    areas = vertex_areas(vertices, tf.constant(mesh.faces, tf.int32))
    turned, turned_normals = to_principal_frame(vertices, areas, normals)
    return turned.numpy(), turned_normals.numpy()


@pytest.mark.parametrize("seed", [0, 1])
def test_a_turned_mesh_has_the_same_positions_and_normals_in_its_principal_frame(seed):
    mesh = _lopsided_mesh(seed)
    upright, upright_normals = _frame(mesh, np.eye(3))
    for rotation in Rotation.random(3, random_state=seed).as_matrix():
        turned, turned_normals = _frame(mesh, rotation)
        np.testing.assert_allclose(turned, upright, atol=1e-4 * np.abs(upright).max())
        np.testing.assert_allclose(turned_normals, upright_normals, atol=1e-4)


def test_principal_axes_are_a_rotation_by_decreasing_variance_with_positive_third_moments():
    mesh = _lopsided_mesh(0)
    vertices = tf.constant(mesh.vertices, tf.float32)
    areas = vertex_areas(vertices, tf.constant(mesh.faces, tf.int32))
    axes = principal_axes(vertices, areas).numpy()
    np.testing.assert_allclose(axes.T @ axes, np.eye(3), atol=1e-5)
    assert np.linalg.det(axes) == pytest.approx(1.0, abs=1e-5)
    weights = areas.numpy() / areas.numpy().sum()
    projected = mesh.vertices @ axes
    variances = weights @ projected ** 2
    assert variances[0] > variances[1] > variances[2]
    third = weights @ projected ** 3
    assert third[0] > 0.01 * variances[0] ** 1.5 and third[1] > 0.01 * variances[1] ** 1.5


def test_vertex_areas_are_a_third_of_each_corner_triangle_and_sum_to_the_surface_area():
    mesh = _lopsided_mesh(0)
    areas = vertex_areas(tf.constant(mesh.vertices, tf.float32),
                         tf.constant(mesh.faces, tf.int32)).numpy()
    assert areas.sum() == pytest.approx(mesh.area, rel=1e-5)
    expected = np.zeros(len(mesh.vertices))
    np.add.at(expected, mesh.faces.reshape(-1), np.repeat(mesh.area_faces / 3, 3))
    np.testing.assert_allclose(areas, expected, rtol=1e-4)


def test_a_mesh_without_area_weighs_every_vertex_alike():
    vertices = tf.constant([[2.0, 0.0, 0.0], [-1.0, 0.5, 0.0], [-1.0, -0.5, 0.0],
                            [0.0, 0.0, 0.0]])
    axes = principal_axes(vertices, tf.zeros([4])).numpy()
    assert np.all(np.isfinite(axes))
    np.testing.assert_allclose(np.abs(axes[:, 0]), [1.0, 0.0, 0.0], atol=1e-5)
    assert axes[0, 0] > 0  # the third moment along x (8 - 1 - 1) is positive


@pytest.fixture(scope="module")
def lopsided_folder(tmp_path_factory):
    """A mesh folder of one training and two test meshes (`_lopsided_mesh`), 2 classes."""
    root = tmp_path_factory.mktemp("lopsided")
    (root / "meshes").mkdir()
    (root / "labels").mkdir()
    names = {"train": ["train0.ply"], "test": ["test0.ply", "test1.ply"]}
    for seed, name in enumerate(names["train"] + names["test"]):
        mesh = _lopsided_mesh(seed)
        mesh.export(root / "meshes" / name)
        labels = (mesh.vertices[:, 0] > 0).astype(int)
        np.savetxt(root / "labels" / f"{Path(name).stem}.txt", labels, fmt="%d")
    for split, entries in names.items():
        (root / f"{split}.txt").write_text("\n".join(entries) + "\n")
    return root


def test_under_frame_pca_a_turned_test_mesh_gives_the_inputs_of_the_upright_one(
        lopsided_folder, tmp_path):
    """experiment=rna_full's claim (data.frame=pca): positions, their Fourier features and
    normals do not change when a mesh turns (data.eval_rotation=so3), nor does the model."""
    source = MeshFolder(str(lopsided_folder), "meshes", "labels", 2, features=("normals",))
    files = prepare_mesh_folder(source, tmp_path / "cache")["test"]

    def batches(frame, rotation_seed):
        inputs = MeshInputs.of(DataConfig(
            name="t", source="tfrecords", num_classes=2, center="area_centroid",
            scale="unit_area", frame=frame, features=["xyz", "xyz_fourier", "normals"]))
        return [features["inputs"][0].numpy() for features, _ in make_dataset(
            files, batch_size=1, training=False, inputs=inputs, rotation_seed=rotation_seed)]

    for upright, turned, plain_turned in zip(batches("pca", None), batches("pca", 7),
                                             batches("none", 7)):
        np.testing.assert_allclose(turned, upright, atol=2e-4)
        assert not np.allclose(plain_turned[:, :3], upright[:, :3], atol=1e-2)

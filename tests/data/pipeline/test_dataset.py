"""Specification of the batched input pipeline (meshseg.data.pipeline.dataset)."""

import numpy as np
import pytest
import tensorflow as tf

from meshseg.data.mesh.adjacency import mesh_edges
from meshseg.data.pipeline.dataset import make_dataset, normalize_vertices
from meshseg.data.pipeline.inputs import MeshInputs
from meshseg.data.records.reader import BadRecordError


def _scaled(mesh: dict, scale: float, label: int) -> dict:
    """A copy of `mesh` with scaled vertices and all labels set to `label`."""
    return {
        "vertices": mesh["vertices"] * scale,
        "triangles": mesh["triangles"],
        "labels": np.full_like(mesh["labels"], label),
    }


@pytest.fixture
def triangle():
    """One triangle, 3 vertices, labels [5, 6, 7]."""
    return {
        "vertices": np.array([[0, 0, 0], [3, 0, 0], [0, 3, 0]], np.float32),
        "triangles": np.array([[0, 1, 2]], np.int32),
        "labels": np.array([5, 6, 7], np.int32),
    }


def test_batch_pads_vertices_with_zero_labels_with_minus_one_edges_with_zero(
    write_records, tetrahedron, triangle
):
    shard = write_records("a.tfrecords", [tetrahedron, triangle])
    features, labels = next(iter(make_dataset([shard], batch_size=2, training=False)))
    tetra_edges, tetra_weights = mesh_edges(tetrahedron["triangles"], 5)
    triangle_edges, triangle_weights = mesh_edges(triangle["triangles"], 3)
    num_e = len(tetra_edges)

    assert features["vertices"].dtype == tf.float32 and features["vertices"].shape == (2, 5, 3)
    assert features["edges"].dtype == tf.int32 and features["edges"].shape == (2, num_e, 2)
    assert features["edge_weights"].dtype == tf.float32
    assert features["edge_weights"].shape == (2, num_e)
    assert labels.dtype == tf.int32 and labels.shape == (2, 5)
    np.testing.assert_array_equal(features["num_vertices"], [5, 3])
    np.testing.assert_array_equal(features["num_edges"], [num_e, 9])
    np.testing.assert_array_equal(features["vertices"][1, 3:], np.zeros([2, 3]))
    np.testing.assert_array_equal(labels, [[0, 1, 1, 2, 3], [5, 6, 7, -1, -1]])
    np.testing.assert_array_equal(features["edges"][0], tetra_edges)
    np.testing.assert_array_equal(features["edges"][1, :9], triangle_edges)
    np.testing.assert_array_equal(features["edges"][1, 9:], 0)
    np.testing.assert_array_equal(features["edge_weights"][0], tetra_weights)
    np.testing.assert_array_equal(features["edge_weights"][1, :9], triangle_weights)
    np.testing.assert_array_equal(features["edge_weights"][1, 9:], 0.0)


def test_vertices_are_mean_centred_and_scaled_to_unit_rms_radius(write_records, triangle):
    shard = write_records("a.tfrecords", [triangle])
    features, _ = next(iter(make_dataset([shard], batch_size=1, training=False)))
    vertices = features["vertices"][0].numpy()
    np.testing.assert_allclose(vertices.mean(axis=0), 0.0, atol=1e-6)
    np.testing.assert_allclose(np.sqrt((vertices**2).sum(axis=1).mean()), 1.0, rtol=1e-6)


def test_normalisation_can_be_switched_off(write_records, triangle):
    shard = write_records("a.tfrecords", [triangle])
    dataset = make_dataset([shard], batch_size=1, training=False,
                           inputs=MeshInputs(center="none", scale="none"))
    features, _ = next(iter(dataset))
    np.testing.assert_array_equal(features["vertices"][0], triangle["vertices"])


def test_rms_scale_leaves_a_single_point_mesh_finite():
    vertices = normalize_vertices(tf.constant([[1.0, 2.0, 3.0]]))
    np.testing.assert_array_equal(vertices, [[0.0, 0.0, 0.0]])


def test_evaluation_order_is_round_robin_over_shards_on_every_pass(write_records, tetrahedron):
    first = write_records("a.tfrecords", [_scaled(tetrahedron, 1, label) for label in range(3)])
    second = write_records("b.tfrecords", [_scaled(tetrahedron, 1, label) for label in range(3, 6)])
    dataset = make_dataset([first, second], batch_size=1, training=False)
    for _ in range(2):
        order = [int(labels[0, 0]) for _, labels in dataset]
        assert order == [0, 3, 1, 4, 2, 5]


def test_training_yields_every_mesh_once_per_pass(write_records, tetrahedron):
    shard = write_records("a.tfrecords", [_scaled(tetrahedron, 1, label) for label in range(6)])
    dataset = make_dataset([shard], batch_size=4, training=True, seed=1)
    seen = [int(label) for _, labels in dataset for label in labels[:, 0]]
    assert sorted(seen) == list(range(6))


def test_repeat_continues_past_one_pass(write_records, tetrahedron):
    shard = write_records("a.tfrecords", [tetrahedron])
    dataset = make_dataset([shard], batch_size=1, training=True, seed=0, repeat=True)
    assert len(list(dataset.take(3))) == 3


def test_training_and_evaluation_datasets_run_without_tf_data_autotuning(
        write_records, tetrahedron):
    # Autotuning's model thread made a destroyed iterator wait up to a minute (pipeline.py).
    shard = write_records("a.tfrecords", [tetrahedron])
    for training in (True, False):
        dataset = make_dataset([shard], batch_size=1, training=training, seed=0)
        assert dataset.options().autotune.enabled is False
        assert len(list(dataset)) == 1


def _write_raw(path, record: bytes) -> str:
    with tf.io.TFRecordWriter(str(path)) as writer:
        writer.write(record)
    return str(path)


def test_record_without_mesh_features_fails_naming_its_shard_and_index(
        tmp_path, write_records, tetrahedron):
    good = write_records("good.tfrecords", [tetrahedron])
    bad = _write_raw(tmp_path / "bad.tfrecords", tf.train.Example().SerializeToString())
    with pytest.raises(BadRecordError,
                       match=r"bad\.tfrecords, record 0: missing feature 'vertices'"):
        make_dataset([good, bad], batch_size=1, training=False)


def test_record_with_float64_vertices_fails_naming_its_shard(
    tmp_path, write_records, demo_style_example, tetrahedron
):
    good = write_records("good.tfrecords", [tetrahedron])
    record = demo_style_example(
        tetrahedron["vertices"].astype(np.float64), tetrahedron["triangles"],
        tetrahedron["labels"],
    )
    bad = _write_raw(tmp_path / "bad.tfrecords", record)
    with pytest.raises(BadRecordError,
                       match=r"bad\.tfrecords, record 0: 'vertices' must be float32, got float64"):
        make_dataset([good, bad], batch_size=1, training=False)


def test_make_dataset_rejects_no_files():
    with pytest.raises(ValueError, match="at least one"):
        make_dataset([], batch_size=1, training=False)

"""Specification of the mesh TFRecord schema (meshseg.data.records.schema)."""

import numpy as np
import pytest
import tensorflow as tf

from meshseg.data.records.parse import parse_mesh_record
from meshseg.data.records.schema import mesh_to_example


def test_mesh_to_example_round_trips_and_casts_to_float32_int32(tetrahedron):
    serialized = mesh_to_example(
        tetrahedron["vertices"].astype(np.float64),
        tetrahedron["triangles"].astype(np.int64),
        tetrahedron["labels"].astype(np.int64),
    )
    mesh = parse_mesh_record(tf.constant(serialized))
    assert mesh["vertices"].dtype == tf.float32
    assert mesh["triangles"].dtype == tf.int32
    assert mesh["labels"].dtype == tf.int32
    np.testing.assert_array_equal(mesh["vertices"], tetrahedron["vertices"])
    np.testing.assert_array_equal(mesh["triangles"], tetrahedron["triangles"])
    np.testing.assert_array_equal(mesh["labels"], tetrahedron["labels"])
    assert mesh["num_vertices"].dtype == tf.int32 and int(mesh["num_vertices"]) == 5
    assert mesh["num_triangles"].dtype == tf.int32 and int(mesh["num_triangles"]) == 4


def test_parse_reads_a_record_written_like_the_demo(tetrahedron, demo_style_example):
    serialized = demo_style_example(
        tetrahedron["vertices"], tetrahedron["triangles"], tetrahedron["labels"]
    )
    mesh = parse_mesh_record(tf.constant(serialized))
    np.testing.assert_array_equal(mesh["vertices"], tetrahedron["vertices"])
    np.testing.assert_array_equal(mesh["triangles"], tetrahedron["triangles"])
    np.testing.assert_array_equal(mesh["labels"], tetrahedron["labels"])


def test_parse_works_inside_dataset_map(tetrahedron):
    serialized = mesh_to_example(**tetrahedron)
    dataset = tf.data.Dataset.from_tensors(serialized).map(parse_mesh_record)
    (mesh,) = list(dataset)
    assert mesh["vertices"].shape == (5, 3)
    assert mesh["labels"].shape == (5,)


def test_parse_rejects_wrong_vertex_count_naming_the_source(tetrahedron, demo_style_example):
    serialized = demo_style_example(
        tetrahedron["vertices"], tetrahedron["triangles"], tetrahedron["labels"],
        num_vertices=7,
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match="shard-3.tfrecords"):
        parse_mesh_record(tf.constant(serialized), source="shard-3.tfrecords")


def test_parse_rejects_float64_vertices_naming_the_source(tetrahedron, demo_style_example):
    serialized = demo_style_example(
        tetrahedron["vertices"].astype(np.float64), tetrahedron["triangles"],
        tetrahedron["labels"],
    )
    message = r"(?s)bad\.tfrecords.*'vertices' must be float32"
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        parse_mesh_record(tf.constant(serialized), source="bad.tfrecords")


def test_parse_rejects_negative_labels(tetrahedron, demo_style_example):
    labels = tetrahedron["labels"].copy()
    labels[0] = -1
    serialized = demo_style_example(tetrahedron["vertices"], tetrahedron["triangles"], labels)
    with pytest.raises(tf.errors.InvalidArgumentError, match="negative label"):
        parse_mesh_record(tf.constant(serialized))


def test_mesh_to_example_rejects_label_count_mismatch(tetrahedron):
    with pytest.raises(ValueError, match="labels must have shape"):
        mesh_to_example(tetrahedron["vertices"], tetrahedron["triangles"], np.zeros(4))


def test_no_record_stores_a_value_that_is_not_finite_in_float32(tetrahedron):
    """Every float field (positions, stored features, edge weights) is refused naming the
    field and the first bad value: 1e39 overflows float32, NaN stays NaN."""
    vertices, triangles, labels = (tetrahedron[key] for key in ("vertices", "triangles", "labels"))
    far = vertices.astype(np.float64)
    far[1, 2] = 1e39
    with pytest.raises(ValueError, match=r"vertices is not finite in float32 at 1 values, "
                                         r"e.g. \[1, 2\] = 1e\+39"):
        mesh_to_example(far, triangles, labels)
    normals = np.zeros([5, 3])
    normals[4, 0] = np.nan
    with pytest.raises(ValueError, match=r"normals is not finite in float32 at 1 values, "
                                         r"e.g. \[4, 0\] = nan"):
        mesh_to_example(vertices, triangles, labels, features={"normals": normals})
    edges = np.array([[0, 1], [1, 0]], np.int32)
    with pytest.raises(ValueError, match=r"edge_weights is not finite in float32 at 1 values"):
        mesh_to_example(vertices, triangles, labels,
                        adjacency={"edges": edges, "edge_weights": np.array([1.0, np.inf])})

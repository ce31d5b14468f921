"""The records decoded with TF ops, in the tf.data pipeline's graph (`Dataset.map`): the
mesh (`parse_mesh_record`, checked, naming its source in a failed check), its stored
adjacency, features and hierarchy levels. The schema, its fields' dtypes and shapes, is
`meshseg.data.records.schema`; the Python-side decoder that checks a shard before the
pipeline reads it, `meshseg.data.records.decode`, reads the same tables.
"""

import tensorflow as tf

from meshseg.data.features.stored import STORED_FEATURES
from meshseg.data.mesh.adjacency import ADJACENCY_FIELDS
from meshseg.data.records.schema import (ADJACENCY_FEATURES, ADJACENCY_SHAPES, FEATURE_SPEC,
                                         LEVEL_FEATURES, LEVEL_SHAPES, MESH_TENSORS, level_field)


def _assert_serialized_dtype(
    serialized: tf.Tensor, name: str, source: tf.Tensor | str
) -> tf.Operation:
    """Asserts that a serialised TensorProto holds the schema's dtype for `name`."""
    expected = MESH_TENSORS[name]
    _, (dtype_enum,) = tf.io.decode_proto(
        serialized, "tensorflow.TensorProto", ["dtype"], [tf.int32]
    )
    return tf.debugging.Assert(
        tf.reduce_all(tf.equal(dtype_enum, expected.as_datatype_enum)),
        ["Bad mesh record in", source, f": '{name}' must be {expected.name}, "
         "got DataType enum", dtype_enum],
    )


def _has_shape(shape: tf.Tensor, expected: tf.Tensor) -> tf.Tensor:
    """True when the int32 shape vector `shape` equals `expected` (any rank)."""
    return tf.cond(
        tf.equal(tf.size(shape), tf.size(expected)),
        lambda: tf.reduce_all(tf.equal(shape, expected)),
        lambda: tf.constant(False),
    )


def parse_mesh_record(
    serialized: tf.Tensor, source: tf.Tensor | str = "<unknown>"
) -> dict[str, tf.Tensor]:
    """Parses one serialised mesh `tf.train.Example` with TF ops.

    Usable inside `tf.data.Dataset.map`. The record is checked for consistency;
    a failed check raises at iteration time with `source` in the message. Only
    bytes that are not a `tf.train.Example` at all raise without `source`.

    Args:
      serialized: scalar tf.string tensor, one serialised `tf.train.Example`.
      source: scalar string (Python or tf.string) naming where the record came
        from, e.g. the shard file name; only used in error messages.

    Returns:
      A dict with
        'vertices': float32 [V, 3] vertex positions,
        'triangles': int32 [T, 3] vertex indices,
        'labels': int32 [V] per-vertex class labels, all >= 0,
        'num_vertices': int32 scalar V,
        'num_triangles': int32 scalar T.

    Raises:
      tf.errors.InvalidArgumentError: at iteration time, if a feature is
        missing, a tensor has the wrong dtype or shape, a count disagrees
        with its tensor, a triangle references a vertex outside [0, V), or a
        label is negative.
    """
    # The batched parser puts `example_names` into its missing-feature errors.
    record = tf.io.parse_example(
        tf.reshape(serialized, [1]),
        FEATURE_SPEC,
        example_names=tf.reshape(tf.convert_to_tensor(source, tf.string), [1]),
    )
    record = {name: value[0] for name, value in record.items()}
    dtype_checks = [
        _assert_serialized_dtype(record[name], name, source) for name in MESH_TENSORS
    ]
    with tf.control_dependencies(dtype_checks):
        vertices = tf.io.parse_tensor(record["vertices"], tf.float32)
        triangles = tf.io.parse_tensor(record["triangles"], tf.int32)
        labels = tf.io.parse_tensor(record["labels"], tf.int32)
    num_vertices = tf.cast(record["num_vertices"], tf.int32)
    num_triangles = tf.cast(record["num_triangles"], tf.int32)

    vertices_shape = tf.shape(vertices)
    triangles_shape = tf.shape(triangles)
    checks = [
        tf.debugging.Assert(
            _has_shape(vertices_shape, tf.stack([num_vertices, 3])),
            ["Bad mesh record in", source, ": vertices shape", vertices_shape,
             "!= [num_vertices, 3] with num_vertices =", num_vertices],
        ),
        tf.debugging.Assert(
            _has_shape(triangles_shape, tf.stack([num_triangles, 3])),
            ["Bad mesh record in", source, ": triangles shape", triangles_shape,
             "!= [num_triangles, 3] with num_triangles =", num_triangles],
        ),
        tf.debugging.Assert(
            _has_shape(tf.shape(labels), tf.expand_dims(num_vertices, 0)),
            ["Bad mesh record in", source, ": labels shape", tf.shape(labels),
             "!= [num_vertices] with num_vertices =", num_vertices],
        ),
        tf.debugging.Assert(
            tf.reduce_all((triangles >= 0) & (triangles < num_vertices)),
            ["Bad mesh record in", source, ": triangle vertex index outside [0,",
             num_vertices, ")"],
        ),
        tf.debugging.Assert(
            tf.reduce_all(labels >= 0),
            ["Bad mesh record in", source, ": negative label", tf.reduce_min(labels)],
        ),
    ]
    with tf.control_dependencies(checks):
        return {
            "vertices": tf.ensure_shape(tf.identity(vertices), [None, 3]),
            "triangles": tf.ensure_shape(tf.identity(triangles), [None, 3]),
            "labels": tf.ensure_shape(tf.identity(labels), [None]),
            "num_vertices": tf.identity(num_vertices),
            "num_triangles": tf.identity(num_triangles),
        }


def parse_adjacency(serialized: tf.Tensor, adjacency: str) -> dict[str, tf.Tensor]:
    """Parses a record's stored adjacency with TF ops (usable in `Dataset.map`).

    Args:
      serialized: scalar tf.string, one serialised `tf.train.Example`.
      adjacency: a level of `meshseg.config.ADJACENCY_LEVELS` other than
        "none": "edges" (edges, edge_weights) or "table" (also the neighbour table's
        five arrays); see `ADJACENCY_FEATURES`.

    Returns:
      dict with 'edges' int32 [E, 2], 'edge_weights' float32 [E] and, for
      "table", 'neighbors' int32 [V, K], 'neighbor_weights' float32 [V, K],
      'overflow_neighbors' int32 [O, K], 'overflow_weights' float32 [O, K] and
      'overflow_centers' int32 [O].

    Raises:
      tf.errors.InvalidArgumentError: at iteration time, if a feature is missing
        or a tensor has another dtype.
    """
    names = ADJACENCY_FIELDS[adjacency]
    spec = {name: tf.io.FixedLenFeature([], tf.string) for name in names}
    record = tf.io.parse_single_example(serialized, spec)
    parsed = {name: tf.io.parse_tensor(record[name], ADJACENCY_FEATURES[name])
              for name in names}
    return {name: tf.ensure_shape(value, ADJACENCY_SHAPES[name])
            for name, value in parsed.items()}


def parse_features(serialized: tf.Tensor, names) -> dict[str, tf.Tensor]:
    """Parses stored features with TF ops (usable in `Dataset.map`).

    Args:
      serialized: scalar tf.string, one serialised `tf.train.Example`.
      names: stored feature names ("normals", "hks").

    Returns:
      {name: float32 [V, width]} (static width, `STORED_FEATURES`).

    Raises:
      tf.errors.InvalidArgumentError: at iteration time, if a field is missing or has
        another dtype (`meshseg.data.records.reader.check_shard` reports these first).
    """
    spec = {name: tf.io.FixedLenFeature([], tf.string) for name in names}
    record = tf.io.parse_single_example(serialized, spec)
    return {name: tf.ensure_shape(tf.io.parse_tensor(record[name], tf.float32),
                                  [None, STORED_FEATURES[name]])
            for name in names}


def parse_levels(serialized: tf.Tensor, num_levels: int) -> list[dict[str, tf.Tensor]]:
    """Parses the first `num_levels` stored hierarchy levels with TF ops.

    Returns:
      one dict per level, finest first: 'num_vertices' int32 scalar V_l, 'edges' int32
      [E_l, 2], 'edge_weights' float32 [E_l], 'parents' int32 [V_{l-1}].

    Raises:
      tf.errors.InvalidArgumentError: at iteration time, if a field is missing or has
        another dtype (`meshseg.data.records.reader.check_shard` reports these first).
    """
    spec = {}
    for level in range(1, num_levels + 1):
        spec[level_field(level, "num_vertices")] = tf.io.FixedLenFeature([], tf.int64)
        spec |= {level_field(level, name): tf.io.FixedLenFeature([], tf.string)
                 for name in LEVEL_FEATURES}
    record = tf.io.parse_single_example(serialized, spec)
    return [{"num_vertices": tf.cast(record[level_field(level, "num_vertices")], tf.int32),
             **{name: tf.ensure_shape(tf.io.parse_tensor(record[level_field(level, name)],
                                                         dtype), LEVEL_SHAPES[name])
                for name, dtype in LEVEL_FEATURES.items()}}
            for level in range(1, num_levels + 1)]

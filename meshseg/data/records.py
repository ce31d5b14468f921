"""TFRecord schema of the tensorflow-graphics mesh-segmentation demo.

One mesh is one `tf.train.Example` with five features:

- `num_vertices`: int64 scalar V.
- `num_triangles`: int64 scalar T.
- `vertices`: bytes of `tf.io.serialize_tensor` of a float32 [V, 3] tensor.
- `triangles`: bytes of `tf.io.serialize_tensor` of an int32 [T, 3] tensor of
  vertex indices.
- `labels`: bytes of `tf.io.serialize_tensor` of an int32 [V] tensor, one class
  label >= 0 per vertex (-1 is the pipeline's padding marker, so it is refused).

The demo's own `Dancer_*.tfrecords` files use exactly this schema, so they are
read unchanged by `parse_mesh_record`.

Optional precomputed adjacency (`ADJACENCY_FEATURES`, written by the converter
with `--adjacency edges|table`); readers of the demo schema ignore them:

- `num_edges`: int64 scalar E.
- `edges`: serialised int32 [E, 2], `meshseg.data.adjacency.mesh_edges`.
- `edge_weights`: serialised float32 [E].
- `neighbors`, `neighbor_weights`: serialised int32 / float32 [V, K], and
  `overflow_neighbors`, `overflow_weights` [O, K], `overflow_centers` [O]: the
  neighbour table (`meshseg.batch.table_from_edges`); only with `--adjacency table`.

Optional derived fields (`meshseg.data.derived`, converter `--features`, `--levels`);
readers of the demo schema ignore them too:

- `normals`: serialised float32 [V, 3] unit vertex normals; `hks`: serialised float32
  [V, 16] heat kernel signature (`STORED_FEATURES`).
- `num_levels`: int64 L, the coarser levels of the mesh hierarchy stored, and for each
  l = 1..L: `level<l>_num_vertices` int64 V_l, `level<l>_edges` serialised int32 [E_l, 2],
  `level<l>_edge_weights` float32 [E_l] and `level<l>_parents` int32 [V_{l-1}]
  (`meshseg.data.hierarchy.Level`; `level_field`).
"""

import contextlib
import os

import numpy as np
import tensorflow as tf

from meshseg.data.adjacency import ADJACENCY_FIELDS
from meshseg.data.derived import STORED_FEATURES
from meshseg.data.manifest import partial_path
from meshseg.outputs import writing

# The dtypes of a level's serialised fields (`level_field`).
LEVEL_FEATURES = {"edges": tf.int32, "edge_weights": tf.float32, "parents": tf.int32}

FEATURE_SPEC = {
    "num_vertices": tf.io.FixedLenFeature([], tf.int64),
    "num_triangles": tf.io.FixedLenFeature([], tf.int64),
    "vertices": tf.io.FixedLenFeature([], tf.string),
    "triangles": tf.io.FixedLenFeature([], tf.string),
    "labels": tf.io.FixedLenFeature([], tf.string),
}

_TENSOR_DTYPES = {
    "vertices": tf.float32,
    "triangles": tf.int32,
    "labels": tf.int32,
}

# Serialised tensors of the optional adjacency features, and their dtypes.
ADJACENCY_FEATURES = {
    "edges": tf.int32,
    "edge_weights": tf.float32,
    "neighbors": tf.int32,
    "neighbor_weights": tf.float32,
    "overflow_neighbors": tf.int32,
    "overflow_weights": tf.float32,
    "overflow_centers": tf.int32,
}


def _bytes_feature(value: bytes) -> tf.train.Feature:
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))


def _int64_feature(value: int) -> tf.train.Feature:
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))


def _tensor_feature(array: np.ndarray) -> tf.train.Feature:
    return _bytes_feature(tf.io.serialize_tensor(array).numpy())


def level_field(level: int, name: str) -> str:
    """The record field of level `level` (>= 1): "level<l>_<name>", name one of
    num_vertices, edges, edge_weights, parents."""
    return f"level{level}_{name}"


def finite_float32(name: str, values) -> np.ndarray:
    """`values` as float32, checked finite: no record stores NaN or infinity.

    Raises:
      ValueError: naming the field `name`, how many values are not finite after the cast,
        and the first one (its index and value before the cast).
    """
    original = np.asarray(values)
    with np.errstate(over="ignore", invalid="ignore"):
        cast = original.astype(np.float32)
    bad = ~np.isfinite(cast)
    if bad.any():
        first = tuple(int(axis[0]) for axis in np.nonzero(bad))
        raise ValueError(f"{name} is not finite in float32 at {int(bad.sum())} values, e.g. "
                         f"{list(first)} = {original[first]:g}")
    return cast


def mesh_to_example(
    vertices: np.ndarray,
    triangles: np.ndarray,
    labels: np.ndarray,
    adjacency: dict[str, np.ndarray] | None = None,
    features: dict[str, np.ndarray] | None = None,
    levels=(),
) -> bytes:
    """Serialises one labelled mesh as a `tf.train.Example`.

    Args:
      vertices: [V, 3] float array of vertex positions; float64 is cast to
        float32.
      triangles: [T, 3] integer array of vertex indices; int64 is cast to int32.
      labels: [V] integer array of per-vertex class labels; cast to int32.
      adjacency: optional precomputed adjacency, the arrays of one level of
        `meshseg.data.adjacency.ADJACENCY_FIELDS`: 'edges' [E, 2] and 'edge_weights'
        [E], and for "table" the neighbour table's arrays; cast to the dtypes of
        `ADJACENCY_FEATURES`.
      features: optional {name: [V, width]} stored features ("normals", "hks";
        `STORED_FEATURES`), cast to float32.
      levels: the mesh hierarchy's coarser levels, finest first (objects with
        num_vertices, edges, edge_weights, parents: `meshseg.data.hierarchy.Level`).

    Returns:
      The serialised `tf.train.Example` (bytes) in the demo schema.

    Raises:
      ValueError: if a float array is not finite in float32 (`finite_float32`), an
        array has the wrong rank or last dimension, the
        number of labels differs from the number of vertices, or the adjacency
        arrays are incomplete or inconsistent, or a feature or level has the wrong
        shape or a parent index outside its level.
    """
    vertices = finite_float32("vertices", vertices)
    triangles = np.asarray(triangles, dtype=np.int32)
    labels = np.asarray(labels, dtype=np.int32)
    if vertices.ndim != 2 or vertices.shape[1] != 3:
        raise ValueError(f"vertices must have shape [V, 3], got {vertices.shape}")
    if triangles.ndim != 2 or triangles.shape[1] != 3:
        raise ValueError(f"triangles must have shape [T, 3], got {triangles.shape}")
    if labels.shape != (vertices.shape[0],):
        raise ValueError(
            f"labels must have shape [V] = [{vertices.shape[0]}], got {labels.shape}"
        )
    feature = _adjacency_features(adjacency or {}, vertices.shape[0])
    feature |= _derived_features(features or {}, levels, vertices.shape[0])
    feature |= {
        "num_vertices": _int64_feature(vertices.shape[0]),
        "num_triangles": _int64_feature(triangles.shape[0]),
        "vertices": _bytes_feature(tf.io.serialize_tensor(vertices).numpy()),
        "triangles": _bytes_feature(tf.io.serialize_tensor(triangles).numpy()),
        "labels": _bytes_feature(tf.io.serialize_tensor(labels).numpy()),
    }
    example = tf.train.Example(features=tf.train.Features(feature=feature))
    return example.SerializeToString()


def _adjacency_features(adjacency: dict[str, np.ndarray], num_vertices: int) -> dict:
    """The optional adjacency features of `mesh_to_example`; raises ValueError."""
    levels = {frozenset(fields): level for level, fields in ADJACENCY_FIELDS.items()}
    level = levels.get(frozenset(adjacency))
    if level is None:
        raise ValueError(f"adjacency arrays {sorted(adjacency)} are no stored level; the "
                         f"levels hold {dict(ADJACENCY_FIELDS)}")
    arrays = {name: (finite_float32(name, adjacency[name])
                     if ADJACENCY_FEATURES[name] == tf.float32
                     else np.asarray(adjacency[name], ADJACENCY_FEATURES[name].as_numpy_dtype))
              for name in adjacency}
    if level != "none":
        num_edges = arrays["edges"].shape[0]
        if arrays["edges"].shape != (num_edges, 2) or arrays["edge_weights"].shape != (num_edges,):
            raise ValueError(f"edges must be [E, 2] and edge_weights [E], got "
                             f"{arrays['edges'].shape} and {arrays['edge_weights'].shape}")
    if level == "table":
        shape, overflow = arrays["neighbors"].shape, arrays["overflow_neighbors"].shape
        if (len(shape) != 2 or shape[0] != num_vertices or len(overflow) != 2
                or overflow[1] != shape[1] or arrays["neighbor_weights"].shape != shape
                or arrays["overflow_weights"].shape != overflow
                or arrays["overflow_centers"].shape != overflow[:1]):
            raise ValueError(
                f"the neighbour table must be neighbors, neighbor_weights [V={num_vertices}, K] "
                f"and overflow_neighbors, overflow_weights [O, K], overflow_centers [O]; got "
                f"{ {name: array.shape for name, array in arrays.items()} }")
    features = {name: _bytes_feature(tf.io.serialize_tensor(array).numpy())
                for name, array in arrays.items()}
    if level != "none":
        features["num_edges"] = _int64_feature(arrays["edges"].shape[0])
    return features


def _derived_features(features: dict[str, np.ndarray], levels, num_vertices: int) -> dict:
    """The optional feature and hierarchy fields of `mesh_to_example`; raises ValueError."""
    fields = {}
    for name, values in features.items():
        if name not in STORED_FEATURES:
            raise ValueError(f"feature {name!r} is not stored in records; stored are "
                             f"{', '.join(STORED_FEATURES)}")
        values = finite_float32(name, values)
        if values.shape != (num_vertices, STORED_FEATURES[name]):
            raise ValueError(f"{name} must have shape [V, {STORED_FEATURES[name]}] = "
                             f"[{num_vertices}, {STORED_FEATURES[name]}], got {values.shape}")
        fields[name] = _tensor_feature(values)
    if not levels:
        return fields
    fields["num_levels"] = _int64_feature(len(levels))
    below = num_vertices
    for index, level in enumerate(levels, start=1):
        count = int(level.num_vertices)
        edges = np.asarray(level.edges, np.int32)
        edge_weights = finite_float32(f"level {index} edge_weights", level.edge_weights)
        parents = np.asarray(level.parents, np.int32)
        if (edges.ndim != 2 or edges.shape[1:] != (2,) or edge_weights.shape != edges.shape[:1]
                or parents.shape != (below,)):
            raise ValueError(f"level {index}: edges must be [E, 2], edge_weights [E] and "
                             f"parents [{below}], got {edges.shape}, {edge_weights.shape}, "
                             f"{parents.shape}")
        if parents.size and (parents.min() < 0 or parents.max() >= count):
            raise ValueError(f"level {index}: parents outside [0, {count})")
        fields |= {level_field(index, "num_vertices"): _int64_feature(count),
                   level_field(index, "edges"): _tensor_feature(edges),
                   level_field(index, "edge_weights"): _tensor_feature(edge_weights),
                   level_field(index, "parents"): _tensor_feature(parents)}
        below = count
    return fields


def _assert_serialized_dtype(
    serialized: tf.Tensor, name: str, source: tf.Tensor | str
) -> tf.Operation:
    """Asserts that a serialised TensorProto holds the schema's dtype for `name`."""
    expected = _TENSOR_DTYPES[name]
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
        _assert_serialized_dtype(record[name], name, source) for name in _TENSOR_DTYPES
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


def write_records_atomically(paths: list[str], records, finish=None) -> None:
    """Writes serialised records to shards, all or nothing.

    Every shard is written under a temporary name in a hidden folder beside it
    (`meshseg.data.manifest.partial_path`, where no glob of the shards matches); only when
    `records` is exhausted without error are all of them renamed to `paths`, and
    then `finish()` is called (e.g. to write a manifest). On any error the
    temporary files are removed and the error is re-raised.

    Args:
      paths: final shard paths; their directories are created.
      records: iterable of (shard index into `paths`, serialised record bytes).
      finish: optional callable run after the renames.

    Raises:
      OutputError: if a shard cannot be written (a full disk, no permission), naming the
        first shard's folder and the cause; no shard is renamed then.
    """
    with writing(os.path.dirname(os.path.abspath(paths[0])), "the shards",
                 "no shard was replaced"):
        _write_records(paths, records, finish)


def _write_records(paths: list[str], records, finish) -> None:
    for path in paths:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    temp_paths = [str(partial_path(path)) for path in paths]
    writers = []
    try:
        writers = [tf.io.TFRecordWriter(path) for path in temp_paths]
        for shard, record in records:
            writers[shard].write(record)
        for writer in writers:
            writer.close()
    except BaseException:
        for writer in writers:
            writer.close()
        for path in temp_paths:
            if os.path.exists(path):
                os.remove(path)
        _remove_if_empty(temp_paths)
        raise
    for temp_path, path in zip(temp_paths, paths):
        os.replace(temp_path, path)
    _remove_if_empty(temp_paths)
    if finish is not None:
        finish()


def _remove_if_empty(temp_paths: list[str]) -> None:
    """Removes the hidden folders of `temp_paths` that are empty now."""
    for folder in {os.path.dirname(path) for path in temp_paths}:
        with contextlib.suppress(OSError):
            os.rmdir(folder)


def parse_adjacency(serialized: tf.Tensor, adjacency: str) -> dict[str, tf.Tensor]:
    """Parses a record's stored adjacency with TF ops (usable in `Dataset.map`).

    Args:
      serialized: scalar tf.string, one serialised `tf.train.Example`.
      adjacency: a level of `meshseg.data.adjacency.ADJACENCY_LEVELS` other than
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
    shapes = {"edges": [None, 2], "edge_weights": [None], "neighbors": [None, None],
              "neighbor_weights": [None, None], "overflow_neighbors": [None, None],
              "overflow_weights": [None, None], "overflow_centers": [None]}
    return {name: tf.ensure_shape(value, shapes[name]) for name, value in parsed.items()}


def parse_features(serialized: tf.Tensor, names) -> dict[str, tf.Tensor]:
    """Parses stored features with TF ops (usable in `Dataset.map`).

    Args:
      serialized: scalar tf.string, one serialised `tf.train.Example`.
      names: stored feature names ("normals", "hks").

    Returns:
      {name: float32 [V, width]} (static width, `STORED_FEATURES`).

    Raises:
      tf.errors.InvalidArgumentError: at iteration time, if a field is missing or has
        another dtype (`meshseg.data.reader.check_shard` reports these first).
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
        another dtype (`meshseg.data.reader.check_shard` reports these first).
    """
    spec = {}
    for level in range(1, num_levels + 1):
        spec[level_field(level, "num_vertices")] = tf.io.FixedLenFeature([], tf.int64)
        spec |= {level_field(level, name): tf.io.FixedLenFeature([], tf.string)
                 for name in LEVEL_FEATURES}
    record = tf.io.parse_single_example(serialized, spec)
    shapes = {"edges": [None, 2], "edge_weights": [None], "parents": [None]}
    return [{"num_vertices": tf.cast(record[level_field(level, "num_vertices")], tf.int32),
             **{name: tf.ensure_shape(tf.io.parse_tensor(record[level_field(level, name)],
                                                         dtype), shapes[name])
                for name, dtype in LEVEL_FEATURES.items()}}
            for level in range(1, num_levels + 1)]

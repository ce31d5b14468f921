"""One record decoded and checked in Python (protobuf + NumPy), the reason named when it
is not a valid mesh: the check of every shard before the pipeline reads it
(`meshseg.data.records.reader`). It reads the schema's tables
(`meshseg.data.records.schema`: each field's dtype and shape) as the pipeline's graph-mode
parser does (`meshseg.data.records.parse`), so both accept the same records.
"""

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import tensor_pb2

from meshseg.config import ADJACENCY_LEVELS
from meshseg.data.features.stored import STORED_FEATURES
from meshseg.data.mesh.adjacency import ADJACENCY_FIELDS
from meshseg.data.records.schema import (ADJACENCY_FEATURES, LEVEL_FEATURES, MESH_TENSORS,
                                         level_field)


def _tensor(example: tf.train.Example, name: str, dtype) -> np.ndarray:
    """Decodes the serialised TensorProto feature `name`; raises ValueError with a reason."""
    if name not in example.features.feature:
        raise ValueError(f"missing feature '{name}'")
    values = example.features.feature[name].bytes_list.value
    if len(values) != 1:
        raise ValueError(f"feature '{name}' must hold one serialised tensor, got {len(values)}")
    proto = tensor_pb2.TensorProto.FromString(values[0])
    got = tf.dtypes.as_dtype(proto.dtype)
    if got != tf.dtypes.as_dtype(dtype):
        raise ValueError(f"'{name}' must be {tf.dtypes.as_dtype(dtype).name}, got {got.name}")
    return tf.make_ndarray(proto)


def _count(example: tf.train.Example, name: str) -> int:
    if name not in example.features.feature:
        raise ValueError(f"missing feature '{name}'")
    values = example.features.feature[name].int64_list.value
    if len(values) != 1:
        raise ValueError(f"feature '{name}' must be one int64, got {len(values)} values")
    return int(values[0])


def _check_shape(name: str, array: np.ndarray, expected: tuple) -> None:
    if array.ndim != len(expected) or any(
            e is not None and s != e for s, e in zip(array.shape, expected)):
        shown = tuple("*" if e is None else e for e in expected)
        raise ValueError(f"'{name}' has shape {array.shape}, expected {shown}")


def decode_mesh_record(serialized: bytes, adjacency: str = "none", features=(),
                       levels: int = 0) -> dict[str, np.ndarray]:
    """Decodes and checks one serialised mesh `tf.train.Example` in Python.

    Args:
      serialized: the record's bytes.
      adjacency: stored adjacency to decode as well: "none", "edges" (edges,
        edge_weights, num_edges) or "table" (also the neighbour table's arrays).
      features: stored features to decode and check ("normals", "hks").
      levels: L, the hierarchy levels to decode and check (the record may store more).

    Returns:
      dict with 'vertices' float32 [V, 3], 'triangles' int32 [T, 3], 'labels'
      int32 [V], 'num_vertices' and 'num_triangles' int32 scalars, plus the
      requested adjacency arrays ('num_edges' int32 scalar), the features
      (float32 [V, width]) and each level's fields under `level_field` names.

    Raises:
      ValueError: with the reason, if the bytes are not an Example, a feature is
        missing, a tensor has the wrong dtype or shape, a count disagrees with
        its tensor, an index is outside [0, V), a label is negative, a feature is not
        finite, or a level's edges or parents index outside its vertices (the message
        names the field).
    """
    try:
        example = tf.train.Example.FromString(serialized)
    except Exception as error:  # protobuf's DecodeError
        raise ValueError(f"not a tf.train.Example ({error})") from error
    mesh = {name: _tensor(example, name, dtype.as_numpy_dtype)
            for name, dtype in MESH_TENSORS.items()}
    num_vertices, num_triangles = _count(example, "num_vertices"), _count(example, "num_triangles")
    _check_shape("vertices", mesh["vertices"], (num_vertices, 3))
    _check_shape("triangles", mesh["triangles"], (num_triangles, 3))
    _check_shape("labels", mesh["labels"], (num_vertices,))
    if mesh["triangles"].size and (mesh["triangles"].min() < 0
                                   or mesh["triangles"].max() >= num_vertices):
        raise ValueError(f"triangle vertex index outside [0, {num_vertices})")
    if mesh["labels"].size and mesh["labels"].min() < 0:
        raise ValueError(f"negative label {mesh['labels'].min()}")
    mesh["num_vertices"] = np.int32(num_vertices)
    mesh["num_triangles"] = np.int32(num_triangles)
    for name in ADJACENCY_FIELDS[adjacency]:
        mesh[name] = _tensor(example, name, ADJACENCY_FEATURES[name].as_numpy_dtype)
    if adjacency != "none":
        num_edges = _count(example, "num_edges")
        _check_shape("edges", mesh["edges"], (num_edges, 2))
        _check_shape("edge_weights", mesh["edge_weights"], (num_edges,))
        if num_edges and (mesh["edges"].min() < 0 or mesh["edges"].max() >= num_vertices):
            raise ValueError(f"edge vertex index outside [0, {num_vertices})")
        mesh["num_edges"] = np.int32(num_edges)
    if adjacency == "table":
        _check_shape("neighbors", mesh["neighbors"], (num_vertices, None))
        _check_shape("neighbor_weights", mesh["neighbor_weights"], mesh["neighbors"].shape)
        width = mesh["neighbors"].shape[1]
        _check_shape("overflow_neighbors", mesh["overflow_neighbors"], (None, width))
        _check_shape("overflow_weights", mesh["overflow_weights"],
                     mesh["overflow_neighbors"].shape)
        _check_shape("overflow_centers", mesh["overflow_centers"],
                     mesh["overflow_neighbors"].shape[:1])
    for name in features:
        mesh[name] = _tensor(example, name, np.float32)
        _check_shape(name, mesh[name], (num_vertices, STORED_FEATURES[name]))
        if not np.isfinite(mesh[name]).all():
            raise ValueError(f"'{name}' has {np.sum(~np.isfinite(mesh[name]))} non-finite "
                             "values")
    if levels:
        mesh |= _decode_levels(example, levels, num_vertices)
    return mesh


def _decode_levels(example: tf.train.Example, levels: int, num_vertices: int) -> dict:
    """The fields of the first `levels` hierarchy levels, checked; raises ValueError."""
    stored = _count(example, "num_levels")
    if stored < levels:
        raise ValueError(f"'num_levels' is {stored}, fewer than the {levels} levels asked for")
    fields, below = {}, num_vertices
    for level in range(1, levels + 1):
        count = _count(example, level_field(level, "num_vertices"))
        arrays = {name: _tensor(example, level_field(level, name), dtype.as_numpy_dtype)
                  for name, dtype in LEVEL_FEATURES.items()}
        edges, weights, parents = arrays["edges"], arrays["edge_weights"], arrays["parents"]
        _check_shape(level_field(level, "edges"), edges, (None, 2))
        _check_shape(level_field(level, "edge_weights"), weights, edges.shape[:1])
        _check_shape(level_field(level, "parents"), parents, (below,))
        if count < 1:
            raise ValueError(f"'{level_field(level, 'num_vertices')}' is {count}, not >= 1")
        if edges.size and (edges.min() < 0 or edges.max() >= count):
            raise ValueError(f"'{level_field(level, 'edges')}' has a vertex index outside "
                             f"[0, {count})")
        if not np.isfinite(weights).all():
            raise ValueError(f"'{level_field(level, 'edge_weights')}' is not finite")
        if parents.size and (parents.min() < 0 or parents.max() >= count):
            raise ValueError(f"'{level_field(level, 'parents')}' has a parent outside "
                             f"[0, {count}): [{parents.min()}, {parents.max()}]")
        fields[level_field(level, "num_vertices")] = np.int32(count)
        fields |= {level_field(level, name): array for name, array in arrays.items()}
        below = count
    return fields


def record_adjacency(example: tf.train.Example) -> str:
    """The stored adjacency level ("none", "edges" or "table") of one decoded record."""
    feature = example.features.feature
    for level in reversed(ADJACENCY_LEVELS):
        if all(name in feature for name in ADJACENCY_FIELDS[level]):
            return level
    return "none"


def record_fields(example: tf.train.Example) -> tuple[tuple[str, ...], int]:
    """(stored features in `STORED_FEATURES` order, stored hierarchy levels) of one decoded
    record."""
    feature = example.features.feature
    levels = feature["num_levels"].int64_list.value if "num_levels" in feature else [0]
    return (tuple(name for name in STORED_FEATURES if name in feature),
            int(levels[0]) if len(levels) == 1 else 0)

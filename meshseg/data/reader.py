"""A Python-side check of mesh TFRecord shards that names the shard and record index of
every bad record, before the tf.data pipeline reads them.

tf.data's own reader reports a truncated shard as a bare `DataLossError` and
`ignore_errors` drops bad records without saying which. `check_shard` enumerates
a shard's records once, decodes each with protobuf + NumPy
(`decode_mesh_record`) and either raises a `BadRecordError` "<shard>, record
<i>: <reason>" or, with `skip_bad_records`, logs and counts the record in a
`BadRecordLog`. The pipeline then reads the shard in graph mode (so its iterator
stays checkpointable, which a `from_generator` reader is not), up to the first
unreadable byte and without the bad indices. A truncated or corrupt shard cannot
be resynchronised, so skipping there drops the rest of that shard (counted once, as
a record; a shard with no readable record at all is counted as a skipped shard).

Shards may be GZIP- or ZLIB-compressed TFRecords: `shard_compression` detects it
per shard, and every reader opens the shard with it (`open_shard`).
"""

import functools
import hashlib
import logging
import os
import re

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import tensor_pb2

from meshseg.config import ADJACENCY_LEVELS
from meshseg.data.adjacency import ADJACENCY_FIELDS
from meshseg.data.derived import STORED_FEATURES
from meshseg.data.records import ADJACENCY_FEATURES, LEVEL_FEATURES, level_field
from meshseg.errors import DataError

log = logging.getLogger(__name__)

MESH_DTYPES = {"vertices": np.float32, "triangles": np.int32, "labels": np.int32}


class BadRecordError(DataError):
    """A record that is not a valid mesh; the message names shard and record index."""


class BadRecordLog:
    """Counts (and keeps the messages of) what `skip_bad_records` skipped: single records
    (`messages`, `count`) and whole shards without a readable record (`shards`)."""

    def __init__(self):
        self.messages: list[str] = []
        self.shards: list[str] = []

    @property
    def count(self) -> int:
        return len(self.messages)

    def add(self, message: str, whole_shard: bool = False) -> None:
        if whole_shard:
            self.shards.append(message)
            log.warning("skipping unreadable shard (%d so far): %s", len(self.shards), message)
        else:
            self.messages.append(message)
            log.warning("skipping bad record (%d so far): %s", self.count, message)


COMPRESSIONS = ("", "GZIP", "ZLIB")  # TFRecordDataset's compression types, uncompressed first


def per_file_version(function):
    """Caches `function(path, *args)` once per process and file version (the file's size
    and modification time), so start-up scans and every `make_dataset` call share one read
    of a shard until it changes. The cache is the wrapper's `cache`."""
    @functools.lru_cache(maxsize=1024)
    def cache(path: str, size: int, mtime_ns: int, *args):
        return function(path, *args)

    @functools.wraps(function)
    def cached(path, *args):
        stat = os.stat(path)
        return cache(str(path), stat.st_size, stat.st_mtime_ns, *args)

    cached.cache = cache
    return cached


@per_file_version
def shard_compression(path: str) -> str:
    """The compression of a TFRecord shard: "" (none), "GZIP" or "ZLIB", the first with
    which its first record reads ("" for an empty or unreadable shard, which the reader
    then reports)."""
    for compression in COMPRESSIONS:
        try:
            next(iter(tf.data.TFRecordDataset(path, compression_type=compression).take(1)))
            return compression
        except (StopIteration, tf.errors.OpError):
            continue
    return ""


def open_shard(path: str) -> tf.data.TFRecordDataset:
    """The records of one shard, read with its detected compression."""
    return tf.data.TFRecordDataset(str(path), compression_type=shard_compression(path))


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
    mesh = {name: _tensor(example, name, dtype) for name, dtype in MESH_DTYPES.items()}
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


def record_adjacency(serialized: bytes) -> str:
    """The stored adjacency level ("none", "edges" or "table") of one record."""
    feature = tf.train.Example.FromString(serialized).features.feature
    for level in reversed(ADJACENCY_LEVELS):
        if all(name in feature for name in ADJACENCY_FIELDS[level]):
            return level
    return "none"


def record_fields(serialized: bytes) -> tuple[tuple[str, ...], int]:
    """(stored features in `STORED_FEATURES` order, stored hierarchy levels) of one
    record."""
    feature = tf.train.Example.FromString(serialized).features.feature
    levels = feature["num_levels"].int64_list.value if "num_levels" in feature else [0]
    return (tuple(name for name in STORED_FEATURES if name in feature),
            int(levels[0]) if len(levels) == 1 else 0)


def stored_fields(files: list[str]) -> tuple[tuple[str, ...], int]:
    """The features and hierarchy levels every shard stores, judged by each shard's first
    record (none for an empty or unreadable shard; the reader reports it later)."""
    features, levels = set(STORED_FEATURES), 8
    for path in files:
        try:
            first = next(iter(open_shard(path).take(1)), None)
        except tf.errors.OpError:
            first = None
        names, count = ((), 0) if first is None else record_fields(first.numpy())
        features, levels = features & set(names), min(levels, count)
    if not files:
        return (), 0
    return tuple(name for name in STORED_FEATURES if name in features), levels


def stored_adjacency(files: list[str]) -> str:
    """The adjacency level every shard stores, judged by each shard's first record
    ("none" if a shard is empty or unreadable; the reader reports it later)."""
    levels = []
    for path in files:
        try:
            first = next(iter(open_shard(path).take(1)), None)
        except tf.errors.OpError:
            first = None
        levels.append("none" if first is None else record_adjacency(first.numpy()))
    return min(levels, key=ADJACENCY_LEVELS.index) if levels else "none"


def check_shard(path: str, adjacency: str = "none", skip_bad_records: bool = False,
                bad_records: BadRecordLog | None = None, features=(), levels: int = 0
                ) -> tuple[int, list[int]]:
    """Reads and decodes every record of one shard once, in file order.

    Args:
      path: the shard file.
      adjacency: stored adjacency to check as well (see `decode_mesh_record`).
      skip_bad_records: log and count bad records in `bad_records` instead of raising.
      bad_records: where skipped records are counted; a fresh log when None.
      features, levels: stored features and hierarchy levels to check as well.

    Returns:
      (readable, bad): the number of records before the shard's end or the first
      unreadable byte, and the indices of the readable records that do not decode.

    Raises:
      BadRecordError: "<path>, record <i>: <reason>" for a record that does not
        decode, or for a truncated/corrupt shard (record i is the first one that
        could not be read), unless `skip_bad_records`.
      FileNotFoundError: if the shard does not exist.
    """
    bad_records = bad_records if bad_records is not None else BadRecordLog()
    readable, problems, _ = _decode_shard(path, adjacency, tuple(features), levels)
    for index, message in problems:
        if not skip_bad_records:
            raise BadRecordError(message)
        bad_records.add(message, whole_shard=readable == 0 and index == 0)
    return readable, [index for index, _ in problems if index < readable]


def geometry_digests(path: str, adjacency: str = "none", features=(), levels: int = 0
                     ) -> dict[int, str]:
    """{record index: SHA-256 of its vertices and triangles} of the records of one shard
    that decode: equal for two records of the same mesh, whichever file holds them."""
    return dict(_decode_shard(path, adjacency, tuple(features), levels)[2])


@per_file_version
def _decode_shard(path: str, adjacency: str, features: tuple = (), levels: int = 0):
    """Decodes every record of a shard (once per file version, `per_file_version`).

    Returns:
      (readable, problems, digests): the number of readable records; (record index,
      message) for each record that does not decode, then (readable, message) for a
      truncated or corrupt tail, in file order; (record index, geometry digest) of each
      record that decodes.
    """
    records = iter(open_shard(path))
    index, problems, digests = 0, [], []
    while True:
        try:
            serialized = next(records)
        except StopIteration:
            return index, tuple(problems), tuple(digests)
        except tf.errors.DataLossError as error:
            problems.append((index, f"{path}, record {index}: truncated or corrupt shard "
                                    f"({_data_loss_reason(error)}); the rest of the shard is "
                                    "unreadable"))
            return index, tuple(problems), tuple(digests)
        try:
            mesh = decode_mesh_record(serialized.numpy(), adjacency, features, levels)
        except ValueError as error:
            problems.append((index, f"{path}, record {index}: {error}"))
        else:
            geometry = mesh["vertices"].tobytes() + mesh["triangles"].tobytes()
            digests.append((index, hashlib.sha256(geometry).hexdigest()))
        index += 1


def _data_loss_reason(error: tf.errors.DataLossError) -> str:
    """The reader's own words ("truncated record at 3791912") without TensorFlow's op and
    device names; the first line of the message if it has none."""
    found = re.search(r"(truncated|corrupted) record at \d+", error.message)
    return found.group(0) if found else error.message.splitlines()[0]

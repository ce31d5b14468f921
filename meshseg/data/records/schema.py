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
read unchanged by `meshseg.data.records.parse.parse_mesh_record`.

This module holds the schema (each field's dtype and shape: `MESH_TENSORS`,
`ADJACENCY_FEATURES`, `ADJACENCY_SHAPES`, `LEVEL_FEATURES`, `LEVEL_SHAPES`) and its
encoder (`mesh_to_example`); both decoders read these tables: `meshseg.data.records.parse`
with TF ops in the pipeline's graph, `meshseg.data.records.decode` in Python, for the check
that names each bad record.

Optional precomputed adjacency (`ADJACENCY_FEATURES`, written by the converter
with `--adjacency edges|table`); readers of the demo schema ignore them:

- `num_edges`: int64 scalar E.
- `edges`: serialised int32 [E, 2], `meshseg.data.mesh.adjacency.mesh_edges`.
- `edge_weights`: serialised float32 [E].
- `neighbors`, `neighbor_weights`: serialised int32 / float32 [V, K], and
  `overflow_neighbors`, `overflow_weights` [O, K], `overflow_centers` [O]: the
  neighbour table (`meshseg.batch.table_from_edges`); only with `--adjacency table`.

Optional derived fields (`meshseg.data.features.derived`, converter `--features`, `--levels`);
readers of the demo schema ignore them too:

- `normals`: serialised float32 [V, 3] unit vertex normals; `hks`: serialised float32
  [V, 16] heat kernel signature (`STORED_FEATURES`).
- `num_levels`: int64 L, the coarser levels of the mesh hierarchy stored, and for each
  l = 1..L: `level<l>_num_vertices` int64 V_l, `level<l>_edges` serialised int32 [E_l, 2],
  `level<l>_edge_weights` float32 [E_l] and `level<l>_parents` int32 [V_{l-1}]
  (`meshseg.data.features.hierarchy.Level`; `level_field`).
"""

import numpy as np
import tensorflow as tf

from meshseg.data.features.stored import STORED_FEATURES
from meshseg.data.mesh.adjacency import ADJACENCY_FIELDS

# The dtypes of a level's serialised fields (`level_field`).
LEVEL_FEATURES = {"edges": tf.int32, "edge_weights": tf.float32, "parents": tf.int32}

FEATURE_SPEC = {
    "num_vertices": tf.io.FixedLenFeature([], tf.int64),
    "num_triangles": tf.io.FixedLenFeature([], tf.int64),
    "vertices": tf.io.FixedLenFeature([], tf.string),
    "triangles": tf.io.FixedLenFeature([], tf.string),
    "labels": tf.io.FixedLenFeature([], tf.string),
}

# The serialised tensors every record holds, and their dtypes.
MESH_TENSORS = {
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
# Their shapes (None: any size), and those of a level's fields (`LEVEL_FEATURES`).
ADJACENCY_SHAPES = {"edges": [None, 2], "edge_weights": [None], "neighbors": [None, None],
                    "neighbor_weights": [None, None], "overflow_neighbors": [None, None],
                    "overflow_weights": [None, None], "overflow_centers": [None]}
LEVEL_SHAPES = {"edges": [None, 2], "edge_weights": [None], "parents": [None]}


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
        `meshseg.data.mesh.adjacency.ADJACENCY_FIELDS`: 'edges' [E, 2] and 'edge_weights'
        [E], and for "table" the neighbour table's arrays; cast to the dtypes of
        `ADJACENCY_FEATURES`.
      features: optional {name: [V, width]} stored features ("normals", "hks";
        `STORED_FEATURES`), cast to float32.
      levels: the mesh hierarchy's coarser levels, finest first (objects with
        num_vertices, edges, edge_weights, parents: `meshseg.data.features.hierarchy.Level`).

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

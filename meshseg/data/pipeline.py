"""tf.data input pipeline: mesh TFRecord shards -> padded batches for the model.

Order: shards -> interleaved records -> parse -> adjacency -> cache -> shuffle
(training) -> repeat -> normalisation -> padded batch -> prefetch.

Each element is `(features, labels)` with B meshes, V = the largest
num_vertices and E = the largest num_edges in the batch:

- features['vertices']: float32 [B, V, 3], padded with 0.
- features['num_vertices']: int32 [B].
- features['edges']: int32 [B, E, 2], local vertex indices (row i, neighbour j)
  of each mesh's 1-ring adjacency with self-edges, padded with 0.
- features['edge_weights']: float32 [B, E], row-normalised (1 / degree(i)),
  padded with 0, so padded edges contribute nothing.
- features['num_edges']: int32 [B].
- features['neighbors']: int32 [B, V, K], the same adjacency as a neighbour table
  (row i lists the neighbours of vertex i, K = the largest degree in the batch),
  unused slots hold i itself.
- features['neighbor_weights']: float32 [B, V, K], the edge weights, 0 in unused slots.
- labels: int32 [B, V] per-vertex class labels >= 0, padded with -1.
"""

import tensorflow as tf

from meshseg.data.adjacency import mesh_edges_tf
from meshseg.ops.neighbor_table import table_from_edges
from meshseg.data.records import parse_mesh_record

LABEL_PADDING = -1

# Shards read at once; records are taken round-robin, one from each in turn.
INTERLEAVED_SHARDS = 8

_MIN_RMS_RADIUS = 1e-12


def num_examples(files: list[str]) -> int:
    """Counts the records (meshes) in TFRecord shards.

    Raises:
      tf.errors.NotFoundError: if a file does not exist.
      tf.errors.DataLossError: if a file is truncated or corrupted.
    """
    records = tf.data.TFRecordDataset(list(files))
    return int(records.reduce(tf.constant(0, tf.int64), lambda count, _: count + 1))


def normalize_vertices(
    vertices: tf.Tensor, mean_center: bool = True, unit_scale: bool = True
) -> tf.Tensor:
    """Centres and scales one mesh's vertex positions.

    Args:
      vertices: float32 [V, 3] vertex positions.
      mean_center: subtract the mean vertex position (the demo's default).
      unit_scale: divide by the RMS distance of the vertices from the origin
        (after centring, when `mean_center`), so the RMS radius becomes 1.

    Returns:
      float32 [V, 3] normalised vertex positions.
    """
    if mean_center:
        vertices = vertices - tf.reduce_mean(vertices, axis=0, keepdims=True)
    if unit_scale:
        rms_radius = tf.sqrt(tf.reduce_mean(tf.reduce_sum(tf.square(vertices), axis=-1)))
        vertices = vertices / tf.maximum(rms_radius, _MIN_RMS_RADIUS)
    return vertices


def _with_adjacency(mesh: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    """Adds the 1-ring adjacency (edge list and neighbour table) to one parsed mesh."""
    edges, edge_weights = mesh_edges_tf(mesh["triangles"], mesh["num_vertices"])
    table, _ = table_from_edges(edges[:, 0], edges[:, 1], edge_weights, mesh["num_vertices"])
    return {
        "vertices": mesh["vertices"],
        "labels": mesh["labels"],
        "num_vertices": mesh["num_vertices"],
        "edges": edges,
        "edge_weights": edge_weights,
        "num_edges": tf.shape(edges, out_type=tf.int32)[0],
        "neighbors": table.neighbors,
        "neighbor_weights": table.weights,
    }


def _model_inputs(
    mesh: dict[str, tf.Tensor], mean_center: bool, unit_scale: bool
) -> tuple[dict[str, tf.Tensor], tf.Tensor]:
    """Turns one mesh with adjacency into the unbatched `(features, labels)` pair."""
    features = {key: value for key, value in mesh.items() if key != "labels"}
    features["vertices"] = normalize_vertices(mesh["vertices"], mean_center, unit_scale)
    return features, mesh["labels"]


def _read_meshes(files: tf.data.Dataset, training: bool) -> tf.data.Dataset:
    """Interleaves the shards' records and parses each, naming its shard on error."""

    def parse_shard(filename: tf.Tensor) -> tf.data.Dataset:
        return tf.data.TFRecordDataset(filename).map(
            lambda serialized: parse_mesh_record(serialized, source=filename)
        )

    return files.interleave(
        parse_shard,
        cycle_length=INTERLEAVED_SHARDS,
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=not training,
    )


def make_dataset(
    files: list[str],
    batch_size: int,
    training: bool,
    shuffle_buffer: int = 64,
    seed: int | None = None,
    mean_center: bool = True,
    unit_scale: bool = True,
    repeat: bool = False,
    cache: bool = True,
    pad_to: tuple[int, int] | None = None,
) -> tf.data.Dataset:
    """Builds the batched mesh-segmentation dataset from TFRecord shards.

    Args:
      files: TFRecord shard paths in the `meshseg.data.records` schema.
      batch_size: meshes per batch B; the last batch may be smaller.
      training: shuffle shards and meshes (seeded by `seed`) and allow
        non-deterministic interleaving; when False the order is fixed and the
        same on every pass: records round-robin from `INTERLEAVED_SHARDS`
        shards at a time, in `files` order.
      shuffle_buffer: number of meshes in the shuffle buffer (training only).
      seed: seed of the shard and mesh shuffles; None draws a fresh one.
      mean_center: subtract each mesh's mean vertex position.
      unit_scale: scale each mesh to RMS radius 1 (see `normalize_vertices`).
      repeat: repeat the data indefinitely (reshuffled on each pass).
      cache: keep the parsed meshes and their adjacency in memory after the first pass.
      pad_to: optional (V, E, K): pad every batch to exactly V vertices, E edges and
        neighbour-table width K (and B meshes, for training) instead of the batch
        maxima, so XLA compiles the step once.

    Returns:
      A `tf.data.Dataset` of `(features, labels)`; see the module docstring
      for the shapes, dtypes and padding values.

    Raises:
      ValueError: if `files` is empty or `batch_size` < 1.
      tf.errors.InvalidArgumentError: during iteration, for a bad record; the
        message names the shard file.
    """
    if not files:
        raise ValueError("make_dataset needs at least one TFRecord file")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    shards = tf.data.Dataset.from_tensor_slices([str(f) for f in files])
    if training:
        shards = shards.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
    meshes = _read_meshes(shards, training).map(
        _with_adjacency, num_parallel_calls=tf.data.AUTOTUNE, deterministic=not training)
    if cache:
        meshes = meshes.cache()
    if training:
        meshes = meshes.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        meshes = meshes.repeat()
    examples = meshes.map(
        lambda mesh: _model_inputs(mesh, mean_center, unit_scale),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=not training,
    )
    padding_values = (
        {
            "vertices": tf.constant(0.0, tf.float32),
            "num_vertices": tf.constant(0, tf.int32),
            "edges": tf.constant(0, tf.int32),
            "edge_weights": tf.constant(0.0, tf.float32),
            "num_edges": tf.constant(0, tf.int32),
            "neighbors": tf.constant(0, tf.int32),
            "neighbor_weights": tf.constant(0.0, tf.float32),
        },
        tf.constant(LABEL_PADDING, tf.int32),
    )
    padded_shapes = None
    if pad_to is not None:
        num_vertices, num_edges, max_degree = pad_to
        padded_shapes = (
            {"vertices": [num_vertices, 3], "num_vertices": [], "edges": [num_edges, 2],
             "edge_weights": [num_edges], "num_edges": [],
             "neighbors": [num_vertices, max_degree],
             "neighbor_weights": [num_vertices, max_degree]},
            [num_vertices],
        )
    batches = examples.padded_batch(batch_size, padded_shapes=padded_shapes,
                                    padding_values=padding_values,
                                    drop_remainder=pad_to is not None and training)
    return batches.prefetch(tf.data.AUTOTUNE)

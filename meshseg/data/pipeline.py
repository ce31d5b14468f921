"""tf.data input pipeline: mesh TFRecord shards -> padded batches for the model.

Order: shards (checked once in Python, `meshseg.data.reader`, so a bad record
is reported with its shard and index) -> interleaved records -> parse ->
adjacency (stored in the records, or computed) -> cache -> shuffle (training) -> repeat -> normalisation ->
augmentation (training) -> padded batch (or bucketed batch) -> prefetch.

Each element is `(features, labels)` as the batch contract (`meshseg.batch`) defines
it: B meshes, padded to the batch maxima or to a bucket shape.

Records that store their adjacency (converter `--adjacency edges|table`) are
used as stored, with no Python call per mesh; otherwise `mesh_edges` runs in a
`tf.numpy_function`. Both give identical batches.
"""

import tensorflow as tf

from meshseg.batch import MESH_ID, PADDING_VALUES, mesh_features, table_features
from meshseg.config import AugmentConfig
from meshseg.data.adjacency import mesh_edges
from meshseg.data.augment import augment_vertices
from meshseg.data.buckets import bucket_batch
from meshseg.data.reader import (BadRecordLog, check_shard, open_shard, shard_compression,
                                 stored_adjacency)
from meshseg.data.records import parse_adjacency, parse_mesh_record

# Shards read at once; records are taken round-robin, one from each in turn.
INTERLEAVED_SHARDS = 8

_MIN_RMS_RADIUS = 1e-12


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


def mesh_edges_tf(triangles: tf.Tensor, num_vertices: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """TF wrapper of `meshseg.data.adjacency.mesh_edges` (a `tf.numpy_function`).

    Args:
      triangles: int32 tensor [T, 3] of vertex indices.
      num_vertices: int32 scalar tensor V.

    Returns:
      edges: int32 tensor [E, 2], static shape [None, 2].
      edge_weights: float32 tensor [E], static shape [None].

    Raises:
      tf.errors.InvalidArgumentError: at run time, for the inputs `mesh_edges`
        rejects with ValueError.
    """
    edges, edge_weights = tf.numpy_function(
        lambda t, v: mesh_edges(t, int(v)), [triangles, num_vertices],
        [tf.int32, tf.float32], stateful=False, name="mesh_edges")
    edges.set_shape([None, 2])
    edge_weights.set_shape([None])
    return edges, edge_weights


def _with_adjacency(mesh: dict[str, tf.Tensor]) -> tuple[dict[str, tf.Tensor], tf.Tensor]:
    """One parsed mesh as (`meshseg.batch.mesh_features`, labels): the adjacency from the
    record when stored, computed otherwise."""
    if "edges" in mesh:
        edges, edge_weights = mesh["edges"], mesh["edge_weights"]
    else:
        edges, edge_weights = mesh_edges_tf(mesh["triangles"], mesh["num_vertices"])
    table = table_features(mesh) if "neighbors" in mesh else None
    features = mesh_features(mesh["vertices"], edges, edge_weights, table, mesh[MESH_ID])
    return features, mesh["labels"]


def read_meshes(files: list[str], training: bool = False, seed: int | None = None,
                skip_bad_records: bool = False,
                bad_records: BadRecordLog | None = None) -> tf.data.Dataset:
    """Unbatched meshes with adjacency, before caching and normalisation.

    Every shard is first checked in Python (`meshseg.data.reader.check_shard`), so
    a bad record fails here, naming shard and record index, or (with
    `skip_bad_records`) is left out and counted in `bad_records`. The records are
    then read in graph mode, so the dataset's iterator can be checkpointed.

    Args:
      files: shard paths; `training` shuffles their order (seeded).
      skip_bad_records, bad_records: see `meshseg.data.reader.check_shard`.

    Returns:
      Dataset of unbatched `(features, labels)`: `meshseg.batch.mesh_features` of
      the raw vertex positions, and int32 [V] labels.

    Raises:
      BadRecordError: for a bad record, unless `skip_bad_records`.
    """
    adjacency = stored_adjacency(files)
    checks = [check_shard(str(f), adjacency, skip_bad_records, bad_records) for f in files]
    widest = max([len(bad) for _, bad in checks] + [1])
    skipped = [bad + [-1] * (widest - len(bad)) for _, bad in checks]
    shards = tf.data.Dataset.from_tensor_slices((
        [str(f) for f in files], [shard_compression(str(f)) for f in files],
        tf.constant([n for n, _ in checks], tf.int64), tf.constant(skipped, tf.int64)))
    if training:
        shards = shards.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)

    def shard_records(path, compression, readable, bad):
        records = tf.data.TFRecordDataset(path, compression).take(readable).enumerate()
        records = records.filter(lambda index, _: ~tf.reduce_any(tf.equal(index, bad)))
        return records.map(lambda index, serialized: _parse(
            serialized, tf.strings.join([path, ", record ", tf.strings.as_string(index)]),
            adjacency))

    meshes = shards.interleave(shard_records, cycle_length=INTERLEAVED_SHARDS,
                               num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return meshes.map(_with_adjacency, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def _parse(serialized: tf.Tensor, source: tf.Tensor, adjacency: str) -> dict[str, tf.Tensor]:
    """`parse_mesh_record` plus the stored adjacency of level `adjacency`."""
    mesh = parse_mesh_record(serialized, source)
    mesh[MESH_ID] = source
    if adjacency != "none":
        mesh |= parse_adjacency(serialized, adjacency)
    return mesh


def sample_meshes(files: list[str], count: int, mean_center: bool = True,
                  unit_scale: bool = True) -> list[tuple[dict, tf.Tensor, tf.Tensor]]:
    """The first `count` meshes of `files` (file order, then record order) as the model
    sees them on the test split, with their triangles, for display (`summaries.meshes`).

    Records that do not parse are passed over (the split's scan has already failed or
    counted them, see `build_datasets`).

    Returns:
      up to `count` tuples (features, labels, triangles): `meshseg.batch.mesh_features`
      of one mesh with normalised vertices (no batch axis), int32 [V] labels, int32 [T, 3]
      triangles.
    """
    samples = []
    if count == 0:
        return samples
    adjacency = stored_adjacency(files)
    for path in files:
        for index, serialized in enumerate(open_shard(path)):
            try:
                mesh = _parse(serialized, tf.constant(f"{path}, record {index}"), adjacency)
                features, labels = _with_adjacency(mesh)
            except tf.errors.InvalidArgumentError:
                continue
            features["vertices"] = normalize_vertices(features["vertices"], mean_center,
                                                      unit_scale)
            samples.append((features, labels, mesh["triangles"]))
            if len(samples) == count:
                return samples
    return samples


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
    bucket_shapes: list[tuple[int, int, int, int]] | None = None,
    augment: AugmentConfig | None = None,
    skip_bad_records: bool = False,
    bad_records: BadRecordLog | None = None,
) -> tf.data.Dataset:
    """Builds the batched mesh-segmentation dataset from TFRecord shards.

    Args:
      files: TFRecord shard paths in the `meshseg.data.records` schema.
      batch_size: meshes per batch B; the last batch may be smaller.
      training: shuffle shards and meshes (seeded by `seed`) and augment; when
        False the order is fixed and the same on every pass: records round-robin
        from `INTERLEAVED_SHARDS` shards at a time, in `files` order (grouped by
        bucket with `bucket_shapes`). Parallel stages keep their input order, so
        the same seed gives the same batches (loops agree; resumed runs replay).
      shuffle_buffer: number of meshes in the shuffle buffer (training only).
      seed: seed of the shard and mesh shuffles and of augmentation; None draws
        a fresh one.
      mean_center: subtract each mesh's mean vertex position.
      unit_scale: scale each mesh to RMS radius 1 (see `normalize_vertices`).
      repeat: repeat the data indefinitely (reshuffled on each pass).
      cache: keep the parsed meshes and their adjacency in memory after the first pass.
      bucket_shapes: optional (V, E, K, O) shapes, V increasing (see
        `meshseg.data.buckets`): batch within buckets, padded to exactly their
        vertex count V, edge count E, neighbour-table width K and overflow rows O
        (and B meshes, for training), so XLA compiles the step once per bucket.
      augment: random rotation/scaling, applied when `training` only.
      skip_bad_records: skip (log and count) bad records instead of failing.
      bad_records: the `BadRecordLog` skipped records are counted in.

    Returns:
      A `tf.data.Dataset` of `(features, labels)`; see `meshseg.batch` for the
      shapes, dtypes and padding values.

    Raises:
      ValueError: if `files` is empty or `batch_size` < 1.
      tf.errors.InvalidArgumentError: during iteration, for a bad record (the
        message names the shard file and record index) or a mesh larger than
        every bucket.
    """
    if not files:
        raise ValueError("make_dataset needs at least one TFRecord file")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    meshes = read_meshes(files, training, seed, skip_bad_records, bad_records)
    if cache:
        meshes = meshes.cache()
    if training:
        meshes = meshes.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        meshes = meshes.repeat()
    augment = augment if training and augment is not None and augment.active else None
    if augment is not None:
        meshes = tf.data.Dataset.zip(meshes, tf.data.Dataset.random(seed=seed).batch(2))

    def model_inputs(features, labels, augment_seed=None):
        features = dict(features)
        features["vertices"] = normalize_vertices(features["vertices"], mean_center, unit_scale)
        if augment_seed is not None:
            features["vertices"] = augment_vertices(features["vertices"], augment_seed, augment)
        return features, labels

    if augment is not None:
        examples = meshes.map(lambda example, augment_seed: model_inputs(*example, augment_seed),
                              num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    else:
        examples = meshes.map(model_inputs, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if bucket_shapes:
        batches = bucket_batch(examples, batch_size, bucket_shapes, PADDING_VALUES,
                               drop_remainder=training)
    else:
        batches = examples.padded_batch(batch_size, padding_values=PADDING_VALUES)
    return batches.prefetch(tf.data.AUTOTUNE)

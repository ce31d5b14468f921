"""tf.data input pipeline: mesh TFRecord shards -> padded batches for the model.

Order: shards (checked once in Python, `meshseg.data.records.reader`, so a bad record
is reported with its shard and index) -> interleaved records -> parse (with the stored
features and hierarchy levels `data.features` / `data.levels` read) -> adjacency (stored
in the records, or computed) and normalisation (`data.center`, `data.scale`) -> cache ->
shuffle (training) -> repeat -> augmentation (training; evaluation's `data.eval_rotation`),
the principal frame (`data.frame`) and "inputs" (the `data.features` concatenated in their
listed order) -> padded batch (or bucketed batch) -> prefetch.

Each element is `(features, labels)` as the batch contract (`meshseg.batch`) defines
it: B meshes, padded to the batch maxima or to a bucket shape.

Records that store their adjacency (converter `--adjacency edges|table`) are
used as stored, with no Python call per mesh; otherwise `mesh_edges` runs in a
`tf.numpy_function`. Both give identical batches.
"""

import tensorflow as tf

from meshseg.batch import MESH_ID, Level, mesh_features, padding_values, table_features
from meshseg.config import AugmentConfig
from meshseg.data.features.stored import STORED_FEATURES
from meshseg.data.mesh.adjacency import mesh_edges
from meshseg.data.pipeline.augment import augment_mesh
from meshseg.data.pipeline.buckets import bucket_batch
from meshseg.data.pipeline.inputs import MeshInputs
from meshseg.data.pipeline.positional import fourier_features
from meshseg.data.pipeline.principal_frame import to_principal_frame, triangle_areas, vertex_areas
from meshseg.data.records.framing import HEADER_BYTES
from meshseg.data.records.parse import (parse_adjacency, parse_features, parse_levels,
                                        parse_mesh_record)
from meshseg.data.records.reader import (BadRecordLog, check_shard, good_records, stored_adjacency,
                                         stored_fields)
from meshseg.errors import DataError

# Shards read at once; records are taken round-robin, one from each in turn.
INTERLEAVED_SHARDS = 8
# The key under which `with_adjacency` hands `model_inputs` the vertex areas that weigh
# the principal frame (`data.frame=pca`); never in a batch.
VERTEX_AREAS = "vertex_areas"

# The pipeline's functions hold no Python control flow on tensors, so tf.data traces them
# as written: autograph's conversion would only add to every run's start.
_plain = tf.autograph.experimental.do_not_convert

_MIN_RMS_RADIUS = 1e-12
_MIN_AREA = 1e-24


def normalize_vertices(vertices: tf.Tensor, triangles: tf.Tensor | None = None,
                       center: str = "mean", scale: str = "rms") -> tf.Tensor:
    """Centres and scales one mesh's vertex positions (`data.center`, `data.scale`).

    Args:
      vertices: float32 [V, 3] vertex positions.
      triangles: int32 [T, 3] vertex indices; needed by "area_centroid" and "unit_area".
      center: "mean" subtracts the mean vertex position (the demo's default);
        "area_centroid" the centroid of the surface (triangle centroids weighted by area,
        as `meshseg.data.features.descriptors.area_weighted_centroid`; the vertex mean for a mesh
        of zero area); "none" keeps the positions.
      scale: after centring, "rms" divides by the RMS distance of the vertices from the
        origin (RMS radius 1); "unit_area" by the square root of the surface area (unit
        area, as `meshseg.data.features.descriptors.normalized_positions`); "none" keeps it.

    Returns:
      float32 [V, 3] normalised vertex positions.
    """
    if center == "mean":
        vertices = vertices - tf.reduce_mean(vertices, axis=0, keepdims=True)
    elif center == "area_centroid":
        areas, corners = triangle_areas(vertices, triangles)
        total = tf.reduce_sum(areas)
        weighted = tf.reduce_sum(areas[:, tf.newaxis] * tf.reduce_mean(corners, axis=1),
                                 axis=0, keepdims=True) / tf.maximum(total, _MIN_AREA)
        mean = tf.reduce_mean(vertices, axis=0, keepdims=True)
        vertices = vertices - tf.where(total > 0, weighted, mean)
    if scale == "rms":
        rms_radius = tf.sqrt(tf.reduce_mean(tf.reduce_sum(tf.square(vertices), axis=-1)))
        vertices = vertices / tf.maximum(rms_radius, _MIN_RMS_RADIUS)
    elif scale == "unit_area":
        area = tf.reduce_sum(triangle_areas(vertices, triangles)[0])
        vertices = vertices / tf.sqrt(tf.maximum(area, _MIN_AREA))
    return vertices


def mesh_edges_tf(triangles: tf.Tensor, num_vertices: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """TF wrapper of `meshseg.data.mesh.adjacency.mesh_edges` (a `tf.numpy_function`).

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


def with_adjacency(mesh: dict[str, tf.Tensor], inputs: MeshInputs | None = None
                    ) -> tuple[dict[str, tf.Tensor], tf.Tensor]:
    """One parsed mesh as (`meshseg.batch.mesh_features`, labels): the adjacency from the
    record when stored, computed otherwise; the hierarchy levels parsed; the vertices
    normalised by `inputs` (raw when None). The stored features ride along under their
    names ("normals", "hks") until `model_inputs` concatenates them into "inputs", and
    under `inputs.frame` "pca" the vertex areas that weigh the principal frame."""
    vertices = mesh["vertices"]
    if inputs is not None:
        vertices = normalize_vertices(vertices, mesh["triangles"], inputs.center, inputs.scale)
    if "edges" in mesh:
        edges, edge_weights = mesh["edges"], mesh["edge_weights"]
    else:
        edges, edge_weights = mesh_edges_tf(mesh["triangles"], mesh["num_vertices"])
    table = table_features(mesh) if "neighbors" in mesh else None
    levels = [Level(level["edges"], level["edge_weights"], level["parents"],
                    level["num_vertices"]) for level in mesh.get("levels", [])]
    features = mesh_features(vertices, edges, edge_weights, table, mesh.get(MESH_ID),
                             levels=levels)
    features |= {name: mesh[name] for name in STORED_FEATURES if name in mesh}
    if inputs is not None and inputs.frame == "pca":
        features[VERTEX_AREAS] = vertex_areas(vertices, mesh["triangles"])
    return features, mesh.get("labels")


def model_inputs(features: dict[str, tf.Tensor], inputs: MeshInputs,
                 augment: AugmentConfig | None = None, augment_seed: tf.Tensor | None = None
                 ) -> dict[str, tf.Tensor]:
    """The batch contract's features of one mesh from `with_adjacency`'s: augmented
    (when `augment_seed` is given; normals turn with the positions), then turned into
    the mesh's principal frame under `inputs.frame` "pca"
    (`meshseg.data.pipeline.principal_frame`; normals too), and with "inputs", the
    `inputs.features` concatenated in their listed order ([V, F]); xyz and its Fourier
    features (`meshseg.data.pipeline.positional`) from the final positions."""
    features = dict(features)
    stored = {name: features.pop(name) for name in STORED_FEATURES if name in features}
    areas = features.pop(VERTEX_AREAS, None)
    normals = stored.get("normals")
    if augment_seed is not None:
        features["vertices"], normals = augment_mesh(features["vertices"], augment_seed,
                                                     augment, normals)
    if areas is not None:
        features["vertices"], normals = to_principal_frame(features["vertices"], areas,
                                                           normals)
    if normals is not None:
        stored["normals"] = normals
    computed = {"xyz": lambda: features["vertices"],
                "xyz_fourier": lambda: fourier_features(features["vertices"],
                                                        inputs.fourier_octaves)}
    parts = [computed[name]() if name in computed else stored[name] for name in inputs.features]
    features["inputs"] = parts[0] if len(parts) == 1 else tf.concat(parts, axis=-1)
    return features


def require_stored(files: list[str], inputs: MeshInputs) -> None:
    """Checks that every shard stores the features and levels `inputs` reads.

    Raises:
      DataError: naming the first shard that lacks them and what to do.
    """
    needed = inputs.stored
    if not needed and not inputs.levels:
        return
    for path in files:
        features, levels = stored_fields([path])
        missing = [name for name in needed if name not in features]
        if missing or levels < inputs.levels:
            lacks = ", ".join([f"'{name}'" for name in missing] +
                              ([f"{inputs.levels} hierarchy levels (it has {levels})"]
                               if levels < inputs.levels else []))
            raise DataError(
                f"{path}: the records lack {lacks}, which data.features="
                f"{list(inputs.features)} / data.levels={inputs.levels} need; convert with "
                f"`python -m meshseg.data.convert ... --features {' '.join(needed) or '...'} "
                f"--levels {inputs.levels}` (data.source=mesh_folder converts by itself)")


def read_meshes(files: list[str], training: bool = False, seed: int | None = None,
                skip_bad_records: bool = False,
                bad_records: BadRecordLog | None = None,
                inputs: MeshInputs | None = None) -> tf.data.Dataset:
    """Unbatched meshes with adjacency (and hierarchy), before caching.

    Every shard is first checked in Python (`meshseg.data.records.reader.check_shard`), so
    a bad record fails here, naming shard and record index, or (with
    `skip_bad_records`) is left out and counted in `bad_records`. The good records are
    then read in graph mode, so the dataset's iterator can be checkpointed: those of an
    uncompressed shard at the byte spans the check found (so records after a damaged one
    are still read), those of a compressed shard in order up to the last good one.

    Args:
      files: shard paths; `training` shuffles their order (seeded).
      skip_bad_records, bad_records: see `meshseg.data.records.reader.check_shard`.
      inputs: the stored features and levels to read, and the normalisation; None: no
        stored feature, no level, raw positions.

    Returns:
      Dataset of unbatched `(features, labels)`: `meshseg.batch.mesh_features` of
      the vertex positions (normalised by `inputs`, raw when None) with the stored
      features under their names, and int32 [V] labels.

    Raises:
      BadRecordError: for a bad record, unless `skip_bad_records`.
      DataError: if the shards lack a feature or level `inputs` reads (`require_stored`).
    """
    stored, levels = (inputs.stored, inputs.levels) if inputs is not None else ((), 0)
    if inputs is not None:
        require_stored(files, inputs)
    adjacency = stored_adjacency(files)
    scans = [check_shard(str(f), adjacency, skip_bad_records, bad_records, stored, levels)
             for f in files]
    widest = max([len(scan.good) for scan in scans] + [1])
    good = [[list(record) for record in scan.good] + [[-1, -1, -1]] * (widest - len(scan.good))
            for scan in scans]
    shards = tf.data.Dataset.from_tensor_slices((
        [scan.path for scan in scans], [scan.compression for scan in scans],
        tf.constant([scan.size for scan in scans], tf.int64), tf.constant(good, tf.int64)))
    if training:
        shards = shards.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)

    def shard_records(path, compression, size, good):
        good = tf.boolean_mask(good, good[:, 0] >= 0)
        index, offset, length = good[:, 0], good[:, 1], good[:, 2]
        # An uncompressed shard: each good record's bytes, read at its offset.
        spans = tf.data.Dataset.from_tensor_slices((index, offset, length)).filter(
            _plain(lambda _, offset, __: offset >= 0))
        records = spans.flat_map(_plain(
            lambda index, offset, length: tf.data.FixedLengthRecordDataset(
                path, length, header_bytes=offset + HEADER_BYTES,
                footer_bytes=size - offset - HEADER_BYTES - length).map(
                    _plain(lambda serialized: (index, serialized)))))
        # A compressed one (no offsets): its records in order, the good ones kept.
        compressed = tf.where(tf.equal(compression, ""), tf.constant(0, tf.int64),
                              tf.reduce_max(tf.concat([[-1], index], 0)) + 1)
        records = tf.data.TFRecordDataset(path, compression).take(compressed).enumerate().filter(
            _plain(lambda position, _: tf.reduce_any(tf.equal(position, index)))).concatenate(
                records)
        return records.map(_plain(lambda index, serialized: _parse(
            serialized, tf.strings.join([path, ", record ", tf.strings.as_string(index)]),
            adjacency, stored, levels)))

    meshes = shards.interleave(_plain(shard_records), cycle_length=INTERLEAVED_SHARDS,
                               num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return meshes.map(_plain(lambda mesh: with_adjacency(mesh, inputs)),
                      num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def _parse(serialized: tf.Tensor, source: tf.Tensor, adjacency: str, features=(),
           levels: int = 0) -> dict[str, tf.Tensor]:
    """`parse_mesh_record` plus the stored adjacency of level `adjacency`, the stored
    `features` and the first `levels` hierarchy levels (under "levels")."""
    mesh = parse_mesh_record(serialized, source)
    mesh[MESH_ID] = source
    if adjacency != "none":
        mesh |= parse_adjacency(serialized, adjacency)
    if features:
        mesh |= parse_features(serialized, features)
    if levels:
        mesh["levels"] = tuple(parse_levels(serialized, levels))  # tf.data takes no lists
    return mesh


def sample_meshes(files: list[str], count: int, inputs: MeshInputs = MeshInputs()
                  ) -> list[tuple[dict, tf.Tensor, tf.Tensor]]:
    """The first `count` meshes of `files` (file order, then record order) as the model
    sees them on the test split, with their triangles, for display (`summaries.meshes`).

    Only the records that decode are read (`meshseg.data.records.reader.good_records`; the
    split's scan has already failed on or counted the others, see `build_datasets`).

    Args:
      inputs: how the run builds its inputs (`MeshInputs.of(config.data)`).

    Returns:
      up to `count` tuples (features, labels, triangles): `meshseg.batch.mesh_features`
      of one mesh with normalised vertices and its "inputs" (no batch axis), int32 [V]
      labels, int32 [T, 3] triangles.
    """
    samples = []
    if count == 0:
        return samples
    adjacency = stored_adjacency(files)
    for path in files:
        for index, serialized in good_records(path, adjacency, inputs.stored, inputs.levels):
            mesh = _parse(serialized, tf.constant(f"{path}, record {index}"),
                          adjacency, inputs.stored, inputs.levels)
            features, labels = with_adjacency(mesh, inputs)
            samples.append((model_inputs(features, inputs), labels, mesh["triangles"]))
            if len(samples) == count:
                return samples
    return samples


def make_dataset(
    files: list[str],
    batch_size: int,
    training: bool,
    shuffle_buffer: int = 64,
    seed: int | None = None,
    inputs: MeshInputs = MeshInputs(),
    repeat: bool = False,
    cache: bool = True,
    bucket_shapes: list[tuple] | None = None,
    augment: AugmentConfig | None = None,
    skip_bad_records: bool = False,
    bad_records: BadRecordLog | None = None,
    rotation_seed: int | None = None,
) -> tf.data.Dataset:
    """Builds the batched mesh-segmentation dataset from TFRecord shards.

    Args:
      files: TFRecord shard paths in the `meshseg.data.records.schema` schema.
      batch_size: meshes per batch B; the last batch may be smaller.
      training: shuffle shards and meshes (seeded by `seed`) and augment; when
        False the order is fixed and the same on every pass: records round-robin
        from `INTERLEAVED_SHARDS` shards at a time, in `files` order (grouped by
        bucket with `bucket_shapes`). Parallel stages keep their input order, so
        the same seed gives the same batches (loops agree; resumed runs replay).
      shuffle_buffer: number of meshes in the shuffle buffer (training only).
      seed: seed of the shard and mesh shuffles and of augmentation; None draws
        a fresh one.
      inputs: the input features, hierarchy levels and normalisation (`MeshInputs`;
        default: the demo's positions only, mean-centred, RMS radius 1, no levels).
      repeat: repeat the data indefinitely (reshuffled on each pass).
      cache: keep the parsed, normalised meshes and their adjacency in memory after the
        first pass.
      bucket_shapes: optional shapes (V, E, K, O) of the mesh followed by those of each
        of the `inputs.levels` levels, V increasing (see `meshseg.data.pipeline.buckets`): batch
        within buckets, padded to exactly their vertex count V, edge count E,
        neighbour-table width K and overflow rows O at every level (and B meshes, for
        training), so XLA compiles the step once per bucket.
      augment: random rotation, tilt, scaling and jitter, applied when `training` only.
      skip_bad_records: skip (log and count) bad records instead of failing.
      bad_records: the `BadRecordLog` skipped records are counted in.
      rotation_seed: evaluation only (`training` False): turn each mesh by a rotation
        uniform over SO(3), drawn from this seed in the split's fixed order, so a mesh
        gets the same rotation on every pass (`data.eval_rotation`). Positions and
        normals turn together; stored intrinsic features (HKS) are unchanged.

    Returns:
      A `tf.data.Dataset` of `(features, labels)`; see `meshseg.batch` for the
      shapes, dtypes and padding values.

    Raises:
      ValueError: if `files` is empty or `batch_size` < 1.
      DataError: if the shards lack a feature or level `inputs` reads.
      tf.errors.InvalidArgumentError: during iteration, for a bad record (the
        message names the shard file and record index) or a mesh larger than
        every bucket.
    """
    if not files:
        raise ValueError("make_dataset needs at least one TFRecord file")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    meshes = read_meshes(files, training, seed, skip_bad_records, bad_records, inputs)
    if cache:
        meshes = meshes.cache()
    if training:
        meshes = meshes.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        meshes = meshes.repeat()
    augment = augment if training and augment is not None and augment.active else None
    if rotation_seed is not None and not training:
        augment, seed = AugmentConfig(rotation="so3"), rotation_seed
    if augment is not None:
        meshes = tf.data.Dataset.zip(meshes, tf.data.Dataset.random(seed=seed).batch(2))
        examples = meshes.map(
            _plain(lambda example, augment_seed: (
                model_inputs(example[0], inputs, augment, augment_seed), example[1])),
            num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    else:
        examples = meshes.map(_plain(lambda features, labels: (model_inputs(features, inputs),
                                                                labels)),
                              num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    padding = padding_values(inputs.levels)
    if bucket_shapes:
        batches = bucket_batch(examples, batch_size, bucket_shapes, padding,
                               drop_remainder=training)
    else:
        batches = examples.padded_batch(batch_size, padding_values=padding)
    return batches.prefetch(tf.data.AUTOTUNE).with_options(without_autotuning())


def without_autotuning() -> tf.data.Options:
    """Dataset options with tf.data's autotuning off: AUTOTUNE parallelism becomes one
    call per core and prefetch buffers grow as needed (TensorFlow's fallbacks).

    Autotuning runs a model thread that a destroyed iterator waits for: at the end of a
    default 40-step run the training iterator took 11-57 s to destroy (py-spy: the main
    thread in `RootDataset::Iterator::~Iterator`, waiting on a tf.data thread), against
    0.1 s with autotuning off; the input costs the step 0.1-1 ms either way
    (docs/performance.md, "Input pipeline teardown").
    """
    options = tf.data.Options()
    options.autotune.enabled = False
    return options

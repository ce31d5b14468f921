"""From the `data` config group to train/test datasets: source files, mesh sizes, buckets.

`build_datasets` subsumes the application's file resolution, its scan of the
splits and its `make_dataset` calls:

1. resolve the shards (`resolve_files`): `source: mesh_folder` converts a mesh
   folder once into `cache_dir` (`meshseg.data.records.prepare`); `source: tfrecords`
   globs `train_files`/`test_files`;
2. find every mesh's size (vertices, edges, max degree) and the class
   histograms, from the shards' manifests when they all have one, else by one
   pass over the records (`split_sizes`);
3. under jit, choose bucket shapes (`meshseg.data.pipeline.buckets`) covering both splits,
   so the train step compiles at most once per bucket; otherwise batches are
   padded to their own maxima;
4. build the training (shuffled, repeated, augmented) and test datasets.
"""

import glob
import logging
from dataclasses import dataclass

import numpy as np

from meshseg.batch import level_key
from meshseg.config import DataConfig, check_data_paths
from meshseg.data.pipeline.buckets import (auto_boundaries, bucket_shapes, padding_fractions,
                                           split_outlier_buckets)
from meshseg.data.pipeline.dataset import make_dataset, read_meshes
from meshseg.data.pipeline.inputs import MeshInputs
from meshseg.data.records.manifest import leftover_files, manifest_sizes, unlisted_shards
from meshseg.data.records.prepare import VALIDATION, mesh_folder, prepare_mesh_folder
from meshseg.data.records.reader import BadRecordLog, geometry_digests, stored_adjacency
from meshseg.errors import ConfigError, DataError

log = logging.getLogger(__name__)


def resolve_files(data: DataConfig) -> dict[str, list[str]]:
    """Train and test shard paths of the `data` config (see the module docstring), and
    validation shard paths under "validation" when `data.validation_meshes` > 0 (a mesh
    folder only).

    Relative paths are taken as they are, relative to the working directory (the run
    makes them absolute first, `meshseg.train.run.typed_config`).

    Raises:
      ConfigError: if the source folder is missing or a glob matches no file.
      DataError: if a mesh or label file of a split is missing or invalid (conversion), or
        a glob matches converted shards their conversion's manifest does not list
        (`meshseg.data.records.manifest.unlisted_shards`) or an interrupted conversion's
        temporaries (`meshseg.data.records.manifest.leftover_files`).
    """
    check_data_paths(data)
    if data.source == "tfrecords":
        files = {}
        for split, pattern in (("train", data.train_files), ("test", data.test_files)):
            files[split] = sorted(glob.glob(pattern))
            leftovers = leftover_files(files[split])
            if leftovers:
                raise DataError(f"data.{split}_files={pattern!r} matches leftovers of an "
                                f"interrupted conversion, not shards: {', '.join(leftovers)}; "
                                "remove them")
            stale = unlisted_shards(files[split])
            if stale:
                raise DataError(f"data.{split}_files={pattern!r} matches shards no manifest of "
                                f"their conversion lists: {', '.join(stale)}; remove them or "
                                "narrow the pattern")
        return files
    source = mesh_folder(data)
    prepared = prepare_mesh_folder(source, data.cache_dir, workers=data.convert_workers,
                                   descriptor_cache=data.descriptor_cache)
    return {split: prepared[split] for split in ("train", VALIDATION, "test")
            if split in prepared}


def _class_histogram(counts: np.ndarray, num_classes: int) -> np.ndarray:
    """counts padded to int64 [num_classes]; ConfigError if a class >= num_classes occurs."""
    counts = np.asarray(counts, np.int64)
    if np.any(counts[num_classes:]):
        raise ConfigError(f"data has label {np.flatnonzero(counts)[-1]} but num_classes="
                         f"{num_classes}; set data.num_classes to at least max label + 1")
    return np.pad(counts[:num_classes], (0, max(0, num_classes - counts.size)))


def split_sizes(files: list[str], num_classes: int, skip_bad_records: bool = False,
                bad_records: BadRecordLog | None = None, inputs: MeshInputs | None = None
                ) -> tuple[np.ndarray, np.ndarray, str]:
    """Sizes of every mesh in `files` (and of its `inputs.levels` coarser levels) and their
    class histogram.

    Returns:
      (sizes int64 [N, 4 * (1 + L)] of (num_vertices, num_edges, table_width,
      overflow_rows) of the mesh and each level, as `meshseg.data.pipeline.buckets` takes them,
      histogram int64 [num_classes], "manifest" or "scan": where they came from).

    Raises:
      ConfigError: if a label is >= num_classes.
      BadRecordError: for a bad record during a scan, naming shard and record,
        unless `skip_bad_records`.
    """
    levels = inputs.levels if inputs is not None else 0
    from_manifest = manifest_sizes(files, levels)
    if from_manifest is not None:
        sizes, counts = from_manifest
        return sizes, _class_histogram(counts, num_classes), "manifest"
    sizes, counts = [], np.zeros(0, np.int64)
    for features, labels in read_meshes(files, skip_bad_records=skip_bad_records,
                                        bad_records=bad_records, inputs=inputs):
        sizes.append(tuple(size for level in range(levels + 1) for size in (
            int(features[level_key(level, "num_vertices")]),
            int(features[level_key(level, "num_edges")]),
            int(features[level_key(level, "neighbors")].shape[1]),
            int(features[level_key(level, "overflow_centers")].shape[0]))))
        mesh_counts = np.bincount(labels.numpy())
        size = max(counts.size, mesh_counts.size)
        counts = np.pad(counts, (0, size - counts.size)) + np.pad(
            mesh_counts, (0, size - mesh_counts.size))
    return (np.asarray(sizes, np.int64).reshape(-1, 4 * (1 + levels)),
            _class_histogram(counts, num_classes),
            "scan")


def choose_bucket_shapes(sizes: np.ndarray, data: DataConfig) -> tuple[list[int], list[tuple]]:
    """(boundaries, shapes): `data.bucket_boundaries`, or `data.num_buckets` quantiles
    of the vertex counts, each rounded up to `data.pad_multiple`, split while a bucket pads
    more than `data.max_padding` (`split_outlier_buckets`). Logs the split, and a warning
    for each bucket that still pads more than `data.max_padding`."""
    if data.bucket_boundaries:
        boundaries = [int(b) for b in data.bucket_boundaries]
    else:
        quantiles = auto_boundaries(sizes[:, 0], data.num_buckets, data.pad_multiple)
        boundaries = split_outlier_buckets(sizes[:, 0], quantiles, data.pad_multiple,
                                           data.max_padding, data.max_buckets)
        if len(boundaries) > len(quantiles):
            log.info("jit: %d vertex-count quantile bucket(s) split into %d, so that none pads "
                     "more than data.max_padding=%g of its vertices: boundaries %s",
                     len(quantiles), len(boundaries), data.max_padding, boundaries)
    shapes = bucket_shapes(sizes, boundaries, data.pad_multiple)
    limits = [shape[0] for shape in shapes]
    for limit, fraction in zip(limits, padding_fractions(sizes[:, 0], limits,
                                                         data.pad_multiple)):
        if fraction > data.max_padding:
            log.warning("jit: the bucket of %d vertices is %.0f%% padding (above "
                        "data.max_padding=%g), so its steps do %.1fx the work of its meshes; "
                        "%s", limit, 100 * fraction, data.max_padding, 1 / (1 - fraction),
                        "set data.bucket_boundaries to split it" if data.bucket_boundaries
                        else f"raise data.max_buckets (now {data.max_buckets}) to split it")
    return boundaries, shapes


def log_table_layout(sizes: np.ndarray) -> None:
    """Says in the run log how the neighbour tables are laid out (`meshseg.batch`)."""
    split = sizes[:, 3] > 0
    if split.any():
        log.info("neighbour tables: width %d at most; %d mesh(es) with a few very high-degree "
                 "vertices continue them on up to %d overflow rows, so the table grows with "
                 "the edges", sizes[:, 2].max(), split.sum(), sizes[:, 3].max())
    else:
        log.info("neighbour tables: as wide as the largest degree, %d at most",
                 sizes[:, 2].max())


def split_overlap(files: dict[str, list[str]]) -> tuple[dict[tuple[str, str], int], dict[str, int]]:
    """How many meshes of each evaluated split (test, validation) are also meshes of an
    earlier split (train; for validation, train and test), and how many meshes of each
    split repeat an earlier one of it, judged by content (`reader.geometry_digests`), so
    byte copies, the same file listed twice and overlapping globs all count.

    Returns:
      ({(split, earlier split): meshes of split also in the earlier one}, {split:
      repeated meshes}).
    """
    digests = {}
    for split, paths in files.items():
        adjacency = stored_adjacency(paths)  # the level the pipeline decodes (and caches) with
        digests[split] = [digest for path in paths
                          for digest in geometry_digests(path, adjacency).values()]
    pairs = [(split, earlier) for split, earlier in (("test", "train"), ("validation", "train"),
                                                      ("validation", "test"))
             if split in digests and earlier in digests]
    overlaps = {(split, earlier): sum(digest in set(digests[earlier]) for digest in digests[split])
                for split, earlier in pairs}
    return overlaps, {split: len(found) - len(set(found)) for split, found in digests.items()}


def check_overlap(files: dict[str, list[str]], policy: str, num_test: int) -> int:
    """Logs (policy "warn") or refuses (policy "refuse") test or validation meshes that are
    also training meshes, validation meshes that are also test meshes, and meshes twice in
    one split; returns the number of test meshes (of `num_test`) that are also training
    meshes.

    Raises:
      DataError: under "refuse", naming the counts.
    """
    overlaps, repeated = split_overlap(files)
    named = {"train": "training", "test": "test"}
    problems = [(f"{count} of {num_test} test meshes" if split == "test" else
                 f"{count} {split} mesh(es)") + f" are also in the {named[earlier]} split"
                for (split, earlier), count in overlaps.items() if count]
    problems += [f"{count} {split} mesh(es) repeat another of the {split} split"
                 for split, count in repeated.items() if count]
    for problem in problems:
        if policy == "refuse":
            raise DataError(f"{problem} (data.overlap=refuse)")
        log.warning("%s (data.overlap=refuse stops such a run)", problem)
    return overlaps.get(("test", "train"), 0)


@dataclass
class DataInfo:
    """What `build_datasets` learnt about the splits.

    Attributes:
      files: {split: [shard paths]}: train, test and, with `data.validation_meshes`,
        validation.
      train_histogram, test_histogram: int64 [num_classes] vertices per class.
      num_meshes: {split: N}.
      extent: (V, E, K, O) maxima over both splits (vertices, edges, table width,
        overflow rows).
      sizes_from: "manifest", "scan" or "manifest+scan".
      bucket_boundaries, bucket_shapes: under jit, the vertex-count boundaries and the
        padded (V, E, K, O) shapes, continued by each hierarchy level's (V_l, E_l, K_l,
        O_l) when `data.levels` > 0; None otherwise.
      bad_records: {split: records skipped during the scan}.
      test_train_overlap: test meshes that are also training meshes (`check_overlap`).
    """

    files: dict[str, list[str]]
    train_histogram: np.ndarray
    test_histogram: np.ndarray
    num_meshes: dict[str, int]
    extent: tuple[int, int, int, int]
    sizes_from: str
    bucket_boundaries: list[int] | None
    bucket_shapes: list[tuple] | None
    bad_records: dict[str, int]
    test_train_overlap: int


def build_datasets(data: DataConfig, seed: int, jit: bool):
    """Train and test datasets of the `data` config, and what was learnt about them.

    Args:
      data: the `data` settings (conf/data/*.yaml over `meshseg.config.DataConfig`).
      seed: seed of shuffling and augmentation.
      jit: pad batches to bucket shapes (XLA compiles once per bucket); otherwise
        every batch is padded to its own maxima.

    Returns:
      (train_ds, test_ds, info): train_ds repeats forever, shuffled and augmented;
      test_ds is one deterministic pass; info is the `DataInfo` (with the validation
      split's shards, when the data has one, for `evaluation_dataset`).

    Raises:
      ConfigError: see `resolve_files` and `split_sizes`.
      DataError: for a mesh that does not convert, a bad record during the scan (naming
        shard and record index) unless `data.skip_bad_records`, or, with
        `data.overlap=refuse`, a mesh in both splits or twice in one.
    """
    files = resolve_files(data)
    inputs = MeshInputs.of(data)
    sizes, histograms, num_meshes, skipped, origins = {}, {}, {}, {}, set()
    for split in files:
        bad_records = BadRecordLog()
        sizes[split], histograms[split], origin = split_sizes(
            files[split], data.num_classes, data.skip_bad_records, bad_records, inputs)
        num_meshes[split] = int(sizes[split].shape[0])
        skipped[split] = bad_records.count
        origins.add(origin)
        if bad_records.count or bad_records.shards:
            log.warning("%s split: skipped %d bad record(s) and %d unreadable shard(s)", split,
                        bad_records.count, len(bad_records.shards))
        if not num_meshes[split]:
            raise DataError(f"the {split} split holds no mesh: {', '.join(files[split])} "
                            "(empty shards, or every record skipped)")
    all_sizes = np.concatenate(list(sizes.values()))
    log_table_layout(all_sizes[:, :4])
    boundaries, shapes = choose_bucket_shapes(all_sizes, data) if jit else (None, None)
    if jit:
        log.info("jit: %d bucket shapes (vertices, edges, table width, overflow rows): %s",
                 len(shapes), shapes)
    info = DataInfo(files, histograms["train"], histograms["test"], num_meshes,
                    tuple(int(n) for n in all_sizes[:, :4].max(axis=0)),
                    "+".join(sorted(origins)),
                    boundaries, shapes, skipped,
                    check_overlap(files, data.overlap, num_meshes["test"]))
    train_ds = make_dataset(files["train"], training=True, seed=seed, repeat=True,
                            shuffle_buffer=data.shuffle_buffer, augment=data.augment,
                            **_batching(data, info))
    return train_ds, evaluation_dataset(data, info, "test"), info


def _batching(data: DataConfig, info: DataInfo) -> dict:
    """The `make_dataset` arguments every split of a run shares."""
    return dict(batch_size=data.batch_size, inputs=MeshInputs.of(data),
                bucket_shapes=info.bucket_shapes, skip_bad_records=data.skip_bad_records)


def evaluation_dataset(data: DataConfig, info: DataInfo, split: str):
    """One deterministic pass over `split` ("test" or "validation") of a run's data
    (no shuffle, no augmentation; under `data.eval_rotation=so3` its records hold the
    meshes turned before conversion, `meshseg.data.records.prepare.MeshFolder.eval_turn_seed`),
    batched as the training split: the batches `meshseg.train.loop.evaluate` scores.

    Raises:
      KeyError: for a split the data has not (no validation without
        `data.validation_meshes`).
    """
    return make_dataset(info.files[split], training=False, **_batching(data, info))

"""From the `data` config group to train/test datasets: source files, mesh sizes, buckets.

`build_datasets` subsumes the application's file resolution, its scan of the
splits and its `make_dataset` calls:

1. resolve the shards (`resolve_files`): `source: rna_sample` and
   `source: mesh_folder` convert a mesh folder once into `cache_dir`
   (`meshseg.data.prepare`); `source: tfrecords` globs `train_files`/`test_files`;
2. find every mesh's size (vertices, edges, max degree) and the class
   histograms, from the shards' manifests when they all have one, else by one
   pass over the records (`split_sizes`);
3. under jit, choose bucket shapes (`meshseg.data.buckets`) covering both splits,
   so the train step compiles at most once per bucket; otherwise batches are
   padded to their own maxima;
4. build the training (shuffled, repeated, augmented) and test datasets.
"""

import glob
import logging
from pathlib import Path

import numpy as np
from hydra.utils import to_absolute_path

from meshseg.data.augment import AugmentConfig
from meshseg.data.buckets import auto_boundaries, bucket_shapes
from meshseg.data.manifest import manifest_sizes
from meshseg.data.pipeline import make_dataset, read_meshes
from meshseg.data.prepare import MeshFolder, prepare_mesh_folder, rna_sample_folder
from meshseg.data.reader import BadRecordLog

log = logging.getLogger(__name__)
SOURCES = ("rna_sample", "mesh_folder", "tfrecords")


def resolve_files(data_cfg) -> dict[str, list[str]]:
    """Train and test shard paths for the `data` config group (see the module docstring).

    Raises:
      FileNotFoundError: if the source folder is missing or a glob matches no file.
      ValueError: for an unknown `source`, or a bad mesh during conversion.
    """
    if data_cfg.source not in SOURCES:
        raise ValueError(f"data.source must be one of {SOURCES}, got {data_cfg.source!r}")
    if data_cfg.source == "tfrecords":
        files = {}
        for split in ("train", "test"):
            pattern = to_absolute_path(data_cfg[f"{split}_files"])
            files[split] = sorted(glob.glob(pattern))
            if not files[split]:
                raise FileNotFoundError(f"data.{split}_files={pattern!r} matches no file")
        return files
    root = str(Path(to_absolute_path(data_cfg.root)).resolve())
    if not Path(root).is_dir():
        raise FileNotFoundError(f"data.root={root!r} is not a folder; pass data.root=<path>")
    shards = {"train": data_cfg.train_shards, "test": data_cfg.test_shards}
    if data_cfg.source == "rna_sample":
        source = rna_sample_folder(root, shards["train"], shards["test"], data_cfg.adjacency)
    else:
        source = MeshFolder(root, data_cfg.meshes, data_cfg.labels, data_cfg.num_classes,
                            data_cfg.label_offset, shards, data_cfg.adjacency)
    prepared = prepare_mesh_folder(source, to_absolute_path(data_cfg.cache_dir),
                                   workers=data_cfg.convert_workers)
    return {"train": prepared["train"], "test": prepared["test"]}


def _class_histogram(counts: np.ndarray, num_classes: int) -> np.ndarray:
    """counts padded to int64 [num_classes]; ValueError if a class >= num_classes occurs."""
    counts = np.asarray(counts, np.int64)
    if np.any(counts[num_classes:]):
        raise ValueError(f"data has label {np.flatnonzero(counts)[-1]} but num_classes="
                         f"{num_classes}; set data.num_classes to at least max label + 1")
    return np.pad(counts[:num_classes], (0, max(0, num_classes - counts.size)))


def split_sizes(files: list[str], num_classes: int, skip_bad_records: bool = False,
                bad_records: BadRecordLog | None = None) -> tuple[np.ndarray, np.ndarray, str]:
    """Sizes of every mesh in `files` and their class histogram.

    Returns:
      (sizes int64 [N, 3] of (num_vertices, num_edges, max_degree), histogram
      int64 [num_classes], "manifest" or "scan": where they came from).

    Raises:
      ValueError: if a label is >= num_classes.
      tf.errors.InvalidArgumentError: for a bad record during a scan, naming shard
        and record, unless `skip_bad_records`.
    """
    from_manifest = manifest_sizes(files)
    if from_manifest is not None:
        sizes, counts = from_manifest
        return sizes, _class_histogram(counts, num_classes), "manifest"
    sizes, counts = [], np.zeros(0, np.int64)
    for mesh in read_meshes(files, skip_bad_records=skip_bad_records, bad_records=bad_records):
        sizes.append((int(mesh["num_vertices"]), int(mesh["num_edges"]),
                      int(mesh["neighbors"].shape[1])))
        mesh_counts = np.bincount(mesh["labels"].numpy())
        size = max(counts.size, mesh_counts.size)
        counts = np.pad(counts, (0, size - counts.size)) + np.pad(
            mesh_counts, (0, size - mesh_counts.size))
    return np.asarray(sizes, np.int64).reshape(-1, 3), _class_histogram(counts, num_classes), "scan"


def choose_bucket_shapes(sizes: np.ndarray, data_cfg) -> tuple[list[int], list[tuple]]:
    """(boundaries, shapes): `data.bucket_boundaries`, or `data.num_buckets` quantiles
    of the vertex counts, each rounded up to `data.pad_multiple`."""
    if data_cfg.bucket_boundaries:
        boundaries = [int(b) for b in data_cfg.bucket_boundaries]
    else:
        boundaries = auto_boundaries(sizes[:, 0], data_cfg.num_buckets, data_cfg.pad_multiple)
    return boundaries, bucket_shapes(sizes, boundaries, data_cfg.pad_multiple)


def build_datasets(data_cfg, seed: int, jit: bool):
    """Train and test datasets of the `data` config group, and what was learnt about them.

    Args:
      data_cfg: the composed `data` config (conf/data/*.yaml).
      seed: seed of shuffling and augmentation.
      jit: pad batches to bucket shapes (XLA compiles once per bucket); otherwise
        every batch is padded to its own maxima.

    Returns:
      (train_ds, test_ds, info): train_ds repeats forever, shuffled and augmented;
      test_ds is one deterministic pass. `info` has 'files' {split: [paths]},
      'train_histogram' and 'test_histogram' int64 [num_classes], 'num_meshes'
      {split: N}, 'extent' (V, E, K) maxima over both splits, 'sizes_from'
      ("manifest" or "scan"), 'bucket_boundaries' and 'bucket_shapes' (None unless
      jit), 'bad_records' {split: count skipped during the scan}.

    Raises:
      FileNotFoundError, ValueError: see `resolve_files` and `split_sizes`.
      tf.errors.InvalidArgumentError: for a bad record during the scan, naming
        shard and record index, unless `data.skip_bad_records`.
    """
    files = resolve_files(data_cfg)
    info = {"files": files, "num_meshes": {}, "bad_records": {}, "sizes_from": set()}
    sizes = {}
    for split in ("train", "test"):
        bad_records = BadRecordLog()
        sizes[split], info[f"{split}_histogram"], origin = split_sizes(
            files[split], data_cfg.num_classes, data_cfg.skip_bad_records, bad_records)
        info["num_meshes"][split] = int(sizes[split].shape[0])
        info["bad_records"][split] = bad_records.count
        info["sizes_from"].add(origin)
        if bad_records.count:
            log.warning("%s split: skipped %d bad record(s)", split, bad_records.count)
    info["sizes_from"] = "+".join(sorted(info["sizes_from"]))
    all_sizes = np.concatenate([sizes["train"], sizes["test"]])
    info["extent"] = tuple(int(n) for n in all_sizes.max(axis=0))
    info["bucket_boundaries"], info["bucket_shapes"] = None, None
    if jit:
        info["bucket_boundaries"], info["bucket_shapes"] = choose_bucket_shapes(all_sizes, data_cfg)
        log.info("jit: %d bucket shapes (vertices, edges, neighbours): %s",
                 len(info["bucket_shapes"]), info["bucket_shapes"])
    common = dict(batch_size=data_cfg.batch_size, mean_center=data_cfg.mean_center,
                  unit_scale=data_cfg.unit_scale, bucket_shapes=info["bucket_shapes"],
                  skip_bad_records=data_cfg.skip_bad_records)
    train_ds = make_dataset(files["train"], training=True, seed=seed, repeat=True,
                            shuffle_buffer=data_cfg.shuffle_buffer,
                            augment=AugmentConfig.from_mapping(data_cfg.augment), **common)
    test_ds = make_dataset(files["test"], training=False, **common)
    return train_ds, test_ds, info

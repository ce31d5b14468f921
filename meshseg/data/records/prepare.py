"""Convert a labelled mesh folder to TFRecord shards once, and reuse them (a cache).

A source folder holds meshes, label files and split files (`train.txt`,
`test.txt` unless named otherwise) whose lines are mesh paths relative to the meshes
folder. A validation split, when asked for, is a fixed seeded choice of the training split
file's entries (`validation_entries`), converted apart and left out of training. The
bundled RNA sample (`data/rna_sample`: `ply/<stem>.ply`, `labels/<stem>.txt`
in [-1, 258], stored with +1: 260 classes, class 0 = unlabelled) and the human
body parts set (`meshes/{iso,qes}/*.ply`, `labels/<label_set>/<variant>/<stem>.txt`)
are both described by a `MeshFolder` (conf/data/rna_sample.yaml, human_parts.yaml).

The cache folder holds the shards, their manifests and `stamp.json`, which
records the source files, their content hashes and the conversion settings (adjacency,
stored features, hierarchy levels and coarsening included). A cache whose stamp differs
from the current source or settings is rebuilt, and so is one whose stamp is damaged
(named in a warning, `meshseg.data.features.cache_entries`): changing `data.features` to
[xyz, hks] or `data.levels` reconverts the folder once (into the same `cache_dir`). The
build happens in a temporary sibling folder that is renamed into place only when complete,
so an interrupted build is never reused, and under an exclusive lock on a hidden sibling
file (`.<cache name>.lock`, POSIX `flock`), so runs started together convert once: the
others wait and then read the finished cache. Conversion is strict: a bad mesh fails the
build with its file name.
"""

import fcntl
import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from meshseg.config import DataConfig
from meshseg.data.features.cache_entries import DAMAGED, read_entry
from meshseg.data.features.stored import stored_features
from meshseg.data.mesh.meshfiles import file_sha256
from meshseg.data.records.convert import convert_split, shard_paths, split_file_pairs
from meshseg.data.records.manifest import MANIFEST_FORMAT
from meshseg.errors import ConfigError
from meshseg.outputs import (check_output_dir, make_dirs, replace_dir, temporary_dir, write_text,
                             writing)

STAMP_NAME = "stamp.json"
SPLITS = ("train", "test")
VALIDATION = "validation"


@dataclass(frozen=True)
class MeshFolder:
    """What to convert and how.

    Attributes:
      root: the source folder.
      meshes: folder (relative to root) the split entries are relative to.
      labels: folder (relative to root) searched for `<stem>.txt` / `.npy` labels.
      num_classes: labels must lie in [0, num_classes) after the offset.
      label_offset: added to every label.
      shards: number of shards per split, e.g. {"train": 4, "test": 1} (at most one per
        mesh: a split of fewer meshes gets fewer shards); the validation split, when
        asked for, takes "validation" (default 1).
      adjacency: stored adjacency, "none", "edges" or "table".
      label_kind: "vertex" or "face".
      features: stored per-vertex features, among "normals", "hks" (in that order;
        `meshseg.data.features.stored.stored_features`).
      levels: coarser mesh-hierarchy levels stored; coarsening: their vertex ratio.
      entries: per split, an fnmatch pattern: only the split file's entries matching it
        are converted (e.g. {"train": "meshes/iso/*", "test": "meshes/qes/*"}).
      split_files: per split, its split file relative to root.
      validation: meshes of the training split held out as the validation split (0:
        none), chosen by `validation_entries` with `validation_seed`.
      frame: "pca" stores every mesh in its canonical pose (`meshseg.data.features.pose`), its
        hierarchy and normals derived there (`meshseg.data.records.convert.convert_split`).
      eval_turn_seed: the validation and test meshes are turned, moved and scaled by a
        motion drawn from this seed before anything is derived (`data.eval_rotation=so3`;
        `meshseg.data.features.pose.turned`); None: as they are.
    """

    root: str
    meshes: str
    labels: str
    num_classes: int
    label_offset: int = 0
    shards: dict = field(default_factory=lambda: {"train": 4, "test": 1})
    adjacency: str = "edges"
    label_kind: str = "vertex"
    features: tuple = ()
    levels: int = 0
    coarsening: float = 4.0
    entries: dict = field(default_factory=lambda: {"train": "*", "test": "*"})
    split_files: dict = field(default_factory=lambda: {"train": "train.txt",
                                                       "test": "test.txt"})
    validation: int = 0
    validation_seed: int = 0
    frame: str = "none"
    eval_turn_seed: int | None = None


def mesh_folder(data: DataConfig) -> MeshFolder:
    """The `MeshFolder` of a `data` config of source mesh_folder (root made absolute):
    what the converter converts, and the splits the descriptor baseline reads
    (`meshseg.tools.baseline`), so both see the same training, validation and test meshes.
    """
    return MeshFolder(str(Path(data.root).resolve()), data.meshes, data.labels,
                      data.num_classes, data.label_offset,
                      {"train": data.train_shards, "test": data.test_shards,
                       **({VALIDATION: data.validation_shards} if data.validation_meshes
                          else {})}, data.adjacency,
                      features=stored_features(data.features), levels=data.levels,
                      coarsening=data.coarsening,
                      entries={"train": data.train_entries, "test": data.test_entries},
                      split_files={"train": data.train_split, "test": data.test_split},
                      validation=data.validation_meshes, validation_seed=data.validation_seed,
                      frame=data.frame,
                      eval_turn_seed=(data.eval_rotation_seed if data.eval_rotation == "so3"
                                      else None))


def validation_entries(num_train: int, count: int, seed: int) -> np.ndarray:
    """Indices (int64, ascending) of the `count` training entries held out for validation:
    a uniform draw without replacement by NumPy's PCG64 generator seeded with `seed`, so
    the same split file and seed give the same validation meshes in every run.

    Raises:
      ConfigError: unless 0 <= count < num_train (training keeps at least one mesh).
    """
    if not 0 <= count < num_train:
        raise ConfigError(f"data.validation_meshes={count} must be in [0, {num_train}): the "
                          f"training split has {num_train} meshes")
    chosen = np.random.default_rng(seed).choice(num_train, size=count, replace=False)
    return np.sort(chosen).astype(np.int64)


def split_pairs(source: MeshFolder) -> dict[str, tuple[list[Path], list[Path]]]:
    """(mesh paths, label paths) of each split's entries that match `source.entries`, and
    of the validation split carved from the training entries when `source.validation`.

    Raises:
      ConfigError: if a pattern other than "*" matches none of its split's entries, or
        the validation split would take every training mesh.
    """
    root = Path(source.root)
    pairs = {}
    for split in SPLITS:
        pattern = source.entries[split]
        split_file = root / source.split_files[split]
        pairs[split] = split_file_pairs(root / source.meshes, root / source.labels,
                                        split_file, pattern)
        if pattern != "*" and not pairs[split][0]:
            raise ConfigError(f"data.{split}_entries={pattern!r} matches no entry of "
                              f"{split_file}")
    if source.validation:
        meshes, labels = pairs["train"]
        held_out = set(validation_entries(len(meshes), source.validation,
                                          source.validation_seed).tolist())
        for split, keep in ((VALIDATION, True), ("train", False)):
            indices = [i for i in range(len(meshes)) if (i in held_out) == keep]
            pairs[split] = ([meshes[i] for i in indices], [labels[i] for i in indices])
    return pairs


def _source_stamp(source: MeshFolder, pairs: dict) -> dict:
    """The JSON-serialisable description of the source a cache was built from: the SHA-256
    of every split, mesh and label file (so an edit that keeps a file's size is seen), the
    conversion settings, and the converter's output format (a cache an older format wrote
    is rebuilt)."""
    root = Path(source.root)
    files = [root / source.split_files[split] for split in SPLITS]
    for mesh_paths, label_paths in pairs.values():
        files += list(mesh_paths) + list(label_paths)
    settings = asdict(source)
    settings.pop("root")
    settings["features"] = list(settings["features"])
    # Settings at their defaults are left out, so a cache built before they existed (no
    # features, no hierarchy) stays valid; the coarsening matters only with levels.
    for name, default in (("features", []), ("levels", 0),
                          ("entries", {"train": "*", "test": "*"}),
                          ("split_files", {"train": "train.txt", "test": "test.txt"}),
                          ("validation", 0), ("validation_seed", 0), ("frame", "none"),
                          ("eval_turn_seed", None)):
        if settings[name] == default:
            settings.pop(name)
    if not source.levels:
        settings.pop("coarsening")
    return {"files": {str(Path(p).relative_to(root)): file_sha256(p) for p in files},
            "settings": settings, "format": MANIFEST_FORMAT}


def _read_stamp(cache_dir: Path) -> dict | None:
    """The stamp of `cache_dir`: None without one; {} (a cache of unknown settings, which
    is rebuilt) for a damaged one, after the warning of `cache_entries.read_entry`."""
    path = cache_dir / STAMP_NAME
    if not path.exists():
        return None
    stamp = read_entry(path, _parse_stamp, "conversion cache stamp")
    return {} if stamp is None else stamp


def _stamp_matches(cache_dir: Path, stamp: dict) -> bool:
    """Whether the stamp of `cache_dir` is `stamp`: the check without the lock. A missing or
    damaged stamp is not (the build then reads it again under the lock, and names it)."""
    try:
        return _parse_stamp(cache_dir / STAMP_NAME) == stamp
    except DAMAGED:
        return False


def _parse_stamp(path: Path) -> dict:
    """A stamp file's dict. Raises ValueError (not UTF-8 JSON) or TypeError (not a dict)."""
    stamp = json.loads(path.read_bytes().decode())
    if not isinstance(stamp, dict):
        raise TypeError(f"holds a {type(stamp).__name__}, not a stamp")
    return stamp


def prepare_mesh_folder(source: MeshFolder, cache_dir: str | Path, workers: int = 1,
                        descriptor_cache: str | None = None) -> dict:
    """Returns TFRecord shards of `source`, converting it on first use.

    Args:
      source: the `MeshFolder` to convert.
      cache_dir: folder holding the converted shards and their stamp; created if
        missing. Keep it outside version control (e.g. `data/cache/`, gitignored):
        converted meshes may carry the source's licence terms.
      workers: conversion processes.
      descriptor_cache: folder of the per-mesh descriptor cache
        (`meshseg.data.features.descriptor_cache`), or None.

    Returns:
      dict(train=[shard paths], test=[shard paths], num_classes=source.num_classes), and
      validation=[shard paths] when `source.validation`.

    Raises:
      ConfigError: if `cache_dir` exists, is not empty and holds no stamp (it is
        not a cache this function made, so it is not overwritten), or cannot be written
        (`meshseg.outputs.check_output_dir`), before any mesh is converted.
      OutputError: if writing the shards fails (a full disk); the earlier cache stays.
      DataError: if a split file, mesh or label file is missing or invalid (the
        message names the file).
    """
    # A symlinked cache folder is followed: the folder it points to is built and replaced,
    # the link stays.
    cache_dir = Path(os.path.realpath(cache_dir))
    pairs = split_pairs(source)
    stamp = _source_stamp(source, pairs)
    # A split of fewer meshes than shards gets one shard per mesh.
    shards = {split: min(source.shards.get(split, 1), len(paths[0]))
              for split, paths in pairs.items()}
    result = {split: shard_paths(cache_dir / split, shards[split]) for split in pairs}
    result["num_classes"] = source.num_classes
    if _stamp_matches(cache_dir, stamp):
        return result
    check_output_dir(str(cache_dir), f"data.cache_dir={cache_dir}")
    make_dirs(str(cache_dir.parent))
    # Runs started together convert one at a time: the next finds the cache built.
    with open(cache_dir.parent / f".{cache_dir.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        existing = _read_stamp(cache_dir)
        if existing != stamp:
            _build(source, pairs, shards, stamp, cache_dir, existing, workers,
                   descriptor_cache)
    return result


def _build(source: MeshFolder, pairs: dict, shards: dict, stamp: dict, cache_dir: Path,
           existing: dict | None, workers: int, descriptor_cache: str | None) -> None:
    """Converts `pairs` into `cache_dir` (see `prepare_mesh_folder`), replacing a cache of
    other settings (`existing`, its stamp) only once the new one is complete."""
    if cache_dir.exists() and any(cache_dir.iterdir()) and existing is None:
        raise ConfigError(f"{cache_dir} is not empty and is not a meshseg conversion cache")
    with writing(str(cache_dir), "the converted shards",
                 "the earlier cache is kept; free space and run again"):
        build_dir = Path(temporary_dir(str(cache_dir.parent), f".{cache_dir.name}.build-"))
        try:
            for split in pairs:
                convert_split(*pairs[split], build_dir / split, shards[split],
                              source.label_offset, num_classes=source.num_classes,
                              label_kind=source.label_kind, adjacency=source.adjacency,
                              workers=workers, strict=True, features=tuple(source.features),
                              levels=source.levels, coarsening=source.coarsening,
                              descriptor_cache=descriptor_cache, frame=source.frame,
                              turn_seed=None if split == "train" else source.eval_turn_seed)
            write_text(str(build_dir / STAMP_NAME), json.dumps(stamp, indent=1, sort_keys=True))
            replace_dir(str(build_dir), str(cache_dir))
        except BaseException:
            shutil.rmtree(build_dir, ignore_errors=True)
            raise

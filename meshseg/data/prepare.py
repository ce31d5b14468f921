"""Convert the bundled RNA sample to TFRecord shards once, and reuse them.

The source folder (`data/rna_sample`) holds `off/<stem>.off` meshes,
`labels/<stem>.txt` per-vertex labels in [-1, 258] and the `train.txt` /
`test.txt` split files. Labels are stored with +1 (260 classes, class 0 =
unlabelled), so the records hold labels >= 0 only.

The cache folder holds the shards and `stamp.json`, which records the source
files, their sizes and the shard counts. A cache whose stamp differs from the
current source is rebuilt. The build happens in a temporary sibling folder
that is renamed into place only when complete, so an interrupted build is
never reused.
"""

import json
import shutil
import tempfile
from pathlib import Path

from meshseg.data.convert import convert_split, split_file_pairs

RNA_NUM_CLASSES = 260
RNA_LABEL_OFFSET = 1
STAMP_NAME = "stamp.json"


def _source_stamp(source_dir: Path, train_shards: int, test_shards: int) -> dict:
    """The JSON-serialisable description of the source a cache was built from."""
    files = [source_dir / "train.txt", source_dir / "test.txt"]
    files += sorted((source_dir / "off").glob("*.off"))
    files += sorted((source_dir / "labels").glob("*.txt"))
    return {
        "files": {str(path.relative_to(source_dir)): path.stat().st_size for path in files},
        "label_offset": RNA_LABEL_OFFSET,
        "shards": {"train": train_shards, "test": test_shards},
    }


def _read_stamp(cache_dir: Path) -> dict | None:
    try:
        return json.loads((cache_dir / STAMP_NAME).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _shards(cache_dir: Path, split: str, num_shards: int) -> list[str]:
    return [
        str(cache_dir / f"{split}-{i:05d}-of-{num_shards:05d}.tfrecords")
        for i in range(num_shards)
    ]


def prepare_rna_sample(
    source_dir: str | Path,
    cache_dir: str | Path,
    train_shards: int = 4,
    test_shards: int = 1,
) -> dict:
    """Returns TFRecord shards of the RNA sample, converting it on first use.

    Args:
      source_dir: the RNA sample folder (`off/`, `labels/`, `train.txt`,
        `test.txt`).
      cache_dir: folder holding the converted shards and their stamp; created
        if missing.
      train_shards: number of shards for the training split.
      test_shards: number of shards for the test split.

    Returns:
      dict(train=[shard paths], test=[shard paths], num_classes=260).

    Raises:
      FileNotFoundError: if a split file of `source_dir` is missing.
      ValueError: if `cache_dir` exists, is not empty and holds no stamp (it
        is not a cache this function made, so it is not overwritten), or a
        mesh is invalid (see `meshseg.data.convert.load_labelled_mesh`).
    """
    source_dir, cache_dir = Path(source_dir), Path(cache_dir)
    stamp = _source_stamp(source_dir, train_shards, test_shards)
    result = {
        "train": _shards(cache_dir, "train", train_shards),
        "test": _shards(cache_dir, "test", test_shards),
        "num_classes": RNA_NUM_CLASSES,
    }
    if _read_stamp(cache_dir) == stamp:
        return result
    if cache_dir.exists() and any(cache_dir.iterdir()) and _read_stamp(cache_dir) is None:
        raise ValueError(f"{cache_dir} is not empty and is not an RNA sample cache")

    cache_dir.parent.mkdir(parents=True, exist_ok=True)
    build_dir = Path(tempfile.mkdtemp(prefix=f".{cache_dir.name}.build-", dir=cache_dir.parent))
    try:
        for split, num_shards in (("train", train_shards), ("test", test_shards)):
            mesh_paths, label_paths = split_file_pairs(
                source_dir / "off", source_dir / "labels", source_dir / f"{split}.txt"
            )
            convert_split(mesh_paths, label_paths, build_dir / split, num_shards,
                          RNA_LABEL_OFFSET)
        (build_dir / STAMP_NAME).write_text(json.dumps(stamp, indent=1, sort_keys=True))
        if cache_dir.exists():
            shutil.rmtree(cache_dir)
        build_dir.rename(cache_dir)
    except BaseException:
        shutil.rmtree(build_dir, ignore_errors=True)
        raise
    return result

"""The manifest JSON written next to converted shards, and its use for sizing batches.

For shards `<prefix>-00000-of-0000N.tfrecords` the manifest is
`<prefix>.manifest.json` (it does not match the shard glob `<prefix>-*`):

    {"format": 1, "shards": [shard file names], "num_meshes": N, "num_skipped": S,
     "num_classes": C or null, "label_offset": int, "label_kind": "vertex"|"face",
     "adjacency": "none"|"edges"|"table", "features": [stored features],
     "levels": L, "coarsening": ratio,
     "class_histogram": [vertex count of class 0, 1, ..., max label],
     "vertex_count": {"min", "max", "mean", "median"},
     "faces": {"degenerate": total, "duplicate": total},
     "meshes": [{"source", "sha256", "labels", "shard", "num_vertices", "num_triangles",
                 "num_edges", "max_degree", "table_width", "overflow_rows",
                 "degenerate_faces", "duplicate_faces",
                 "origin": [x, y, z] the stored positions are relative to,
                 "levels": [{"num_vertices", "num_edges", "table_width",
                             "overflow_rows"} per coarser level] (only when L > 0)}, ...],
     "skipped": [{"source", "reason"}, ...]}
"""

import contextlib
import json
import os
import re
from pathlib import Path

import numpy as np

from meshseg.outputs import writing

MANIFEST_FORMAT = 2  # 2: meshes have table_width and overflow_rows
_SHARD_NAME = re.compile(r"^(?P<prefix>.*)-\d{5}-of-\d{5}\.tfrecords$")


def manifest_path(out_prefix: str | Path) -> Path:
    """`<out_prefix>.manifest.json`."""
    return Path(f"{out_prefix}.manifest.json")


def summarize(meshes: list[dict], skipped: list[dict], shards: list[str], **settings) -> dict:
    """Builds the manifest dict (see the module docstring) from per-mesh entries.

    Args:
      meshes: one dict per written mesh (keys as in the module docstring) plus
        'histogram': int [C_i] per-class vertex counts of that mesh (removed here).
      skipped: {"source", "reason"} per skipped mesh.
      shards: shard paths (stored as file names).
      **settings: num_classes, label_offset, label_kind, adjacency, features, levels,
        coarsening, frame.
    """
    histogram = np.zeros(0, np.int64)
    for mesh in meshes:
        counts = np.asarray(mesh.pop("histogram"), np.int64)
        size = max(histogram.size, counts.size)
        histogram = np.pad(histogram, (0, size - histogram.size)) + np.pad(
            counts, (0, size - counts.size))
    vertex_counts = np.array([m["num_vertices"] for m in meshes] or [0])
    return {
        "format": MANIFEST_FORMAT,
        "shards": [Path(shard).name for shard in shards],
        "num_meshes": len(meshes),
        "num_skipped": len(skipped),
        **settings,
        "class_histogram": histogram.tolist(),
        "vertex_count": {"min": int(vertex_counts.min()), "max": int(vertex_counts.max()),
                         "mean": float(vertex_counts.mean()),
                         "median": float(np.median(vertex_counts))},
        "faces": {"degenerate": sum(m["degenerate_faces"] for m in meshes),
                  "duplicate": sum(m["duplicate_faces"] for m in meshes)},
        "meshes": meshes,
        "skipped": skipped,
    }


# A conversion writes every file under a temporary name in this hidden folder beside its
# outputs, where no glob of the outputs (`rec/train-*`) matches, then renames it.
PARTIAL_DIR = ".partial"
# A temporary left by an earlier version beside the outputs: `<shard or manifest>.tmp-<pid>`.
_OLD_TEMPORARY = re.compile(r"\.tmp-\d+$")


def partial_path(path: str | Path) -> Path:
    """Where `path` is written before its rename: `<dir>/.partial/<name>.<pid>`. Temporaries
    of the same file left by a process that no longer runs are removed first (a re-run
    cleans up after a conversion that was killed)."""
    path = Path(path)
    folder = path.parent / PARTIAL_DIR
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob(f"{path.name}.*"):
        pid = stale.name[len(path.name) + 1:]
        if pid.isdigit() and not _process_runs(int(pid)):
            stale.unlink(missing_ok=True)
    return folder / f"{path.name}.{os.getpid()}"


def _process_runs(pid: int) -> bool:
    """Whether a process with this id runs on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def leftover_files(files: list[str]) -> list[str]:
    """The files among `files` that are temporaries of an interrupted conversion written
    beside its outputs by earlier versions (`<shard>.tmp-<pid>`), not shards."""
    return sorted(str(f) for f in files if _OLD_TEMPORARY.search(Path(f).name))


def write_manifest(path: str | Path, manifest: dict) -> None:
    """Writes the manifest atomically (a temporary file under `PARTIAL_DIR`, then rename)."""
    with writing(str(path), "the manifest"):
        temp = partial_path(path)
        temp.write_text(json.dumps(manifest, indent=1))
        os.replace(temp, path)
    with contextlib.suppress(OSError):  # the hidden folder, once empty
        temp.parent.rmdir()


def read_manifest(path: str | Path) -> dict:
    """Reads a manifest: a JSON object whose "shards" lists the shard file names.

    Raises:
      OSError: if the file cannot be read.
      ValueError: if it is not UTF-8 JSON (`json.JSONDecodeError`, `UnicodeDecodeError`),
        or not an object listing its shards by name (a damaged or foreign file).
    """
    manifest = json.loads(Path(path).read_bytes().decode())
    if not isinstance(manifest, dict) or not isinstance(manifest.get("shards"), list) or \
            not all(isinstance(name, str) for name in manifest["shards"]):
        raise ValueError(f"{path} is not a shard manifest (no list of shard names)")
    return manifest


def listed_shards(out_prefix: str | Path) -> set[str]:
    """The shard paths the manifest of `out_prefix` lists (empty without a readable one)."""
    try:
        manifest = read_manifest(manifest_path(out_prefix))
    except (OSError, ValueError):
        return set()
    return {str(Path(out_prefix).parent / name) for name in manifest.get("shards", [])}


def unlisted_shards(files: list[str]) -> list[str]:
    """The converted shards among `files` (`<prefix>-iiiii-of-nnnnn.tfrecords`) that their
    prefix's manifest does not list (a stale `-of-N` set, another conversion's shards); for
    a prefix without a manifest, the shards of every `-of-N` set but the newest file's."""
    by_prefix: dict[str, list[str]] = {}
    for file in files:
        match = _SHARD_NAME.match(str(file))
        if match:
            by_prefix.setdefault(match["prefix"], []).append(str(file))
    unlisted = []
    for prefix, shards in by_prefix.items():
        listed = listed_shards(prefix)
        if not listed:
            newest = max(shards, key=lambda path: Path(path).stat().st_mtime_ns)
            total = newest[-len("00000.tfrecords"):]
            listed = {path for path in shards if path.endswith(total)}
        unlisted += sorted(set(shards) - listed)
    return unlisted


LEVEL_SIZES = ("num_vertices", "num_edges", "table_width", "overflow_rows")


def manifest_sizes(files: list[str], levels: int = 0
                   ) -> tuple[np.ndarray, np.ndarray] | None:
    """Mesh sizes and class histogram of `files` from their manifests, if all have one.

    Args:
      files: shard paths named `<prefix>-iiiii-of-nnnnn.tfrecords`.
      levels: L, the coarser hierarchy levels whose sizes are wanted too.

    Returns:
      (sizes int64 [N, 4 * (1 + L)]: (num_vertices, num_edges, table_width, overflow_rows)
      of the mesh, then of each level, per mesh in `files`, class histogram int64 [C]) or
      None when a file is not named like a converted shard, its manifest is missing,
      unreadable or of another format, does not list it, or stores fewer than L levels.
    """
    wanted: dict[Path, set[str]] = {}
    for file in files:
        match = _SHARD_NAME.match(str(file))
        if match is None:
            return None
        wanted.setdefault(manifest_path(match["prefix"]), set()).add(Path(file).name)
    sizes, histogram = [], np.zeros(0, np.int64)
    for path, names in wanted.items():
        try:
            manifest = read_manifest(path)
        except (OSError, ValueError):
            return None
        # Only a manifest's full shard set has a known histogram; otherwise scan.
        if manifest.get("format") != MANIFEST_FORMAT or names != set(manifest["shards"]):
            return None
        try:
            if levels and any(len(m.get("levels", ())) < levels for m in manifest["meshes"]):
                return None
            sizes += [tuple(int(entry[name]) for entry in [m, *m.get("levels", ())[:levels]]
                            for name in LEVEL_SIZES) for m in manifest["meshes"]]
            counts = np.asarray(manifest["class_histogram"], np.int64).reshape(-1)
        except (KeyError, TypeError, ValueError, AttributeError):
            return None  # a damaged manifest: the caller scans the shards instead
        size = max(histogram.size, counts.size)
        histogram = np.pad(histogram, (0, size - histogram.size)) + np.pad(
            counts, (0, size - counts.size))
    return np.asarray(sizes, np.int64).reshape(-1, 4 * (1 + levels)), histogram

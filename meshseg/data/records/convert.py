"""Converts labelled meshes (mesh file + label file) to TFRecord shards and a manifest:
the library under `python -m meshseg.data.convert` (`meshseg.data.convert`, the command
line) and the conversion cache (`meshseg.data.records.prepare`).

Line i of a per-vertex label file is the class label of vertex i of the mesh
file with the same stem; see `meshseg.data.mesh.meshfiles` for the formats, scenes,
per-face labels and `meshseg.data.mesh.validate` for the checks. Meshes are loaded,
validated and (optionally) given their adjacency, features and hierarchy in `workers`
processes (`meshseg.data.records.job.convert_job`); the parent writes the shards in input
order. A bad mesh is logged with its file name and reason and skipped (listed in the
manifest), or stops the conversion under `strict`. Shards and manifest are written under
temporary names and renamed only when everything succeeded.
"""

import fnmatch
import itertools
import logging
import multiprocessing
import signal
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from threadpoolctl import threadpool_limits
from tqdm import tqdm

from meshseg.config import ADJACENCY_LEVELS, FRAMES, POSITION_FEATURES
from meshseg.console import start_tensorflow_quietly
from meshseg.data.features.pose import ambiguity
from meshseg.data.features.stored import STORED_FEATURES, stored_features
from meshseg.data.mesh.adjacency import ADJACENCY_FIELDS
from meshseg.data.mesh.foreign import list_file_lines
from meshseg.data.mesh.meshfiles import LABEL_KINDS
from meshseg.data.records.manifest import listed_shards, manifest_path, summarize, write_manifest
from meshseg.errors import DataError

if TYPE_CHECKING:  # the job module loads the descriptor libraries: see `_loaded_meshes`
    from meshseg.data.records.job import ConvertedMesh

log = logging.getLogger(__name__)
LABEL_SUFFIXES = (".txt", ".npy")


def shard_paths(out_prefix: str | Path, num_shards: int) -> list[str]:
    """Names of the shards: `{out_prefix}-{i:05d}-of-{num_shards:05d}.tfrecords`."""
    return [f"{out_prefix}-{i:05d}-of-{num_shards:05d}.tfrecords" for i in range(num_shards)]


def _one_thread_each() -> None:
    """Worker start-up: one BLAS / OpenMP thread per converter process. The processes
    already fill the cores; with the libraries' own threads on top, two processes took
    9.2-9.3 s per RNA mesh's HKS against 4.2-4.7 s with one thread each (2 cores,
    docs/experiments/2026-12-02-rna-feature-computation.md). Ctrl-C, which the terminal
    sends to every process of the job, is left to the parent, which ends the workers
    (`_loaded_meshes`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threadpool_limits(1)


def _loaded_meshes(jobs: list[dict], workers: int):
    """Yields `meshseg.data.records.job.convert_job` results in job order, using `workers`
    processes.
    Workers are spawned (not forked: the parent may run TensorFlow threads), each with one
    BLAS / OpenMP thread (`_one_thread_each`). When the caller stops early (an error, or a
    stop signal: `meshseg.signals.Stop`), the workers are ended at once (SIGTERM), not
    after the meshes they are converting, and the descriptor-cache files they were
    writing are removed."""
    # The job module derives the features: it loads the descriptor libraries (SciPy,
    # robust_laplacian, fast_simplification), so only a conversion imports it, not every
    # importer of this module (the training process, through the conversion cache).
    from meshseg.data.features.descriptor_cache import remove_partial_files
    from meshseg.data.records.job import convert_job

    if workers <= 1:
        yield from map(convert_job, jobs)
        return
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_one_thread_each) as pool:
        try:
            yield from pool.map(convert_job, jobs)
        except BaseException:
            # `ProcessPoolExecutor` has no public way to end its workers before Python
            # 3.14 (`terminate_workers`); its `_processes` are the worker processes.
            processes = dict(getattr(pool, "_processes", None) or {})
            pool.shutdown(wait=False, cancel_futures=True)
            for process in processes.values():
                if process.is_alive():
                    process.terminate()
            for pid, process in processes.items():
                process.join(timeout=10)
                if jobs[0]["descriptor_cache"] is not None:
                    remove_partial_files(jobs[0]["descriptor_cache"], pid)
            raise


def _table(mesh: "ConvertedMesh"):
    """The mesh's neighbour table, `meshseg.batch.table_from_edges` of its edges."""
    # TensorFlow is imported here, not at module level, so that spawned workers, which
    # import this module as their __main__ under `python -m`, stay TensorFlow-free.
    from meshseg.batch import table_from_edges

    table, _ = table_from_edges(mesh.edges[:, 0], mesh.edges[:, 1], mesh.edge_weights,
                                len(mesh.vertices))
    return table


def _level_tables(mesh: "ConvertedMesh") -> list:
    """The neighbour table of each coarser level of the mesh's hierarchy (for its sizes)."""
    from meshseg.batch import table_from_edges  # TF: see `_table`

    return [table_from_edges(level.edges[:, 0], level.edges[:, 1], level.edge_weights,
                             level.num_vertices)[0] for level in mesh.derived.levels]


def _record(mesh: "ConvertedMesh", table, adjacency: str) -> bytes:
    """The mesh's record, storing the adjacency of level `adjacency` (ADJACENCY_LEVELS) and
    the mesh's derived features and hierarchy levels."""
    from meshseg.data.records.schema import mesh_to_example  # TF: see `_table`

    arrays = {"edges": mesh.edges, "edge_weights": mesh.edge_weights,
              "neighbors": table.neighbors, "neighbor_weights": table.weights,
              "overflow_neighbors": table.overflow_neighbors,
              "overflow_weights": table.overflow_weights,
              "overflow_centers": table.overflow_centers}
    stored = {name: arrays[name] for name in ADJACENCY_FIELDS[adjacency]}
    return mesh_to_example(mesh.derived.vertices, mesh.triangles, mesh.labels, stored,
                           mesh.derived.features, mesh.derived.levels)


def _manifest_entry(mesh: "ConvertedMesh", table, mesh_path, label_path,
                    shard: int) -> dict:
    entry = {
        "source": str(mesh_path), "sha256": mesh.sha256, "labels": str(label_path),
        "shard": shard, "num_vertices": len(mesh.vertices),
        "num_triangles": len(mesh.triangles), "num_edges": len(mesh.edges),
        "max_degree": mesh.max_degree, "table_width": int(table.neighbors.shape[1]),
        "overflow_rows": int(table.overflow_centers.shape[0]),
        "degenerate_faces": mesh.face_counts.degenerate,
        "duplicate_faces": mesh.face_counts.duplicate, "origin": mesh.origin.tolist(),
        "histogram": np.bincount(mesh.labels).tolist(),
    }
    pose = mesh.derived.pose
    if pose is not None:  # stored = ((file - origin - centre) / scale) @ axes
        entry["pose"] = {"centre": pose.centre.tolist(), "scale": pose.scale,
                         "axes": pose.axes.tolist()}
    if mesh.derived.levels:
        entry["levels"] = [
            {"num_vertices": int(level.num_vertices), "num_edges": len(level.edges),
             "table_width": int(level_table.neighbors.shape[1]),
             "overflow_rows": int(level_table.overflow_centers.shape[0])}
            for level, level_table in zip(mesh.derived.levels, _level_tables(mesh))]
    return entry


def convert_split(
    mesh_paths: list[str | Path],
    label_paths: list[str | Path],
    out_prefix: str | Path,
    num_shards: int,
    label_offset: int = 0,
    num_classes: int | None = None,
    label_kind: str = "vertex",
    adjacency: str = "none",
    workers: int = 1,
    strict: bool = False,
    features: tuple[str, ...] = (),
    levels: int = 0,
    coarsening: float = 4.0,
    descriptor_cache: str | None = None,
    frame: str = "none",
    turn_seed: int | None = None,
) -> list[str]:
    """Writes labelled meshes to TFRecord shards plus `<out_prefix>.manifest.json`.

    The inputs are split into `num_shards` contiguous, near-equal chunks in the
    given order; a skipped mesh leaves its shard one record shorter. The shards an earlier
    conversion to the same prefix listed in its manifest are replaced: those the new set
    does not overwrite are removed once it is written.

    Args:
      mesh_paths: mesh files, one per example.
      label_paths: label files (`.txt` / `.npy`), aligned with `mesh_paths`.
      out_prefix: path prefix of the shards; its directory is created.
      num_shards: number of shards, 1 <= num_shards <= len(mesh_paths).
      label_offset: added to every label.
      num_classes: labels must lie in [0, num_classes); None: only >= 0.
      label_kind: "vertex" or "face" labels (see `meshseg.data.mesh.meshfiles`).
      adjacency: store "none", "edges" or "table" in the records
        (see `meshseg.data.records.schema.ADJACENCY_FEATURES`).
      workers: processes that load and validate meshes (1: in this process).
      strict: stop at the first bad mesh instead of skipping it.
      features: stored features, names of `meshseg.data.features.stored.STORED_FEATURES`
        ("normals", "hks"; "xyz" and "xyz_fourier" are ignored: computed when read).
      levels: coarser hierarchy levels stored (0: none); coarsening: their vertex ratio.
      descriptor_cache: folder caching each mesh file's descriptors
        (`meshseg.data.features.descriptor_cache`, shared with the baseline), or None.
      frame: "pca" stores each mesh in its canonical pose (`meshseg.data.features.pose`: centred,
        unit area, principal frame), its hierarchy and normals derived in that pose, so a
        turned, moved or scaled copy of a mesh file converts to the same record; a mesh
        whose frame is ambiguous is named in a warning (`meshseg.data.features.pose.ambiguity`).
        "none" stores the positions as read.
      turn_seed: turn, move and scale every mesh first (`meshseg.data.features.pose.turned`, drawn
        from this seed and the mesh file's SHA-256), before anything is derived: the
        evaluation splits of `data.eval_rotation=so3`. None: as read.

    Returns:
      The shard paths, in order.

    Raises:
      ValueError: if the path lists differ in length or are empty, or `num_shards`,
        `label_kind`, `adjacency`, `features`, `levels`, `coarsening` or `frame` is
        invalid.
      DataError: if every mesh is bad, or (under `strict`) a mesh is bad:
        "<mesh file>: <reason>". Nothing is written then.
    """
    if len(mesh_paths) != len(label_paths):
        raise ValueError(f"{len(mesh_paths)} mesh paths but {len(label_paths)} label paths")
    if not mesh_paths:
        raise ValueError("convert_split needs at least one mesh")
    if not 1 <= num_shards <= len(mesh_paths):
        raise ValueError(f"num_shards must be in [1, {len(mesh_paths)}], got {num_shards}")
    if label_kind not in LABEL_KINDS or adjacency not in ADJACENCY_LEVELS:
        raise ValueError(f"bad label_kind {label_kind!r} or adjacency {adjacency!r}")
    unknown = set(features) - set(STORED_FEATURES) - set(POSITION_FEATURES)
    if unknown or levels < 0 or not coarsening > 1:
        raise ValueError(f"bad features {sorted(unknown)}, levels {levels} or coarsening "
                         f"{coarsening}: features among {', '.join(STORED_FEATURES)}, "
                         "levels >= 0, coarsening > 1")
    if frame not in FRAMES:
        raise ValueError(f"frame must be one of {', '.join(FRAMES)}, got {frame!r}")
    features = stored_features(features)
    jobs = [dict(mesh_path=str(m), label_path=str(l), label_offset=label_offset,
                 num_classes=num_classes, label_kind=label_kind, features=features,
                 levels=levels, coarsening=coarsening, descriptor_cache=descriptor_cache,
                 frame=frame, turn_seed=turn_seed)
            for m, l in zip(mesh_paths, label_paths)]
    shard_of = np.repeat(np.arange(num_shards),
                         [len(c) for c in np.array_split(np.arange(len(jobs)), num_shards)])
    final_paths = shard_paths(out_prefix, num_shards)
    entries, skipped = [], []

    def valid_meshes():  # (index, job, converted mesh) of each valid mesh, in job order
        results = _loaded_meshes(jobs, workers)
        progress = tqdm(zip(jobs, results), total=len(jobs), unit="mesh",
                        desc=f"Converting {Path(out_prefix).name}")
        for index, (job, (ok, result)) in enumerate(progress):
            if not ok:
                if strict:
                    raise DataError(f"{job['mesh_path']}: {result}")
                log.warning("skipping %s: %s", job["mesh_path"], result)
                skipped.append({"source": job["mesh_path"], "reason": result})
                continue
            if result.derived.pose is not None and ambiguity(result.derived.pose):
                log.warning("%s: %s", job["mesh_path"], ambiguity(result.derived.pose))
            yield index, job, result
        if len(skipped) == len(jobs):
            raise DataError(f"no valid mesh among {len(jobs)}; first reason: "
                             f"{skipped[0]['source']}: {skipped[0]['reason']}")

    # TensorFlow (the tables and records) starts once the first valid mesh is read, so a
    # bad mesh under `strict`, or a set without a valid mesh, ends without it.
    meshes = valid_meshes()
    first = next(meshes)
    start_tensorflow_quietly()
    from meshseg.data.records.writer import write_records_atomically  # TF: see `_record`

    def records():
        for index, job, result in itertools.chain([first], meshes):
            table = _table(result)
            entries.append(_manifest_entry(result, table, job["mesh_path"], job["label_path"],
                                           int(shard_of[index])))
            yield int(shard_of[index]), _record(result, table, adjacency)

    settings = dict(num_classes=num_classes, label_offset=label_offset,
                    label_kind=label_kind, adjacency=adjacency, features=list(features),
                    levels=levels, coarsening=coarsening, frame=frame,
                    **({} if turn_seed is None else {"turn_seed": turn_seed}))
    replaced = listed_shards(out_prefix)

    def finish():
        write_manifest(manifest_path(out_prefix),
                       summarize(entries, skipped, final_paths, **settings))
        for stale in sorted(replaced - set(final_paths)):  # the earlier set's other shards
            Path(stale).unlink(missing_ok=True)

    write_records_atomically(final_paths, records(), finish=finish)
    if skipped:
        log.warning("%s: skipped %d of %d meshes (see %s)", out_prefix, len(skipped),
                    len(jobs), manifest_path(out_prefix))
    return final_paths


def split_file_pairs(
    meshes_dir: str | Path, labels_dir: str | Path, split_file: str | Path, mesh_glob: str = "*"
) -> tuple[list[Path], list[Path]]:
    """Resolves a split file's entries to (mesh path, label path) pairs.

    Each non-empty line of `split_file` (UTF-8 text) is a mesh path relative to
    `meshes_dir` (e.g. `1VQ6_9.off` or `meshes/iso/tr_reg_iso_080.ply`);
    entries not matching `mesh_glob` (fnmatch) are skipped. The label file is
    the `<stem>.txt` or `<stem>.npy` found anywhere under `labels_dir`.

    Raises:
      DataError: if the split file or a mesh file is missing, the split file is not UTF-8
        text (naming its line), or a label file is missing or its stem occurs more than
        once under `labels_dir`.
    """
    labels_by_stem: dict[str, list[Path]] = {}
    for path in sorted(Path(labels_dir).rglob("*")):
        if path.suffix in LABEL_SUFFIXES and path.is_file():
            labels_by_stem.setdefault(path.stem, []).append(path)
    if not Path(split_file).is_file():
        raise DataError(f"split file {split_file} does not exist")
    entries = [line.strip() for line in list_file_lines(split_file)]
    mesh_paths, label_paths = [], []
    for entry in entries:
        if not entry or not fnmatch.fnmatch(entry, mesh_glob):
            continue
        mesh_path = Path(meshes_dir) / entry
        if not mesh_path.is_file():
            raise DataError(f"{split_file}: mesh {mesh_path} does not exist")
        candidates = labels_by_stem.get(mesh_path.stem, [])
        if len(candidates) != 1:
            raise DataError(
                f"{mesh_path}: expected one label file {mesh_path.stem}.txt or .npy under "
                f"{labels_dir}, found {len(candidates)}"
            )
        mesh_paths.append(mesh_path)
        label_paths.append(candidates[0])
    return mesh_paths, label_paths

"""Convert labelled meshes (mesh file + per-vertex label file) to TFRecord shards.

Line i of a label file is the class label of vertex i of the mesh file with the
same stem. Meshes are loaded with `trimesh.load(..., process=False)` so vertex
order, and therefore the vertex-to-label alignment, is kept.

Command line:

    python -m meshseg.data.convert --meshes data/rna_sample/off \\
        --labels data/rna_sample/labels --split-file data/rna_sample/train.txt \\
        --out /tmp/rna/train --num-shards 4 --label-offset 1
"""

import argparse
import fnmatch
import os
from pathlib import Path

import numpy as np
import tensorflow as tf
import trimesh
from tqdm import tqdm

from meshseg.data.records import mesh_to_example


def load_labelled_mesh(
    mesh_path: str | Path, label_path: str | Path, label_offset: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Loads and validates one mesh and its per-vertex labels.

    Args:
      mesh_path: a triangle mesh file trimesh can read (OFF, PLY, OBJ, ...).
      label_path: text file with one integer label per line, one per vertex.
      label_offset: added to every label, e.g. 1 to map the RNA data's -1
        (unlabelled) to class 0.

    Returns:
      vertices: float32 [V, 3]; triangles: int32 [T, 3]; labels: int32 [V].

    Raises:
      ValueError: naming `mesh_path` and the reason, if trimesh cannot load
        it (its OFF reader rejects out-of-range face indices), the mesh is
        empty or not triangular, a coordinate is not finite, a triangle
        references a vertex outside [0, V), the label count differs from V,
        or a label is negative after the offset.
    """
    def fail(reason: str) -> ValueError:
        return ValueError(f"{mesh_path}: {reason}")

    try:
        mesh = trimesh.load(mesh_path, process=False, force="mesh")
    except ValueError as error:
        raise fail(f"cannot load mesh: {error}") from error
    vertices = np.asarray(mesh.vertices, dtype=np.float64)
    triangles = np.asarray(mesh.faces, dtype=np.int64)
    labels = np.loadtxt(label_path, dtype=np.int64, ndmin=1) + label_offset

    if vertices.shape[0] == 0 or triangles.shape[0] == 0:
        raise fail(f"empty mesh ({vertices.shape[0]} vertices, {triangles.shape[0]} triangles)")
    if triangles.ndim != 2 or triangles.shape[1] != 3:
        raise fail(f"faces must be triangles, got shape {triangles.shape}")
    if not np.isfinite(vertices).all():
        raise fail("vertex coordinates contain NaN or infinity")
    if triangles.min() < 0 or triangles.max() >= vertices.shape[0]:
        raise fail(
            f"face vertex indices span [{triangles.min()}, {triangles.max()}], "
            f"outside [0, {vertices.shape[0]})"
        )
    if labels.shape[0] != vertices.shape[0]:
        raise fail(f"{labels.shape[0]} labels in {label_path} for {vertices.shape[0]} vertices")
    if labels.min() < 0:
        raise fail(f"label {labels.min()} < 0 after label_offset {label_offset} ({label_path})")
    return vertices.astype(np.float32), triangles.astype(np.int32), labels.astype(np.int32)


def shard_paths(out_prefix: str | Path, num_shards: int) -> list[str]:
    """Names of the shards: `{out_prefix}-{i:05d}-of-{num_shards:05d}.tfrecords`."""
    return [f"{out_prefix}-{i:05d}-of-{num_shards:05d}.tfrecords" for i in range(num_shards)]


def convert_split(
    mesh_paths: list[str | Path],
    label_paths: list[str | Path],
    out_prefix: str | Path,
    num_shards: int,
    label_offset: int = 0,
) -> list[str]:
    """Writes labelled meshes to TFRecord shards, all or nothing.

    Meshes are split into `num_shards` contiguous, near-equal chunks in the
    given order. Each shard is written under a temporary name; only when every
    mesh has been validated and written are all shards renamed to their final
    names, so an error leaves no partial output.

    Args:
      mesh_paths: mesh files, one per example.
      label_paths: label files, aligned with `mesh_paths`.
      out_prefix: path prefix of the shards; its directory is created.
      num_shards: number of shards, 1 <= num_shards <= len(mesh_paths).
      label_offset: added to every label (see `load_labelled_mesh`).

    Returns:
      The shard paths, in order.

    Raises:
      ValueError: if the path lists differ in length or are empty,
        `num_shards` is out of range, or a mesh is invalid (the message names
        the mesh file).
    """
    if len(mesh_paths) != len(label_paths):
        raise ValueError(f"{len(mesh_paths)} mesh paths but {len(label_paths)} label paths")
    if not mesh_paths:
        raise ValueError("convert_split needs at least one mesh")
    if not 1 <= num_shards <= len(mesh_paths):
        raise ValueError(f"num_shards must be in [1, {len(mesh_paths)}], got {num_shards}")
    Path(out_prefix).parent.mkdir(parents=True, exist_ok=True)
    final_paths = shard_paths(out_prefix, num_shards)
    temp_paths = [f"{path}.tmp-{os.getpid()}" for path in final_paths]
    chunks = np.array_split(np.arange(len(mesh_paths)), num_shards)
    try:
        with tqdm(total=len(mesh_paths), desc=f"Converting {Path(out_prefix).name}",
                  unit="mesh") as progress:
            for temp_path, chunk in zip(temp_paths, chunks):
                with tf.io.TFRecordWriter(temp_path) as writer:
                    for index in chunk:
                        arrays = load_labelled_mesh(
                            mesh_paths[index], label_paths[index], label_offset
                        )
                        writer.write(mesh_to_example(*arrays))
                        progress.update()
    except BaseException:
        for temp_path in temp_paths:
            Path(temp_path).unlink(missing_ok=True)
        raise
    for temp_path, final_path in zip(temp_paths, final_paths):
        os.replace(temp_path, final_path)
    return final_paths


def split_file_pairs(
    meshes_dir: str | Path, labels_dir: str | Path, split_file: str | Path, mesh_glob: str = "*"
) -> tuple[list[Path], list[Path]]:
    """Resolves a split file's entries to (mesh path, label path) pairs.

    Each non-empty line of `split_file` is a mesh path relative to
    `meshes_dir` (e.g. `1VQ6_9.off` or `meshes/iso/tr_reg_iso_080.ply`);
    entries not matching `mesh_glob` (fnmatch) are skipped. The label file is
    the `<stem>.txt` found anywhere under `labels_dir`.

    Raises:
      ValueError: if a mesh file is missing, or a label file is missing or its
        stem occurs more than once under `labels_dir`.
    """
    labels_by_stem: dict[str, list[Path]] = {}
    for path in sorted(Path(labels_dir).rglob("*.txt")):
        labels_by_stem.setdefault(path.stem, []).append(path)
    entries = [line.strip() for line in Path(split_file).read_text().splitlines()]
    mesh_paths, label_paths = [], []
    for entry in entries:
        if not entry or not fnmatch.fnmatch(entry, mesh_glob):
            continue
        mesh_path = Path(meshes_dir) / entry
        if not mesh_path.is_file():
            raise ValueError(f"{split_file}: mesh {mesh_path} does not exist")
        candidates = labels_by_stem.get(mesh_path.stem, [])
        if len(candidates) != 1:
            raise ValueError(
                f"{mesh_path}: expected one label file {mesh_path.stem}.txt under "
                f"{labels_dir}, found {len(candidates)}"
            )
        mesh_paths.append(mesh_path)
        label_paths.append(candidates[0])
    return mesh_paths, label_paths


def main(argv: list[str] | None = None) -> list[str]:
    """Command-line entry point; returns the written shard paths."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--meshes", required=True, help="folder the split entries are relative to")
    parser.add_argument("--labels", required=True, help="folder searched for <stem>.txt labels")
    parser.add_argument("--split-file", required=True, help="text file, one mesh path per line")
    parser.add_argument("--out", required=True, help="shard path prefix")
    parser.add_argument("--num-shards", type=int, required=True)
    parser.add_argument("--label-offset", type=int, default=0,
                        help="added to every label (1 for the RNA data)")
    parser.add_argument("--mesh-glob", default="*",
                        help="keep only split entries matching this fnmatch pattern")
    args = parser.parse_args(argv)
    mesh_paths, label_paths = split_file_pairs(
        args.meshes, args.labels, args.split_file, args.mesh_glob
    )
    shards = convert_split(mesh_paths, label_paths, args.out, args.num_shards, args.label_offset)
    for shard in shards:
        print(shard)
    return shards


if __name__ == "__main__":
    main()

"""Convert labelled meshes (mesh file + label file) to TFRecord shards and a manifest.

Line i of a per-vertex label file is the class label of vertex i of the mesh
file with the same stem; see `meshseg.data.mesh.meshfiles` for the formats, scenes,
per-face labels and `meshseg.data.mesh.validate` for the checks. Meshes are loaded,
validated and (optionally) given their adjacency in `--workers` processes; the
parent writes the shards in input order. A bad mesh is logged with its file
name and reason and skipped (listed in the manifest), or stops the conversion
under `--strict`. Shards and manifest are written under temporary names and
renamed only when everything succeeded. TensorFlow, which builds the records, starts
once the first valid mesh is read: a conversion stopped by a bad mesh under `--strict`,
or one without a valid mesh, ends within the time of reading it.

Command line:

    python -m meshseg.data.convert --meshes data/rna_sample/ply \\
        --labels data/rna_sample/labels --split-file data/rna_sample/train.txt \\
        --out /tmp/rna/train --num-shards 4 --label-offset 1 --num-classes 260 \\
        --adjacency edges --workers 2 [--features normals hks --levels 3 --coarsening 4]

`--features` stores per-vertex normals and/or the heat kernel signature, `--levels` the
mesh hierarchy (`meshseg.data.features.derived`, computed in the worker processes). This
module is the command line (its arguments and their checks); the conversion is
`meshseg.data.records.convert.convert_split`.
"""

import argparse
import logging
import os

from meshseg.cli import (at_least, command, distinct_from_inputs, existing_dir, existing_file,
                         output_dir)
from meshseg.config import ADJACENCY_LEVELS, FRAMES
from meshseg.data.features.stored import STORED_FEATURES
from meshseg.data.records.convert import convert_split, shard_paths, split_file_pairs
from meshseg.data.records.manifest import manifest_path
from meshseg.errors import ConfigError


@command
def main(argv: list[str] | None = None) -> None:
    """Command-line entry point: converts one split and prints the shard and manifest paths.

    The paths and counts given are checked before any mesh is read: a missing `--meshes` or
    `--labels` folder or `--split-file`, a split file that lists no mesh (matching
    `--mesh-glob`), more `--num-shards` than meshes, or an `--out` whose shard or manifest
    would replace a mesh, label or split file (`distinct_from_inputs`) ends the process with
    one line and exit status 2 (`ConfigError`); a count below 1 is argparse's usage error
    (status 2). A mesh the split file lists that does not exist, or has no label file, a
    split file that is not UTF-8 text, or no valid mesh at all ends it with status 4
    (`DataError`). Nothing is written then.
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--meshes", required=True, help="folder the split entries are relative to")
    parser.add_argument("--labels", required=True,
                        help="folder searched for <stem>.txt / <stem>.npy labels")
    parser.add_argument("--split-file", required=True, help="text file, one mesh path per line")
    parser.add_argument("--out", required=True, help="shard path prefix")
    parser.add_argument("--num-shards", type=at_least(1), required=True)
    parser.add_argument("--label-offset", type=int, default=0,
                        help="added to every label (1 for the RNA data)")
    parser.add_argument("--num-classes", type=at_least(1), default=None,
                        help="labels must lie in [0, num-classes)")
    parser.add_argument("--face-labels", action="store_true",
                        help="labels are per face; majority vote per vertex, ties to lowest")
    parser.add_argument("--adjacency", choices=ADJACENCY_LEVELS, default="none",
                        help="store the 1-ring edges (and the neighbour table) in the records")
    parser.add_argument("--features", nargs="*", choices=tuple(STORED_FEATURES), default=[],
                        help="per-vertex features to store: normals, hks (heat kernel "
                             "signature, 16 channels)")
    parser.add_argument("--levels", type=int, choices=range(0, 9), default=0, metavar="L",
                        help="coarser mesh-hierarchy levels to store (0-8)")
    parser.add_argument("--coarsening", type=float, default=4.0,
                        help="vertex-count ratio between hierarchy levels (> 1)")
    parser.add_argument("--frame", choices=FRAMES, default="none",
                        help="pca: store each mesh in its canonical pose (centred, unit area, "
                             "principal frame) and derive its hierarchy and normals there, so "
                             "a turned copy converts to the same record (data.frame=pca)")
    parser.add_argument("--workers", type=at_least(1), default=os.cpu_count() or 1)
    parser.add_argument("--strict", action="store_true", help="stop at the first bad mesh")
    parser.add_argument("--mesh-glob", default="*",
                        help="keep only split entries matching this fnmatch pattern")
    args = parser.parse_args(argv)
    if not 1 < args.coarsening < float("inf"):
        raise ConfigError(f"--coarsening {args.coarsening}: must be a finite number > 1")
    existing_dir("--meshes", args.meshes)
    existing_dir("--labels", args.labels)
    existing_file("--split-file", args.split_file)
    output_dir("--out", args.out, folder=os.path.dirname(args.out) or ".")
    mesh_paths, label_paths = split_file_pairs(args.meshes, args.labels, args.split_file,
                                               args.mesh_glob)
    inputs = {str(args.split_file): "split file", **{str(p): "label file" for p in label_paths},
              **{str(p): "mesh" for p in mesh_paths}}
    outputs = shard_paths(args.out, min(args.num_shards, len(mesh_paths) or 1))
    distinct_from_inputs("--out", outputs + [str(manifest_path(args.out))], inputs)
    if not mesh_paths:
        matching = f" matching --mesh-glob {args.mesh_glob!r}" if args.mesh_glob != "*" else ""
        raise ConfigError(f"--split-file {args.split_file} lists no mesh{matching}; list one "
                          "mesh path per line, relative to --meshes")
    if args.num_shards > len(mesh_paths):
        raise ConfigError(f"--num-shards {args.num_shards}: more shards than meshes in "
                          f"--split-file {args.split_file} ({len(mesh_paths)}); use at most "
                          f"{len(mesh_paths)}")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    shards = convert_split(
        mesh_paths, label_paths, args.out, args.num_shards, args.label_offset,
        num_classes=args.num_classes, label_kind="face" if args.face_labels else "vertex",
        adjacency=args.adjacency, workers=args.workers, strict=args.strict,
        features=tuple(args.features), levels=args.levels, coarsening=args.coarsening,
        frame=args.frame)
    for shard in shards:
        print(shard)
    print(manifest_path(args.out))


if __name__ == "__main__":
    main()

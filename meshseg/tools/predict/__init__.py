"""Per-vertex predictions of a trained run on mesh files, and on the run's test split.

Inputs are built exactly as the pipeline builds them: the mesh is loaded and checked as
the converter loads it (`meshseg.data.mesh.meshfiles.load_geometry`); the run's stored features
(normals, HKS) and mesh hierarchy (`data.levels`, `data.coarsening`) are derived by the
converter's own function (`meshseg.data.features.derived.derive`); and the pipeline's functions
build the feature dict (`meshseg.data.pipeline.dataset`: adjacency, the run's `data.center` /
`data.scale`, "inputs" in the order of `data.features`).

Command line:

    python -m meshseg.tools.predict outputs/<run> my/mesh.off other.ply --out predictions \\
        [--labels-dir my/labels] [--picture] [--overwrite]
    python -m meshseg.tools.predict --pretrained rna my/molecule.ply   # a shipped model
    python -m meshseg.tools.predict outputs/<run> --test-split [--eval-rotation so3] \\
        [--split-file FILE] [--hierarchies K]
    python -m meshseg.tools.predict outputs/<run> --validation-split [--hierarchies K]

writes `<out>/<stem>.ply` (the mesh, vertices coloured by predicted class) and
`<out>/<stem>.txt` (one predicted label per line, in the label files' convention: class
minus the run's `data.label_offset`, e.g. -1 for the RNA data's unlabelled class 0); with
`--labels-dir`, it also prints each mesh's per-vertex accuracy against
`<labels-dir>/<stem>.txt`, read in the same convention. `--picture` also writes `<out>/<stem>.png`, the mesh
coloured by its predicted labels beside its true ones (with `--labels-dir`; the .ply's
colours, `meshseg.tools.visualize.render_mesh_labels`). `--label-offset N` only restates
the run's offset: a different value is refused, since the model's classes were fixed by
the offset it was trained with. Outputs never replace
one another: meshes with the same stem (`a/part.off`, `b/part.off`) are refused before
anything is written, and so are outputs already in `--out` unless `--overwrite` is given.
Inputs are never outputs: an `--out` where an output would replace a mesh, a label file
or a file of the run is refused, `--overwrite` or not. A damaged model.keras (not a zip
archive, cut short, a member missing) is named as damaged.

`--test-split` scores the run's model on its test split instead (the records the run was
evaluated on, as it evaluated them: `evaluate_test_split`) and prints the accuracy and mean
IoU; `--eval-rotation so3` instead turns, moves and scales each test mesh *file* by a
seeded motion and predicts it from the turned file through the whole input path
(`evaluate_test_files`): the figure a user with meshes in other orientations gets.
Under `data.frame=pca` each mesh is read in its canonical pose (`meshseg.data.features.pose`); a
mesh whose frame is ambiguous is named in a warning line.

`--hierarchies K` (default 1) averages the class probabilities of K mesh hierarchies of
each mesh: the converter's, and K-1 decimated from positions moved by seeded noise
(`meshseg.data.features.hierarchy.jittered_hierarchy`), for meshes and `--test-split`
(which then predicts the test mesh files). The quadric decimation is chaotic, so one
hierarchy's prediction changes with float rounding (a turned copy of a file); the average
changes far less and is more accurate. `--validation-split` scores the mesh files the run
held out as its validation split (`data.validation_meshes`), where K is chosen.

The command line checks its arguments (the run, the mesh files, the folders) before it
imports TensorFlow, which the functions that need it import themselves: a mistake ends
in about a second with one line naming it (`main`).
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Dict, Iterator, List, Optional, Tuple

import numpy as np
import trimesh

from meshseg.cli import command, distinct_from_inputs, existing_dir, existing_file, output_dir
from meshseg.config import data_root, load_run_config
from meshseg.console import start_tensorflow_quietly
from meshseg.data.features.derived import derive
from meshseg.data.mesh.foreign import check_keras_archive
from meshseg.data.pipeline.inputs import MeshInputs
from meshseg.data.mesh.meshfiles import load_geometry, load_label_file
from meshseg.data.features.pose import ambiguity, principal_pose
from meshseg.data.mesh.validate import InvalidMeshError, validate_labels
from meshseg.errors import ConfigError, DataError
from meshseg.outputs import write_atomically
from meshseg.registry import NETWORKS
from meshseg.train.rundir.claim import MODEL_FILE
from meshseg.train.rundir.summary import RunSummary

from meshseg.tools.predict.evaluation import *  # noqa: F401,F403
from meshseg.tools.predict.files import *  # noqa: F401,F403
from meshseg.tools.predict.inputs import *  # noqa: F401,F403

# The models shipped inside the package, one run directory each (`pretrained_run_dir`).
PRETRAINED_DIR = Path(__file__).resolve().parents[2] / "pretrained"


def pretrained_names() -> List[str]:
    """The models shipped with meshseg: the folders of `PRETRAINED_DIR` (not a hidden one,
    a package `meshseg.tools.pretrained` is building)."""
    return sorted(p.name for p in PRETRAINED_DIR.iterdir()
                  if p.is_dir() and not p.name.startswith(".")) \
        if PRETRAINED_DIR.is_dir() else []


def pretrained_run_dir(name: str) -> str:
    """The run directory of the shipped model `name` (model.keras, run_config.yaml,
    summary.json and results.json, written by `meshseg.tools.pretrained`).

    Raises:
      ConfigError: if meshseg ships no model of that name, naming those it ships.
    """
    if name not in pretrained_names():
        raise ConfigError(f"--pretrained {name}: no such model; meshseg ships "
                          f"{', '.join(pretrained_names()) or 'none'}")
    return str(PRETRAINED_DIR / name)


def check_hierarchies(run_dir: str, hierarchies: int) -> None:
    """`--hierarchies`' check.

    Raises:
      ConfigError: for K < 1, or K > 1 for a run whose network reads no mesh hierarchy
        (one not `multi_scale` in `meshseg.registry.NETWORKS`, e.g. the demo network).
    """
    if hierarchies < 1:
        raise ConfigError(f"--hierarchies must be at least 1, got {hierarchies}")
    input_settings(run_dir)  # a finished run's, else ConfigError
    model = load_run_config(run_dir).model.name
    if hierarchies > 1 and not NETWORKS[model].multi_scale:
        raise ConfigError(f"--hierarchies {hierarchies}: the run in {run_dir} reads no mesh "
                          f"hierarchy (model={model}); leave it out")


def check_arguments(run_dir: str, mesh_paths: List[str], out_dir: str,
                    labels_dir: Optional[str], overwrite: bool,
                    label_offset: Optional[int] = None, picture: bool = False,
                    hierarchies: int = 1) -> None:
    """The command line's checks, made before TensorFlow is imported.

    Raises:
      ConfigError: naming the argument: a run directory that does not exist, holds no
        finished run or no model.keras; a mesh file that does not exist; a `--labels-dir`
        that is not a folder; an `--out` that is a file; a `--label-offset` other than the
        run's (`run_label_offset`); a `check_hierarchies`, `check_inputs_kept` or
        `check_outputs` refusal.
      DataError: if the run's model.keras is damaged (`check_keras_archive`).
    """
    existing_dir("run_dir", run_dir)
    run_label_offset(input_settings(run_dir), label_offset)
    check_hierarchies(run_dir, hierarchies)
    if not os.path.isfile(os.path.join(run_dir, MODEL_FILE)):
        raise ConfigError(f"{run_dir} holds no {MODEL_FILE}; give the directory of a run "
                          "that finished")
    for path in mesh_paths:
        existing_file("mesh", path)
    if labels_dir:
        existing_dir("--labels-dir", labels_dir)
    output_dir("--out", out_dir)
    check_inputs_kept(run_dir, mesh_paths, out_dir, labels_dir, picture)
    check_outputs(mesh_paths, out_dir, overwrite, picture)
    check_keras_archive(os.path.join(run_dir, MODEL_FILE))


def score_test_split(args: argparse.Namespace) -> None:
    """`--test-split` (`--validation-split`): prints the accuracy and mean IoU of the run's
    (or the shipped model's) model on its test (validation) split, the mesh files turned
    with `--eval-rotation so3` (seed 0), each averaged over `--hierarchies`, the
    mean IoU of its classes by frequency quarter (`iou_by_frequency`), and the accuracy
    on and off label boundaries (`BoundaryAccuracy`).

    Raises:
      ConfigError: for mesh files or options that only apply to them, or a run directory
        without a finished run.
      DataError: if a test shard the run recorded is gone.
    """
    if args.pretrained:
        run_dir, meshes = pretrained_run_dir(args.pretrained), args.paths
    else:
        run_dir, meshes = (args.paths[0] if args.paths else None), args.paths[1:]
    split = "validation" if args.validation_split else "test"
    flag = f"--{split}-split"
    if run_dir is None or meshes:
        raise ConfigError(f"{flag} takes a run directory (or --pretrained NAME) and no "
                          "mesh files")
    if args.labels_dir or args.picture or args.label_offset is not None:
        raise ConfigError(f"{flag} reads the labels of the run's split: leave out "
                          "--labels-dir, --label-offset and --picture")
    if args.test_split and args.validation_split:
        raise ConfigError("--test-split and --validation-split: give one")
    existing_dir("run_dir", run_dir)
    check_hierarchies(run_dir, args.hierarchies)
    if args.validation_split:
        check_validation_split(run_dir)
    rotated = args.eval_rotation == "so3"
    if args.split_file:
        if args.validation_split:
            raise ConfigError("--split-file replaces the test split: only with --test-split")
        existing_file("--split-file", args.split_file)
    start_tensorflow_quietly()
    files = rotated or args.split_file or args.hierarchies > 1 or args.validation_split
    result = (evaluate_test_files(run_dir, 0 if rotated else None, args.split_file,
                                  args.hierarchies, split)
              if files else evaluate_test_split(run_dir, keep_meshes=0))
    print(f"{run_dir}: {split} split ({result['num_meshes']} meshes"
          f"{' of ' + args.split_file if args.split_file else ''}"
          f"{', each mesh file turned, moved and scaled at random (seed 0)' if rotated else ''}"
          f"{f', {args.hierarchies} hierarchies each' if args.hierarchies > 1 else ''}"
          f"): accuracy {result['accuracy']:.4f}, mean IoU {result['mean_iou']:.4f}")
    from meshseg.train.loop.metrics import iou_by_frequency
    print(f"mean IoU of the classes by {split} vertex count, rarest quarter first: " + "; ".join(
        f"{group['mean_iou']:.3f} ({group['classes']} classes of {group['min_vertices']}-"
        f"{group['max_vertices']} vertices)" for group in iou_by_frequency(result["confusion"])))
    boundary = result["boundary"]
    print(f"label boundaries (a 1-ring neighbour of another class): "
          f"{boundary['boundary_fraction']:.1%} of the {split} vertices, accuracy "
          f"{boundary['boundary_accuracy']:.4f} there and {boundary['interior_accuracy']:.4f} "
          f"elsewhere; {boundary['boundary_error_fraction']:.1%} of the errors")


@command
def main(argv: Optional[List[str]] = None) -> None:
    """Command-line entry point.

    A mistake in the arguments (`check_arguments`) ends the process with one line and exit
    status 2 before TensorFlow is imported; a mesh the converter's checks refuse is named
    on stderr with its reason, the others are predicted, and the process then ends with
    one line naming the failed meshes and exit status 4 (`DataError`).
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", metavar="[RUN_DIR] MESH",
                        help="a run directory with model.keras (not with --pretrained), then "
                             "mesh files trimesh reads (OFF, PLY, OBJ, ...)")
    parser.add_argument("--test-split", action="store_true",
                        help="score the run's test split (its records) instead of mesh files")
    parser.add_argument("--validation-split", action="store_true",
                        help="score the mesh files of the run's validation split (the "
                             "training meshes it held out) instead of mesh files")
    parser.add_argument("--hierarchies", type=int, default=1, metavar="K",
                        help="average the class probabilities of K mesh hierarchies of "
                             "each mesh (the first the converter's, the others from seeded "
                             "noise)")
    parser.add_argument("--eval-rotation", choices=("none", "so3"), default="none",
                        help="with --test-split: turn, move and scale each test mesh file "
                             "(seeded) and predict it from the turned file (data.eval_rotation)")
    parser.add_argument("--split-file", metavar="FILE",
                        help="with --test-split: score the run's mesh files listed in FILE "
                             "instead of its test records (entries as in its test.txt)")
    parser.add_argument("--pretrained", metavar="NAME",
                        help=f"a model shipped with meshseg instead of a run directory: "
                             f"{', '.join(pretrained_names()) or 'none'}")
    parser.add_argument("--out", default="predictions", help="output directory")
    parser.add_argument("--labels-dir", help="folder of <stem>.txt true labels, one per vertex")
    parser.add_argument("--label-offset", type=int, default=None,
                        help="class = label + offset; the run's data.label_offset is used "
                             "(1 for the RNA data's -1 = unlabelled), a different one refused")
    parser.add_argument("--picture", action="store_true",
                        help="also write <stem>.png: the prediction, beside the truth "
                             "when --labels-dir is given")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace outputs of an earlier call in --out")
    args = parser.parse_args(argv)
    if args.test_split or args.validation_split:
        score_test_split(args)
        return
    if args.eval_rotation != "none" or args.split_file:
        raise ConfigError("--eval-rotation and --split-file: only with --test-split")
    if args.pretrained:
        run_dir, meshes = pretrained_run_dir(args.pretrained), args.paths
        if not meshes:
            raise ConfigError("give mesh files to predict, or --test-split")
    elif len(args.paths) < 2:
        raise ConfigError("give a run directory and at least one mesh file, or "
                          "--pretrained NAME and mesh files")
    else:
        run_dir, meshes = args.paths[0], args.paths[1:]
    check_arguments(run_dir, meshes, args.out, args.labels_dir, args.overwrite,
                    args.label_offset, args.picture, args.hierarchies)
    start_tensorflow_quietly()
    result = predict_files(run_dir, meshes, args.out, args.labels_dir, args.label_offset,
                           args.overwrite, args.picture, args.hierarchies)
    print(f"wrote {len(result.written)} prediction{'' if len(result.written) == 1 else 's'} "
          f"to {args.out}")
    for path, accuracy in result.accuracies.items():
        print(f"{path}: accuracy {accuracy:.4f}")
    for path, reason in result.failures.items():
        print(f"error: {path}: {reason}", file=sys.stderr)
    if result.failures:
        raise DataError(f"{len(result.failures)} of {len(meshes)} meshes failed: "
                        f"{', '.join(result.failures)} (reasons above); the others were "
                        f"written to {args.out}")

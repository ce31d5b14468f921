"""Per-vertex predictions of a trained run on mesh files, and on the run's test split.

Inputs are built exactly as the pipeline builds them: the mesh is loaded and checked as
the converter loads it (`meshseg.data.mesh.meshfiles.load_geometry`); the run's stored features
(normals, HKS) and mesh hierarchy (`data.levels`, `data.coarsening`) are derived by the
converter's own function (`meshseg.data.features.derived.derive`); and the pipeline's functions
build the feature dict (`meshseg.data.pipeline.dataset`: adjacency, the run's `data.center` /
`data.scale`, "inputs" in the order of `data.features`). Runs written before `data.center`
and `data.scale` existed store `data.mean_center` / `data.unit_scale`; they are read as
center mean / none and scale rms / none (`load_run_config`).

Command line:

    python -m meshseg.tools.predict outputs/<run> my/mesh.off other.ply --out predictions \\
        [--labels-dir my/labels] [--picture] [--overwrite]
    python -m meshseg.tools.predict --pretrained rna my/molecule.ply   # a shipped model
    python -m meshseg.tools.predict outputs/<run> --test-split [--eval-rotation so3] \\
        [--split-file FILE]

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
from meshseg.config import TrainConfig, data_root
from meshseg.console import start_tensorflow_quietly
from meshseg.data.features.derived import derive
from meshseg.data.features.pose import ambiguity, principal_pose
from meshseg.data.mesh.foreign import check_keras_archive
from meshseg.data.mesh.meshfiles import load_geometry, load_label_file
from meshseg.data.mesh.validate import InvalidMeshError, validate_labels
from meshseg.data.pipeline.inputs import MeshInputs
from meshseg.errors import ConfigError, DataError
from meshseg.outputs import write_atomically
from meshseg.train.rundir import MODEL_FILE, RUN_CONFIG
from meshseg.train.summary import RunSummary

# The models shipped inside the package, one run directory each (`pretrained_run_dir`).
PRETRAINED_DIR = Path(__file__).resolve().parents[1] / "pretrained"

if TYPE_CHECKING:
    import keras

    import tensorflow as tf


@dataclass(frozen=True)
class InputSettings:
    """What a run's inputs need: classes K, the features, levels and normalisation
    (`meshseg.data.pipeline.inputs.MeshInputs`), the hierarchy's coarsening, its test split's
    shards, the offset its label files were read with (class = label + offset), and
    whether it skipped bad records (`data.skip_bad_records`)."""

    num_classes: int
    inputs: MeshInputs
    coarsening: float
    test_files: List[str]
    label_offset: int = 0
    skip_bad_records: bool = False


# Settings older runs stored, and the values that replace them: {old key: (new key,
# {old value: new value})}.
LEGACY_DATA_SETTINGS = {"mean_center": ("center", {True: "mean", False: "none"}),
                        "unit_scale": ("scale", {True: "rms", False: "none"})}


def load_run_config(run_dir: str) -> Optional[TrainConfig]:
    """The typed settings of `<run_dir>/run_config.yaml` (None without one), with the
    booleans `data.mean_center` / `data.unit_scale` of runs written before `data.center`
    and `data.scale` existed mapped to them (`LEGACY_DATA_SETTINGS`)."""
    from omegaconf import OmegaConf

    path = os.path.join(run_dir, RUN_CONFIG)
    if not os.path.exists(path):
        return None
    stored = OmegaConf.load(path)
    data = stored.get("data") or {}
    for old, (new, values) in LEGACY_DATA_SETTINGS.items():
        if old in data:
            data[new] = values[bool(data.pop(old))]
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(TrainConfig), stored))


def input_settings(run_dir: str) -> InputSettings:
    """The `InputSettings` of a run, from its stored settings (`load_run_config`) and
    summary (`meshseg.train.summary.RunSummary`).

    Raises:
      ConfigError: if `run_dir` holds no finished run (no run_config.yaml or summary.json).
    """
    config, summary = load_run_config(run_dir), RunSummary.load(run_dir)
    if config is None or summary is None:
        raise ConfigError(f"{run_dir} holds no finished meshseg run (run_config.yaml and "
                          "summary.json are needed); give a run directory train.py wrote")
    return InputSettings(config.data.num_classes, MeshInputs.of(config.data),
                         config.data.coarsening, summary.test_files,
                         config.data.label_offset, config.data.skip_bad_records)


def run_label_offset(settings: InputSettings, requested: Optional[int]) -> int:
    """The label offset predict uses: the run's (`settings.label_offset`).

    Raises:
      ConfigError: if `requested` (a `--label-offset`) is given and differs from it.
    """
    if requested is not None and requested != settings.label_offset:
        raise ConfigError(f"--label-offset {requested} differs from the run's "
                          f"data.label_offset {settings.label_offset}: the model's classes are "
                          f"labels + {settings.label_offset}; leave --label-offset out")
    return settings.label_offset


def load_model(run_dir: str) -> keras.Model:
    """The trained `MeshSegmentationNet` of `<run_dir>/model.keras`.

    Raises:
      DataError: naming the file as damaged if it is not a whole Keras archive
        (`meshseg.data.mesh.foreign.check_keras_archive`).
    """
    import keras

    from meshseg.nn import model as _registers_keras_classes  # noqa: F401  (for load_model)

    path = os.path.join(run_dir, MODEL_FILE)
    check_keras_archive(path)
    return keras.models.load_model(path, compile=False)


def mesh_inputs(vertices: np.ndarray, triangles: np.ndarray,
                settings: InputSettings) -> Dict[str, tf.Tensor]:
    """The model inputs of one mesh, a batch of one, as the pipeline builds them.

    Args:
      vertices: float [V, 3] vertex positions (cast to float32 first, as the records
        store them).
      triangles: int [T, 3] vertex indices.
      settings: the run's input settings.

    Returns:
      the batch contract's features (`meshseg.batch`) with a batch axis of 1.

    Raises:
      ValueError: if a triangle references a vertex outside [0, V), or the run's features
        are undefined for the mesh (e.g. the HKS of a mesh of zero area).
    """
    import tensorflow as tf

    from meshseg.batch import as_batch
    from meshseg.data.mesh.adjacency import mesh_edges
    from meshseg.data.pipeline.dataset import model_inputs, with_adjacency

    inputs = settings.inputs
    vertices = np.asarray(vertices, np.float32)
    triangles = np.asarray(triangles, np.int32)
    edges, edge_weights = mesh_edges(triangles, len(vertices))
    derived = derive(vertices, triangles, inputs.stored, inputs.levels, settings.coarsening,
                     frame=inputs.frame)
    mesh = {"vertices": tf.constant(derived.vertices), "triangles": tf.constant(triangles),
            "edges": edges, "edge_weights": edge_weights, **derived.features,
            "levels": [{"num_vertices": level.num_vertices, "edges": level.edges,
                        "edge_weights": level.edge_weights, "parents": level.parents}
                       for level in derived.levels]}
    features, _ = with_adjacency(mesh, inputs)
    return as_batch(model_inputs(features, inputs))


def predict_labels(model: keras.Model, vertices: np.ndarray, triangles: np.ndarray,
                   settings: InputSettings) -> np.ndarray:
    """int32 [V] predicted class of every vertex of one mesh (argmax of the logits)."""
    logits = model(mesh_inputs(vertices, triangles, settings), training=False)
    return np.argmax(np.asarray(logits)[0], axis=-1).astype(np.int32)


def read_meshes(files: List[str]) -> Iterator[Dict[str, np.ndarray]]:
    """Yields the meshes of TFRecord shards in file order: vertices float32 [V, 3],
    triangles int32 [T, 3], labels int32 [V]."""
    from meshseg.data.records.reader import good_records
    from meshseg.data.records.parse import parse_mesh_record

    for path in files:
        for _, serialized in good_records(path):
            mesh = parse_mesh_record(serialized, source=path)
            yield {key: mesh[key].numpy() for key in ("vertices", "triangles", "labels")}


def evaluate_test_split(run_dir: str, keep_meshes: int = 3) -> Dict:
    """Evaluates a run's model on its test split, as the run evaluated it (records the
    run skipped as bad are skipped again).

    Args:
      keep_meshes: how many test meshes to return with their predictions.

    Returns:
      dict with accuracy (fraction of test vertices predicted right; equals the run's
      eval accuracy), mean_iou, confusion (int64 [K, K], rows true class, columns
      predicted), boundary (`BoundaryAccuracy.result()`: accuracy on and off label
      boundaries), num_meshes, and meshes: the first `keep_meshes` meshes as dicts of
      vertices float32 [V, 3], triangles int32 [T, 3], labels and predictions int32 [V].

    Raises:
      DataError: naming the shard, if a test shard the run recorded is gone.
    """
    from meshseg.data.pipeline.dataset import make_dataset
    from meshseg.data.records.reader import BadRecordLog, check_shard
    from meshseg.train.evaluate import confusion_matrix, make_predict_step
    from meshseg.train.metrics import BoundaryAccuracy, mean_iou

    settings = input_settings(run_dir)
    missing = [path for path in settings.test_files if not os.path.isfile(path)]
    if missing:
        raise DataError(f"{missing[0]}: a test shard of the run in {run_dir} is gone; "
                        "convert its data again (a run of the same settings does)")
    model = load_model(run_dir)
    test_data = make_dataset(settings.test_files, batch_size=1, training=False,
                             inputs=settings.inputs, skip_bad_records=settings.skip_bad_records)
    boundary = BoundaryAccuracy()
    confusion = confusion_matrix(make_predict_step(model, jit=False), test_data,
                                 settings.num_classes, boundary)
    meshes = [{**mesh, "predictions": predict_labels(model, mesh["vertices"], mesh["triangles"],
                                                     settings)}
              for mesh in itertools.islice(read_meshes(settings.test_files), keep_meshes)]
    return {"accuracy": float(np.trace(confusion) / max(confusion.sum(), 1)),
            "mean_iou": mean_iou(confusion), "confusion": confusion,
            "boundary": boundary.result(),
            "num_meshes": sum(len(check_shard(path, skip_bad_records=True,
                                              bad_records=BadRecordLog(quiet=True)).good)
                              for path in settings.test_files),
            "meshes": meshes}


def evaluate_test_files(run_dir: str, turn_seed: Optional[int] = 0,
                        split_file: Optional[str] = None) -> Dict:
    """Evaluates a run's model on its test mesh *files*, as a user gives them: each test
    mesh file of the run's mesh folder is (with `turn_seed`) turned by a rotation uniform
    over SO(3), moved and scaled (`meshseg.data.features.pose.turned`, drawn from the seed and the
    file's SHA-256) and written as a binary PLY file, then predicted from that file through
    predict's whole input path (`load_geometry`, then `mesh_inputs`: pose, features and
    hierarchy derived from the file). `split_file` (entries relative to the run's
    `data.root`/`data.meshes`, e.g. `meshseg.tools.baseline --novel-split`) replaces the
    run's test split file.

    Returns:
      the keys of `evaluate_test_split` (meshes empty), and predictions: {mesh path: int32
      [V] predicted classes}.

    Raises:
      ConfigError: for a run whose data is not a mesh folder (its test meshes are records
        only), or whose mesh folder is not where its settings say.
      DataError: for a test mesh or label file that is missing or invalid.
    """
    import tempfile

    from meshseg.data.mesh.adjacency import mesh_edges
    from meshseg.data.mesh.meshfiles import file_sha256
    from meshseg.data.features.pose import turned
    from meshseg.data.records.prepare import mesh_folder, split_pairs
    from meshseg.train.metrics import BoundaryAccuracy, mean_iou

    config, settings = load_run_config(run_dir), input_settings(run_dir)
    if config.data.source != "mesh_folder":
        raise ConfigError(f"evaluating test mesh files needs a mesh-folder run: the run in "
                          f"{run_dir} read TFRecords (data.source={config.data.source})")
    config.data.root = str(data_root(config.data))
    if split_file is not None:
        config.data.test_split = os.path.abspath(split_file)
    mesh_paths, label_paths = split_pairs(mesh_folder(config.data))["test"]
    model = load_model(run_dir)
    confusion = np.zeros((settings.num_classes,) * 2, np.int64)
    boundary = BoundaryAccuracy()
    predicted = {}
    with tempfile.TemporaryDirectory(prefix="meshseg-turned-") as folder:
        for mesh_path, label_path in zip(mesh_paths, label_paths):
            geometry = load_geometry(mesh_path)
            labels = load_label_file(label_path) + settings.label_offset
            validate_labels(labels, len(geometry.vertices), settings.num_classes)
            if turn_seed is not None:
                moved = turned(geometry.vertices + geometry.origin, turn_seed,
                               file_sha256(mesh_path))
                path = os.path.join(folder, f"{Path(mesh_path).stem}.ply")
                trimesh.Trimesh(moved, geometry.triangles, process=False).export(path)
                geometry = load_geometry(path)
                os.remove(path)
            predictions = predict_labels(model, geometry.vertices, geometry.triangles, settings)
            predicted[str(mesh_path)] = predictions
            np.add.at(confusion, (labels, predictions), 1)
            edges, _ = mesh_edges(geometry.triangles, len(geometry.vertices))
            boundary.update_state(labels[None], predictions[None], edges[None])
    return {"accuracy": float(np.trace(confusion) / max(confusion.sum(), 1)),
            "mean_iou": mean_iou(confusion), "confusion": confusion, "predictions": predicted,
            "boundary": boundary.result(), "num_meshes": len(mesh_paths), "meshes": []}


def write_prediction(out_dir: str, stem: str, vertices: np.ndarray, triangles: np.ndarray,
                     labels: np.ndarray) -> Tuple[str, str]:
    """Writes `<stem>.ply` (vertices coloured by `label_colors`) and `<stem>.txt` (one
    label per line) into `out_dir` (created if missing), each whole
    (`meshseg.outputs.write_atomically`); returns both paths.

    Raises:
      OutputError: if a file cannot be written (a full disk, no permission), naming it.
    """
    from meshseg.tools.visualize import label_colors

    ply_path, txt_path = (os.path.join(out_dir, stem + ext) for ext in (".ply", ".txt"))
    mesh = trimesh.Trimesh(vertices, triangles, vertex_colors=label_colors(labels),
                           process=False)
    write_atomically(ply_path, mesh.export, "the predicted mesh")
    write_atomically(txt_path, lambda path: np.savetxt(path, labels, fmt="%d"),
                     "the predicted labels")
    return ply_path, txt_path


def output_names(stem: str, picture: bool = False) -> List[str]:
    """The files `predict_files` writes for a mesh `stem`: `.ply`, `.txt` (and `.png`)."""
    return [f"{stem}{ext}" for ext in (".ply", ".txt", ".png")[:3 if picture else 2]]


def write_picture(out_dir: str, stem: str, vertices: np.ndarray, triangles: np.ndarray,
                  predicted: np.ndarray, truth: Optional[np.ndarray]) -> str:
    """Writes `<stem>.png`: the mesh coloured by `predicted` labels (int [V]), beside it by
    `truth` (int [V], or None: the prediction alone), with `render_mesh_labels`; returns
    its path."""
    from meshseg.tools.visualize import figure_png, render_mesh_labels

    panels = {"prediction": predicted} if truth is None else {"truth": truth,
                                                             "prediction": predicted}
    picture = figure_png(render_mesh_labels(vertices, triangles, panels))
    return write_atomically(os.path.join(out_dir, f"{stem}.png"),
                            lambda path: Path(path).write_bytes(picture), "the picture")


def call_inputs(run_dir: str, mesh_paths: List[str],
                labels_dir: Optional[str] = None) -> Dict[str, str]:
    """{path: what it is} of every file a `predict_files` call reads: the meshes, their
    label files `<labels_dir>/<stem>.txt`, and the files of the run directory."""
    inputs = {os.path.join(folder, name): "run file"
              for folder, _, names in os.walk(run_dir) for name in names}
    if labels_dir:
        inputs.update({os.path.join(labels_dir, f"{Path(path).stem}.txt"): "label file"
                       for path in mesh_paths})
    inputs.update({path: "mesh" for path in mesh_paths})
    return inputs


def check_inputs_kept(run_dir: str, mesh_paths: List[str], out_dir: str,
                      labels_dir: Optional[str] = None, picture: bool = False) -> None:
    """Refuses an `out_dir` where an output (`output_names`) would replace a file the call
    reads (`call_inputs`), with or without `--overwrite`.

    Raises:
      ConfigError: naming the output and the input (`meshseg.cli.distinct_from_inputs`).
    """
    outputs = [os.path.join(out_dir, name) for path in mesh_paths
               for name in output_names(Path(path).stem, picture)]
    distinct_from_inputs("--out", outputs, call_inputs(run_dir, mesh_paths, labels_dir))


def check_outputs(mesh_paths: List[str], out_dir: str, overwrite: bool = False,
                  picture: bool = False) -> None:
    """Checks that the predictions of `mesh_paths` can be written to `out_dir` as
    `<stem>.ply` / `<stem>.txt` (and `<stem>.png` with `picture`) without one replacing
    another.

    Raises:
      ConfigError: naming both meshes if two share a stem, or naming the files if an output
        already exists in `out_dir` and not `overwrite`.
    """
    first = {}
    for path in mesh_paths:
        stem = Path(path).stem
        if stem in first:
            raise ConfigError(f"{first[stem]} and {path} would both be written as {stem}.ply "
                              "and .txt; predict them in separate calls (--out)")
        first[stem] = path
    existing = [name for stem in first for name in output_names(stem, picture)
                if os.path.exists(os.path.join(out_dir, name))]
    if existing and not overwrite:
        more = f" and {len(existing) - 4} more" if len(existing) > 4 else ""
        shown = ", ".join(existing[:4]) + more
        raise ConfigError(f"{out_dir} already holds {shown}; pass --overwrite to replace them")


@dataclass
class Predictions:
    """What `predict_files` did: `written` mesh paths (their .ply/.txt pairs exist),
    `accuracies` {mesh path: per-vertex accuracy} for meshes with a label file, and
    `failures` {mesh path: reason} for meshes refused by the converter's checks."""

    written: List[str]
    accuracies: Dict[str, float]
    failures: Dict[str, str]


def predict_files(run_dir: str, mesh_paths: List[str], out_dir: str,
                  labels_dir: Optional[str] = None, label_offset: Optional[int] = None,
                  overwrite: bool = False, picture: bool = False) -> Predictions:
    """Predicts and writes every mesh of `mesh_paths` (see the module docstring).

    Before anything is written, `check_inputs_kept` makes sure no output replaces a file
    the call reads (even with `overwrite`), and `check_outputs` that no output replaces
    another (earlier outputs in `out_dir` only with `overwrite`). Each mesh is loaded and checked
    as the converter loads and checks it (`meshseg.data.mesh.meshfiles.load_geometry`, and with
    `labels_dir` its label file with `validate_labels`); a mesh that fails is listed in
    `failures` with its reason and the others go on. Written labels are the predicted
    classes minus the run's label offset, i.e. in the label files' convention. With
    `labels_dir`, `<labels_dir>/<stem>.txt` + that offset are the true classes.
    `label_offset`, if given, must equal the run's (`run_label_offset`). With `picture`,
    `write_picture` draws each mesh's prediction (beside its truth with `labels_dir`).

    Returns:
      the `Predictions`.

    Raises:
      ConfigError: from `check_inputs_kept`, `check_outputs` or `run_label_offset`, or for
        a directory without a finished run.
      DataError: if the run's model.keras is damaged (`load_model`).
    """
    check_inputs_kept(run_dir, mesh_paths, out_dir, labels_dir, picture)
    check_outputs(mesh_paths, out_dir, overwrite, picture)
    settings = input_settings(run_dir)
    label_offset = run_label_offset(settings, label_offset)
    model = load_model(run_dir)
    result = Predictions([], {}, {})
    for path in mesh_paths:
        try:
            geometry = load_geometry(path)
            if labels_dir:
                labels = load_label_file(Path(labels_dir) / f"{Path(path).stem}.txt")
                validate_labels(labels + label_offset, len(geometry.vertices),
                                settings.num_classes)
        except InvalidMeshError as error:
            result.failures[path] = str(error)
            continue
        try:
            if settings.inputs.frame == "pca":
                reason = ambiguity(principal_pose(geometry.vertices, geometry.triangles))
                if reason:
                    print(f"warning: {path}: {reason}", file=sys.stderr)
            predictions = predict_labels(model, geometry.vertices, geometry.triangles, settings)
        except ValueError as error:  # pose or features undefined for this mesh (`derive`)
            result.failures[path] = str(error)
            continue
        write_prediction(out_dir, Path(path).stem, geometry.vertices + geometry.origin,
                         geometry.triangles, predictions - label_offset)
        if picture:
            write_picture(out_dir, Path(path).stem, geometry.vertices, geometry.triangles,
                          predictions - label_offset, labels if labels_dir else None)
        result.written.append(path)
        if labels_dir:
            result.accuracies[path] = float(np.mean(labels + label_offset == predictions))
    return result


def pretrained_names() -> List[str]:
    """The models shipped with meshseg: the folders of `PRETRAINED_DIR`."""
    return sorted(p.name for p in PRETRAINED_DIR.iterdir() if p.is_dir()) \
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


def check_arguments(run_dir: str, mesh_paths: List[str], out_dir: str,
                    labels_dir: Optional[str], overwrite: bool,
                    label_offset: Optional[int] = None, picture: bool = False) -> None:
    """The command line's checks, made before TensorFlow is imported.

    Raises:
      ConfigError: naming the argument: a run directory that does not exist, holds no
        finished run or no model.keras; a mesh file that does not exist; a `--labels-dir`
        that is not a folder; an `--out` that is a file; a `--label-offset` other than the
        run's (`run_label_offset`); or a `check_inputs_kept` or `check_outputs` refusal.
      DataError: if the run's model.keras is damaged (`check_keras_archive`).
    """
    existing_dir("run_dir", run_dir)
    run_label_offset(input_settings(run_dir), label_offset)
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
    """`--test-split`: prints the accuracy and mean IoU of the run's (or the shipped
    model's) model on its test split, rotated with `--eval-rotation so3` (seed 0), the
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
    if run_dir is None or meshes:
        raise ConfigError("--test-split takes a run directory (or --pretrained NAME) and no "
                          "mesh files")
    if args.labels_dir or args.picture or args.label_offset is not None:
        raise ConfigError("--test-split reads the labels of the run's records: leave out "
                          "--labels-dir, --label-offset and --picture")
    existing_dir("run_dir", run_dir)
    input_settings(run_dir)
    start_tensorflow_quietly()
    rotated = args.eval_rotation == "so3"
    if args.split_file:
        existing_file("--split-file", args.split_file)
    result = (evaluate_test_files(run_dir, 0 if rotated else None, args.split_file)
              if rotated or args.split_file else evaluate_test_split(run_dir, keep_meshes=0))
    print(f"{run_dir}: test split ({result['num_meshes']} meshes"
          f"{' of ' + args.split_file if args.split_file else ''}"
          f"{', each mesh file turned, moved and scaled at random (seed 0)' if rotated else ''}"
          f"): accuracy {result['accuracy']:.4f}, mean IoU {result['mean_iou']:.4f}")
    from meshseg.train.metrics import iou_by_frequency
    print("mean IoU of the classes by test vertex count, rarest quarter first: " + "; ".join(
        f"{group['mean_iou']:.3f} ({group['classes']} classes of {group['min_vertices']}-"
        f"{group['max_vertices']} vertices)" for group in iou_by_frequency(result["confusion"])))
    boundary = result["boundary"]
    print(f"label boundaries (a 1-ring neighbour of another class): "
          f"{boundary['boundary_fraction']:.1%} of the test vertices, accuracy "
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
    if args.test_split:
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
                    args.label_offset, args.picture)
    start_tensorflow_quietly()
    result = predict_files(run_dir, meshes, args.out, args.labels_dir, args.label_offset,
                           args.overwrite, args.picture)
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


if __name__ == "__main__":
    main()

"""Predictions of a trained run on mesh files, written as `<out>/<stem>.ply` / `.txt`
(and `.png`), with the checks that no input is overwritten and no output replaces
another (`predict_files`)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

import numpy as np
import trimesh

from meshseg.cli import distinct_from_inputs
from meshseg.data.mesh.meshfiles import load_geometry, load_label_file
from meshseg.data.features.pose import ambiguity, principal_pose
from meshseg.data.mesh.validate import InvalidMeshError, validate_labels
from meshseg.errors import ConfigError
from meshseg.outputs import write_atomically, write_atomically_together

from meshseg.tools.predict.inputs import (input_settings, load_model, predict_labels,
                                          run_label_offset)

if TYPE_CHECKING:
    pass


def write_prediction(out_dir: str, stem: str, vertices: np.ndarray, triangles: np.ndarray,
                     labels: np.ndarray) -> Tuple[str, str]:
    """Writes `<stem>.ply` (vertices coloured by `label_colors`) and `<stem>.txt` (one
    label per line) into `out_dir` (created if missing), both or neither, each whole
    (`meshseg.outputs.write_atomically_together`; a full disk or a stop signal between
    them leaves no `.ply` without its `.txt`); returns both paths.

    Raises:
      OutputError: if a file cannot be written (a full disk, no permission), naming it.
    """
    from meshseg.tools.visualize import label_colors

    ply_path, txt_path = (os.path.join(out_dir, stem + ext) for ext in (".ply", ".txt"))
    mesh = trimesh.Trimesh(vertices, triangles, vertex_colors=label_colors(labels),
                           process=False)
    write_atomically_together([
        (ply_path, mesh.export, "the predicted mesh"),
        (txt_path, lambda path: np.savetxt(path, labels, fmt="%d"), "the predicted labels")])
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
                  overwrite: bool = False, picture: bool = False,
                  hierarchies: int = 1) -> Predictions:
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
    Each prediction averages `hierarchies` mesh hierarchies (`predict_probabilities`).

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
            predictions = predict_labels(model, geometry.vertices, geometry.triangles, settings,
                                         hierarchies)
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

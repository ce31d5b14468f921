"""A trained run's model scored on its test split: on the records it was evaluated on
(`evaluate_test_split`), or on the test (or validation) mesh files, as they are or turned
by a seeded motion (`evaluate_test_files`), `python -m meshseg.tools.predict <run>
--test-split` (`--validation-split`)."""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import TYPE_CHECKING, Dict, Optional

import numpy as np
import trimesh

from meshseg.config import data_root, load_run_config
from meshseg.data.mesh.meshfiles import load_geometry, load_label_file
from meshseg.data.mesh.validate import validate_labels
from meshseg.errors import ConfigError, DataError

from meshseg.tools.predict.inputs import (input_settings, load_model, predict_labels,
                                          read_meshes)

if TYPE_CHECKING:
    pass


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
    from meshseg.train.loop.evaluate import confusion_matrix, make_predict_step
    from meshseg.train.loop.metrics import BoundaryAccuracy, mean_iou

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


def check_validation_split(run_dir: str) -> None:
    """Raises ConfigError if the run in `run_dir` held out no validation meshes
    (`data.validation_meshes=0`): there is no validation split to score."""
    if not load_run_config(run_dir).data.validation_meshes:
        raise ConfigError(f"the run in {run_dir} held out no validation meshes "
                          "(data.validation_meshes=0): score its test split, or a run that "
                          "chose its settings")


def evaluate_test_files(run_dir: str, turn_seed: Optional[int] = 0,
                        split_file: Optional[str] = None, hierarchies: int = 1,
                        split: str = "test") -> Dict:
    """Evaluates a run's model on its test mesh *files*, as a user gives them: each test
    mesh file of the run's mesh folder is (with `turn_seed`) turned by a rotation uniform
    over SO(3), moved and scaled (`meshseg.data.features.pose.turned`, drawn from the seed and the
    file's SHA-256) and written as a binary PLY file, then predicted from that file through
    predict's whole input path (`load_geometry`, then `mesh_inputs`: pose, features and
    hierarchy derived from the file). `split_file` (entries relative to the run's
    `data.root`/`data.meshes`, e.g. `meshseg.tools.baseline --novel-split`) replaces the
    run's test split file. Each mesh's prediction averages `hierarchies` mesh hierarchies
    (`predict_probabilities`). `split="validation"` scores the validation meshes the run
    held out of its training split (`data.validation_meshes`) instead: the split a
    setting of prediction is chosen on.

    Returns:
      the keys of `evaluate_test_split` (meshes empty), and predictions: {mesh path: int32
      [V] predicted classes}.

    Raises:
      ConfigError: for a run whose data is not a mesh folder (its test meshes are records
        only), or whose mesh folder is not where its settings say; for
        split="validation", a run that held out no validation meshes.
      DataError: for a test mesh or label file that is missing or invalid.
    """
    import tempfile

    from meshseg.data.mesh.adjacency import mesh_edges
    from meshseg.data.mesh.meshfiles import file_sha256
    from meshseg.data.features.pose import turned
    from meshseg.data.records.prepare import mesh_folder, split_pairs
    from meshseg.train.loop.metrics import BoundaryAccuracy, mean_iou

    config, settings = load_run_config(run_dir), input_settings(run_dir)
    if config.data.source != "mesh_folder":
        raise ConfigError(f"evaluating test mesh files needs a mesh-folder run: the run in "
                          f"{run_dir} read TFRecords (data.source={config.data.source})")
    if split == "validation":
        check_validation_split(run_dir)
    config.data.root = str(data_root(config.data))
    if split_file is not None:
        config.data.test_split = os.path.abspath(split_file)
    mesh_paths, label_paths = split_pairs(mesh_folder(config.data))[split]
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
            predictions = predict_labels(model, geometry.vertices, geometry.triangles, settings,
                                         hierarchies)
            predicted[str(mesh_path)] = predictions
            np.add.at(confusion, (labels, predictions), 1)
            edges, _ = mesh_edges(geometry.triangles, len(geometry.vertices))
            boundary.update_state(labels[None], predictions[None], edges[None])
    return {"accuracy": float(np.trace(confusion) / max(confusion.sum(), 1)),
            "mean_iou": mean_iou(confusion), "confusion": confusion, "predictions": predicted,
            "boundary": boundary.result(), "num_meshes": len(mesh_paths), "meshes": []}

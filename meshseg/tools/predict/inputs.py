"""A trained run's inputs and model, and the model's per-vertex predictions of a mesh
built exactly as the pipeline builds its inputs (`meshseg.tools.predict`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, Iterator, List, Optional

import numpy as np

from meshseg.config import load_run_config
from meshseg.data.features.derived import derive
from meshseg.data.mesh.foreign import check_keras_archive
from meshseg.data.pipeline.inputs import MeshInputs
from meshseg.errors import ConfigError
from meshseg.train.rundir.claim import MODEL_FILE
from meshseg.train.rundir.summary import RunSummary


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


def input_settings(run_dir: str) -> InputSettings:
    """The `InputSettings` of a run, from its stored settings (`load_run_config`) and
    summary (`meshseg.train.rundir.summary.RunSummary`).

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


# `--hierarchies K`: hierarchies 1..K-1 are decimated from the positions moved by normal
# noise of this standard deviation per coordinate, relative to the square root of the
# surface area (`jittered_hierarchy`): about 1% of an edge of the RNA meshes. The only
# scale tried; K was chosen with it on experiment=rna_full's validation split
# (docs/experiments/2026-12-07-hierarchy-ensembles.md).
HIERARCHY_JITTER = 1e-4


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
    return next(hierarchy_inputs(vertices, triangles, settings, 1))


def hierarchy_inputs(vertices: np.ndarray, triangles: np.ndarray, settings: InputSettings,
                     hierarchies: int) -> Iterator[Dict[str, tf.Tensor]]:
    """The model inputs of one mesh (as `mesh_inputs`) with each of `hierarchies` mesh
    hierarchies: the first the converter's, the others `jittered_hierarchy` draws (seeds
    1, 2, ...; `HIERARCHY_JITTER`). The pose and features are derived once.

    Raises:
      ValueError: as `mesh_inputs`; or for hierarchies < 1.
    """
    import tensorflow as tf

    from meshseg.batch import as_batch
    from meshseg.data.features.hierarchy import jittered_hierarchy
    from meshseg.data.mesh.adjacency import mesh_edges
    from meshseg.data.pipeline.dataset import model_inputs, with_adjacency

    if hierarchies < 1:
        raise ValueError(f"hierarchies must be >= 1, got {hierarchies}")
    inputs = settings.inputs
    vertices = np.asarray(vertices, np.float32)
    triangles = np.asarray(triangles, np.int32)
    edges, edge_weights = mesh_edges(triangles, len(vertices))
    derived = derive(vertices, triangles, inputs.stored, inputs.levels, settings.coarsening,
                     frame=inputs.frame)
    for seed in range(hierarchies):
        levels = derived.levels if seed == 0 else jittered_hierarchy(
            derived.vertices, triangles, inputs.levels, settings.coarsening, seed,
            HIERARCHY_JITTER)
        mesh = {"vertices": tf.constant(derived.vertices), "triangles": tf.constant(triangles),
                "edges": edges, "edge_weights": edge_weights, **derived.features,
                "levels": [{"num_vertices": level.num_vertices, "edges": level.edges,
                            "edge_weights": level.edge_weights, "parents": level.parents}
                           for level in levels]}
        features, _ = with_adjacency(mesh, inputs)
        yield as_batch(model_inputs(features, inputs))


def predict_probabilities(model: keras.Model, vertices: np.ndarray, triangles: np.ndarray,
                          settings: InputSettings, hierarchies: int = 1) -> np.ndarray:
    """float64 [V, C] class probabilities of every vertex of one mesh: the softmax of the
    model's logits, averaged over `hierarchies` mesh hierarchies (`hierarchy_inputs`).

    Raises:
      ValueError: as `hierarchy_inputs`.
    """
    total = 0.0
    for batch in hierarchy_inputs(vertices, triangles, settings, hierarchies):
        logits = np.asarray(model(batch, training=False), np.float64)[0]
        exp = np.exp(logits - logits.max(axis=-1, keepdims=True))
        total = total + exp / exp.sum(axis=-1, keepdims=True)
    return total / hierarchies


def predict_labels(model: keras.Model, vertices: np.ndarray, triangles: np.ndarray,
                   settings: InputSettings, hierarchies: int = 1) -> np.ndarray:
    """int32 [V] predicted class of every vertex of one mesh: the most probable class of
    `predict_probabilities` (with one hierarchy, the argmax of the logits)."""
    probabilities = predict_probabilities(model, vertices, triangles, settings, hierarchies)
    return np.argmax(probabilities, axis=-1).astype(np.int32)


def read_meshes(files: List[str]) -> Iterator[Dict[str, np.ndarray]]:
    """Yields the meshes of TFRecord shards in file order: vertices float32 [V, 3],
    triangles int32 [T, 3], labels int32 [V]."""
    from meshseg.data.records.reader import good_records
    from meshseg.data.records.parse import parse_mesh_record

    for path in files:
        for _, serialized in good_records(path):
            mesh = parse_mesh_record(serialized, source=path)
            yield {key: mesh[key].numpy() for key in ("vertices", "triangles", "labels")}

"""Test meshes in TensorBoard's Mesh dashboard, coloured by prediction and by ground truth.

At each evaluation the run writes, for each of the first `summaries.meshes` test meshes,
a mesh summary of the predicted classes (`test_mesh_<i>/prediction`) and, once, one of
the true classes (`test_mesh_<i>/ground_truth`), with TensorBoard's mesh plugin
(`tensorboard.plugins.mesh.summary_v2.mesh`): vertex positions as the model sees them
(normalised), the triangles, and one colour per vertex from `label_colors`.
"""

from typing import List, Tuple

import keras
import numpy as np
import tensorflow as tf
from tensorboard.plugins.mesh import summary_v2 as mesh_summary

from meshseg.batch import as_batch, without_mesh_ids

# Three.js settings of the Mesh dashboard: lit, flat-shaded vertex colours.
MESH_DISPLAY = {"material": {"cls": "MeshStandardMaterial", "roughness": 1, "metalness": 0},
                "camera": {"cls": "PerspectiveCamera", "fov": 60}}


def label_colors(labels: np.ndarray) -> np.ndarray:
    """uint8 [V, 4] RGBA colour of each label: matplotlib's tab20 palette, cycled."""
    from matplotlib import colormaps

    palette = (np.asarray(colormaps["tab20"].colors) * 255).round().astype(np.uint8)
    rgb = palette[np.asarray(labels) % len(palette)]
    return np.concatenate([rgb, np.full((len(rgb), 1), 255, np.uint8)], axis=1)


class MeshSummaries:
    """Writes the mesh summaries of a few test meshes.

    Args:
      samples: (features, labels, triangles) per mesh, as
        `meshseg.data.pipeline.dataset.sample_meshes` gives them:
        `meshseg.batch.mesh_features` of one mesh (no batch axis), int32 [V] labels, int32
        [T, 3] triangles. Empty: nothing is written.
      model: the network; called on one mesh at a time (a batch of one, not compiled).
    """

    def __init__(self, samples: List[Tuple[dict, tf.Tensor, tf.Tensor]], model: keras.Model):
        self.samples = samples
        self.model = model
        self.ground_truth_written = False

    def predictions(self, features: dict) -> np.ndarray:
        """int64 [V] predicted class of every vertex of one mesh (argmax of the logits)."""
        logits = self.model(as_batch(without_mesh_ids(features)), training=False)
        return np.argmax(np.asarray(logits)[0], axis=-1)

    def write(self, writer: tf.summary.SummaryWriter, step: int) -> None:
        """Writes `test_mesh_<i>/prediction` of every sample at `step`, and
        `test_mesh_<i>/ground_truth` the first time."""
        with writer.as_default(step=step):
            for index, (features, labels, triangles) in enumerate(self.samples):
                source = features["mesh_id"].numpy().decode() if "mesh_id" in features else ""
                shown = {"prediction": self.predictions(features)}
                if not self.ground_truth_written:
                    shown["ground_truth"] = labels.numpy()
                for kind, classes in shown.items():
                    mesh_summary.mesh(
                        f"test_mesh_{index}/{kind}", vertices=features["vertices"][tf.newaxis],
                        faces=triangles[tf.newaxis],
                        colors=label_colors(classes)[tf.newaxis, :, :3],
                        config_dict=MESH_DISPLAY,
                        description=f"{kind.replace('_', ' ')} of {source} "
                                    "(colours: classes, tab20 palette)")
        writer.flush()
        self.ground_truth_written = True

"""The tensorflow-graphics mesh segmentation demo network."""

from typing import Dict, Sequence

import keras
import tensorflow as tf

from meshseg.batch import (Level, NeighborTable, as_batch, flat_reverse, level_features,
                           mesh_features, table_features)
from meshseg.nn.layers import FeatureSteeredConvolution, PointwiseConv1D
from meshseg.nn.ops import NEIGHBOR_TABLE_IMPLS


def batch_neighbors(edges: tf.Tensor, edge_weights: tf.Tensor, num_vertices_padded) -> tf.SparseTensor:
    """The block-diagonal adjacency of a padded batch, as one 2-D SparseTensor.

    Args:
      edges: int32 [B, E, 2] local (row i, neighbour j) indices, padded with (0, 0).
      edge_weights: float32 [B, E] adjacency values a_ij, padded with 0.
      num_vertices_padded: V, the padded vertex count of the batch (int or scalar tensor).

    Returns:
      SparseTensor [B*V, B*V]; vertex i of mesh b is row b*V + i. Padding edges become
      zero-valued entries on the diagonal, which contribute nothing to any implementation.
    """
    batch_size = tf.shape(edges)[0]
    offsets = tf.range(batch_size)[:, tf.newaxis, tf.newaxis] * num_vertices_padded
    indices = tf.cast(tf.reshape(edges + offsets, [-1, 2]), tf.int64)
    size = tf.cast(batch_size * num_vertices_padded, tf.int64)
    return tf.SparseTensor(indices, tf.reshape(edge_weights, [-1]), tf.stack([size, size]))


def batch_table(features: Dict[str, tf.Tensor]) -> NeighborTable:
    """The neighbour tables of a padded batch as one table over all B*V vertices.

    Args:
      features: a batch's "neighbors", "neighbor_weights" and "reverse_slots" [B, V, K],
        "paired" [B], "overflow_neighbors", "overflow_weights" [B, O, K] and
        "overflow_centers" [B, O] (`meshseg.batch`), indices local to each mesh.

    Returns:
      `NeighborTable` [B*V, K] with [B*O, K] overflow rows and its reverse slots (from
      the meshes' own, `meshseg.batch.flat_reverse`; paired if every mesh's are); vertex
      i of mesh b is row b*V + i.
    """
    table = table_features(features)
    shape = tf.shape(table.neighbors)
    offsets = tf.range(shape[0])[:, tf.newaxis] * shape[1]  # [B, 1]
    width = table.neighbors.shape[-1] or shape[2]

    def flat(tensor, shifted=False):
        tensor = tensor + offsets[..., tf.newaxis] if shifted else tensor
        return tf.reshape(tensor, [-1, width])

    neighbors, weights = flat(table.neighbors, True), flat(table.weights)
    return NeighborTable(
        neighbors, weights, flat(table.overflow_neighbors, True), flat(table.overflow_weights),
        tf.reshape(table.overflow_centers + offsets, [-1]),
        reverse=flat_reverse(neighbors, weights, flat(features["reverse_slots"])),
        paired=tf.reduce_all(features["paired"]))


def graph_neighbors(features: Dict[str, tf.Tensor], impl: str, level: int = 0,
                    num_vertices_padded=None):
    """The adjacency of hierarchy level `level` of a padded batch in the form `impl`
    takes: `batch_table` for `meshseg.nn.ops.NEIGHBOR_TABLE_IMPLS`, else `batch_neighbors`
    over `num_vertices_padded` vertices per mesh (default: V_l of the level's neighbour
    table [B, V_l, K])."""
    adjacency = level_features(features, level)
    if impl in NEIGHBOR_TABLE_IMPLS:
        return batch_table(adjacency)
    if num_vertices_padded is None:
        num_vertices_padded = tf.shape(adjacency["neighbors"])[1]
    return batch_neighbors(adjacency["edges"], adjacency["edge_weights"], num_vertices_padded)


def one_triangle(input_width: int = 3, levels: int = 0) -> Dict[str, tf.Tensor]:
    """The features of one triangle (3 vertices, 1-ring with self-edges), batch size 1,
    with `input_width` input channels (the first three the identity) and `levels` coarser
    levels of one vertex each (all vertices merged into it)."""
    rows = tf.repeat(tf.range(3), 3)
    cols = tf.reshape(tf.constant([[0, 1, 2], [1, 0, 2], [2, 0, 1]]), [-1])
    inputs = tf.eye(3, input_width)
    coarse = [Level(tf.zeros([1, 2], tf.int32), tf.ones([1]),
                    tf.zeros([3 if level == 1 else 1], tf.int32), 1)
              for level in range(1, levels + 1)]
    return as_batch(mesh_features(tf.eye(3), tf.stack([rows, cols], axis=-1),
                                  tf.fill([9], 1.0 / 3.0), inputs=inputs, levels=coarse))


@keras.saving.register_keras_serializable(package="meshseg")
class MeshSegmentationNet(keras.Model):
    """Per-vertex classifier of the tensorflow-graphics mesh segmentation demo.

    Conv1D(16) -> [FeatureSteeredConvolution(D) + ReLU for D in conv_channels] ->
    Conv1D(hidden_channels) + ReLU -> Conv1D(num_classes). The 1x1 Conv1D layers act per
    vertex (`meshseg.nn.layers.PointwiseConv1D`: the same variables, computed as matmuls).

    Inputs: the feature dict of `meshseg.batch`: "inputs" float32 [B, V, input_width],
    "edges" int32 [B, E, 2] and "edge_weights" float32 [B, E], or, for the
    implementations that read a neighbour table, "neighbors" int32 [B, V, K],
    "neighbor_weights" float32 [B, V, K] and the table's overflow rows (other keys are
    ignored).
    Output: logits float32 [B, V, num_classes]. Padded vertices get logits too; the losses
    and metrics in `meshseg.train.loop.metrics` mask them out.

    Args:
      num_classes: number of per-vertex classes K.
      impl: feature-steered convolution implementation (`meshseg.nn.ops.IMPLEMENTATIONS`).
      num_weight_matrices: W of every graph convolution (8 in the demo).
      input_channels: width of the first 1x1 convolution (16).
      conv_channels: output channels D of the graph convolutions ((32, 64, 128)).
      hidden_channels: width of the last hidden 1x1 convolution (256).
      translation_invariant: tie v = -u in every graph convolution (the demo's default).
      xla: build graph convolutions in their XLA-compilable formulation.
      input_width: F, the width of features["inputs"] (3 for the demo's xyz;
        `meshseg.config.feature_widths`).
      precision: the Keras dtype policy of every layer but the last ("float32",
        "mixed_float16", "mixed_bfloat16"); the logits are float32 whatever it is. Saved
        with the model, so a reloaded model computes as the trained one did.
    """

    def __init__(self, num_classes: int, impl: str, num_weight_matrices: int = 8,
                 input_channels: int = 16, conv_channels: Sequence[int] = (32, 64, 128),
                 hidden_channels: int = 256, translation_invariant: bool = True,
                 xla: bool = False, precision: str = "float32", input_width: int = 3,
                 **kwargs):
        super().__init__(**kwargs)
        self.num_classes = num_classes
        self.input_width = input_width
        self.impl = impl
        self.num_weight_matrices = num_weight_matrices
        self.input_channels = input_channels
        self.conv_channels = tuple(conv_channels)
        self.hidden_channels = hidden_channels
        self.translation_invariant = translation_invariant
        self.xla = xla
        self.precision = precision
        self.lin_in = PointwiseConv1D(input_channels, name="lin_in", dtype=precision)
        self.graph_convs = [
            FeatureSteeredConvolution(num_weight_matrices, channels, impl=impl,
                                      translation_invariant=translation_invariant, xla=xla,
                                      name=f"feast_{channels}", dtype=precision)
            for channels in self.conv_channels]
        self.lin_hidden = PointwiseConv1D(hidden_channels, activation="relu",
                                          name="lin_hidden", dtype=precision)
        # Logits in float32 also under a mixed-precision policy (numerically safe softmax).
        self.lin_out = PointwiseConv1D(num_classes, name="lin_out", dtype="float32")

    def call(self, features: Dict[str, tf.Tensor]):
        inputs = features["inputs"]
        shape = tf.shape(inputs)
        neighbors = graph_neighbors(features, self.impl, num_vertices_padded=shape[1])
        x = tf.reshape(self.lin_in(inputs), [-1, self.input_channels])
        for conv in self.graph_convs:
            x = tf.nn.relu(conv(x, neighbors))
        x = tf.reshape(x, [shape[0], shape[1], self.conv_channels[-1]])
        return self.lin_out(self.lin_hidden(x))

    def get_compile_config(self):
        """None: a saved network holds no training state (the Keras loop's losses and
        metrics live in `meshseg.train`; a run's settings in its run_config.yaml), so it
        loads with nothing but `meshseg.nn` imported."""
        return None

    def get_build_config(self):
        return {"built_on": "a one-triangle mesh"}

    def build_from_config(self, config):
        """Creates the variables (e.g. when a `.keras` file is loaded) by one call on a
        one-triangle mesh; the input width is the only shape the weights depend on."""
        self(one_triangle(self.input_width))

    def get_config(self):
        return dict(name=self.name, num_classes=self.num_classes, impl=self.impl,
                    num_weight_matrices=self.num_weight_matrices,
                    input_channels=self.input_channels, conv_channels=list(self.conv_channels),
                    hidden_channels=self.hidden_channels,
                    translation_invariant=self.translation_invariant, xla=self.xla,
                    precision=self.precision, input_width=self.input_width)

"""FeaStUNet: a multi-scale encoder-decoder of feature-steered convolutions over a mesh
hierarchy (`model.name=feastnet_unet`)."""

from typing import Dict, List, Sequence

import keras
import tensorflow as tf

from meshseg.batch import level_key
from meshseg.nn.layers import FeatureSteeredConvolution, PhiloxDropout, PointwiseConv1D
from meshseg.nn.model import graph_neighbors, one_triangle
from meshseg.nn.pooling import carry_back, global_pool, mean_pool, unpool, vertex_mask


@keras.saving.register_keras_serializable(package="meshseg")
class ResidualFeaStBlock(keras.layers.Layer):
    """relu(LayerNorm(FeaSt(x)) + shortcut(x)): a FeaStNet convolution as a residual block.

    The residual form (He et al., CVPR 2016) keeps the deeper encoder-decoder trainable with
    the demo's plain Adam schedule; the shortcut is x itself, or a bias-free linear map when
    the width changes. The normalisation is LayerNormalization (Ba et al., 2016) over each
    vertex's channels: it uses no statistics across vertices or meshes, so padded vertices
    cannot change a real vertex's output, it computes the same in training and inference,
    and it does not depend on the batch size (unlike batch normalisation, which would need
    masked moments and per-replica synchronisation).

    Call arguments:
      data: float [N, C] vertex features, flattened over the batch.
      neighbors: the adjacency the convolution's `impl` takes (`graph_neighbors`).

    Returns float [N, D].

    Args:
      num_weight_matrices: W. num_output_channels: D.
      impl, translation_invariant, xla: as `FeatureSteeredConvolution`.
    """

    def __init__(self, num_weight_matrices: int, num_output_channels: int, impl: str,
                 translation_invariant: bool = True, xla: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.num_weight_matrices = num_weight_matrices
        self.num_output_channels = num_output_channels
        self.impl = impl
        self.translation_invariant = translation_invariant
        self.xla = xla
        self.conv = FeatureSteeredConvolution(
            num_weight_matrices, num_output_channels, impl=impl,
            translation_invariant=translation_invariant, xla=xla, name="feast",
            dtype=self.dtype_policy)
        self.norm = keras.layers.LayerNormalization(name="norm", dtype=self.dtype_policy)
        self.shortcut = None

    def build(self, input_shape):
        if int(input_shape[-1]) != self.num_output_channels:
            self.shortcut = keras.layers.Dense(self.num_output_channels, use_bias=False,
                                               name="shortcut", dtype=self.dtype_policy)

    def call(self, data, neighbors):
        shortcut = data if self.shortcut is None else self.shortcut(data)
        return tf.nn.relu(self.norm(self.conv(data, neighbors)) + shortcut)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.num_output_channels,)

    def get_config(self):
        config = super().get_config()
        config.update(num_weight_matrices=self.num_weight_matrices,
                      num_output_channels=self.num_output_channels, impl=self.impl,
                      translation_invariant=self.translation_invariant, xla=self.xla)
        return config


@keras.saving.register_keras_serializable(package="meshseg")
class FeaStUNet(keras.Model):
    """Per-vertex classifier: a U-Net (Ronneberger et al., MICCAI 2015) of FeaStNet
    convolutions (Verma et al., CVPR 2018, who also pool over a mesh hierarchy) on the
    levels 0..L of a mesh hierarchy, L = len(conv_channels) - 1:

        Conv1D(input_channels)
        encoder, l = 0..L:  [pool from l-1 (l > 0)] -> convs_per_level x block(conv_channels[l])
        global:             [masked mean | max over level L] -> Dense(conv_channels[L]) + ReLU,
                            broadcast to every level-L vertex and concatenated
        decoder, l = L-1..P: unpool -> concat encoder level l -> 1x1 (conv_channels[l])
                            -> convs_per_level x block(conv_channels[l])
        [concat the inputs (input_skip)] -> hidden_layers x (Conv1D(hidden_channels) + ReLU)
                            [the first one also given the global feature (global_skip,
                            global_scale)]
                            -> Dropout(dropout) -> Conv1D(num_classes)
        carry-back:         the logits of level P copied to every mesh vertex (`carry_back`)
        fine head (P > 0, fine_head_channels = F' > 0): logits += Conv1D(num_classes)(relu(
                            carried-back Dense(F')(head's last hidden layer)
                            + Conv1D(F')([encoder level 0 | inputs]))
                            -> fine_head_convs x block(F')) on every mesh vertex

    block = `ResidualFeaStBlock`; pool = mean over a coarse vertex's children, unpool =
    copy of the parent's features (`meshseg.nn.pooling`). With one conv_channels entry
    (L = 0) it is a single-level network with the global feature. P = `output_level`: the
    classifier runs on level P (0: the mesh itself), and every vertex of the mesh gets the
    logits of its level-P ancestor, so the loss and every score are taken on the original
    vertices; P > 0 skips the decoder's finest levels (coarse regions such as RNA
    segments need less resolution than the mesh has). Carried back alone, level-P logits
    give all children of a level-P vertex one class, which caps the accuracy at region
    boundaries (docs/experiments/2026-12-05-head-on-level-1.md), so the fine head, a narrow
    per-vertex layer on the mesh itself, adds a correction to the carried-back logits from
    the vertex's own inputs and level-0 encoder features, at a fraction of the full head's
    cost on the mesh (its output starts at zero).

    Inputs: the feature dict of `meshseg.batch`: "inputs" float32 [B, V, input_width],
    the adjacency of every level 0..L ("edges"/"edge_weights", or the neighbour table and
    its overflow rows, under `level_key`), "level<l>/num_vertices" int32 [B] and
    "level<l>/parents" int32 [B, V_{l-1}] for l = 1..L. Other keys (more levels) are ignored.
    Output: logits float32 [B, V, num_classes] on the mesh (level 0), whatever P. Padded
    vertices get logits too (masked by the losses); they never change the logits of real
    vertices.

    Args:
      num_classes: number of per-vertex classes K.
      impl: feature-steered convolution implementation (`meshseg.nn.ops.IMPLEMENTATIONS`).
      num_weight_matrices: W of every graph convolution.
      input_channels: width of the first 1x1 convolution.
      conv_channels: channels of levels 0..L.
      hidden_channels: width of the classifier head's hidden 1x1 convolutions.
      hidden_layers: how many hidden 1x1 convolutions the head has (>= 1; 1 is the demo's
        head). Two suit the RNA presets
        (docs/experiments/2026-12-01-fourier-features-and-head-depth.md).
      translation_invariant: tie v = -u in every graph convolution.
      convs_per_level: blocks per level in the encoder, and again in the decoder.
      dropout: rate of the dropout before the classifier (training only; 0: none).
      xla: build graph convolutions in their XLA-compilable formulation.
      precision: the Keras dtype policy of every layer but the classifier, whose logits are
        float32 (float64 under "float64", which the tests use as a reference).
      input_width: F, the width of features["inputs"] (`meshseg.config.feature_widths`).
      output_level: P in [0, L], the level the classifier runs on.
      fine_head_channels: F', the width of the fine head that corrects the carried-back
        logits on the mesh (needs P > 0; 0: none, every child takes its ancestor's logits).
      fine_head_convs: residual FeaSt blocks of width F' on the mesh in the fine head
        (0: none, a per-vertex head). A graph convolution lets a vertex compare its
        carried-back context with its 1-ring's, which near a region's edge comes from
        another ancestor (docs/experiments/2026-12-06-fine-head-convolution.md). Needs
        fine_head_channels > 0.
      input_skip: also feed features["inputs"] (mean-pooled to level P) to the classifier
        head, a skip connection from the input to the head as in per-point segmentation
        heads (PointNet, Qi et al., CVPR 2017): the head then sees the per-vertex
        descriptors that a per-vertex classifier gets, besides the decoder's context.
      global_skip: also feed the global mesh feature to the classifier head, as PointNet's
        segmentation head concatenates its global feature to every point's features. The
        first hidden layer then computes relu(W_x x_i + W_g g + b) with g [B, C_L] the
        mesh's feature: W_g g is one [B, hidden_channels] product per mesh, added to each
        of its vertices, the same function as concatenating g to every vertex at no
        per-vertex cost. It lets the head's per-vertex map depend on which mesh it is
        in (docs/experiments/2026-11-30-unet-human-parts-and-rna-250.md).
      global_scale: also scale the first hidden layer's pre-activation per mesh and
        channel by 1 + W_s g, feature-wise linear modulation (FiLM, Perez et al., AAAI
        2018): with global_skip, relu((1 + W_s g) * (W_x x_i + b) + W_g g). W_s [C_L,
        hidden_channels] starts at zero, so the network starts as it would without it;
        the global feature can then also change the slope of the head's map, not only
        shift it.

    Raises:
      ValueError: for empty conv_channels, convs_per_level < 1, hidden_layers < 1, dropout
        outside [0, 1), output_level outside [0, L], or fine_head_channels < 0, or > 0
        with output_level 0.
    """

    def __init__(self, num_classes: int, impl: str, num_weight_matrices: int = 8,
                 input_channels: int = 32, conv_channels: Sequence[int] = (32, 64, 128, 256),
                 hidden_channels: int = 128, translation_invariant: bool = True,
                 convs_per_level: int = 2, dropout: float = 0.0, xla: bool = False,
                 precision: str = "float32", input_width: int = 3, output_level: int = 0,
                 fine_head_channels: int = 0, fine_head_convs: int = 0,
                 input_skip: bool = False, hidden_layers: int = 1, global_skip: bool = False,
                 global_scale: bool = False, **kwargs):
        super().__init__(**kwargs)
        if (not conv_channels or convs_per_level < 1 or hidden_layers < 1
                or not 0 <= dropout < 1):
            raise ValueError("FeaStUNet needs conv_channels, convs_per_level >= 1, "
                             "hidden_layers >= 1 and dropout in [0, 1), got "
                             f"{list(conv_channels)}, {convs_per_level}, {hidden_layers}, "
                             f"{dropout}")
        if not 0 <= output_level < len(conv_channels):
            raise ValueError(f"FeaStUNet's output_level must be in [0, {len(conv_channels) - 1}]"
                             f" (its levels), got {output_level}")
        if fine_head_channels < 0 or (fine_head_channels and not output_level):
            raise ValueError(f"FeaStUNet's fine_head_channels must be 0, or > 0 with output_level"
                             f" > 0 (it corrects logits carried back from a coarser level), got "
                             f"{fine_head_channels} with output_level {output_level}")
        if fine_head_convs < 0 or (fine_head_convs and not fine_head_channels):
            raise ValueError(f"FeaStUNet's fine_head_convs must be 0, or > 0 with "
                             f"fine_head_channels > 0 (its blocks are the fine head's), got "
                             f"{fine_head_convs} with fine_head_channels {fine_head_channels}")
        self.num_classes = num_classes
        self.impl = impl
        self.num_weight_matrices = num_weight_matrices
        self.input_channels = input_channels
        self.conv_channels = tuple(conv_channels)
        self.hidden_channels = hidden_channels
        self.hidden_layers = hidden_layers
        self.translation_invariant = translation_invariant
        self.convs_per_level = convs_per_level
        self.dropout = dropout
        self.xla = xla
        self.precision = precision
        self.input_width = input_width
        self.output_level = output_level
        self.fine_head_channels = fine_head_channels
        self.fine_head_convs = fine_head_convs
        self.input_skip = input_skip
        self.global_skip = global_skip
        self.global_scale = global_scale

        def blocks(name: str, channels: int, count: int) -> List[ResidualFeaStBlock]:
            return [ResidualFeaStBlock(num_weight_matrices, channels, impl,
                                       translation_invariant, xla, dtype=precision,
                                       name=f"{name}_block{index}")
                    for index in range(count)]

        self.lin_in = PointwiseConv1D(input_channels, name="lin_in", dtype=precision)
        self.encoder = [blocks(f"encoder{level}", self.conv_channels[level], convs_per_level)
                        for level in range(self.num_levels + 1)]
        self.global_dense = keras.layers.Dense(self.conv_channels[-1], activation="relu",
                                               name="global", dtype=precision)
        decoded = range(output_level, self.num_levels)  # the decoder's levels, finest first
        self.fuse = [keras.layers.Dense(self.conv_channels[level], name=f"fuse{level}",
                                        dtype=precision) for level in decoded]
        self.decoder = [blocks(f"decoder{level}", self.conv_channels[level], convs_per_level)
                        for level in decoded]
        # Its ReLU follows the global terms (global_skip, global_scale), in `call`.
        self.lin_hidden = PointwiseConv1D(hidden_channels, name="lin_hidden", dtype=precision)
        self.global_head = keras.layers.Dense(
            hidden_channels, use_bias=False, name="global_head",
            dtype=precision) if global_skip else None
        self.global_scale_head = keras.layers.Dense(
            hidden_channels, use_bias=False, kernel_initializer="zeros",
            name="global_scale_head", dtype=precision) if global_scale else None
        # The head's further hidden layers (none by default: checkpoints of one-layer heads
        # keep their variable paths).
        self.lin_hidden_more = [
            PointwiseConv1D(hidden_channels, activation="relu", name=f"lin_hidden{index}",
                            dtype=precision) for index in range(2, hidden_layers + 1)]
        self.drop = PhiloxDropout(dropout, name="dropout") if dropout > 0 else None
        logits_dtype = "float64" if precision == "float64" else "float32"
        self.lin_out = PointwiseConv1D(num_classes, name="lin_out", dtype=logits_dtype)
        self.fine_from_coarse = self.fine_hidden = self.fine_out = None
        self.fine_blocks = blocks("fine", fine_head_channels, fine_head_convs)
        if fine_head_channels:
            self.fine_from_coarse = keras.layers.Dense(
                fine_head_channels, use_bias=False, name="fine_from_coarse", dtype=precision)
            self.fine_hidden = PointwiseConv1D(fine_head_channels, name="fine_hidden",
                                               dtype=precision)
            self.fine_out = PointwiseConv1D(num_classes, kernel_initializer="zeros",
                                            name="fine_out", dtype=logits_dtype)

    @property
    def num_levels(self) -> int:
        """L, the coarser levels the network reads."""
        return len(self.conv_channels) - 1

    def call(self, features: Dict[str, tf.Tensor], training=None):
        inputs = features["inputs"]
        batch_size = tf.shape(inputs)[0]
        sizes = [tf.shape(inputs)[1]] + [
            tf.shape(features[level_key(level, "neighbors")])[1]
            for level in range(1, self.num_levels + 1)]  # V_l, padded
        neighbors = [graph_neighbors(features, self.impl, level, sizes[level])
                     for level in range(self.num_levels + 1)]
        parents = [None] + [features[level_key(level, "parents")]
                            for level in range(1, self.num_levels + 1)]

        x = tf.reshape(self.lin_in(inputs), [-1, self.input_channels])  # [B*V, C]
        skips = []
        for level, level_blocks in enumerate(self.encoder):
            if level > 0:
                x = mean_pool(x, parents[level], sizes[level])
            for block in level_blocks:
                x = block(x, neighbors[level])
            skips.append(x)

        coarsest = self.num_levels
        x = tf.reshape(x, [batch_size, sizes[coarsest], self.conv_channels[-1]])
        mask = vertex_mask(features[level_key(coarsest, "num_vertices")], sizes[coarsest])
        mesh = self.global_dense(global_pool(x, mask))  # [B, C_L]
        x = tf.concat([x, tf.broadcast_to(mesh[:, tf.newaxis], tf.shape(x))], axis=-1)
        x = tf.reshape(x, [-1, 2 * self.conv_channels[-1]])

        for index in reversed(range(len(self.decoder))):
            level = self.output_level + index
            x = tf.concat([unpool(x, parents[level + 1]), skips[level]], axis=-1)
            x = self.fuse[index](x)
            for block in self.decoder[index]:
                x = block(x, neighbors[level])

        x = tf.reshape(x, [batch_size, sizes[self.output_level], x.shape[-1]])
        if self.input_skip:
            x = tf.concat([x, tf.cast(self._inputs_at(inputs, parents, sizes), x.dtype)], axis=-1)
        x = self.lin_hidden(x)
        if self.global_scale_head is not None:
            x = x * (1.0 + self.global_scale_head(mesh)[:, tf.newaxis])
        if self.global_head is not None:
            x = x + self.global_head(mesh)[:, tf.newaxis]
        x = tf.nn.relu(x)
        for layer in self.lin_hidden_more:
            x = layer(x)
        if self.drop is not None:
            x = self.drop(x, training=training)
        logits = carry_back(self.lin_out(x), parents[1:self.output_level + 1])
        if self.fine_out is None:
            return logits
        fine = tf.concat([tf.reshape(skips[0], [batch_size, sizes[0], self.conv_channels[0]]),
                          tf.cast(inputs, skips[0].dtype)], axis=-1)
        fine = tf.nn.relu(self.fine_hidden(fine) + carry_back(
            self.fine_from_coarse(x), parents[1:self.output_level + 1]))
        if self.fine_blocks:
            fine = tf.reshape(fine, [-1, self.fine_head_channels])
            for block in self.fine_blocks:
                fine = block(fine, neighbors[0])
            fine = tf.reshape(fine, [batch_size, sizes[0], self.fine_head_channels])
        return logits + self.fine_out(fine)

    def _inputs_at(self, inputs, parents, sizes):
        """features["inputs"] [B, V, F] mean-pooled to the output level, [B, V_P, F]."""
        data = tf.reshape(inputs, [-1, self.input_width])
        for level in range(1, self.output_level + 1):
            data = mean_pool(data, parents[level], sizes[level])
        return tf.reshape(data, [tf.shape(inputs)[0], sizes[self.output_level], self.input_width])

    def get_compile_config(self):
        """None, as `MeshSegmentationNet.get_compile_config`."""
        return None

    def get_build_config(self):
        return {"built_on": "a one-triangle mesh"}

    def build_from_config(self, config):
        """Creates the variables by one call on a one-triangle mesh with L one-vertex coarser
        levels; the input width is the only shape the weights depend on."""
        self(one_triangle(self.input_width, self.num_levels))

    def get_config(self):
        return dict(name=self.name, num_classes=self.num_classes, impl=self.impl,
                    num_weight_matrices=self.num_weight_matrices,
                    input_channels=self.input_channels, conv_channels=list(self.conv_channels),
                    hidden_channels=self.hidden_channels, hidden_layers=self.hidden_layers,
                    translation_invariant=self.translation_invariant,
                    convs_per_level=self.convs_per_level, dropout=self.dropout, xla=self.xla,
                    precision=self.precision, input_width=self.input_width,
                    output_level=self.output_level,
                    fine_head_channels=self.fine_head_channels,
                    fine_head_convs=self.fine_head_convs, input_skip=self.input_skip,
                    global_skip=self.global_skip, global_scale=self.global_scale)

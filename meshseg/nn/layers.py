"""Keras layers: the feature-steered graph convolution with a selectable implementation,
the per-vertex 1x1 convolution as one matmul, and a dropout whose mask XLA draws fast."""

from typing import Optional, Union

import keras
import tensorflow as tf

from meshseg.batch import NeighborTable
from meshseg.nn.ops import FLOAT32_IMPLS, NEIGHBOR_TABLE_IMPLS, get_implementation
from meshseg.nn.ops.vertex_matmul import add_bias, vertex_matmul


@keras.saving.register_keras_serializable(package="meshseg")
class FeatureSteeredConvolution(keras.layers.Layer):
    """FeaStNet graph convolution (Verma et al., CVPR 2018) over a sparse neighbourhood.

    The variables follow the paper and `tensorflow_graphics.nn.layer.graph_convolution.
    FeatureSteeredConvolutionKerasLayer`: u, v [C, W], c [W], W [W, C, D], b [D]. With
    `translation_invariant=True` there is no separate v: v = -u at every step, so the
    weights q_m depend on x_j - x_i only.

    Call arguments:
      data: float32 [A1, ..., An, V, C] vertex features.
      neighbors: SparseTensor [A1, ..., An, V, V'] of adjacency weights (the row-normalised
        1-ring with self-edges for a mesh), or, for the implementations in
        `meshseg.nn.ops.NEIGHBOR_TABLE_IMPLS` and 2-D data, a `meshseg.batch.NeighborTable`.
      sizes: optional int32 [A1, ..., An] vertex counts of padded graphs.

    Returns float32 [A1, ..., An, V, D].

    Args:
      num_weight_matrices: W, the number of weight matrices W_m.
      num_output_channels: D.
      impl: a name from `meshseg.nn.ops.IMPLEMENTATIONS`.
      translation_invariant: tie v = -u.
      initializer: anything `keras.initializers.get` accepts; defaults to
        TruncatedNormal(stddev=0.1) as in tensorflow-graphics.
      regularizer: anything `keras.regularizers.get` accepts, applied to u, v and W.
      xla: use the implementation's XLA-compilable formulation (set when the step runs
        under `jit_compile=True`).
      dtype: a Keras dtype policy; under "mixed_float16" / "mixed_bfloat16" the variables
        stay float32, `gather_matmul` computes in the low precision with its softmax in
        float32, and the implementations in `meshseg.nn.ops.FLOAT32_IMPLS` run in float32.

    Raises:
      ValueError: for an unknown `impl` or non-positive sizes.
      TypeError: (at call) for a `NeighborTable` passed to a SparseTensor implementation.
    """

    def __init__(self, num_weight_matrices: int, num_output_channels: int,
                 impl: str, translation_invariant: bool = True,
                 initializer=None, regularizer=None, xla: bool = False, **kwargs):
        super().__init__(**kwargs)
        if num_weight_matrices < 1 or num_output_channels < 1:
            raise ValueError("num_weight_matrices and num_output_channels must be positive, got "
                             f"{num_weight_matrices} and {num_output_channels}")
        self._op = get_implementation(impl)
        self.impl = impl
        self.num_weight_matrices = num_weight_matrices
        self.num_output_channels = num_output_channels
        self.translation_invariant = translation_invariant
        self.initializer = keras.initializers.get(
            initializer or keras.initializers.TruncatedNormal(stddev=0.1))
        self.regularizer = keras.regularizers.get(regularizer)
        self.xla = xla

    def build(self, input_shape):
        channels = int(input_shape[-1])
        weights = self.num_weight_matrices

        def add(name, shape, regularized=True):
            return self.add_weight(name=name, shape=shape, initializer=self.initializer,
                                   regularizer=self.regularizer if regularized else None)

        self.var_u = add("var_u", (channels, weights))
        self.var_v = None if self.translation_invariant else add("var_v", (channels, weights))
        self.var_c = add("var_c", (weights,), regularized=False)
        self.var_w = add("var_w", (weights, channels, self.num_output_channels))
        self.var_b = add("var_b", (self.num_output_channels,), regularized=False)

    def call(self, data, neighbors: Union[tf.SparseTensor, NeighborTable],
             sizes: Optional[tf.Tensor] = None):
        if isinstance(neighbors, NeighborTable) and self.impl not in NEIGHBOR_TABLE_IMPLS:
            raise TypeError(f"impl={self.impl!r} takes a SparseTensor, not a NeighborTable")
        variables = [self.var_u, self.var_v, self.var_c, self.var_w, self.var_b]
        dtype = tf.float32 if self.impl in FLOAT32_IMPLS else self.compute_dtype
        data = tf.cast(data, dtype)
        if isinstance(neighbors, NeighborTable):
            overflow = neighbors.overflow_weights
            neighbors = neighbors._replace(
                weights=tf.cast(neighbors.weights, dtype),
                overflow_weights=None if overflow is None else tf.cast(overflow, dtype))
        else:
            neighbors = tf.SparseTensor(neighbors.indices, tf.cast(neighbors.values, dtype),
                                        neighbors.dense_shape)
        var_u, var_v, var_c, var_w, var_b = (
            None if v is None else tf.cast(tf.convert_to_tensor(v), dtype) for v in variables)
        if self.translation_invariant:
            var_v = -var_u
        out = self._op(data, neighbors, sizes, var_u, var_v, var_c, var_w, var_b, xla=self.xla)
        return tf.cast(out, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.num_output_channels,)

    def get_config(self):
        config = super().get_config()
        config.update(
            num_weight_matrices=self.num_weight_matrices,
            num_output_channels=self.num_output_channels,
            impl=self.impl,
            translation_invariant=self.translation_invariant,
            initializer=keras.initializers.serialize(self.initializer),
            regularizer=keras.regularizers.serialize(self.regularizer) if self.regularizer else None,
            xla=self.xla,
        )
        return config


@keras.saving.register_keras_serializable(package="meshseg")
class PointwiseConv1D(keras.layers.Conv1D):
    """`keras.layers.Conv1D(filters, 1)`, a per-vertex dense layer, computed as one matmul.

    The variables are Conv1D's (kernel [1, C, D], bias [D]), so weights, checkpoints and the
    values are those of the tensorflow-graphics demo's 1x1 Conv1D layers. Only the op
    differs: [N, C] x [C, D] with N = A1 * ... * An vertices instead of a convolution, whose
    gradient w.r.t. the kernel XLA on CPU computes as a convolution over transposed copies
    of the activations (a whole demo train step under XLA took 11-17% longer that way);
    the matmul is `meshseg.nn.ops.vertex_matmul` and the bias `add_bias` (faster gradients).

    Call: float [A1, ..., An, C] -> [A1, ..., An, D] (`activation` applied).

    Args:
      filters: D.
      **kwargs: as for `keras.layers.Conv1D` (activation, use_bias, initializers, dtype,
        name, ...); `kernel_size` is always 1 and `strides`, `padding` and `dilation_rate`
        keep their defaults.
    """

    def __init__(self, filters: int, **kwargs):
        kwargs.pop("kernel_size", None)
        super().__init__(filters, 1, **kwargs)

    def call(self, inputs):
        channels = tf.shape(inputs)[-1]
        flat = vertex_matmul(tf.reshape(inputs, [-1, channels]),
                             tf.cast(self.kernel[0], inputs.dtype))
        if self.use_bias:
            flat = add_bias(flat, self.bias)
        outputs = tf.reshape(flat, tf.concat([tf.shape(inputs)[:-1], [self.filters]], axis=0))
        return self.activation(outputs)


@keras.saving.register_keras_serializable(package="meshseg")
class PhiloxDropout(keras.layers.Dropout):
    """`keras.layers.Dropout` whose mask is drawn by the Philox generator, named explicitly.

    Keras draws the mask with `tf.nn.experimental.stateless_dropout`, i.e.
    `tf.random.stateless_uniform` with its default algorithm ("auto_select"), which under
    XLA on CPU is 40-50x slower than `alg="philox"`
    (docs/experiments/2026-12-01-unet-under-xla-philox-dropout.md). The layer, its seed generator
    and its variables are Dropout's; only the generator differs, so masks differ from
    Keras' for the same seed, and are as reproducible.

    Call: float [A1, ..., An, C] -> the same shape: in training, each entry zeroed with
    probability `rate` and the others scaled by 1 / (1 - rate) (all zero for rate 1);
    unchanged otherwise.

    Args:
      rate: the probability in [0, 1] of zeroing an entry.
      **kwargs: as for `keras.layers.Dropout` (name, dtype, seed), without `noise_shape`.

    Raises:
      ValueError: for a `noise_shape` (the mask always has the input's shape), or (from
        Keras) a rate outside [0, 1].
    """

    def __init__(self, rate: float, **kwargs):
        if kwargs.get("noise_shape") is not None:
            raise ValueError("PhiloxDropout draws one mask entry per input entry; "
                             "noise_shape is not supported")
        super().__init__(rate, **kwargs)

    def call(self, inputs, training=False):
        if not training or self.rate == 0:
            return inputs
        if self.rate >= 1:
            return inputs * tf.zeros([], inputs.dtype)  # zero, with a zero gradient
        seed = tf.cast(self.seed_generator.next(), tf.int64)
        uniform = tf.random.stateless_uniform(tf.shape(inputs), seed, alg="philox")
        keep = uniform >= self.rate
        return tf.where(keep, inputs / tf.cast(1.0 - self.rate, inputs.dtype),
                        tf.zeros_like(inputs))

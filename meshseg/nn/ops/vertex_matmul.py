"""The per-vertex dense product x w with a faster weight gradient, and with its bias and
ReLU in one op."""

from contextlib import nullcontext
from typing import Optional

import tensorflow as tf


def _in_forward_scope(forward_scope: str):
    """The name scope of the forward product, for its gradient's ops (as TensorFlow names
    its own gradients, so a profile attributes them to the layer:
    `meshseg.tools.profile_summary`)."""
    return tf.name_scope(forward_scope + "/") if forward_scope else nullcontext()


def _weight_gradient(x, dy):
    """dL/dw = x^T dy computed as (dy^T x)^T (see `vertex_matmul`)."""
    return tf.transpose(tf.matmul(dy, x, transpose_a=True))


@tf.custom_gradient
def vertex_matmul(x: tf.Tensor, w: tf.Tensor) -> tf.Tensor:
    """y = x w for x [N, C] (one row per vertex, N >> C) and w [C, D], any float dtype:
    `tf.matmul`'s values and gradients.

    Only the op of the weight gradient differs: dL/dw = x^T dy reduces over the N rows of
    a transposed [N, C] operand, and is computed as (dy^T x)^T, a [D, C] product
    transposed. On this CPU (batch 8 x 10,242 vertices, W*C -> D of the demo's layers)
    that took 13 / 29 / 100 ms against 17 / 42 / 131 ms for x^T dy (docs/performance.md).

    The gradient's ops are named in the forward product's scope (the layer's), as
    TensorFlow's own gradients are.

    Returns:
      [N, D] of x's dtype.
    """
    forward_scope = tf.get_current_name_scope()

    def grad(dy):
        with _in_forward_scope(forward_scope):
            return tf.matmul(dy, w, transpose_b=True), _weight_gradient(x, dy)

    return tf.matmul(x, w), grad


@tf.custom_gradient
def _matmul_bias(x, w, b):
    forward_scope = tf.get_current_name_scope()

    def grad(dy):
        with _in_forward_scope(forward_scope):
            return (tf.matmul(dy, w, transpose_b=True), _weight_gradient(x, dy),
                    tf.raw_ops.BiasAddGrad(out_backprop=dy))

    return tf.nn.bias_add(tf.matmul(x, w), b), grad


@tf.custom_gradient
def _matmul_bias_relu(x, w, b):
    forward_scope = tf.get_current_name_scope()
    y = tf.nn.relu(tf.nn.bias_add(tf.matmul(x, w), b))

    def grad(dy):
        with _in_forward_scope(forward_scope):
            dy = tf.raw_ops.ReluGrad(gradients=dy, features=y)  # y > 0 where x w + b > 0
            return (tf.matmul(dy, w, transpose_b=True), _weight_gradient(x, dy),
                    tf.raw_ops.BiasAddGrad(out_backprop=dy))

    return y, grad


def vertex_dense(x: tf.Tensor, w: tf.Tensor, b: Optional[tf.Tensor] = None,
                 relu: bool = False) -> tf.Tensor:
    """y = x w + b, then ReLU if `relu`, for x [N, C], w [C, D], b [D] of one float dtype:
    the values and gradients of `tf.nn.relu(tf.matmul(x, w) + b)`.

    The product, its bias and its ReLU are written as MatMul, BiasAdd and Relu inside one
    gradient function, so TensorFlow's graph optimiser (Grappler's remapper, oneDNN on
    CPU) runs them as one fused product that writes y once instead of three passes over
    [N, D]; the backward uses ReluGrad, BiasAddGrad and `vertex_matmul`'s weight gradient.
    A [81,936, 128] x [128, 256] layer with bias and ReLU, forward and backward in one
    `tf.function`, took 0.91x the time of the unfused ops on this CPU
    (docs/performance.md).

    Returns:
      [N, D] of x's dtype.
    """
    if b is None and not relu:
        return vertex_matmul(x, w)
    if b is None:
        b = tf.zeros(tf.shape(w)[1:], x.dtype)
    return (_matmul_bias_relu if relu else _matmul_bias)(x, w, b)

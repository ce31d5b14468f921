"""The per-vertex dense product x w and its bias, with faster gradients."""

from contextlib import nullcontext

import tensorflow as tf


def _forward_scope():
    """A factory of context managers, called inside a gradient function (which TensorFlow
    runs in the backward's scope), that name ops in the name scope current when
    `_forward_scope` was called, so that a profile attributes a custom gradient's ops to
    the forward layer (`meshseg.tools.profile_summary`)."""
    scope = tf.get_current_name_scope()
    return (lambda: tf.name_scope(scope + "/")) if scope else nullcontext


@tf.custom_gradient
def vertex_matmul(x: tf.Tensor, w: tf.Tensor) -> tf.Tensor:
    """y = x w for x [N, C] (one row per vertex, N >> C) and w [C, D], any float dtype:
    `tf.matmul`'s values and gradients.

    Only the op of the weight gradient differs: dL/dw = x^T dy reduces over the N rows of
    a transposed [N, C] operand, and is computed as (dy^T x)^T, a [D, C] product
    transposed: 22-30% faster on this CPU (docs/experiments/2026-12-01-weight-gradient.md).

    The gradient's ops are named in the forward product's scope (the layer's), as
    TensorFlow's own gradients are, so a profile attributes them to the layer
    (`meshseg.tools.profile_summary`).

    Returns:
      [N, D] of x's dtype.
    """
    forward_scope = _forward_scope()

    def grad(dy):
        with forward_scope():
            dx = tf.matmul(dy, w, transpose_b=True)
            dw = tf.transpose(tf.matmul(dy, x, transpose_a=True))
        return dx, dw

    return tf.matmul(x, w), grad


def add_bias(y: tf.Tensor, bias: tf.Tensor) -> tf.Tensor:
    """y + bias for y [N, D] (one row per vertex) and bias [D] (cast to y's dtype): the
    values and gradients of the broadcast add.

    Only the op of the bias gradient differs: dL/dbias = sum over the N rows of dy, a
    column sum that TensorFlow's CPU `Sum` computes slowly for N >> D; it is computed as
    the product of a row of N ones and dy ([1, N] x [N, D]), 3-4x faster on this CPU
    (docs/experiments/2026-12-05-backward-sums-bias-gradient-reverse-slots.md). The
    forward add stays a plain add, which
    TensorFlow's graph optimizer fuses into the preceding matmul.

    Returns:
      [N, D] of y's dtype.
    """
    forward_scope = _forward_scope()

    @tf.custom_gradient
    def add(y, bias):
        def grad(dy):
            with forward_scope():
                ones = tf.ones(tf.stack([1, tf.shape(dy)[0]]), dy.dtype)
                return dy, tf.reshape(tf.matmul(ones, dy), [-1])
        return y + bias, grad

    return add(y, tf.cast(bias, y.dtype))

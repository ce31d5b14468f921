"""The train step: forward, masked loss, backward and update in one `tf.function`.

The one train step of meshseg: the custom loop, `impl=auto`, the input-bound check and the
benchmark all run it (the Keras loop runs Keras' own step with the same loss).
"""

import statistics
import time
from typing import Iterable

import keras
import tensorflow as tf

from meshseg.batch import real_vertices, without_mesh_ids
from meshseg.train.distribute import is_replicated
from meshseg.train.metrics import correct_vertices, masked_cross_entropy


class TrainStep:
    """One optimisation step, run on every replica of `strategy` and counted.

    The loss is the masked cross-entropy of the global batch: each replica divides its sum
    of per-vertex losses by the number of real vertices over all replicas, and the
    optimizer sums the replicas' gradients. Without replication the update is applied only
    when the loss and every gradient are finite, so a bad batch leaves the weights as they
    were (`guarded`). With a `keras.optimizers.LossScaleOptimizer` (mixed_float16) the loss
    is scaled, and only a non-finite loss counts as bad.

    Args:
      model: the network, built in `strategy.scope()`; its trainable variables are updated.
      optimizer: a Keras optimizer.
      jit: compile the whole step (forward, backward, update) with XLA.
      strategy: the `tf.distribute.Strategy` the step runs under; TensorFlow's default
        strategy (`tf.distribute.get_strategy()` outside any scope) for one device.

    Call: `(features, labels) -> (loss, accuracy, finite, num_vertices)` for the global
    batch (features and labels as `meshseg.batch` defines them): float32 scalars, a bool
    scalar and the number of real vertices. `traces` counts how often the step was traced
    (each trace is followed by a compilation).
    """

    def __init__(self, model: keras.Model, optimizer: keras.optimizers.Optimizer, jit: bool,
                 strategy: tf.distribute.Strategy):
        self.model = model
        self.optimizer = optimizer
        self.strategy = strategy
        # Replicated updates synchronise (merge) across replicas, which cannot happen
        # inside a tf.cond: only an unreplicated step skips a non-finite update.
        self.guarded = not is_replicated(strategy)
        self.scaling = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
        self.traces = 0
        self._step = tf.function(self._train_step, jit_compile=jit, reduce_retracing=not jit)

    def loss_and_gradients(self, features, labels):
        """The forward and backward pass of one replica, without the update.

        Returns:
          (loss, total_loss, gradients, logits, num_vertices): the replica's share of the
          global batch's masked cross-entropy (float32 scalar); that plus any model losses
          (scaled, under loss scaling); the gradients of `total_loss` w.r.t. the trainable
          variables; the logits [B, V, K]; the real vertices of the global batch.
        """
        context = tf.distribute.get_replica_context()
        valid = real_vertices(labels)
        num_vertices = context.all_reduce(tf.distribute.ReduceOp.SUM, tf.reduce_sum(valid))
        with tf.GradientTape() as tape:
            logits = self.model(features, training=True)
            loss = masked_cross_entropy(labels, logits) * tf.reduce_sum(valid) / num_vertices
            total_loss = loss + tf.add_n(self.model.losses) if self.model.losses else loss
            if self.scaling:
                total_loss = self.optimizer.scale_loss(total_loss)
        gradients = tape.gradient(total_loss, self.model.trainable_variables)
        return loss, total_loss, gradients, logits, num_vertices

    def _replica_step(self, features, labels):
        loss, total_loss, gradients, logits, num_vertices = self.loss_and_gradients(
            features, labels)
        variables = self.model.trainable_variables
        # With loss scaling, non-finite gradients are expected now and then: the
        # LossScaleOptimizer skips those updates and lowers the scale itself.
        checked = [loss] if self.scaling else [total_loss] + gradients
        finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(t)) for t in checked])
        if not self.optimizer.built:  # its variables must exist outside the tf.cond below
            self.optimizer.build(variables)
        if self.guarded:
            tf.cond(finite, lambda: self._apply(gradients, variables), lambda: tf.constant(False))
        else:
            self._apply(gradients, variables)
        accuracy = correct_vertices(labels, logits) / num_vertices
        return loss, accuracy, 1.0 - tf.cast(finite, tf.float32), num_vertices

    def _apply(self, gradients, variables):
        self.optimizer.apply_gradients(zip(gradients, variables))
        return tf.constant(True)

    def _train_step(self, features, labels):
        self.traces += 1
        results = self.strategy.run(self._replica_step, args=(features, labels))
        loss, accuracy, bad = (self.strategy.reduce(tf.distribute.ReduceOp.SUM, r, axis=None)
                               for r in results[:3])
        num_vertices = self.strategy.experimental_local_results(results[3])[0]
        return loss, accuracy, bad == 0, num_vertices

    def __call__(self, features, labels):
        return self._step(without_mesh_ids(features), labels)


def median_step_ms(train_step: TrainStep, batches: Iterable) -> float:
    """Median wall time (ms) of `train_step` over (features, labels) `batches`, each step
    synchronised on its loss."""
    times = []
    for features, labels in batches:
        start = time.perf_counter()
        float(train_step(features, labels)[0])
        times.append(1e3 * (time.perf_counter() - start))
    return statistics.median(times)

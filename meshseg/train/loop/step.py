"""The train step: forward, masked loss, backward and update in one `tf.function`.

The one train step of meshseg: the custom loop, `impl=auto`, the input-bound check and the
benchmark all run it (the Keras loop runs Keras' own step with the same loss).
"""

import statistics
import time
from typing import Callable, Iterable, Optional

import keras
import tensorflow as tf

from meshseg.batch import real_vertices, without_mesh_ids
from meshseg.train.device.distribute import is_replicated
from meshseg.train.loop.metrics import correct_vertices, masked_cross_entropy


class TrainStep:
    """One optimisation step, run on every replica of `strategy` and counted.

    The loss is the masked cross-entropy of the global batch: each replica divides its sum
    of per-vertex losses by the number of real vertices over all replicas, and the
    optimizer sums the replicas' gradients. The update is applied only when the loss and
    every gradient are finite on every replica: the replicas (of every worker) all-reduce
    their count of non-finite results, and the update runs in a `tf.cond` on that count,
    in cross-replica context (where a replicated update, which merges across replicas, may
    sit in a branch; Keras' `LossScaleOptimizer` does the same), so all of them skip a bad
    batch and the weights and the optimizer's state stay as they were. With a
    `keras.optimizers.LossScaleOptimizer` (mixed_float16) the loss is scaled, and only a
    non-finite loss counts as bad.

    With `jit`, XLA compiles the whole step without replication. With replication it
    compiles each replica's forward and backward pass (`jit_compile` inside
    `strategy.run`), since the replicas' all-reduce and update are merged outside XLA;
    `replica_traces` counts those traces (one per input shape, i.e. per bucket, and per
    replica at most).

    Args:
      model: the network, built in `strategy.scope()`; its trainable variables are updated.
      optimizer: a Keras optimizer; under replication built in `strategy.scope()`
        (without, it is built at the first step, once the model's variables exist).
      jit: compile with XLA, as above.
      strategy: the `tf.distribute.Strategy` the step runs under; TensorFlow's default
        strategy (`tf.distribute.get_strategy()` outside any scope) for one device.
      loss: the per-batch loss `(labels, logits) -> float32 scalar` over real vertices
        (`meshseg.train.loop.metrics.MaskedCrossEntropy`, with the run's label smoothing and
        class weights); default: the plain masked cross-entropy.
      signature: the `(features, labels)` element spec of the batches (a padded
        `tf.data.Dataset`'s `element_spec`). Without XLA and replication the step is
        traced once for it, its unknown dimensions (batch, vertices, edges, per level)
        left unknown, instead of once per padded shape (each trace of the multi-scale
        network took 20-30 s). Under XLA the step is specialised per shape anyway (one
        compilation per bucket). None: traced per shape, with `reduce_retracing`.

    Call: `(features, labels, stop=False) -> (loss, accuracy, finite, num_vertices,
    stopping)` for the global batch (features and labels as `meshseg.batch` defines them):
    float32 scalars, a bool scalar (False: the update was skipped), the number of real
    vertices, and whether any worker passed `stop=True` (a stop signal; all-reduced with
    the step's results, so every worker of a multi-worker run stops after the same step).
    `traces` counts how often the step was traced (each trace is followed by a compilation).
    The step's ops are named by part (`tf.name_scope`): forward, loss, backward, guard (the
    finiteness check), metrics and update, which a profile
    (`meshseg.tools.profile_summary`) attributes time by.
    """

    def __init__(self, model: keras.Model, optimizer: keras.optimizers.Optimizer, jit: bool,
                 strategy: tf.distribute.Strategy, loss: Optional[Callable] = None,
                 signature: Optional[tuple] = None):
        self.model = model
        self.loss = loss or masked_cross_entropy
        self.optimizer = optimizer
        self.strategy = strategy
        self.scaling = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
        self.traces = 0
        self.replica_traces = 0
        replicated = is_replicated(strategy)
        self._replica_pass = (tf.function(self._forward_backward_checked, jit_compile=True)
                              if jit and replicated else self._forward_backward_checked)
        if signature is not None and not jit and not replicated:
            features, labels = signature
            self._step = tf.function(self._train_step, input_signature=(
                without_mesh_ids(features), labels, tf.TensorSpec([], tf.float32)))
        else:
            self._step = tf.function(self._train_step, jit_compile=jit and not replicated,
                                     reduce_retracing=not jit)

    def forward_backward(self, features, labels, num_vertices):
        """The forward and backward pass of one replica, without the update.

        Args:
          num_vertices: the real vertices of the global batch (float32 scalar).

        Returns:
          (loss, total_loss, gradients, logits): the replica's share of the global batch's
          masked cross-entropy (float32 scalar); that plus any model losses (scaled, under
          loss scaling); the gradients of `total_loss` w.r.t. the trainable variables; the
          logits [B, V, K].
        """
        valid = real_vertices(labels)
        with tf.GradientTape() as tape:
            with tf.name_scope("forward"):
                logits = self.model(features, training=True)
            with tf.name_scope("loss"):
                loss = self.loss(labels, logits) * tf.reduce_sum(valid) / num_vertices
                total_loss = loss + tf.add_n(self.model.losses) if self.model.losses else loss
                if self.scaling:
                    total_loss = self.optimizer.scale_loss(total_loss)
        with tf.name_scope("backward"):
            gradients = tape.gradient(total_loss, self.model.trainable_variables)
        return loss, total_loss, gradients, logits

    def loss_and_gradients(self, features, labels):
        """`forward_backward` of one replica, with the global batch's real vertices
        all-reduced; returns (loss, total_loss, gradients, logits, num_vertices)."""
        num_vertices = tf.distribute.get_replica_context().all_reduce(
            tf.distribute.ReduceOp.SUM, tf.reduce_sum(real_vertices(labels)))
        return (*self.forward_backward(features, labels, num_vertices), num_vertices)

    def _forward_backward_checked(self, features, labels, num_vertices):
        self.replica_traces += 1
        loss, total_loss, gradients, logits = self.forward_backward(features, labels,
                                                                    num_vertices)
        # With loss scaling, non-finite gradients are expected now and then: the
        # LossScaleOptimizer skips those updates and lowers the scale itself.
        checked = [loss] if self.scaling else [total_loss] + gradients
        with tf.name_scope("guard"):
            finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(t)) for t in checked])
        with tf.name_scope("metrics"):
            correct = correct_vertices(labels, logits)
        return loss, gradients, correct, 1.0 - tf.cast(finite, tf.float32)

    def _replica_step(self, features, labels, stop):
        num_vertices = tf.distribute.get_replica_context().all_reduce(
            tf.distribute.ReduceOp.SUM, tf.reduce_sum(real_vertices(labels)))
        loss, gradients, correct, bad = self._replica_pass(features, labels, num_vertices)
        # (an identity per replica, so that the replicas' values are reduced, not merged)
        return loss, correct / num_vertices, bad, tf.identity(stop), num_vertices, gradients

    def _apply(self, gradients):
        self.optimizer.apply_gradients(zip(gradients, self.model.trainable_variables))

    def _train_step(self, features, labels, stop):
        self.traces += 1
        results = self.strategy.run(self._replica_step, args=(features, labels, stop))
        if not self.optimizer.built:  # its variables must exist outside the tf.cond below
            self.optimizer.build(self.model.trainable_variables)
        loss, accuracy, bad, stops = (
            self.strategy.reduce(tf.distribute.ReduceOp.SUM, r, axis=None) for r in results[:4])
        finite = bad == 0

        def apply():
            self.strategy.run(self._apply, args=(results[5],))
            return tf.constant(True)

        with tf.name_scope("update"):
            tf.cond(finite, apply, lambda: tf.constant(False))
        num_vertices = self.strategy.experimental_local_results(results[4])[0]
        return loss, accuracy, finite, num_vertices, stops > 0

    def __call__(self, features, labels, stop: bool = False):
        return self._step(without_mesh_ids(features), labels, tf.constant(float(stop)))

    def concrete_function(self, features, labels):
        """The step traced for this batch (counted in `traces`), without running it."""
        return self._step.get_concrete_function(without_mesh_ids(features), labels,
                                                tf.constant(0.0))

    def compiler_ir(self, features, labels, stage: str = "hlo") -> str:
        """XLA's IR of the whole step for this batch (`jit` without replication only).

        Raises:
          tf.errors.InvalidArgumentError: an op of the step has no XLA kernel (it would
            run outside the compiled cluster).
        """
        return self._step.experimental_get_compiler_ir(
            without_mesh_ids(features), labels, tf.constant(0.0))(stage=stage)


def median_step_ms(train_step: TrainStep, batches: Iterable) -> float:
    """Median wall time (ms) of `train_step` over (features, labels) `batches`, each step
    synchronised on its loss."""
    times = []
    for features, labels in batches:
        start = time.perf_counter()
        float(train_step(features, labels)[0])
        times.append(1e3 * (time.perf_counter() - start))
    return statistics.median(times)

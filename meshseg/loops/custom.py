"""The custom training loop: a GradientTape step in a `tf.function`, optionally XLA-compiled."""

import statistics
import time
from typing import Callable, Dict, Optional

import keras
import tensorflow as tf

from meshseg.checkpoints import StopSignals, TrainingCheckpoint
from meshseg.data.pipeline import LABEL_PADDING, without_mesh_ids
from meshseg.loops.after_step import AfterStep
from meshseg.errors import NonFiniteError
from meshseg.metrics import masked_cross_entropy
from meshseg.summaries import RunLogger


class TrainStep:
    """One optimisation step, run on every replica of `strategy` and counted.

    The loss is the masked cross-entropy of the global batch: each replica divides its sum
    of per-vertex losses by the number of real vertices over all replicas, and the
    optimizer sums the replicas' gradients. Without replication the update is applied only
    when the loss and every gradient are finite, so a bad batch leaves the weights as they
    were. With a `keras.optimizers.LossScaleOptimizer` (mixed_float16) the loss is scaled,
    and only a non-finite loss counts as bad.

    Args:
      model: the network, built in `strategy.scope()`; its trainable variables are updated.
      optimizer: a Keras optimizer.
      jit: compile the whole step (forward, backward, update) with XLA.
      strategy: a `tf.distribute.Strategy`; None: no distribution (the default strategy).

    Call: `(features, labels) -> (loss, accuracy, finite, num_vertices)` for the global
    batch: float32 scalars, a bool scalar and the number of real vertices. `traces` counts
    how often the step was traced (each trace is followed by a compilation).
    """

    def __init__(self, model: keras.Model, optimizer: keras.optimizers.Optimizer, jit: bool,
                 strategy: Optional[tf.distribute.Strategy] = None):
        self.model = model
        self.optimizer = optimizer
        self.strategy = strategy or tf.distribute.get_strategy()
        # Replicated updates synchronise (merge) across replicas, which cannot happen
        # inside a tf.cond: only an undistributed step skips a non-finite update.
        self.guarded = strategy is None
        self.traces = 0
        self._step = tf.function(self._train_step, jit_compile=jit, reduce_retracing=not jit)

    def _replica_step(self, features, labels):
        context = tf.distribute.get_replica_context()
        valid = tf.cast(labels != LABEL_PADDING, tf.float32)
        num_vertices = context.all_reduce(tf.distribute.ReduceOp.SUM, tf.reduce_sum(valid))
        scaling = isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer)
        with tf.GradientTape() as tape:
            logits = self.model(features, training=True)
            loss = masked_cross_entropy(labels, logits) * tf.reduce_sum(valid) / num_vertices
            total_loss = loss + tf.add_n(self.model.losses) if self.model.losses else loss
            if scaling:
                total_loss = self.optimizer.scale_loss(total_loss)
        variables = self.model.trainable_variables
        gradients = tape.gradient(total_loss, variables)
        # With loss scaling, non-finite gradients are expected now and then: the
        # LossScaleOptimizer skips those updates and lowers the scale itself.
        checked = [loss] if scaling else [total_loss] + gradients
        finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(t)) for t in checked])
        if not self.optimizer.built:  # its variables must exist outside the tf.cond below
            self.optimizer.build(variables)
        if self.guarded:
            tf.cond(finite, lambda: self._apply(gradients, variables), lambda: tf.constant(False))
        else:
            self._apply(gradients, variables)
        hits = tf.cast(tf.argmax(logits, -1, output_type=tf.int32) == labels, tf.float32)
        return loss, tf.reduce_sum(hits * valid) / num_vertices, 1.0 - tf.cast(finite, tf.float32), num_vertices

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


def median_step_ms(train_step: TrainStep, batches) -> float:
    """Median wall time (ms) of `train_step` over (features, labels) `batches`, each step
    synchronised on its loss."""
    times = []
    for features, labels in batches:
        start = time.perf_counter()
        float(train_step(features, labels)[0])
        times.append(1e3 * (time.perf_counter() - start))
    return statistics.median(times)


def train_custom(model: keras.Model, optimizer: keras.optimizers.Optimizer, dataset: tf.data.Dataset,
                 steps: int, eval_every: int, jit: bool, logger: RunLogger,
                 run_eval: Callable[[], Dict[str, float]], run_dir: str, checkpoint_every: int,
                 checkpoints_kept: int,
                 strategy: Optional[tf.distribute.Strategy] = None) -> None:
    """Trains for `steps` steps of the repeated `dataset`, resuming from the latest checkpoint.

    Evaluates every `eval_every` steps and at the end; saves a checkpoint (model, optimizer,
    step, input position) every `checkpoint_every` steps, at the end, and on SIGINT/SIGTERM.
    Under a distribution `strategy` the dataset's global batches are split over the
    replicas (and sharded over workers); `model` and `optimizer` must have been built in
    its scope. `strategy=None` trains without distribution.

    Raises:
      NonFiniteError: at the first step with a non-finite loss or gradient (without
        replication its update is not applied; no checkpoint is written after it).
      Interrupted: after SIGINT/SIGTERM, once the checkpoint is saved.
    """
    train_step = TrainStep(model, optimizer, jit, strategy)
    strategy = train_step.strategy
    batches = iter(strategy.experimental_distribute_dataset(dataset))
    # A distributed iterator cannot be checkpointed: under a strategy with replicas a
    # resumed run restarts the (seeded) input stream.
    trackable = batches if isinstance(batches, tf.data.Iterator) else None
    checkpoint = TrainingCheckpoint(run_dir, model, optimizer, trackable, checkpoints_kept)
    start_step = checkpoint.restore_latest()
    with StopSignals() as signals:
        after_step = AfterStep(steps, eval_every, checkpoint_every, logger, run_eval, checkpoint,
                               signals)
        for step in range(start_step + 1, steps + 1):
            features, labels = next(batches)
            traces = train_step.traces
            start = time.perf_counter()
            loss, accuracy, finite, num_vertices = train_step(features, labels)
            loss = float(loss)  # waits for the step to finish
            seconds = time.perf_counter() - start
            if not bool(finite):
                applied = "was applied (replicated)" if not train_step.guarded else "was not applied"
                raise NonFiniteError(
                    f"step {step}: non-finite loss ({loss}) or gradient; the update {applied}. "
                    f"Batch: {describe_batch(strategy, features)}. Last good checkpoint: "
                    f"{checkpoint.manager.latest_checkpoint or 'none'}")
            logger.log_step(step, loss, float(accuracy), seconds, int(num_vertices),
                            compiled=train_step.traces > traces)
            after_step(step)


def describe_batch(strategy: tf.distribute.Strategy, features: Dict[str, tf.Tensor]) -> str:
    """The meshes of this worker's part of a batch, by id when the pipeline provides one,
    else by vertex count."""
    def gather(key):
        return [item for part in strategy.experimental_local_results(features[key])
                for item in part.numpy().tolist()]

    if "mesh_id" in features:
        return ", ".join(m.decode() for m in gather("mesh_id"))
    counts = gather("num_vertices")
    return f"{len(counts)} meshes with {counts} vertices"

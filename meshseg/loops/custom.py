"""The custom training loop: a GradientTape step in a `tf.function`, optionally XLA-compiled."""

import time
from typing import Callable, Dict, Iterator

import keras
import tensorflow as tf

from meshseg.metrics import PADDING_LABEL, masked_cross_entropy
from meshseg.summaries import RunLogger


def batch_accuracy(labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
    """Per-vertex accuracy of one batch over real vertices (float32 scalar)."""
    valid = tf.cast(labels != PADDING_LABEL, tf.float32)
    hits = tf.cast(tf.argmax(logits, -1, output_type=tf.int32) == labels, tf.float32)
    return tf.math.divide_no_nan(tf.reduce_sum(hits * valid), tf.reduce_sum(valid))


class TrainStep:
    """One optimisation step, traced once per input signature and counted.

    Args:
      model: the network; its trainable variables are updated.
      optimizer: a Keras optimizer.
      jit: compile the whole step (forward, backward, update) with XLA.

    Call: `(features, labels) -> (loss, accuracy)` float32 scalars. `traces` counts how
    often the step was traced (each trace is followed by a compilation).
    """

    def __init__(self, model: keras.Model, optimizer: keras.optimizers.Optimizer, jit: bool):
        self.model = model
        self.optimizer = optimizer
        self.traces = 0
        self._step = tf.function(self._train_step, jit_compile=jit, reduce_retracing=not jit)

    def _train_step(self, features, labels):
        self.traces += 1
        with tf.GradientTape() as tape:
            logits = self.model(features, training=True)
            loss = masked_cross_entropy(labels, logits)
            total_loss = loss + tf.add_n(self.model.losses) if self.model.losses else loss
        variables = self.model.trainable_variables
        self.optimizer.apply_gradients(zip(tape.gradient(total_loss, variables), variables))
        return loss, batch_accuracy(labels, logits)

    def __call__(self, features, labels):
        return self._step(features, labels)


def train_custom(model: keras.Model, optimizer: keras.optimizers.Optimizer,
                 batches: Iterator, steps: int, eval_every: int, jit: bool,
                 logger: RunLogger, run_eval: Callable[[], Dict[str, float]]) -> None:
    """Runs `steps` training steps from `batches`, evaluating every `eval_every` and at the end."""
    train_step = TrainStep(model, optimizer, jit)
    for step in range(1, steps + 1):
        features, labels = next(batches)
        traces = train_step.traces
        start = time.perf_counter()
        loss, accuracy = train_step(features, labels)
        loss = float(loss)  # waits for the step to finish
        seconds = time.perf_counter() - start
        logger.log_step(step, loss, float(accuracy), seconds,
                        int(tf.reduce_sum(features["num_vertices"])),
                        compiled=train_step.traces > traces)
        if step % eval_every == 0 or step == steps:
            logger.log_eval(step, run_eval())

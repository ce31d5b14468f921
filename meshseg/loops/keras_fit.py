"""The Keras loop: `Model.fit` with callbacks that log per-step time and evaluate."""

import time
from typing import Callable, Dict

import keras
import tensorflow as tf

from meshseg.loops.custom import batch_accuracy
from meshseg.metrics import PADDING_LABEL, MaskedCrossEntropy, masked_cross_entropy
from meshseg.summaries import RunLogger


@keras.saving.register_keras_serializable(package="meshseg")
class LastBatch(keras.metrics.Metric):
    """The value of `fn(y_true, y_pred)` on the latest batch (Keras' own `loss` log is a
    running mean over the epoch; per-step logging needs the step's own value)."""

    def __init__(self, fn: Callable, name: str, **kwargs):
        super().__init__(name=name, **kwargs)
        self.fn = fn
        self.value = self.add_variable(shape=(), initializer="zeros", name="value")

    def update_state(self, y_true, y_pred, sample_weight=None):
        self.value.assign(self.fn(y_true, y_pred))

    def result(self):
        return tf.identity(self.value)


class StepLogger(keras.callbacks.Callback):
    """Times each `fit` step and sends loss, accuracy and time to a `RunLogger`.

    The first step of `fit` traces and compiles the train function and is logged as
    compile time. Evaluates at the end of every epoch (`eval_every` steps) and stops
    training after `steps` steps.
    """

    def __init__(self, logger: RunLogger, run_eval: Callable[[], Dict[str, float]], steps: int):
        super().__init__()
        self.logger = logger
        self.run_eval = run_eval
        self.steps = steps
        self.step = 0
        self.start = 0.0

    def on_train_batch_begin(self, batch, logs=None):
        self.start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        loss = float(logs["step_loss"])  # waits for the step to finish
        seconds = time.perf_counter() - self.start
        self.step += 1
        self.logger.log_step(self.step, loss, float(logs["step_accuracy"]), seconds,
                             int(logs["step_vertices"]), compiled=self.step == 1)
        if self.step == self.steps:
            self.model.stop_training = True

    def on_epoch_end(self, epoch, logs=None):
        self.logger.log_eval(self.step, self.run_eval())


def count_vertices(y_true, y_pred) -> tf.Tensor:
    """Number of real (unpadded) vertices in the batch, as float32."""
    return tf.reduce_sum(tf.cast(y_true != PADDING_LABEL, tf.float32))


def train_keras(model: keras.Model, optimizer: keras.optimizers.Optimizer,
                dataset: tf.data.Dataset, steps: int, eval_every: int, jit: bool,
                logger: RunLogger, run_eval: Callable[[], Dict[str, float]]) -> None:
    """Trains with one `Model.fit` call for `steps` steps of the repeated `dataset`.

    One Keras epoch is `eval_every` steps; training stops after exactly `steps` steps.
    Loss and accuracy are those of `train_custom`, step for step.
    """
    model.compile(optimizer=optimizer, loss=MaskedCrossEntropy(), jit_compile=jit,
                  metrics=[LastBatch(masked_cross_entropy, "step_loss"),
                           LastBatch(batch_accuracy, "step_accuracy"),
                           LastBatch(count_vertices, "step_vertices")])
    epochs = -(-steps // eval_every)
    model.fit(dataset, steps_per_epoch=eval_every, epochs=epochs, verbose=0, shuffle=False,
              callbacks=[StepLogger(logger, run_eval, steps)])

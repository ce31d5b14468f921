"""The Keras loop: `Model.fit` with a callback that logs per-step time, evaluates and saves
checkpoints."""

import math
import time
from typing import Callable, Dict

import keras
import tensorflow as tf

from meshseg.checkpoints import StopSignals, TrainingCheckpoint
from meshseg.data.pipeline import LABEL_PADDING, without_mesh_ids
from meshseg.loops.after_step import AfterStep
from meshseg.errors import NonFiniteError
from meshseg.metrics import MaskedCrossEntropy, batch_accuracy, masked_cross_entropy
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


def count_vertices(y_true, y_pred) -> tf.Tensor:
    """Number of real (unpadded) vertices in the batch, as float32."""
    return tf.reduce_sum(tf.cast(y_true != LABEL_PADDING, tf.float32))


class StepLogger(keras.callbacks.Callback):
    """Times each `fit` step, logs it, stops on a non-finite loss, then runs `after_step`
    (evaluation, checkpoints, stop signals).

    The first step of `fit` traces and compiles the train function and is logged as
    compile time.
    """

    def __init__(self, logger: RunLogger, start_step: int, after_step: AfterStep):
        super().__init__()
        self.logger = logger
        self.after_step = after_step
        self.first_step = start_step + 1
        self.step = start_step
        self.start = 0.0

    def on_train_batch_begin(self, batch, logs=None):
        self.start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        loss = float(logs["step_loss"])  # waits for the step to finish
        seconds = time.perf_counter() - self.start
        self.step += 1
        if not math.isfinite(loss):
            raise NonFiniteError(
                f"step {self.step}: non-finite loss ({loss}) in Model.fit (loop=custom names the "
                f"meshes of the batch). Last good checkpoint: "
                f"{self.after_step.checkpoint.manager.latest_checkpoint or 'none'}")
        self.logger.log_step(self.step, loss, float(logs["step_accuracy"]), seconds,
                             int(logs["step_vertices"]), compiled=self.step == self.first_step)
        self.after_step(self.step)


def train_keras(model: keras.Model, optimizer: keras.optimizers.Optimizer,
                dataset: tf.data.Dataset, steps: int, eval_every: int, jit: bool,
                logger: RunLogger, run_eval: Callable[[], Dict[str, float]], run_dir: str,
                checkpoint_every: int, checkpoints_kept: int) -> None:
    """Trains with one `Model.fit` call over the repeated `dataset` up to `steps` steps.

    Loss and accuracy match `train_custom`, step for step. A resumed run restores model,
    optimizer and step from the latest checkpoint; the input stream restarts (Keras owns
    the iterator), so exact replay of an interrupted run is guaranteed by `loop=custom` only.

    Raises:
      NonFiniteError, Interrupted: as `train_custom`.
    """
    model.compile(optimizer=optimizer, loss=MaskedCrossEntropy(), jit_compile=jit,
                  metrics=[LastBatch(masked_cross_entropy, "step_loss"),
                           LastBatch(batch_accuracy, "step_accuracy"),
                           LastBatch(count_vertices, "step_vertices")])
    checkpoint = TrainingCheckpoint(run_dir, model, optimizer, max_to_keep=checkpoints_kept)
    start_step = checkpoint.restore_latest()
    with StopSignals() as signals:
        after_step = AfterStep(steps, eval_every, checkpoint_every, logger, run_eval, checkpoint,
                               signals)
        callback = StepLogger(logger, start_step, after_step)
        features_only = dataset.map(lambda features, labels: (without_mesh_ids(features), labels))
        model.fit(features_only, steps_per_epoch=steps - start_step, epochs=1, verbose=0,
                  shuffle=False, callbacks=[callback])

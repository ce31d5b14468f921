"""The Keras loop: one `Model.fit` call, with a callback that hands every step to the
controller."""

import math
import os
import time
from typing import Callable, Optional, Sequence

import keras
import tensorflow as tf

from meshseg.batch import real_vertices, without_mesh_ids
from meshseg.train.loop.controller import Controller
from meshseg.train.loop.metrics import MaskedCrossEntropy, batch_accuracy
from meshseg.train.logs.profiling import StepProfiler


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
    return tf.reduce_sum(real_vertices(y_true))


class StepCallback(keras.callbacks.Callback):
    """Times each `fit` step and hands it to the controller. The first step of `fit`
    traces and compiles the train function and is logged as compile time. With a
    `profiler`, it starts and stops it around the profiled steps (Keras' own TensorBoard
    callback, which this loop does not use, would do the same with `profile_batch`)."""

    def __init__(self, controller: Controller, profiler: Optional[StepProfiler] = None):
        super().__init__()
        self.controller = controller
        self.profiler = profiler
        self.step = controller.start_step
        self.start = 0.0

    def on_train_batch_begin(self, batch, logs=None):
        if self.profiler is not None:
            self.profiler.step_begin(self.step + 1)
        self.start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        loss = float(logs["step_loss"])  # waits for the step to finish
        seconds = time.perf_counter() - self.start
        self.step += 1
        if self.profiler is not None:
            self.profiler.step_end(self.step)
        if not math.isfinite(loss):
            self.controller.stop_non_finite(
                self.step, loss, "Model.fit applied the update (loop=custom skips it and "
                                 "names the meshes of the batch)")
        self.controller.step_done(self.step, loss, float(logs["step_accuracy"]), seconds,
                                  int(logs["step_vertices"]),
                                  compiled=self.step == self.controller.start_step + 1)


class KerasLoop:
    """Runs the controller's steps with one `Model.fit` call over `dataset`.

    Loss and accuracy match `CustomLoop`, step for step. The input starts at batch
    `controller.start_step` of the seeded stream, so a resumed run replays exactly the
    batches of an uninterrupted one.

    Args:
      model, optimizer: the network and its Keras optimizer (compiled here).
      dataset: repeated `(features, labels)` batches (`meshseg.batch`).
      jit: compile Keras' train function with XLA.
      loss: the run's loss (label smoothing, class weights).
      profile_steps: [start, stop): the steps to profile into `<output dir>/train`
        (`meshseg.train.logs.profiling`); None: no profile.
    """

    def __init__(self, model: keras.Model, optimizer: keras.optimizers.Optimizer,
                 dataset: tf.data.Dataset, jit: bool, loss: MaskedCrossEntropy,
                 profile_steps: Optional[Sequence[int]] = None):
        self.model = model
        self.profile_steps = profile_steps
        model.compile(optimizer=optimizer, loss=loss, jit_compile=jit,
                      metrics=[LastBatch(loss, "step_loss"),
                               LastBatch(batch_accuracy, "step_accuracy"),
                               LastBatch(count_vertices, "step_vertices")])
        self.dataset = dataset.map(lambda features, labels: (without_mesh_ids(features), labels))

    def run(self, controller: Controller) -> None:
        """Runs `controller.remaining_steps` in one `fit` epoch.

        Raises:
          NonFiniteError: at the first step with a non-finite loss.
        """
        with StepProfiler(os.path.join(controller.logger.run_dir, "train"),
                          self.profile_steps) as profiler:
            self.model.fit(self.dataset.skip(controller.start_step),
                           steps_per_epoch=len(controller.remaining_steps), epochs=1,
                           verbose=0, shuffle=False,
                           callbacks=[StepCallback(controller, profiler)])

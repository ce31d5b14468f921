"""The custom loop: `meshseg.train.loop.step.TrainStep` (a GradientTape step in a `tf.function`,
optionally XLA-compiled) over the repeated training data, under any strategy."""

import logging
import os
import statistics
import time
from typing import Dict, Optional, Sequence

import keras
import tensorflow as tf

from meshseg.batch import MESH_ID
from meshseg.train.loop.controller import Controller, Schedule
from meshseg.train.device.distribute import is_replicated, worker_position
from meshseg.train.loop.metrics import MaskedCrossEntropy
from meshseg.train.logs.profiling import StepProfiler
from meshseg.train.loop.step import TrainStep

log = logging.getLogger(__name__)


def periodic(schedule: Schedule, step: int) -> bool:
    """Whether `Controller.step_done` evaluates or checkpoints after `step` on `schedule`
    (besides the last step, and a stop)."""
    return step % schedule.eval_every == 0 or step % schedule.checkpoint_every == 0


class CustomLoop:
    """Runs the controller's steps with `TrainStep` on batches of `dataset`.

    Under a replicating `strategy` the dataset's global batches are split over the replicas
    (and sharded over workers); `model` and `optimizer` must have been built in its scope.
    The input starts at batch `controller.start_step` of the seeded stream, so a resumed
    run replays exactly the batches of an uninterrupted one. The batches are skipped after
    distribution: with input sharded by file, a worker's step takes its replicas' part of
    a batch of its own files, not a global batch (`Dataset.skip` before distribution
    would count global batches). At the end of a replicated run, each worker logs its own
    throughput (meshes/s of its part of the batches, from its median step time), its
    median iteration time and how often the step traced.

    Besides the step (`seconds`, around the `TrainStep` call), the loop times each whole
    iteration: from its start (before the batch is taken from the input) to the start of
    the next, so the input wait, the step and `Controller.step_done`'s logging and
    summaries are in it. An iteration that compiled, or whose step evaluates or
    checkpoints (`periodic`), is not timed; the others are logged as `iteration_time_ms`
    (`RunLogger.log_iteration`) when the next iteration starts. The last step has no next
    iteration (it evaluates and checkpoints anyway).

    Args:
      model, optimizer: the network and its Keras optimizer.
      dataset: repeated `(features, labels)` batches (`meshseg.batch`).
      strategy: the `tf.distribute.Strategy` (the default strategy for one device).
      jit: compile the step with XLA.
      loss: the run's loss (label smoothing, class weights).
      profile_steps: [start, stop): the steps to profile into `<output dir>/train`
        (`meshseg.train.logs.profiling`); None: no profile.
    """

    def __init__(self, model: keras.Model, optimizer: keras.optimizers.Optimizer,
                 dataset: tf.data.Dataset, strategy: tf.distribute.Strategy, jit: bool,
                 loss: MaskedCrossEntropy, profile_steps: Optional[Sequence[int]] = None):
        self.train_step = TrainStep(model, optimizer, jit, strategy, loss,
                                    signature=dataset.element_spec)
        self.strategy = strategy
        self.num_workers = worker_position(strategy)[1]
        self.dataset = dataset
        self.profile_steps = profile_steps

    def run(self, controller: Controller) -> None:
        """Runs `controller.remaining_steps`.

        Raises:
          NonFiniteError: at the first step with a non-finite loss or gradient on any
            replica, naming the meshes of this worker's part of its batch; no replica
            applied its update.
        """
        batches = iter(self.strategy.experimental_distribute_dataset(self.dataset))
        for _ in range(controller.start_step):  # counted in this worker's own batches
            next(batches)
        timed = []  # (seconds, meshes of this worker) of the steps that did not compile
        iterations = []  # seconds of the timed iterations
        open_iteration = None  # (step, start) of the previous iteration, if it is timed
        profiler = StepProfiler(os.path.join(controller.logger.run_dir, "train"),
                                self.profile_steps)
        try:
            for step in controller.remaining_steps:
                began = time.perf_counter()
                if open_iteration is not None:
                    iterations.append(began - open_iteration[1])
                    controller.logger.log_iteration(open_iteration[0], iterations[-1])
                    open_iteration = None
                profiler.step_begin(step)
                features, labels = next(batches)
                traces = self.train_step.traces
                start = time.perf_counter()
                loss, accuracy, finite, num_vertices, stopping = self.train_step(
                    features, labels, stop=controller.signals.received is not None)
                loss = float(loss)  # waits for the step to finish
                seconds = time.perf_counter() - start
                profiler.step_end(step)
                if not bool(finite):
                    controller.stop_non_finite(
                        step, loss, "no replica applied the update. Batch: "
                                    f"{self.describe_batch(features)}")
                compiled = self.train_step.traces > traces
                if not compiled:
                    timed.append((seconds, len(self.local_values(features["num_vertices"]))))
                # Several workers stop after the same step: the first that any of them
                # began with a stop signal received.
                controller.step_done(step, loss, float(accuracy), seconds, int(num_vertices),
                                     compiled=compiled,
                                     stop=bool(stopping) if self.num_workers > 1 else None)
                if not compiled and not periodic(controller.schedule, step):
                    open_iteration = (step, began)
        finally:
            profiler.close()
            if is_replicated(self.strategy):  # one process: the run's summary says it all
                self.log_throughput(timed, iterations)
                log.info("the step traced %d times; its per-replica pass (XLA under jit "
                         "with replicas) traced %d times over %d replicas",
                         self.train_step.traces, self.train_step.replica_traces,
                         self.strategy.num_replicas_in_sync)

    def log_throughput(self, timed, iterations) -> None:
        """Logs this worker's meshes/s (its meshes per step / its median step time) and its
        median iteration time (`iterations`, s; nan without timed iterations)."""
        if not timed:
            return
        index, count = worker_position(self.strategy)
        median_s = statistics.median(seconds for seconds, _ in timed)
        meshes = statistics.median(meshes for _, meshes in timed)
        iteration_s = statistics.median(iterations) if iterations else float("nan")
        log.info("worker %d of %d: %.2f meshes/s (%g meshes per step on this worker, median "
                 "step %.0f ms over %d steps, median iteration %.0f ms over %d)", index, count,
                 meshes / median_s, meshes, 1e3 * median_s, len(timed), 1e3 * iteration_s,
                 len(iterations))

    def local_values(self, tensor) -> list:
        """The values of a per-replica `tensor` on this worker's replicas, concatenated."""
        return [item for part in self.strategy.experimental_local_results(tensor)
                for item in part.numpy().tolist()]

    def describe_batch(self, features: Dict[str, tf.Tensor]) -> str:
        """The meshes of this worker's part of a batch, by id when the pipeline provides
        one, else by vertex count."""
        if MESH_ID in features:
            return ", ".join(m.decode() for m in self.local_values(features[MESH_ID]))
        counts = self.local_values(features["num_vertices"])
        return f"{len(counts)} meshes with {counts} vertices"

"""The custom loop: `meshseg.train.step.TrainStep` (a GradientTape step in a `tf.function`,
optionally XLA-compiled) over the repeated training data, under any strategy."""

import time
from typing import Dict

import keras
import tensorflow as tf

from meshseg.batch import MESH_ID
from meshseg.train.controller import Controller
from meshseg.train.step import TrainStep


class CustomLoop:
    """Runs the controller's steps with `TrainStep` on batches of `dataset`.

    Under a replicating `strategy` the dataset's global batches are split over the replicas
    (and sharded over workers); `model` and `optimizer` must have been built in its scope.
    The input starts at batch `controller.start_step` of the seeded stream, so a resumed
    run replays exactly the batches of an uninterrupted one.

    Args:
      model, optimizer: the network and its Keras optimizer.
      dataset: repeated `(features, labels)` batches (`meshseg.batch`).
      strategy: the `tf.distribute.Strategy` (the default strategy for one device).
      jit: compile the step with XLA.
    """

    def __init__(self, model: keras.Model, optimizer: keras.optimizers.Optimizer,
                 dataset: tf.data.Dataset, strategy: tf.distribute.Strategy, jit: bool):
        self.train_step = TrainStep(model, optimizer, jit, strategy)
        self.strategy = strategy
        self.dataset = dataset

    def run(self, controller: Controller) -> None:
        """Runs `controller.remaining_steps`.

        Raises:
          NonFiniteError: at the first step with a non-finite loss or gradient, naming the
            meshes of its batch (without replication its update is not applied).
        """
        batches = iter(self.strategy.experimental_distribute_dataset(
            self.dataset.skip(controller.start_step)))
        for step in controller.remaining_steps:
            features, labels = next(batches)
            traces = self.train_step.traces
            start = time.perf_counter()
            loss, accuracy, finite, num_vertices = self.train_step(features, labels)
            loss = float(loss)  # waits for the step to finish
            seconds = time.perf_counter() - start
            if not bool(finite):
                applied = ("was not applied" if self.train_step.guarded
                           else "was applied (replicated)")
                controller.stop_non_finite(step, loss, f"the update {applied}. Batch: "
                                                       f"{self.describe_batch(features)}")
            controller.step_done(step, loss, float(accuracy), seconds, int(num_vertices),
                                 compiled=self.train_step.traces > traces)

    def describe_batch(self, features: Dict[str, tf.Tensor]) -> str:
        """The meshes of this worker's part of a batch, by id when the pipeline provides
        one, else by vertex count."""
        def gather(key):
            return [item for part in self.strategy.experimental_local_results(features[key])
                    for item in part.numpy().tolist()]

        if MESH_ID in features:
            return ", ".join(m.decode() for m in gather(MESH_ID))
        counts = gather("num_vertices")
        return f"{len(counts)} meshes with {counts} vertices"

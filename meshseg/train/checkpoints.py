"""Training checkpoints: model, optimizer, step and input position, in `<run_dir>/checkpoints`."""

import os
import signal
from typing import Optional

import keras
import tensorflow as tf

from meshseg.train.rundir import CHECKPOINT_DIR


class TrainingCheckpoint:
    """A `tf.train.CheckpointManager` over the state a resumed run needs.

    Args:
      run_dir: the run directory; checkpoints go to `<run_dir>/checkpoints/ckpt-<step>`.
      model: a built model (its variables exist).
      optimizer: its optimizer; its variables are created here so a restore fills them.
      iterator: optional `tf.data` iterator whose position (and shuffle state) is saved too,
        so a resumed custom loop sees exactly the batches an uninterrupted run would.
      max_to_keep: number of checkpoints kept (older ones are deleted).
    """

    def __init__(self, run_dir: str, model: keras.Model, optimizer: keras.optimizers.Optimizer,
                 iterator: Optional[tf.data.Iterator] = None, max_to_keep: int = 3):
        if not optimizer.built:
            optimizer.build(model.trainable_variables)
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        state = {"model": model, "optimizer": optimizer, "step": self.step}
        if iterator is not None:
            state["iterator"] = iterator
        self.checkpoint = tf.train.Checkpoint(**state)
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, os.path.join(run_dir, CHECKPOINT_DIR), max_to_keep=max_to_keep)

    def restore_latest(self) -> int:
        """Restores the latest checkpoint, if any; returns its step (0 when none)."""
        if self.manager.latest_checkpoint is None:
            return 0
        self.checkpoint.restore(self.manager.latest_checkpoint).assert_existing_objects_matched()
        return int(self.step.numpy())

    def save(self, step: int) -> str:
        """Saves the state after `step` steps; returns the checkpoint path."""
        self.step.assign(step)
        return self.manager.save(checkpoint_number=step)


class StopSignals:
    """Context manager: SIGINT and SIGTERM are recorded in `received` instead of killing the
    process, so the training loop can save a checkpoint and stop after the current step."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.received: Optional[int] = None
        self._previous = {}

    def _handle(self, signum, frame):
        self.received = signum

    def __enter__(self):
        for signum in self.SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc):
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        return False

"""Training checkpoints: model, optimizer, step and input position, in `<run_dir>/checkpoints`."""

import logging
import os
import re
import signal
from typing import List, Optional, Tuple

import keras
import tensorflow as tf

from meshseg.errors import DataError
from meshseg.train.rundir import CHECKPOINT_DIR

log = logging.getLogger(__name__)


CHECKPOINT_INDEX = re.compile(r"^ckpt-(\d+)\.index$")


def checkpoints_on_disk(directory: str) -> List[Tuple[int, str]]:
    """(step, prefix) of every `ckpt-<step>` in `directory`, newest first, found by listing
    the directory (not from its `checkpoint` state file, and not by a glob)."""
    if not os.path.isdir(directory):
        return []
    found = [(int(match[1]), os.path.join(directory, f"ckpt-{match[1]}"))
             for match in map(CHECKPOINT_INDEX.match, os.listdir(directory)) if match]
    return sorted(found, reverse=True)


class TrainingCheckpoint:
    """The state a resumed run needs, in `<run_dir>/checkpoints/ckpt-<step>`, restored on
    construction from the newest intact checkpoint.

    Restore never trusts one file: the checkpoints are found by listing the directory,
    newest first, and the first that restores completely wins; a damaged one (or a damaged
    `checkpoint` state file) is logged and passed over, and the state file is rewritten to
    list the intact ones, so that `tf.train.CheckpointManager` keeps and rotates them. A
    checkpoint that cannot be read is never deleted.

    Args:
      run_dir: the run directory.
      model: a built model (its variables exist).
      optimizer: its optimizer; its variables are created here so a restore fills them.
      iterator: optional `tf.data` iterator whose position (and shuffle state) is saved too,
        so a resumed custom loop sees exactly the batches an uninterrupted run would.
      max_to_keep: number of checkpoints kept (older ones are deleted).

    Attributes:
      restored_step: the step of the restored checkpoint (0 when there was none).
      manager: the `tf.train.CheckpointManager` that saves and rotates checkpoints.

    Raises:
      DataError: if checkpoints exist but none of them restores (naming each and why).
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
        directory = os.path.join(run_dir, CHECKPOINT_DIR)
        self.restored_step = self._restore_newest_intact(directory)
        self.manager = tf.train.CheckpointManager(self.checkpoint, directory,
                                                  max_to_keep=max_to_keep)

    def _restore_newest_intact(self, directory: str) -> int:
        found = checkpoints_on_disk(directory)
        failures = []
        for index, (step, prefix) in enumerate(found):
            try:
                self.checkpoint.restore(prefix).assert_existing_objects_matched()
            except Exception as error:  # a damaged checkpoint raises many types
                reason = (str(error).strip() or "unreadable").splitlines()[0]
                failures.append(f"{os.path.basename(prefix)}: {type(error).__name__}: {reason}")
                log.warning("checkpoint %s does not restore (%s); trying an older one",
                            prefix, failures[-1])
                continue
            intact = [p for _, p in reversed(found[index:])]
            tf.compat.v1.train.update_checkpoint_state(directory, prefix,
                                                       all_model_checkpoint_paths=intact)
            return int(self.step.numpy())
        if failures:
            raise DataError(f"no checkpoint in {directory} restores ({'; '.join(failures)}); "
                            "move them away to train from the start")
        return 0

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

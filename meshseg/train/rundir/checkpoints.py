"""Training checkpoints: model, optimizer and step, in `<run_dir>/checkpoints` or
`checkpoint.dir`."""

import contextlib
import logging
import os
import re
import signal
from typing import List, Optional

import keras
import tensorflow as tf

from meshseg.errors import DataError, OutputError
from meshseg.outputs import write_text, writing
from meshseg.train.rundir.ownership import check_checkpoint_owner, record_checkpoint_owner

log = logging.getLogger(__name__)


CHECKPOINT_FILE = re.compile(r"^ckpt-(\d+)\.(index|data-\d{5}-of-\d{5})$")


def checkpoints_on_disk(directory: str) -> List[int]:
    """The steps of the `ckpt-<step>` checkpoints in `directory`, newest first, found by
    listing the directory (not from its `checkpoint` state file, and not by a glob)."""
    if not os.path.isdir(directory):
        return []
    matches = (CHECKPOINT_FILE.match(name) for name in os.listdir(directory))
    return sorted({int(match[1]) for match in matches if match and match[2] == "index"},
                  reverse=True)


@contextlib.contextmanager
def inside(directory: str):
    """Runs the block with `directory` as the working directory. TensorFlow's checkpoint
    reader treats a path as a glob pattern, so a run directory named like Hydra's
    `override_dirname` of a list (`model.conv_channels=[8,8,16]`) would not be found:
    checkpoints are written and read by their bare names from inside their folder."""
    previous = os.getcwd()
    os.chdir(directory)
    try:
        yield
    finally:
        os.chdir(previous)


class TrainingCheckpoint:
    """The state a resumed run needs, in `<directory>/ckpt-<step>`, restored on
    construction from the newest intact checkpoint: model, optimizer and step. The input
    position is the step itself (the loops replay the seeded input stream up to it), so a
    checkpoint holds no data and its size does not grow with the data set.

    Restore never trusts one file: the checkpoints are found by listing the directory,
    newest first, and the first that restores completely wins (`tf.train.Checkpoint.read`
    of what `write` wrote); a damaged one (or a damaged
    `checkpoint` state file) is logged and passed over, never deleted. Saving keeps the
    newest `max_to_keep` checkpoints and rewrites the state file. Paths may hold glob
    characters (`[`, `]`, `*`, `?`): files are named and removed with Python's `os`, never
    through a pattern.

    A multi-worker run restores every worker from the chief's directory (storage they all
    read), and only the chief writes there: the other workers write their checkpoints,
    which the collective ops need, to a scratch `directory` of their own.

    Args:
      directory: where checkpoints are written.
      model: a built model (its variables exist).
      optimizer: its optimizer; its variables are created here so a restore fills them.
      max_to_keep: number of checkpoints kept (older ones are deleted).
      restore_directory: where checkpoints are restored from (None: `directory`).
      run_dir: the run directory these checkpoints belong to: a restore from a folder that
        holds another run's checkpoints is refused, and the first save records the run in
        `directory` (`meshseg.train.rundir.ownership`); None: no check, no record.

    Attributes:
      directory, restore_directory: as given (`restore_directory` never None).
      restored_step: the step of the restored checkpoint (0 when there was none).

    Raises:
      DataError: if checkpoints exist but none of them restores (naming each and why).
      RunDirError: if `restore_directory` holds another run's checkpoints (naming both).
    """

    def __init__(self, directory: str, model: keras.Model,
                 optimizer: keras.optimizers.Optimizer, max_to_keep: int = 3,
                 restore_directory: Optional[str] = None, run_dir: Optional[str] = None):
        if not optimizer.built:
            optimizer.build(model.trainable_variables)
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        self.checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=self.step)
        self.directory = directory
        self.restore_directory = restore_directory or directory
        self.max_to_keep = max_to_keep
        self.run_dir = run_dir
        if run_dir is not None:
            check_checkpoint_owner(self.restore_directory, run_dir)
        self.restored_step = self._restore_newest_intact()

    @property
    def latest(self) -> Optional[str]:
        """The path of the newest checkpoint on disk (where restores read), or None."""
        steps = checkpoints_on_disk(self.restore_directory)
        return os.path.join(self.restore_directory, f"ckpt-{steps[0]}") if steps else None

    def _restore_newest_intact(self) -> int:
        failures = []
        for step in checkpoints_on_disk(self.restore_directory):
            try:
                with inside(self.restore_directory):
                    self.checkpoint.read(f"ckpt-{step}").assert_existing_objects_matched()
            except Exception as error:  # a damaged checkpoint raises many types
                reason = (str(error).strip() or "unreadable").splitlines()[0]
                failures.append(f"ckpt-{step}: {type(error).__name__}: {reason}")
                log.warning("checkpoint %s does not restore (%s); trying an older one",
                            self.restore_directory, failures[-1])
                continue
            return int(self.step.numpy())
        if failures:
            raise DataError(f"no checkpoint in {self.restore_directory} restores "
                            f"({'; '.join(failures)}); move them away to train from the start")
        return 0

    def save(self, step: int) -> str:
        """Saves the state after `step` steps, keeps the newest `max_to_keep` checkpoints and
        rewrites the state file; returns the checkpoint path.

        Raises:
          OutputError: if the checkpoint cannot be written (a full disk, a read-only
            folder), naming the folder, the step and the cause; the partial files of
            this checkpoint are removed and the older checkpoints stay as they were.
        """
        self.step.assign(step)
        try:
            with writing(self.directory, f"the checkpoint of step {step}",
                         "the older checkpoints are intact: free space and run the same "
                         "command to resume"):
                os.makedirs(self.directory, exist_ok=True)
                if self.run_dir is not None:
                    record_checkpoint_owner(self.directory, self.run_dir)
                with inside(self.directory):
                    self.checkpoint.write(f"ckpt-{step}")
        except OutputError:
            for name in os.listdir(self.directory) if os.path.isdir(self.directory) else ():
                if CHECKPOINT_FILE.match(name) and name.startswith(f"ckpt-{step}."):
                    with contextlib.suppress(OSError):
                        os.remove(os.path.join(self.directory, name))
            raise
        steps = checkpoints_on_disk(self.directory)
        for name in os.listdir(self.directory):
            match = CHECKPOINT_FILE.match(name)
            if match and int(match[1]) in steps[self.max_to_keep:]:
                os.remove(os.path.join(self.directory, name))
        write_state_file(self.directory, [f"ckpt-{s}" for s in reversed(steps[:self.max_to_keep])])
        return os.path.join(self.directory, f"ckpt-{step}")


def write_state_file(directory: str, names: List[str]) -> None:
    """Writes TensorFlow's `checkpoint` state file (a CheckpointState text proto) listing
    `names`, oldest first, the last as the latest, so `tf.train.latest_checkpoint` and
    TensorBoard find them; atomically (temporary file, then rename)."""
    lines = [f'model_checkpoint_path: "{names[-1]}"']
    lines += [f'all_model_checkpoint_paths: "{name}"' for name in names]
    write_text(os.path.join(directory, "checkpoint"), "\n".join(lines) + "\n",
               "the checkpoint state file")


class StopSignals:
    """Context manager: SIGINT and SIGTERM are recorded in `received` instead of killing the
    process, so the training loop can save a checkpoint and stop after the current step
    (and the multi-worker start-up, `meshseg.train.device.distribute.wait_for_workers`, at once)."""

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

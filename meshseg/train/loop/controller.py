"""The controller: everything around the training steps that both loops share.

A loop (`meshseg.train.loop.custom_loop`, `meshseg.train.loop.keras_loop`) only runs steps. The
controller restores the newest intact checkpoint (and with it the step a resumed run
starts from), catches SIGINT/SIGTERM, logs every step, evaluates and saves checkpoints on the
schedule, and turns a non-finite step into a `NonFiniteError` naming the last good
checkpoint. (A checkpoint with a step counter, as tensorflow/models' orbit controller.)
"""

import os
import signal
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Protocol

import keras

from meshseg.errors import Interrupted, NonFiniteError
from meshseg.train.rundir.checkpoints import StopSignals, TrainingCheckpoint
from meshseg.train.rundir.claim import CHECKPOINT_DIR
from meshseg.train.logs.summaries import RunLogger


@dataclass(frozen=True)
class Schedule:
    """When things happen, in steps: train `steps` in all, evaluate every `eval_every`
    and checkpoint every `checkpoint_every` steps (and both at the last step), keep the
    latest `checkpoints_kept` checkpoints."""

    steps: int
    eval_every: int
    checkpoint_every: int
    checkpoints_kept: int


class Loop(Protocol):
    """A training loop: runs the controller's remaining steps, calling `step_done` after
    each. It starts its (seeded, repeated) input at batch `controller.start_step`, so a
    resumed run sees exactly the batches of an uninterrupted one."""

    def run(self, controller: "Controller") -> None: ...


class Controller:
    """Owns checkpoint/restore, the resume step, stop signals, logging and the evaluation
    and checkpoint schedule of one run.

    Args:
      output_dir: where event files (`train/`, `eval/`) go: the run directory, or a
        scratch directory on non-chief workers.
      model, optimizer: the built model and its optimizer (checkpointed).
      schedule: the `Schedule`.
      run_eval: called with `last` (whether it is the run's last step); evaluates and
        returns {event folder: {metric name: value}}: "eval" for the test split,
        "validation" for the validation split.
      checkpoint_dir: where checkpoints are written (None: `<output_dir>/checkpoints`).
      restore_dir: where they are restored from (None: `checkpoint_dir`); a non-chief
        worker restores from the chief's shared folder and writes to its scratch one.
      run_dir: the run directory, whose checkpoints these are (`meshseg.train.rundir.ownership`);
        None: not checked.

    Attributes:
      start_step: the step restored from the newest intact checkpoint (0 for a fresh run); the
        first step to run is `start_step + 1`.
      logger: the run's `RunLogger`.
    """

    def __init__(self, output_dir: str, model: keras.Model,
                 optimizer: keras.optimizers.Optimizer, schedule: Schedule,
                 run_eval: Callable[[bool], Dict[str, Dict[str, float]]],
                 checkpoint_dir: Optional[str] = None,
                 restore_dir: Optional[str] = None, run_dir: Optional[str] = None):
        self.schedule = schedule
        self.run_eval = run_eval
        self.checkpoint = TrainingCheckpoint(
            checkpoint_dir or os.path.join(output_dir, CHECKPOINT_DIR), model, optimizer,
            schedule.checkpoints_kept, restore_dir, run_dir)
        self.start_step = self.checkpoint.restored_step
        self.logger = RunLogger(output_dir, schedule.steps, initial_step=self.start_step)
        self.signals = StopSignals()

    @property
    def remaining_steps(self) -> range:
        """The numbers of the steps still to run."""
        return range(self.start_step + 1, self.schedule.steps + 1)

    def train(self, loop: Loop) -> None:
        """Runs `loop` over the remaining steps with SIGINT/SIGTERM caught.

        Raises:
          NonFiniteError: from `stop_non_finite`.
          Interrupted: after a stop signal, once the checkpoint is saved.
        """
        if not self.remaining_steps:
            return
        with self.signals:
            loop.run(self)

    def step_done(self, step: int, loss: float, accuracy: float, seconds: float,
                  num_vertices: int, compiled: bool, stop: Optional[bool] = None) -> None:
        """Logs step `step`, then evaluates every `eval_every` steps and at the last step;
        flushes the event files and saves a checkpoint every `checkpoint_every` steps, at
        the last step and when the run stops; then raises `Interrupted` for the stop.

        Args:
          seconds: the step's wall time (s); compiled: whether it traced/compiled.
          stop: whether the run stops after this step: whether any worker had received
            SIGINT/SIGTERM before it (the loop all-reduces that, so all workers stop
            after the same step); None: whether this process received one.
        """
        self.logger.log_step(step, loss, accuracy, seconds, num_vertices, compiled)
        last = step == self.schedule.steps
        stop = self.signals.received is not None if stop is None else stop
        if step % self.schedule.eval_every == 0 or last:
            for split, results in self.run_eval(last).items():
                self.logger.log_eval(step, results, split)
        if step % self.schedule.checkpoint_every == 0 or last or stop:
            self.logger.flush()
            self.checkpoint.save(step)
        if stop:
            signum = self.signals.received or signal.SIGTERM  # else another worker's signal
            raise Interrupted(f"stopped by signal {signum} after step {step}; "
                              f"checkpoint saved in {self.checkpoint.directory}", signum)

    def stop_non_finite(self, step: int, loss: float, detail: str) -> None:
        """Ends the run at a step with a non-finite loss or gradient.

        Raises:
          NonFiniteError: "step N: non-finite loss (L) or gradient; <detail>. Last good
            checkpoint: <path or none>".
        """
        raise NonFiniteError(
            f"step {step}: non-finite loss ({loss}) or gradient; {detail}. Last good "
            f"checkpoint: {self.checkpoint.latest or 'none'}")

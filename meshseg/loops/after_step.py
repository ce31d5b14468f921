"""What follows every training step, in both loops: evaluation, checkpoints, stop signals."""

from typing import Callable, Dict

from meshseg.checkpoints import StopSignals, TrainingCheckpoint
from meshseg.errors import Interrupted
from meshseg.summaries import RunLogger


class AfterStep:
    """Called with the number of the step just finished.

    Evaluates every `eval_every` steps and at the last step; flushes the event files and
    saves a checkpoint every `checkpoint_every` steps, at the last step and when a stop
    signal arrived; then raises `Interrupted` for that signal.
    """

    def __init__(self, steps: int, eval_every: int, checkpoint_every: int, logger: RunLogger,
                 run_eval: Callable[[], Dict[str, float]], checkpoint: TrainingCheckpoint,
                 signals: StopSignals):
        self.steps = steps
        self.eval_every = eval_every
        self.checkpoint_every = checkpoint_every
        self.logger = logger
        self.run_eval = run_eval
        self.checkpoint = checkpoint
        self.signals = signals

    def __call__(self, step: int) -> None:
        last = step == self.steps
        if step % self.eval_every == 0 or last:
            self.logger.log_eval(step, self.run_eval())
        if step % self.checkpoint_every == 0 or last or self.signals.received:
            self.logger.flush()
            self.checkpoint.save(step)
        if self.signals.received:
            raise Interrupted(f"stopped by signal {self.signals.received} after step {step}; "
                              f"checkpoint saved in {self.checkpoint.manager.directory}",
                              self.signals.received)

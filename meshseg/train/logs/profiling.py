"""`profile=true`: a TensorBoard profile of the training steps `profile_steps` = [start, stop).

Both loops drive one `StepProfiler`: `step_begin(step)` before a step, `step_end(step)`
once the step has finished (its loss read back), and `close()` when the loop ends, however
it ends. The profiler (`tf.profiler.experimental`) starts before the first step of the
range and stops after its last, or at `close()` when the run ends or fails inside the
range, so it is never left running. While it runs, each step is wrapped in a
`tf.profiler.experimental.Trace("train", step_num=step)`, which marks the step boundaries
for TensorBoard's overview page and trace viewer.

The profile goes to `<logdir>/plugins/profile/<timestamp>/<host>.xplane.pb`; with
`logdir = <run dir>/train` (where the run's training scalars are, and where Keras'
TensorBoard callback puts its profiles) TensorBoard's Profile tab shows it as the run's
`train`. `python -m meshseg.tools.profile_summary <run dir>` prints where the time went.
"""

import logging
import os
from typing import Optional, Sequence

import tensorflow as tf

log = logging.getLogger(__name__)


class StepProfiler:
    """Profiles the global training steps in [start, stop) (steps count from 1).

    A run that resumes inside the range profiles the rest of it; a run that ends before
    `stop` saves what it traced. With `steps` None it does nothing.

    Args:
      logdir: the TensorBoard log directory the profile is written under.
      steps: [start, stop), 0 <= start < stop (`meshseg.config` checks it), or None.
    """

    def __init__(self, logdir: str, steps: Optional[Sequence[int]]):
        self.logdir = logdir
        self.start, self.stop = (int(steps[0]), int(steps[1])) if steps else (0, 0)
        self.running = False
        self.attempted = False
        self._trace = None

    def step_begin(self, step: int) -> None:
        """Starts the profiler at the first step of the range, then opens the step's trace.
        A profiler that cannot start (another session runs in this process) is logged and
        training goes on without it."""
        if not self.running and not self.attempted and self.start <= step < self.stop:
            self.attempted = True  # once per run, whether it starts or not
            os.makedirs(self.logdir, exist_ok=True)
            try:
                tf.profiler.experimental.start(self.logdir)
            except tf.errors.OpError as error:  # another profiler session is running
                log.warning("profile not taken: %s", error.message)
                return
            self.running = True
            log.info("profiling steps %d to %d into %s", step, self.stop - 1, self.logdir)
        if self.running:
            self._trace = tf.profiler.experimental.Trace("train", step_num=step, _r=1)
            self._trace.__enter__()

    def step_end(self, step: int) -> None:
        """Closes the step's trace; stops the profiler after the last step of the range."""
        self._close_trace()
        if self.running and step >= self.stop - 1:
            self.close()

    def close(self) -> None:
        """Stops the profiler if it runs and saves the profile. Safe to call again."""
        self._close_trace()
        if self.running:
            self.running = False
            tf.profiler.experimental.stop()
            log.info("profile written to %s", os.path.join(self.logdir, "plugins", "profile"))

    def _close_trace(self) -> None:
        if self._trace is not None:
            trace, self._trace = self._trace, None
            trace.__exit__(None, None, None)

    def __enter__(self) -> "StepProfiler":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

"""Stop signals (SIGINT, SIGTERM) in every phase of every command: the process ends with
one line and exit status 128 + signal, its child processes ended and its temporaries
removed.

- `raising_stop`: while it is active, SIGINT and SIGTERM raise `Stop` (a
  `KeyboardInterrupt`) in the main thread wherever it is: converting meshes, building
  the input pipeline, tracing, evaluating or saving. The `finally` and `except
  BaseException` blocks on the way up then run: the converter's worker processes are
  ended (`meshseg.data.convert`), half-built caches and partial files are removed, and
  the command's entry point (`meshseg.cli.command`, `train.py`) prints one line and exits
  with `Stop.exit_code`. The training steps record the signal instead and stop after the
  current step with a checkpoint (`meshseg.train.rundir.checkpoints.StopSignals`).
- `run_child` and `stopping_with`: meshseg's own child processes (a sweep's jobs, the
  benchmark's workers): a stop signal is passed on to the child, which stops as it would
  alone, and waited for, so no child outlives its parent.

Nothing here imports TensorFlow.
"""

import contextlib
import signal
import subprocess
import threading

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
CHILD_GRACE_S = 60.0  # how long a child may take to stop (save its checkpoint) once told


class Stop(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived (`signum`); the process exits with `exit_code`,
    128 + signum, as a shell reports a process the signal ended."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum
        self.exit_code = 128 + signum

    @property
    def name(self) -> str:
        """The signal's name, e.g. "SIGTERM"."""
        return signal.Signals(self.signum).name


def stop_of(interrupt: KeyboardInterrupt) -> Stop:
    """`interrupt` as a `Stop` (Python's own KeyboardInterrupt, from its default SIGINT
    handler, is SIGINT's)."""
    return interrupt if isinstance(interrupt, Stop) else Stop(signal.SIGINT)


def _raise_stop(signum, frame):
    raise Stop(signum)


@contextlib.contextmanager
def raising_stop():
    """Within the block, SIGINT and SIGTERM raise `Stop` in the main thread; the previous
    handlers come back afterwards. A signal the process inherited as ignored (SIGINT in a
    job started with `nohup` or `&`) stays ignored. Outside the main thread (where Python
    cannot set handlers) the block runs unchanged."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, _raise_stop) for signum in STOP_SIGNALS
                if signal.getsignal(signum) is not signal.SIG_IGN}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def stopping_with(process: subprocess.Popen, grace_s: float = CHILD_GRACE_S):
    """Within the block, a `Stop` (or KeyboardInterrupt) is passed on to the child `process`
    as the same signal; the child gets `grace_s` seconds to stop (a training job saves its
    checkpoint), is then killed, and the interrupt is raised again."""
    try:
        yield process
    except KeyboardInterrupt as interrupt:  # a `Stop`, or Python's own for SIGINT
        process.send_signal(stop_of(interrupt).signum)
        try:
            process.wait(timeout=grace_s)
        except (subprocess.TimeoutExpired, KeyboardInterrupt):
            process.kill()
        raise


def run_child(command: list, timeout: float | None = None, grace_s: float = CHILD_GRACE_S,
              **popen_kwargs) -> subprocess.CompletedProcess:
    """`subprocess.run(command, timeout=timeout, **popen_kwargs)` for a meshseg child
    process, which stops with its parent (`stopping_with`). The child runs in its own
    process group, so Ctrl-C in a terminal (SIGINT to the foreground group) reaches it
    once, from here.

    Raises:
      Stop: after the child ended, if this process received a stop signal.
      subprocess.TimeoutExpired: after `timeout` s; the child is killed.
    """
    with subprocess.Popen(command, process_group=0, **popen_kwargs) as process:
        with stopping_with(process, grace_s):
            try:
                stdout, stderr = process.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()
                raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)

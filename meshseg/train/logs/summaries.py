"""Per-step and per-evaluation TensorBoard summaries, console progress, and peak memory."""

import logging
import os
import resource
import socket
import sys
import time
from typing import Dict, Tuple

import numpy as np
import tensorflow as tf
from tensorboard.backend.event_processing.plugin_event_accumulator import EventAccumulator
from tensorboard.compat.proto import event_pb2
from tensorboard.summary.writer.record_writer import RecordWriter
from tqdm.auto import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

log = logging.getLogger(__name__)


def peak_rss_mib() -> float:
    """The peak resident memory of this process so far (MiB): `ru_maxrss`, which Linux
    gives in KiB and macOS in bytes. Reset per process by `meshseg.tools.bench`."""
    max_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return max_rss / (2**20 if sys.platform == "darwin" else 2**10)


def write_session_start(log_dir: str, step: int) -> str:
    """Writes an event file holding a SessionLog START at `step` into `log_dir`.

    Every (re)start of a run writes one. At the second and later STARTs TensorBoard drops
    the events with step >= `step` read before it: the steps an interrupted run logged
    after its last checkpoint, which the resumed run logs again. The file is named to sort
    after existing event files and before the next `tf.summary` writer's (same time
    prefix, then "0" sorts before any process id).

    Returns:
      the path written.
    """
    os.makedirs(log_dir, exist_ok=True)
    path = os.path.join(log_dir, f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}"
                                 f".0-session-start-at-{step}")
    events = [event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2"),
              event_pb2.Event(wall_time=time.time(), step=step,
                              session_log=event_pb2.SessionLog(status=event_pb2.SessionLog.START))]
    with open(path, "wb") as f:
        writer = RecordWriter(f)
        for event in events:
            writer.write(event.SerializeToString())
    return path


def read_scalars(event_dir: str) -> Dict[str, Tuple[np.ndarray, np.ndarray]]:
    """{tag: (steps int64 [N], values float64 [N])} of the scalars in `event_dir`'s own
    event files (not its subfolders); empty if it has none. Non-scalar summaries (e.g. the
    HParams session) are skipped."""
    if not os.path.isdir(event_dir):
        return {}
    events = EventAccumulator(event_dir, size_guidance={"tensors": 0})
    events.Reload()
    scalars = {}
    for tag in events.Tags()["tensors"]:
        if events.SummaryMetadata(tag).plugin_data.plugin_name != "scalars":
            continue
        points = events.Tensors(tag)
        scalars[tag] = (np.array([p.step for p in points], np.int64),
                        np.array([float(tf.make_ndarray(p.tensor_proto)) for p in points]))
    return scalars



def step_times(run_dir: str) -> Dict:
    """Median/min/max step time and median iteration time (ms, None without timed steps or
    iterations), compile time (s) and the number of compiling steps of the whole run, read
    from `<run_dir>/train`'s event files (every process of a resumed run, each step once)."""
    scalars = read_scalars(os.path.join(run_dir, "train"))
    times = scalars.get("step_time_ms", (None, np.zeros(0)))[1]
    iterations = scalars.get("iteration_time_ms", (None, np.zeros(0)))[1]
    compiles = scalars.get("compile_time_s", (None, np.zeros(0)))[1]
    return {
        "median_step_time_ms": float(np.median(times)) if times.size else None,
        "min_step_time_ms": float(times.min()) if times.size else None,
        "max_step_time_ms": float(times.max()) if times.size else None,
        "median_iteration_time_ms": float(np.median(iterations)) if iterations.size else None,
        "compile_time_s": float(compiles.sum()),
        "num_compilations": int(compiles.size),
    }


class RunLogger:
    """Writes `<run_dir>/train`, `<run_dir>/eval` (the test split) and, when a run has a
    validation split, `<run_dir>/validation` event files, and a progress bar with ETA.

    Train scalars per step: `loss`, `accuracy` (per-vertex, the step's batch),
    `step_time_ms` (wall time around the step, synchronised on its loss),
    `vertices_per_second` (real, unpadded vertices / step time). A step that traced or
    compiled the step function is logged as `compile_time_s` instead of step time.
    `iteration_time_ms`: the loop's whole iteration of the step (input, step, logging and
    summaries; `log_iteration`), for the steps a loop times that way.
    Eval and validation scalars: `accuracy`, `mean_iou`, `majority_baseline_accuracy`,
    `boundary_accuracy`, `interior_accuracy` (`meshseg.train.loop.evaluate.evaluate`).

    Args:
      run_dir: directory of this run (Hydra's output directory).
      total_steps: number of training steps, for the progress bar's ETA.
      initial_step: the step a resumed run restarts from (its latest checkpoint). Events
        an interrupted run logged after it are superseded (see `write_session_start`),
        so curves show every step once.
    """

    def __init__(self, run_dir: str, total_steps: int, initial_step: int = 0):
        self.run_dir = run_dir
        for split in ("train", "eval"):
            write_session_start(os.path.join(run_dir, split), initial_step + 1)
        self.train_writer = tf.summary.create_file_writer(os.path.join(run_dir, "train"))
        self.eval_writer = tf.summary.create_file_writer(os.path.join(run_dir, "eval"))
        self.validation_writer = None  # made at the first validation
        self.initial_step = initial_step
        self.last_eval: Dict[str, float] = {}
        self.last_validation: Dict[str, float] = {}
        self.progress = tqdm(total=total_steps, initial=initial_step, desc="train", unit="step",
                             dynamic_ncols=True)

    def flush(self) -> None:
        """Writes pending events to disk (before a checkpoint, so a killed run resumed from
        it misses no step in its curves)."""
        for writer in (self.train_writer, self.eval_writer, self.validation_writer):
            if writer is not None:
                writer.flush()

    def log_step(self, step: int, loss: float, accuracy: float, seconds: float,
                 num_vertices: int, compiled: bool) -> None:
        """Records one training step; `seconds` is its wall time, `compiled` if it traced."""
        with self.train_writer.as_default(step=step):
            tf.summary.scalar("loss", loss)
            tf.summary.scalar("accuracy", accuracy)
            if compiled:
                tf.summary.scalar("compile_time_s", seconds)
            else:
                tf.summary.scalar("step_time_ms", 1e3 * seconds)
                tf.summary.scalar("vertices_per_second", num_vertices / seconds)
        self.progress.update(1)
        self.progress.set_postfix(loss=f"{loss:.3f}", acc=f"{accuracy:.3f}")

    def log_iteration(self, step: int, seconds: float) -> None:
        """Records the wall time (s) of the loop's whole iteration of step `step`: from
        taking its batch to taking the next one (`meshseg.train.loop.custom_loop`)."""
        with self.train_writer.as_default(step=step):
            tf.summary.scalar("iteration_time_ms", 1e3 * seconds)

    def writer(self, split: str) -> tf.summary.SummaryWriter:
        """The summary writer of the test split ("eval") or of the validation split
        ("validation", made on first use)."""
        if split != "validation":
            return self.eval_writer
        if self.validation_writer is None:
            write_session_start(os.path.join(self.run_dir, split), self.initial_step + 1)
            self.validation_writer = tf.summary.create_file_writer(
                os.path.join(self.run_dir, split))
        return self.validation_writer

    def log_eval(self, step: int, results: Dict[str, float], split: str = "eval") -> None:
        """Records evaluation `results` (`meshseg.train.loop.evaluate.evaluate`'s scores)
        of the test split ("eval") or the validation split ("validation")."""
        writer = self.writer(split)
        if split == "validation":
            self.last_validation = dict(results)
        else:
            self.last_eval = dict(results)
        with writer.as_default(step=step):
            for name, value in results.items():
                tf.summary.scalar(name, value)
        # Logged (so train.log holds it) through tqdm, so the line lands above the bar.
        with logging_redirect_tqdm():
            log.info("%s @ step %d: %s", split, step, ", ".join(
                f"{name} {value:.4f}" for name, value in results.items()))

    @property
    def steps_logged(self) -> int:
        """The steps this process logged (0 when it stopped before its first step)."""
        return self.progress.n - self.initial_step

    @property
    def steps_done(self) -> int:
        """The step the run has reached (including the steps before a resume)."""
        return self.progress.n

    def close(self) -> None:
        """Closes the progress bar and flushes the event files."""
        self.progress.close()
        self.flush()

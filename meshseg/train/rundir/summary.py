"""The record of a finished run: its settings and its results, read back by every reader.

A run stores its settings once, in `<run dir>/run_config.yaml` (written when it claims the
directory, `meshseg.train.rundir.claim`), and its results in `<run dir>/summary.json`, the
`RunSummary` below. `load_run` reads both into one typed `Run`; the HParams dashboard,
`meshseg.tools.report`, `meshseg.tools.predict` and the sweep parent in `train.py` read
runs through it and nothing else.
"""

import dataclasses
import os
from dataclasses import dataclass
from typing import List, Optional


from meshseg.config import TrainConfig, load_run_config
from meshseg.data.mesh.foreign import read_json
from meshseg.errors import ConfigError
from meshseg.outputs import write_json
from meshseg.train.rundir.claim import SUMMARY_FILE


@dataclass
class RunSummary:
    """The results of a run, and what it resolved at run time.

    Attributes:
      impl: the implementation that trained (for impl=auto, the one it chose).
      replicas: replicas in sync under the run's strategy.
      test_files: absolute paths of the test split's shards (in a shipped model,
        `meshseg.tools.pretrained`: relative to the project root).
      steps: the step the run reached.
      wall_time_s: wall time of the (last) process, s.
      pid: that process' id (each sweep job trains in its own process).
      median_step_time_ms, min_step_time_ms, max_step_time_ms: over the steps of the whole
        run (every process of a resumed run, as its event files hold them) that did not
        compile, ms; None when every step compiled.
      median_iteration_time_ms: the median of the loop's whole iterations (input, step,
        logging and summaries: the `iteration_time_ms` scalars of loop=custom) over the
        same processes' steps that did not compile, evaluate or checkpoint, ms; None
        without such a step, for loop=keras, and in summaries written before it existed.
      compile_time_s: time of the compiling steps, s; num_compilations: their number.
      peak_rss_mib: the process' peak resident memory, MiB.
      test_train_overlap: test meshes that are also training meshes (by content), so the
        evaluation is not on held-out meshes when it is above 0.
      eval_accuracy, eval_mean_iou, eval_majority_baseline_accuracy,
        eval_boundary_accuracy, eval_interior_accuracy: the last evaluation on the test
        split (per-vertex accuracy, mean IoU, majority-class baseline, accuracy on label
        boundaries and off them; the last two None in summaries written before them).
      validation_accuracy, validation_mean_iou: the last evaluation on the validation
        split (`data.validation_meshes`), None without one.
    """

    impl: str
    replicas: int
    test_files: List[str]
    steps: int
    wall_time_s: float
    pid: int
    median_step_time_ms: Optional[float]
    min_step_time_ms: Optional[float]
    max_step_time_ms: Optional[float]
    compile_time_s: float
    num_compilations: int
    peak_rss_mib: float
    median_iteration_time_ms: Optional[float] = None
    test_train_overlap: int = 0
    eval_accuracy: Optional[float] = None
    eval_mean_iou: Optional[float] = None
    eval_majority_baseline_accuracy: Optional[float] = None
    eval_boundary_accuracy: Optional[float] = None
    eval_interior_accuracy: Optional[float] = None
    validation_accuracy: Optional[float] = None
    validation_mean_iou: Optional[float] = None

    @property
    def choosing_accuracy(self) -> Optional[float]:
        """The accuracy runs are ranked by: on the validation split when the run has one
        (the test split stays sealed for choosing), else on the test split."""
        if self.validation_accuracy is not None:
            return self.validation_accuracy
        return self.eval_accuracy

    def save(self, run_dir: str) -> str:
        """Writes `<run_dir>/summary.json` atomically; returns its path.

        Raises:
          OutputError: if it cannot be written (`meshseg.outputs`); an earlier one stays."""
        return write_json(os.path.join(run_dir, SUMMARY_FILE), dataclasses.asdict(self),
                          indent=2)

    @classmethod
    def load(cls, run_dir: str) -> Optional["RunSummary"]:
        """The summary of `run_dir`, or None if it has none (a run that never finished).

        Raises:
          ConfigError: if the file is not a summary in this format, naming the keys that
            differ.
        """
        path = os.path.join(run_dir, SUMMARY_FILE)
        if not os.path.exists(path):
            return None
        # a damaged file (not UTF-8, not JSON) is named in one line
        fields = read_json(path, "a meshseg run summary", ConfigError, object)
        expected = {f.name for f in dataclasses.fields(cls)}
        required = {f.name for f in dataclasses.fields(cls)
                    if f.default is dataclasses.MISSING}
        if not isinstance(fields, dict) or not required <= set(fields) <= expected:
            keys = set(fields) if isinstance(fields, dict) else set()
            raise ConfigError(
                f"{path} is not a meshseg run summary (missing {sorted(required - keys)}, "
                f"unknown {sorted(keys - expected)})")
        return cls(**fields)


@dataclass
class Run:
    """A run directory read back: `config` from run_config.yaml (None without one),
    `summary` from summary.json (None without one)."""

    run_dir: str
    config: Optional[TrainConfig]
    summary: Optional[RunSummary]


def load_run(run_dir: str) -> Run:
    """Settings and results of the run in `run_dir`."""
    return Run(run_dir, load_run_config(run_dir), RunSummary.load(run_dir))

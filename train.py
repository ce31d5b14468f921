"""Train the mesh segmentation demo network: `python train.py [overrides]` (Hydra).

Examples:
  python train.py                                   # bundled RNA sample, defaults
  python train.py impl=sparse_matmul jit=true
  python train.py -m impl=gather_sum,sparse_matmul jit=false,true
  python train.py resume=outputs/<run dir>          # continue from its latest checkpoint

In a sweep (-m) every job runs `python train.py <its overrides>` as a child process in
the job's directory, so no memory, TensorFlow state or peak-RSS figure carries over from
one job to the next. A job that fails is recorded in its directory and the others run;
the sweep's table and report.md list every job, and the sweep then exits with status 1
and one line counting the failed jobs (`meshseg.train.rundir.sweep`, `meshseg.tools.report`).
"""

import logging
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import hydra  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from hydra.types import RunMode  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from meshseg.config import checked_config  # noqa: E402  (also registers the schema)
from meshseg.console import hydra_override, shell_command, train_py_command  # noqa: E402
from meshseg.errors import Interrupted, MeshsegError  # noqa: E402
from meshseg.signals import raising_stop, stop_of  # noqa: E402
from meshseg.train.rundir.claim import interrupted_run  # noqa: E402
from meshseg.train.rundir.summary import RunSummary  # noqa: E402
from meshseg.train.rundir.sweep import run_job  # noqa: E402

log = logging.getLogger("train")
SWEEP_CHILD = "MESHSEG_SWEEP_CHILD"


def run_job_in_child_process(run_dir: str) -> float | None:
    """Runs this sweep job as `python train.py <job overrides> hydra.run.dir=<run_dir>`
    (`meshseg.train.rundir.sweep.run_job`); returns its `RunSummary.choosing_accuracy` (what a
    Hydra sweeper maximises), or None when it failed (the failure is recorded in `run_dir`,
    and the sweep goes on)."""
    overrides = list(HydraConfig.get().overrides.task)
    if run_job(os.path.abspath(__file__), overrides, run_dir,
               {**os.environ, SWEEP_CHILD: "1"}) is not None:
        return None
    return RunSummary.load(run_dir).choosing_accuracy


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> float:
    run_dir = HydraConfig.get().runtime.output_dir
    if HydraConfig.get().mode == RunMode.MULTIRUN and SWEEP_CHILD not in os.environ:
        return run_job_in_child_process(run_dir)
    task_overrides = list(HydraConfig.get().overrides.task)
    log.info("%s", shell_command(["python", "train.py", *task_overrides]))  # whose log this is
    resume = cfg.resume
    try:
        # The settings were checked before Hydra wrote anything (`RunDirCheck`), before
        # TensorFlow starts (threads=-1 would abort it); from here on they are the typed
        # `TrainConfig`. Threads and the distribution strategy are set before any
        # TensorFlow op runs.
        config = checked_config(cfg)
        from meshseg.console import start_tensorflow_quietly

        start_tensorflow_quietly()  # without TensorFlow's C++ start-up lines
        from meshseg.train.device.distribute import configure_runtime

        strategy = configure_runtime(config.threads, config.strategy, config.inter_op_threads)
        from meshseg.train.run import run

        summary = run(config, run_dir, strategy)
    except (MeshsegError, KeyboardInterrupt) as caught:
        # A stop signal outside the training steps (converting, tracing, saving) arrives
        # as `meshseg.signals.Stop`; within them the loop saves a checkpoint and raises
        # `Interrupted`.
        error = (caught if isinstance(caught, MeshsegError)
                 else interrupted_run(stop_of(caught), run_dir))
        log.error("%s", error)
        if isinstance(error, Interrupted) and error.resumable:
            overrides = [arg for arg in sys.argv[1:] if not arg.startswith("resume=")]
            log.error("resume with: %s", train_py_command(
                [*overrides, hydra_override("resume", resume or run_dir)]))
        sys.exit(error.exit_code)
    return summary.choosing_accuracy


if __name__ == "__main__":
    try:
        with raising_stop():  # SIGINT and SIGTERM in every phase: `meshseg.signals`
            main()
    except KeyboardInterrupt as interrupt:  # before the run started (Hydra, the checks)
        print(f"interrupted by {stop_of(interrupt).name}", file=sys.stderr)
        sys.exit(stop_of(interrupt).exit_code)

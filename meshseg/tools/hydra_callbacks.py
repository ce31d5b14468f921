"""train.py's Hydra callbacks (`hydra.callbacks` in conf/train.yaml): `RunDirCheck` checks
the settings and claims the run directory, or a sweep's, before Hydra writes into it;
`SweepReport` ends a multirun with the table of its jobs.

They are the one place that reads Hydra's own config (`hydra.run.dir`, `hydra.sweep.dir`,
the overrides) and changes it. They live here, in the top layer, because they call down
into both `meshseg.train.rundir.claim` and `meshseg.tools.report`: `meshseg.config` may import
neither, not even inside a function (import-linter counts those imports too).
"""

import os
import re
import sys

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict, read_write
from omegaconf.errors import OmegaConfBaseException

from meshseg.config import TrainConfig, check_data_paths, check_overrides, checked_config
from meshseg.console import hydra_override, shell_command, start_tensorflow_quietly
from meshseg.errors import ConfigError, MeshsegError, OutputError, RunDirError
from meshseg.outputs import check_output_dir, make_dirs, writing
from meshseg.train.rundir.ownership import check_checkpoint_owner
from meshseg.train.rundir.claim import (CHECKPOINT_DIR, HYDRA_DIR, MULTIRUN_FILE, check_resume,
                                        check_run_dir, job_id, new_run_dir, pending_hydra_record)
from meshseg.train.rundir.runlock import hold_run_dir
from meshseg.train.rundir.slurm import slurm_step
from meshseg.train.rundir.sweep import failed_job

NOW = re.compile(r"\$\{now:[^}]*\}")  # the timestamp in the default hydra.run.dir


def in_multi_worker_job(config: DictConfig) -> bool:
    """Whether this process is a worker of a multi-worker job: strategy=multi_worker, with
    TF_CONFIG set or in a SLURM job step."""
    return config.strategy.name == "multi_worker" and (
        "TF_CONFIG" in os.environ or slurm_step() is not None)


def default_run_dir(config: DictConfig) -> str:
    """The directory of a run whose `hydra.run.dir` was not given (`config`: Hydra's config).

    A single process claims a new one: `new_run_dir` of the default, timestamped name. The
    workers of a multi-worker job (strategy=multi_worker, with TF_CONFIG set or in a SLURM
    job step) share one, whatever second each starts in, and so does the job again after a
    requeue: the default name with its timestamp replaced by `job-<job_id()>`.

    Raises:
      ConfigError: see `job_id`.
      OutputError: see `new_run_dir`.
    """
    if not in_multi_worker_job(config):
        return new_run_dir(config.hydra.run.dir)
    template = OmegaConf.to_container(config.hydra.run)["dir"]
    return OmegaConf.create({"dir": NOW.sub(f"job-{job_id()}", template)}, parent=config).dir


def run_dir_given(config: DictConfig, key: str = "hydra.run.dir") -> bool:
    """Whether `key` (`hydra.run.dir`, or `hydra.sweep.dir`) is set on the command line (a
    sweep sets `hydra.run.dir` for each job)."""
    return any(override.lstrip("+").split("=", 1)[0] == key
               for override in config.hydra.overrides.hydra)


def claim_sweep_dir(config: DictConfig) -> str:
    """Makes a new sweep directory this multirun's own before Hydra writes into it, and
    returns its path (`config`: Hydra's config, changed in place).

    The default, timestamped name becomes `new_run_dir` of it, so sweeps started in the same
    second each get their own, and the choice is passed on as a `hydra.sweep.dir` override,
    from which Hydra composes every job's config (and so its run directory). A directory
    given with `hydra.sweep.dir` is claimed by creating its `multirun.yaml` exclusively,
    which Hydra then writes in full.

    Raises:
      RunDirError: if the given directory is not empty (another sweep's or run's files, which
        are left exactly as they were), or another sweep claims it at the same moment.
      OutputError: if the directory cannot be created (`new_run_dir`,
        `meshseg.outputs.make_dirs`), naming it and the cause.
    """
    if run_dir_given(config, "hydra.sweep.dir"):
        sweep_dir = str(config.hydra.sweep.dir)
        held = sorted(os.listdir(make_dirs(sweep_dir)))
        if not held:
            with writing(os.path.join(sweep_dir, MULTIRUN_FILE), "the sweep's record"):
                try:  # (inside `writing`, which would take "File exists" for a failure)
                    os.close(os.open(os.path.join(sweep_dir, MULTIRUN_FILE),
                                     os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                    return sweep_dir
                except FileExistsError:
                    held = [MULTIRUN_FILE]
        raise RunDirError(f"hydra.sweep.dir={sweep_dir} is not empty (it holds "
                          f"{', '.join(held[:3])}{', ...' if len(held) > 3 else ''}); give a "
                          "new directory, or leave hydra.sweep.dir out for a new dated one")
    sweep_dir = new_run_dir(str(config.hydra.sweep.dir))
    with read_write(config.hydra), open_dict(config.hydra):
        config.hydra.sweep.dir = sweep_dir
        config.hydra.overrides.hydra.append(hydra_override("hydra.sweep.dir", sweep_dir))
    return sweep_dir


class RunDirCheck(Callback):
    """Hydra callback: checks the settings (`meshseg.config`) and chooses, checks and locks
    the run directory before Hydra writes `.hydra/` and its log into it, so a mistake
    leaves no directory behind. The default name becomes `default_run_dir`; a given one
    (or the `resume=<run dir>` one, whose log then continues there) is kept, and refused
    if it holds another run (or one with other settings), if `checkpoint.dir` holds
    another run's checkpoints (`meshseg.train.rundir.ownership`), or if a live process holds its
    lock (`meshseg.train.rundir.runlock`): that run's files stay exactly as they were. Into a
    directory that holds a run, Hydra writes its record aside (`pending_hydra_record`)
    until the run has accepted the data as well. A sweep claims its directory first
    (`claim_sweep_dir`), then each job its own."""

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        task = OmegaConf.masked_copy(config, [key for key in config if key != "hydra"])
        try:
            check_overrides(list(config.hydra.overrides.task))
            typed = checked_config(OmegaConf.merge(OmegaConf.structured(TrainConfig), task))
            check_data_paths(typed.data)
            run_dir = typed.resume or config.hydra.run.dir
            check_output_dir(os.path.abspath(run_dir),
                             f"{'resume' if typed.resume else 'hydra.run.dir'}={run_dir}")
            if typed.resume is not None:
                check_resume(os.path.abspath(typed.resume), typed.resume)
                config.hydra.run.dir = os.path.abspath(typed.resume)
            elif not run_dir_given(config):
                config.hydra.run.dir = default_run_dir(config)
            run_dir = str(config.hydra.run.dir)
            resumed = check_run_dir(run_dir, typed)
            if resumed and config.hydra.output_subdir == HYDRA_DIR:  # the data are checked later
                with read_write(config.hydra), open_dict(config.hydra):
                    config.hydra.output_subdir = os.path.basename(pending_hydra_record(run_dir))
            if not in_multi_worker_job(config):  # workers share the chief's (checked there)
                check_checkpoint_owner(os.path.abspath(typed.checkpoint.dir or
                                                       os.path.join(run_dir, CHECKPOINT_DIR)),
                                       run_dir)
            hold_run_dir(run_dir)  # until the process ends
        except MeshsegError as error:
            _refuse(error)
        except OmegaConfBaseException as error:  # Hydra would only warn, and run on
            _refuse(ConfigError(str(error).splitlines()[0]))

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        try:
            check_output_dir(os.path.abspath(config.hydra.sweep.dir),
                             f"hydra.sweep.dir={config.hydra.sweep.dir}")
            claim_sweep_dir(config)
        except MeshsegError as error:
            _refuse(error)


def _refuse(error: MeshsegError) -> None:
    """Ends the process with `error` in one line and its exit status."""
    print(f"error: {error}", file=sys.stderr)
    sys.exit(error.exit_code)


class SweepReport(Callback):
    """Hydra callback (conf/train.yaml): when a multirun ends, writes the report of its
    sweep directory (`meshseg.tools.report.write_report`) and prints the comparison table, one row per job
    (failed ones with their exit status and log), and where the report is. A sweep whose
    jobs wrote no run prints why instead. When jobs failed, the process then ends with one
    line counting them, `error: N of M sweep jobs failed ...`, and exit status 1."""

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        # Imported here: the report draws with matplotlib, which no run needs at start-up.
        from meshseg.tools.report import find_runs, write_report

        sweep_dir = config.hydra.sweep.dir
        start_tensorflow_quietly()
        try:
            paths = write_report(sweep_dir)
        except (ConfigError, OutputError) as error:
            print(f"no sweep report: {error}")
            return
        print(f"\n{paths['table']}\n\nreport: {paths['report']} (again: "
              f"{shell_command(['python', '-m', 'meshseg.tools.report', sweep_dir])})")
        jobs = find_runs(sweep_dir)
        failed = [job for job in jobs if failed_job(job) is not None]
        if failed:
            print(f"error: {len(failed)} of {len(jobs)} sweep jobs failed "
                  f"({', '.join(os.path.basename(job) for job in failed)}); their exit "
                  f"status and log are in the table and in {paths['report']}", file=sys.stderr)
            sys.exit(1)



"""Training through a real SLURM scheduler: the running cluster SLURM_CONF names (CI starts a
one-node one with scripts/slurm/start-local-cluster.sh; `.ci/run`). Opt-in: these tests run
only with `-m slurm` (`helpers.suite_rules`). A plain sbatch script (scripts/slurm/train.sbatch,
srun without submitit) trains two workers in one run directory; a requeue mid-run resumes to
the weights of the uninterrupted job; a job whose second worker never starts fails within
strategy.startup_timeout_s naming it; and the submitit launcher (hydra/launcher=slurm) runs
a two-task job through sbatch. The tests cancel only the jobs they submitted, by id."""

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from helpers.runs import PROJECT, final_weights, scalars, train_command
from meshseg.train.rundir.summary import RunSummary

SCRIPTS = PROJECT / "scripts" / "slurm"
STEPS = 300  # long enough (some seconds) to requeue the job while it trains
pytestmark = [pytest.mark.slow, pytest.mark.slurm]
SUBMITTED: list = []  # the ids of the jobs this module submitted, cancelled at its end


@pytest.fixture(scope="module")
def slurm():
    """The environment (SLURM_CONF, no GPU) of the running cluster SLURM_CONF names. Fails
    in one line where there is none (these tests are asked for by name, `-m slurm`). At the
    end, cancels the module's own jobs (`SUBMITTED`) that are still queued or running."""
    conf = os.environ.get("SLURM_CONF", "")
    if not Path(conf).is_file() or shutil.which("sbatch") is None:
        pytest.fail(f"-m slurm needs a running cluster: SLURM_CONF={conf!r} names no file or "
                    "sbatch is not installed (scripts/slurm/start-local-cluster.sh DIR starts "
                    "one; then export SLURM_CONF=DIR/slurm.conf)", pytrace=False)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    answered = subprocess.run(["sinfo", "-h", "-o", "%P %T"], env=env, capture_output=True,
                              text=True, timeout=30)
    if answered.returncode != 0:
        pytest.fail(f"the cluster of SLURM_CONF={conf} does not answer: "
                    f"{answered.stderr.strip()}", pytrace=False)
    try:
        yield env
    finally:
        if SUBMITTED:
            subprocess.run(["scancel", *SUBMITTED], env=env, capture_output=True, timeout=60)
            SUBMITTED.clear()


def overrides(dataset: dict, run_dir, *extra: str) -> list:
    """The overrides of `train_command` (a small deterministic demo network) for a batch
    script's train.py."""
    return train_command(dataset, run_dir, *extra)[2:]


def sbatch(env, script, *args: str, output) -> str:
    """Submits `script` with `args` (two tasks of one CPU, log to `output`); its job id."""
    result = subprocess.run(["sbatch", "--parsable", f"--output={output}", str(script), *args],
                            cwd=PROJECT, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    job = result.stdout.strip().split(";")[0]
    SUBMITTED.append(job)
    return job


def job_state(env, job: str) -> tuple[str, int]:
    """(JobState, Restarts) of a job, from `scontrol show job`."""
    shown = subprocess.run(["scontrol", "show", "job", "-o", job], env=env,
                           capture_output=True, text=True, timeout=30).stdout
    state = re.search(r"JobState=(\w+)", shown)
    restarts = re.search(r"Restarts=(\d+)", shown)
    return (state.group(1) if state else "UNKNOWN", int(restarts.group(1)) if restarts else 0)


def wait_until_done(env, job: str, timeout: float) -> str:
    """The final state of `job` (COMPLETED, FAILED, ...), polled until it ends; the job is
    cancelled if it does not end within `timeout` seconds."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        state, _ = job_state(env, job)
        if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"):
            return state
        time.sleep(0.5)
    subprocess.run(["scancel", "--full", job], env=env)
    pytest.fail(f"job {job} did not end within {timeout} s (state {job_state(env, job)})")


def train_job(slurm, tiny_dataset, folder, *extra: str) -> tuple[str, float]:
    """train.sbatch on the tiny data set into `folder`/run, to the end; (its log, seconds
    from submission to the end)."""
    started = time.time()
    job = sbatch(slurm, SCRIPTS / "train.sbatch",
                 *overrides(tiny_dataset, folder / "run", *extra), output=folder / "job.out")
    assert wait_until_done(slurm, job, timeout=300) == "COMPLETED", (folder / "job.out").read_text(errors="replace")[-3000:]
    return (folder / "job.out").read_text(errors="replace"), time.time() - started


@pytest.fixture(scope="module")
def uninterrupted(slurm, tiny_dataset, tmp_path_factory):
    """The run directory of an uninterrupted train.sbatch job of STEPS steps."""
    folder = tmp_path_factory.mktemp("uninterrupted")
    log, seconds = train_job(slurm, tiny_dataset, folder, f"steps={STEPS}", "checkpoint.every=50",
                             f"eval_every={STEPS}")
    print(f"uninterrupted 2-worker job of {STEPS} steps: {seconds:.1f} s from sbatch to end")
    return folder / "run", log


def test_an_srun_job_trains_two_workers_in_one_run_directory(uninterrupted):
    run_dir, log = uninterrupted
    summary = RunSummary.load(run_dir)
    assert summary.steps == STEPS and summary.replicas == 2
    assert (run_dir / "model.keras").exists()
    assert "worker 0 of 2:" in log and "worker 1 of 2:" in log
    assert "all 2 workers are up" in log


def test_a_requeued_job_resumes_to_the_weights_of_an_uninterrupted_one(slurm, tiny_dataset,
                                                                      uninterrupted, tmp_path):
    run_dir = tmp_path / "run"
    job = sbatch(slurm, SCRIPTS / "train.sbatch",
                 *overrides(tiny_dataset, run_dir, f"steps={STEPS}", "checkpoint.every=50",
                            f"eval_every={STEPS}"), output=tmp_path / "job.out")
    deadline = time.time() + 240
    while not list((run_dir / "checkpoints").glob("ckpt-*.index")):
        assert time.time() < deadline and job_state(slurm, job)[0] in ("PENDING", "RUNNING")
        time.sleep(0.05)
    requeued = time.time()
    subprocess.run(["scontrol", "requeue", job], env=slurm, check=True, timeout=30)
    while "resuming from" not in (tmp_path / "job.out").read_text(errors="replace"):
        assert time.time() < deadline + 240, "the requeued job did not resume"
        time.sleep(0.1)
    resumed = time.time()
    assert wait_until_done(slurm, job, timeout=300) == "COMPLETED"
    log = (tmp_path / "job.out").read_text(errors="replace")
    print(f"requeue to resumed: {resumed - requeued:.1f} s; to the end: "
          f"{time.time() - requeued:.1f} s")
    assert job_state(slurm, job)[1] == 1  # it ran twice
    assert "checkpoint saved" in log and "resuming from" in log, log[-3000:]
    assert [step for step, _ in scalars(run_dir, "train")["loss"]] == list(range(1, STEPS + 1))
    for got, want in zip(final_weights(run_dir), final_weights(uninterrupted[0])):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_a_job_whose_second_worker_never_starts_fails_in_time_naming_it(slurm, tiny_dataset,
                                                                       tmp_path):
    command = " ".join(f"'{arg}'" for arg in [".venv/bin/python", "train.py",
                                              *overrides(tiny_dataset, tmp_path / "run"),
                                              "strategy=multi_worker",
                                              "strategy.startup_timeout_s=15"])
    script = tmp_path / "one_worker.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH --ntasks=2\n#SBATCH --cpus-per-task=1\n"
                      "srun --resv-ports=2 --kill-on-bad-exit=1 bash -c "
                      f"\"if [ \\$SLURM_PROCID = 1 ]; then exec sleep 600; fi; exec {command}\"\n")
    started = time.time()
    job = sbatch(slurm, script, output=tmp_path / "job.out")
    assert wait_until_done(slurm, job, timeout=180) == "FAILED"
    took = time.time() - started
    log = (tmp_path / "job.out").read_text(errors="replace")
    assert re.search(r"worker 1 \(\S+:\d+\) did not start within 15 s", log), log[-3000:]
    assert "Traceback" not in log
    print(f"a job missing a worker failed {took:.1f} s after sbatch")
    assert took < 120


def launch_through_submitit(command: list, env: dict, sweep_dir: Path):
    """`command` (a train.py command line) as a one-job multirun of hydra/launcher=slurm,
    two tasks of one CPU on the debug partition, into `sweep_dir`; the finished
    `subprocess.CompletedProcess` (text output)."""
    return subprocess.run(
        [*command[:2], "-m", *command[2:], "hydra/launcher=slurm", "strategy=multi_worker",
         "hydra.launcher.partition=debug", "hydra.launcher.tasks_per_node=2",
         "hydra.launcher.gpus_per_node=0", "hydra.launcher.cpus_per_task=1",
         "hydra.launcher.mem_gb=1", "hydra.launcher.timeout_min=10",
         f"hydra.sweep.dir={sweep_dir}"],
        cwd=PROJECT, env=env, capture_output=True, text=True, timeout=600)


def test_the_submitit_launcher_runs_a_two_task_job_through_sbatch(slurm, tiny_dataset,
                                                                  tmp_path):
    command = [arg for arg in train_command(tiny_dataset, None, "steps=4", "eval_every=4")
               if not arg.startswith("hydra.run.dir=")]
    started = time.time()
    try:
        result = launch_through_submitit(command, slurm, tmp_path / "sweep")
    finally:  # submitit names each job's folder by its id
        SUBMITTED.extend(p.name for p in (tmp_path / "sweep" / ".submitit").glob("*")
                         if p.is_dir() and p.name[0].isdigit())
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    print(f"submitit launcher, one 2-task job of 4 steps: {time.time() - started:.1f} s")
    run_dirs = [p for p in (tmp_path / "sweep").iterdir() if p.is_dir() and p.name[0] != "."]
    assert len(run_dirs) == 1
    summary = RunSummary.load(run_dirs[0])
    assert summary.steps == 4 and summary.replicas == 2
    log = (run_dirs[0] / "train.log").read_text(errors="replace")
    assert "worker 0 of 2:" in log and "worker 1 of 2:" in log

"""The SLURM job step (`srun`) this process is a task of, read from the variables SLURM
sets for it; no TensorFlow and no SLURM command, so the run-directory callback can ask
before TensorFlow starts. (Under submitit's launcher submitit describes the job instead:
`meshseg.train.device.distribute.cluster_resolver`.)"""

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class SlurmStep:
    """One task of a SLURM job step.

    Attributes:
      job_id: SLURM_JOB_ID, the same for every task and after a requeue.
      num_tasks: SLURM_STEP_NUM_TASKS, the step's tasks on all nodes.
      rank: SLURM_PROCID, this task's index in [0, num_tasks).
      reserved_port: the first of SLURM_STEP_RESV_PORTS (`srun --resv-ports`, or every step
        under `MpiParams=ports=...`), a port range no other step on the node holds; None
        when SLURM reserved none.
    """

    job_id: str
    num_tasks: int
    rank: int
    reserved_port: int | None


def slurm_step() -> SlurmStep | None:
    """The SLURM step of this process, or None outside one (no SLURM_STEP_ID, as in an
    sbatch script's own shell, or no SLURM_PROCID)."""
    env = os.environ
    if "SLURM_STEP_ID" not in env or "SLURM_PROCID" not in env or "SLURM_JOB_ID" not in env:
        return None
    ports = env.get("SLURM_STEP_RESV_PORTS", "").split("-")[0]
    return SlurmStep(env["SLURM_JOB_ID"], int(env.get("SLURM_STEP_NUM_TASKS", "1")),
                     int(env["SLURM_PROCID"]), int(ports) if ports.isdigit() else None)

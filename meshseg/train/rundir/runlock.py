"""The lock of a run directory: one live process trains in it.

The process that trains in a run directory holds an exclusive `flock` on `<run_dir>/.lock`
(one per task, `.lock.<task>`, when the workers of a multi-worker job share the directory).
`train.py` takes it before Hydra writes into the directory
(`meshseg.tools.hydra_callbacks.RunDirCheck`) and holds it until the process ends; `run`
called in a process takes it when it claims the directory
(`meshseg.train.rundir.claim.claim_run_dir`) and drops it when it returns. The file holds
the holder's pid and host; a second process is refused in one line naming them. The kernel
drops the lock when its holder dies, even by SIGKILL, so a killed run leaves nothing to
clean up; the file itself stays and means nothing without the lock.

Nothing here imports TensorFlow.
"""

import contextlib
import fcntl
import json
import os
import socket

from meshseg.errors import RunDirError
from meshseg.train.rundir.slurm import slurm_step

LOCK_FILE = ".lock"
_held: dict[str, int] = {}  # lock file (real path) -> open descriptor holding its flock


def lock_file(run_dir: str) -> str:
    """`<run_dir>/.lock`, or `.lock.<task>` for a task of a multi-worker job (TF_CONFIG's
    task, the submitit task's rank, or the SLURM step's rank), whose workers share the
    directory."""
    task = ""
    if "TF_CONFIG" in os.environ:
        with contextlib.suppress(ValueError, AttributeError, KeyError, TypeError):
            spec = json.loads(os.environ["TF_CONFIG"])["task"]
            task = f".{spec['type']}-{int(spec['index'])}"
    elif "SUBMITIT_EXECUTOR" in os.environ:  # a task of a submitit launcher's job
        import submitit

        task = f".task-{submitit.JobEnvironment().global_rank}"
    elif slurm_step() is not None:
        task = f".task-{slurm_step().rank}"
    return os.path.join(run_dir, LOCK_FILE + task)


def hold_run_dir(run_dir: str) -> bool:
    """Takes the lock of `run_dir` (creating the folder) for this process; returns whether
    it was taken now (False: this process already held it).

    Raises:
      RunDirError: "<run_dir> is in use by process <pid> on <host> ..." if another live
        process holds it, or naming the cause if the lock file cannot be written (a
        read-only folder).
    """
    path = os.path.realpath(lock_file(run_dir))
    if path in _held:
        return False
    try:
        os.makedirs(run_dir, exist_ok=True)
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as error:
        raise RunDirError(f"{run_dir}: cannot take the run directory's lock {path}: "
                          f"{error.strerror or error}") from None
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(descriptor, 200, 0).decode(errors="replace").split()
        os.close(descriptor)
        who = (f"process {holder[0]} on {holder[1]}" if len(holder) >= 2
               else "another process")
        raise RunDirError(f"{run_dir} is in use by {who} (it holds {path}); wait for that "
                          "run to end, or give this one another directory "
                          "(hydra.run.dir=...)") from None
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, f"{os.getpid()} {socket.gethostname()}\n".encode(), 0)
    _held[path] = descriptor
    return True


def release_run_dir(run_dir: str) -> None:
    """Drops this process's lock of `run_dir` (the file stays; it is not the lock)."""
    descriptor = _held.pop(os.path.realpath(lock_file(run_dir)), None)
    if descriptor is not None:
        os.close(descriptor)


def holds_run_dir(run_dir: str) -> bool:
    """Whether this process holds the lock of `run_dir`."""
    return os.path.realpath(lock_file(run_dir)) in _held

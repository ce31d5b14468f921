"""The jobs of a sweep (`python train.py -m ...`): each runs as a child process, and one
that fails is recorded in its job directory instead of ending the sweep, so every job
runs and the sweep's report (`meshseg.tools.hydra_callbacks.SweepReport`) lists them all.

A failed job's directory holds `job_failed.json` ({"exit_status": int, "command": the
shell command that reruns the job alone, "log": the job's `train.log`}); its `train.log`
holds the job's log lines and then the end of its process's stderr (a refusal before its
run started, a traceback), each line as a terminal last showed it.
"""

import json
import os
import subprocess
import sys
from typing import List, Optional

from meshseg.console import hydra_override, train_py_command
from meshseg.outputs import write_json, writing
from meshseg.signals import stopping_with

FAILED_FILE = "job_failed.json"
LOG_FILE = "train.log"  # Hydra's job log (hydra.job.name is "train")
_KEPT_STDERR = 1 << 16  # bytes of a job's stderr kept for its log (its last ones)


def run_job(script: str, overrides: List[str], run_dir: str, env: dict) -> Optional[int]:
    """Runs `python <script> <overrides> hydra.run.dir=<run_dir>` as a child process in
    its own process group (a stop signal is passed on to it: `meshseg.signals`), its
    stderr passed through to this process's and its end kept; returns None when it
    succeeds, else its exit status after recording the failure in `run_dir` (see the
    module docstring).

    Raises:
      OutputError: if the failure cannot be recorded in `run_dir`.
    """
    run_override = hydra_override("hydra.run.dir", run_dir)
    child = subprocess.Popen([sys.executable, script, *overrides, run_override], env=env,
                             stderr=subprocess.PIPE, process_group=0)
    tail = bytearray()
    with stopping_with(child):  # a stop signal reaches the job, which saves its checkpoint
        for chunk in iter(lambda: os.read(child.stderr.fileno(), 1 << 14), b""):
            sys.stderr.buffer.write(chunk)
            sys.stderr.flush()
            tail = (tail + chunk)[-_KEPT_STDERR:]
        status = child.wait()
    child.stderr.close()
    if status == 0:
        return None
    log = os.path.join(run_dir, LOG_FILE)
    with writing(log, "the failed job's log"), open(log, "a", encoding="utf-8") as stream:
        stream.write(f"--- the end of the job's stderr (exit status {status}) ---\n"
                     f"{_printed_text(bytes(tail))}\n")
    write_json(os.path.join(run_dir, FAILED_FILE), {
        "exit_status": status, "command": train_py_command([*overrides, run_override]),
        "log": log})
    return status


def _printed_text(output: bytes) -> str:
    """Terminal output as its lines show: each line's text after its last carriage return
    (a progress bar's final state)."""
    lines = output.decode("utf-8", errors="replace").split("\n")
    return "\n".join(line.rstrip("\r").rsplit("\r", 1)[-1] for line in lines)


def failed_job(run_dir: str) -> Optional[dict]:
    """The failure record of the sweep job in `run_dir` (see the module docstring), or
    None when it did not fail. A damaged record reads as a failure of unknown status."""
    path = os.path.join(run_dir, FAILED_FILE)
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as stream:
            record = json.load(stream)
    except (OSError, ValueError):
        record = None
    if not isinstance(record, dict):
        return {"exit_status": None, "command": None, "log": path}
    return record

"""A run's checkpoints are restored by no other run.

`<checkpoint folder>/run.json` records the run directory whose checkpoints the folder
holds, written with the first checkpoint (`meshseg.train.rundir.checkpoints.TrainingCheckpoint`).
A run restores only from its own folder: given another run's
(`checkpoint.dir=<run A>/checkpoints`), it is refused naming both, before Hydra writes
(`meshseg.tools.hydra_callbacks.RunDirCheck`) and again before the restore. A run's own
`<run_dir>/checkpoints` is always its own, also after the run directory was moved.

Nothing here imports TensorFlow.
"""

import contextlib
import json
import os

from meshseg.errors import RunDirError
from meshseg.outputs import write_json
from meshseg.train.rundir.claim import CHECKPOINT_DIR

OWNER_FILE = "run.json"


def checkpoint_owner(checkpoint_dir: str) -> str | None:
    """The run directory whose checkpoints `checkpoint_dir` holds, as its `run.json`
    records it; None when no run claimed it (or the record is damaged: the next
    checkpoint's record replaces it)."""
    try:
        with open(os.path.join(checkpoint_dir, OWNER_FILE), encoding="utf-8") as stream:
            return str(json.load(stream)["run_dir"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _is_own(checkpoint_dir: str, run_dir: str) -> bool:
    own = os.path.join(run_dir, CHECKPOINT_DIR)
    return os.path.realpath(checkpoint_dir) == os.path.realpath(own)


def check_checkpoint_owner(checkpoint_dir: str, run_dir: str) -> None:
    """Checks that the run in `run_dir` may restore from and write to `checkpoint_dir`.

    Raises:
      RunDirError: if the folder holds another run's checkpoints, naming both runs.
    """
    if _is_own(checkpoint_dir, run_dir):
        return
    owner = checkpoint_owner(checkpoint_dir)
    if owner is not None and os.path.realpath(owner) != os.path.realpath(run_dir):
        raise RunDirError(
            f"checkpoint.dir={checkpoint_dir} holds the checkpoints of the run in {owner}, "
            f"not of this run ({run_dir}); give this run a folder of its own (or leave "
            f"checkpoint.dir unset), or continue that run with resume={owner}")


def record_checkpoint_owner(checkpoint_dir: str, run_dir: str) -> None:
    """Records `run_dir` as the owner of `checkpoint_dir` (`run.json`, through the one
    write path, `meshseg.outputs.write_json`), unless it already is.

    Raises:
      OutputError: if the record cannot be written.
    """
    path = os.path.join(checkpoint_dir, OWNER_FILE)
    record = {"run_dir": os.path.realpath(run_dir)}
    with contextlib.suppress(OSError, ValueError):
        with open(path, encoding="utf-8") as stream:
            if json.load(stream) == record:
                return
    write_json(path, record, "the checkpoints' owner record")

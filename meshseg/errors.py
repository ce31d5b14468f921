"""The errors that end a run or a tool with one clear line instead of a traceback.

Each class has its own process exit status (`exit_code`), which `train.py` and the
command-line tools exit with:

| class | exit status | meaning |
|---|---|---|
| `ConfigError` | 2 | a setting or a path in it is invalid; nothing was written |
| `RunDirError` | 2 | the run directory holds another run; nothing was written to it |
| `NonFiniteError` | 3 | a step gave a non-finite loss or gradient; the last good checkpoint stays |
| `DataError` | 4 | a mesh, label file or record is missing or invalid; the message names it |
| `ClusterError` | 5 | a multi-worker run's workers did not all start in time, or disagree on the checkpoint they resume from |
| `OutputError` | 6 | an output cannot be written (a full disk, no permission); the message names the path and the cause, and the last good state stays |
| `Interrupted` | 128 + signal | SIGINT or SIGTERM; a checkpoint was saved when it came during the training steps (none in the other phases, nor while a multi-worker run waited for its workers) |

Hydra's own composition errors (unknown key, wrong type) exit with status 1.
"""


class MeshsegError(Exception):
    """Base class; `exit_code` is the process exit status."""

    exit_code = 1


class ConfigError(MeshsegError):
    """The configuration or a path in it is invalid; raised before any output is written."""

    exit_code = 2


class RunDirError(MeshsegError):
    """The run directory holds another run's outputs; nothing was written to it."""

    exit_code = 2


class NonFiniteError(MeshsegError):
    """A training step produced a non-finite loss or gradient; see the message for whether
    its update was applied."""

    exit_code = 3


class DataError(MeshsegError):
    """A mesh, label file or record is missing or invalid; the message names the file (and
    the shard and record index for records)."""

    exit_code = 4


class ClusterError(MeshsegError):
    """The workers of a multi-worker run cannot train together: one did not start within
    `strategy.startup_timeout_s` (the message names it), or they restored different
    checkpoints (their checkpoint directories are not one shared folder)."""

    exit_code = 5


class OutputError(MeshsegError):
    """An output cannot be written: a full disk or quota, a read-only or another user's
    folder (`meshseg.outputs`). The message names the path and the cause; what was
    written before (an earlier checkpoint, the previous version of the file) stays."""

    exit_code = 6


class Interrupted(MeshsegError):
    """SIGINT or SIGTERM arrived. `exit_code` is 128 + signal; `resumable` says whether the
    run directory holds a run that the same command continues (a run stopped before it
    claimed its directory, e.g. while converting its data, has nothing to resume)."""

    def __init__(self, message: str, signum: int, resumable: bool = True):
        super().__init__(message)
        self.exit_code = 128 + signum
        self.resumable = resumable

"""Errors that end a run with one clear line instead of a traceback (see train.py)."""


class MeshsegError(Exception):
    """Base class; `exit_code` is the process exit status train.py uses."""

    exit_code = 1


class ConfigError(MeshsegError):
    """The configuration or a path in it is invalid; raised before any output is written."""

    exit_code = 2


class DataError(MeshsegError):
    """A record or mesh is unreadable or invalid; the message names the file and record."""


class RunDirError(MeshsegError):
    """The run directory holds another run's outputs; nothing was written to it."""

    exit_code = 2


class NonFiniteError(MeshsegError):
    """A training step produced a non-finite loss or gradient; its update was not applied."""

    exit_code = 3


class Interrupted(MeshsegError):
    """SIGINT or SIGTERM arrived; a checkpoint was saved. `exit_code` is 128 + signal."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.exit_code = 128 + signum

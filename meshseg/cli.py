"""What every command-line tool shares: a user's mistake ends the process with one line on
stderr and its exit status (`meshseg.errors`), never with a traceback.

- `command`: wraps a tool's `main(argv)`. A `MeshsegError` it raises is printed as
  `error: <message>` (one line) and the process exits with the error's `exit_code`: 2 for a
  `ConfigError` (a bad option value or path), 4 for a `DataError` (a bad mesh or record).
  Any other exception is a bug and keeps its traceback.
- `at_least`: an argparse type for a count with a lower bound (`--batch-size 0`); argparse
  reports it as a usage error naming the option (exit status 2).
- `existing_file`, `existing_dir`, `output_dir`: checks of a path given on the command
  line; they raise `ConfigError` naming the option and the path.

Nothing here imports TensorFlow, so a tool can check its arguments before it imports
TensorFlow: a mistake then fails in about a second, without TensorFlow's start-up lines.
"""

import argparse
import functools
import os
import sys
from typing import Callable

from meshseg.errors import ConfigError, MeshsegError
from meshseg.signals import raising_stop, stop_of


def command(main: Callable) -> Callable:
    """Decorates a command-line entry point `main(argv=None)`.

    The wrapper returns what `main` returns (a console script exits with it, so `main`
    returns None or an exit status). A `MeshsegError` from `main` is printed to stderr as
    one line, `error: <message>` (the lines of a multi-line message joined by "; "), and
    ends the process with `SystemExit(error.exit_code)`. SIGINT (Ctrl-C) or SIGTERM, in
    whatever phase, ends it with one line, `interrupted by SIGTERM`, and status 128 +
    signal (`meshseg.signals.raising_stop`: child processes are ended and temporaries
    removed on the way).
    """

    @functools.wraps(main)
    def run(argv=None):
        try:
            with raising_stop():
                return main(argv)
        except MeshsegError as error:
            lines = [line.strip() for line in str(error).splitlines() if line.strip()]
            print(f"error: {'; '.join(lines)}", file=sys.stderr)
            sys.exit(error.exit_code)
        except KeyboardInterrupt as interrupt:
            stop = stop_of(interrupt)
            print(f"interrupted by {stop.name}", file=sys.stderr)
            sys.exit(stop.exit_code)

    return run


def at_least(low: int) -> Callable[[str], int]:
    """argparse type: an integer >= `low`; anything else is a usage error naming the option
    (`argument --steps: must be an integer >= 1, got '0'`)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {text!r}")
        return value

    return parse


def existing_file(option: str, path: str) -> str:
    """Returns `path` if it is a file.

    Raises:
      ConfigError: "<option> <path>: no such file" (or "is a folder, not a file").
    """
    if os.path.isdir(path):
        raise ConfigError(f"{option} {path}: is a folder, not a file")
    if not os.path.isfile(path):
        raise ConfigError(f"{option} {path}: no such file")
    return path


def existing_dir(option: str, path: str) -> str:
    """Returns `path` if it is a folder.

    Raises:
      ConfigError: "<option> <path>: no such folder" (or "is a file, not a folder").
    """
    if os.path.isfile(path):
        raise ConfigError(f"{option} {path}: is a file, not a folder")
    if not os.path.isdir(path):
        raise ConfigError(f"{option} {path}: no such folder")
    return path


def output_dir(option: str, path: str, folder: str | None = None) -> str:
    """Returns `path` if the folder it names (`folder`, default `path` itself; e.g. the
    folder of a path prefix) can be made: it is a folder, or it does not exist and its
    nearest existing parent is a folder.

    Raises:
      ConfigError: "<option> <path>: <file> is a file, not a folder".
    """
    parent = os.path.abspath(path if folder is None else folder)
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise ConfigError(f"{option} {path}: {parent} is a file, not a folder")
    return path

"""What every command-line tool shares: a user's mistake ends the process with one line on
stderr and its exit status (`meshseg.errors`), never with a traceback.

- `command`: wraps a tool's `main(argv)`. A `MeshsegError` it raises is printed as
  `error: <message>` (one line) and the process exits with the error's `exit_code`: 2 for a
  `ConfigError` (a bad option value or path), 4 for a `DataError` (a bad mesh or record).
  Any other exception is a bug and keeps its traceback.
- `at_least`: an argparse type for a count with a lower bound (`--batch-size 0`); argparse
  reports it as a usage error naming the option (exit status 2).
- `existing_file`, `existing_dir`, `output_dir`: checks of a path given on the command
  line; they raise `ConfigError` naming the option and the path (`output_dir` also
  refuses a folder this process may not write, `meshseg.outputs.check_output_dir`).
- `distinct_from_inputs`: inputs are never outputs. Every tool that writes files a user
  names passes its outputs and the inputs of the same call through it before it writes;
  an output that is an input (the same path, a symlink to it, or a hard link of it) is
  refused even with `--overwrite`.

Nothing here imports TensorFlow, so a tool can check its arguments before it imports
TensorFlow: a mistake then fails in about a second, without TensorFlow's start-up lines.
"""

import argparse
import functools
import os
import sys
from typing import Callable, Iterable, Mapping

from meshseg.errors import ConfigError, MeshsegError
from meshseg.outputs import check_output_dir
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
    folder of a path prefix) can hold this process's outputs
    (`meshseg.outputs.check_output_dir`: a folder, or creatable, and writable).

    Raises:
      ConfigError: "<option> <path>: <folder> is a file, not a folder" (or "is not
        writable (Permission denied)").
    """
    check_output_dir(path if folder is None else folder, f"{option} {path}")
    return path


def _file_keys(path: str) -> list:
    """What identifies the file `path` names: its path with symlinks resolved and, when it
    exists, its (device, inode) pair, which its hard links share."""
    keys = [os.path.realpath(path)]
    try:
        status = os.stat(path)
        keys.append((status.st_dev, status.st_ino))
    except OSError:
        pass
    return keys


def distinct_from_inputs(option: str, outputs: Iterable[str],
                         inputs: Mapping[str, str]) -> None:
    """Refuses to write over an input of the same call, even with `--overwrite`.

    Args:
      option: the option naming the outputs' destination, e.g. "--out".
      outputs: the files the call would write.
      inputs: {path: what it is, e.g. "mesh", "label file", "run file"} of the files the
        call reads.

    Raises:
      ConfigError: "<option>: would write <output>, which is the <what> <input> this call
        reads; inputs are never replaced, choose another <option>".
    """
    known = {}
    for path, kind in inputs.items():
        for key in _file_keys(path):
            known.setdefault(key, (path, kind))
    for output in outputs:
        found = next((known[key] for key in _file_keys(output) if key in known), None)
        if found is not None:
            path, kind = found
            raise ConfigError(f"{option}: would write {output}, which is the {kind} {path} "
                              f"this call reads; inputs are never replaced, choose another "
                              f"{option}")

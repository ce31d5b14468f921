"""The one write path: every file meshseg writes goes through these helpers.

- `check_output_dir`: before any work starts, checks that a destination folder exists or
  can be made and that this process may write there (its effective user, so another
  user's read-only folder is refused up front). A symlinked folder is followed: it is the
  folder it points to.
- `writing`: a block that writes to a path. Any failure to write in it -- an `OSError`
  (ENOSPC, EACCES, EROFS, EDQUOT, EFBIG, ...) or TensorFlow's own error for the same
  cause (`ResourceExhaustedError` "No space left on device", `PermissionDeniedError`, raised
  by `tf.io`, the summary writer and checkpoints) -- becomes one `OutputError` naming the
  path and the cause.
- `write_atomically` (and `write_text`, `write_json`): a file written whole under a
  per-process temporary name beside it, then renamed over the destination, so a reader
  sees the last good version or the new one, never a part; the temporary is removed when
  writing fails. `write_atomically_together`: several files that make one output (a
  mesh's `.ply` and `.txt`), all or none of them.
- `make_dirs`: `os.makedirs` with the umask's permissions, its failure one line.
- `temporary_dir` and `replace_dir`: a folder built aside (with the umask's
  permissions), then put in the place of an older one, never deleting through a symlink.

Nothing here imports TensorFlow: its errors are recognised by the strerror text they carry.
"""

import contextlib
import errno
import json
import os
import shutil
import signal
import tempfile
from typing import Callable, Iterator, List, Optional, Sequence, Tuple

from meshseg.errors import ConfigError, OutputError
from meshseg.signals import STOP_SIGNALS  # held back while write_atomically_together renames

# The causes of a failed write, as `os.strerror` words them (TensorFlow's messages quote
# the same text).
WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS,
                errno.EFBIG, errno.EIO)
WRITE_CAUSES = tuple(os.strerror(code) for code in WRITE_ERRNOS)


def write_failure_cause(error: BaseException) -> Optional[str]:
    """The cause of `error` if it is a failure to write ("No space left on device",
    "Permission denied", ...), else None: an `OSError`'s strerror (or its text), or the
    `WRITE_CAUSES` text a TensorFlow `OpError` carries (so an out-of-memory
    `ResourceExhaustedError` is not taken for a full disk)."""
    if isinstance(error, OSError):
        return error.strerror or str(error) or type(error).__name__
    if type(error).__module__.startswith("tensorflow"):
        message = str(getattr(error, "message", error))
        return next((cause for cause in WRITE_CAUSES if cause in message), None)
    return None


@contextlib.contextmanager
def writing(path: str, what: str = "", hint: str = "") -> Iterator[None]:
    """Runs the block that writes `path`; a failure to write in it (`write_failure_cause`)
    is raised as one `OutputError`: "<path>: cannot write[ <what>]: <cause>[; <hint>]".

    An `OutputError` raised inside (a nested block's) passes through unchanged, so the
    innermost, most precise path is the one named.
    """
    try:
        yield
    except OutputError:
        raise
    except Exception as error:
        cause = write_failure_cause(error)
        if cause is None:
            raise
        raise OutputError(f"{path}: cannot write{' ' + what if what else ''}: {cause}"
                          f"{'; ' + hint if hint else ''}") from error


def check_output_dir(path: str, name: str = "") -> str:
    """Checks before any work that the folder `path` can hold this process's outputs, and
    returns it: it is a folder (a symlink to one is followed), or does not exist and its
    nearest existing parent is a folder; and this process's effective user may create
    files there.

    Args:
      path: the folder.
      name: how messages name it (default `path`), e.g. "--out predictions/".

    Raises:
      ConfigError: "<name>: <folder> is a file, not a folder" or
        "<name>: <folder> is not writable (Permission denied)" (or "(Read-only file
        system)").
    """
    name = name or str(path)
    parent = os.path.realpath(path)
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise ConfigError(f"{name}: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK,
                     effective_ids=os.access in os.supports_effective_ids):
        read_only = os.statvfs(parent).f_flag & os.ST_RDONLY
        cause = os.strerror(errno.EROFS if read_only else errno.EACCES)
        raise ConfigError(f"{name}: {parent} is not writable ({cause})")
    return path


def make_dirs(path: str) -> str:
    """`os.makedirs(path, exist_ok=True)` (folders get the umask's permissions); returns
    `path`.

    Raises:
      OutputError: "<path>: cannot write the folder: <cause>".
    """
    with writing(path, "the folder"):
        os.makedirs(path, exist_ok=True)
    return path


def temporary_name(path: str) -> str:
    """The per-process temporary name beside `path` it is written under:
    `<folder>/.<stem>.<pid>.tmp<extension>` (hidden, so listings and globs of outputs skip
    it; the extension kept for writers that check it, as Keras' `model.save`)."""
    folder, name = os.path.split(os.fspath(path))
    stem, extension = os.path.splitext(name)
    return os.path.join(folder, f".{stem}.{os.getpid()}.tmp{extension}")


def write_atomically(path: str, write: Callable[[str], None], what: str = "",
                     hint: str = "") -> str:
    """Writes the file `path` whole: `write(temporary)` writes it under
    `temporary_name(path)`, which is then renamed over `path`. Returns `path`.

    Raises:
      OutputError: if it cannot be written (see `writing`, which adds `hint`); the
        temporary is removed and an earlier `path` stays as it was.
    """
    path = os.fspath(path)
    temporary = temporary_name(path)
    with writing(path, what, hint):
        try:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            write(temporary)
            os.replace(temporary, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.remove(temporary)
            raise
    return path


def write_atomically_together(files: Sequence[Tuple[str, Callable[[str], None], str]]
                              ) -> List[str]:
    """Writes several files as one output, e.g. a mesh's predicted `.ply` and `.txt`: each
    `(path, write, what)` is written whole under its temporary name (`write_atomically`),
    and only once all are written are they renamed over their destinations, with SIGINT
    and SIGTERM held back meanwhile (a signal then arrives after the last rename). A
    failure or a stop signal while writing leaves none of them written and every earlier
    version as it was; the temporaries are removed. Returns the paths.

    Raises:
      OutputError: naming the file that cannot be written (see `writing`).
    """
    temporaries = []
    try:
        for path, write, what in files:
            with writing(path, what):
                os.makedirs(os.path.dirname(os.fspath(path)) or ".", exist_ok=True)
                temporaries.append(temporary_name(path))
                write(temporaries[-1])
        held = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            for (path, _, what), temporary in zip(files, temporaries):
                with writing(path, what):
                    os.replace(temporary, path)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
    except BaseException:
        for temporary in temporaries:
            with contextlib.suppress(OSError):
                os.remove(temporary)
        raise
    return [os.fspath(path) for path, _, _ in files]


def write_text(path: str, text: str, what: str = "") -> str:
    """`write_atomically` of `text` (UTF-8)."""

    def write(temporary: str) -> None:
        with open(temporary, "w", encoding="utf-8") as stream:
            stream.write(text)

    return write_atomically(path, write, what)


def write_json(path: str, value, what: str = "", indent: int = 1) -> str:
    """`write_atomically` of `value` as JSON (a trailing newline)."""
    return write_text(path, json.dumps(value, indent=indent) + "\n", what)


def temporary_dir(parent: str, prefix: str) -> str:
    """A new, uniquely named folder in `parent` (`tempfile.mkdtemp`) with the umask's
    permissions rather than mkdtemp's 0700, as it becomes an output when renamed
    (`replace_dir`); returns its path.

    Raises:
      OutputError: "<parent>: cannot write the folder: <cause>".
    """
    with writing(parent, "the folder"):
        path = tempfile.mkdtemp(prefix=prefix, dir=parent)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(path, 0o777 & ~umask)
    return path


def replace_dir(new: str, old: str) -> None:
    """Puts the finished folder `new` in the place of `old` (removed first when it
    exists). `old` must be a real folder (resolve a symlink before building `new` beside
    it); a symlink is never deleted through.

    Raises:
      OutputError: if `old` is a symlink, or cannot be removed, or `new` cannot be renamed.
    """
    if os.path.islink(old):
        raise OutputError(f"{old}: is a symlink; meshseg replaces the folder it points to "
                          f"({os.path.realpath(old)}), never the link")
    with writing(old, "the folder"):
        if os.path.exists(old):
            shutil.rmtree(old)
        os.rename(new, old)

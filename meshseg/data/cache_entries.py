"""How every cache meshseg keeps on disk is read and written: the `impl=auto` timing cache
(`meshseg.train.autotune`), the per-mesh descriptor cache (`meshseg.data.descriptor_cache`)
and the conversion cache's stamp (`meshseg.data.prepare`). Standard library only.

- `read_entry`: a missing entry is None; a damaged one (cut mid-write by a crash or a full
  disk, edited by hand, written by another program) is not trusted: one warning names the
  file and what is wrong, and the entry is None, so the caller computes it again and
  writes it anew. A cache never ends a run.
- `write_entry`: an entry is written to a temporary name of its own process beside it
  (`.<name>.<pid>.tmp`) and renamed over the entry (atomic on POSIX), so a reader sees the
  old entry or the new one, never a part, and processes writing one entry at once never
  write into one temporary file. The temporary is removed when the write fails.
"""

import logging
import os
import zipfile
from pathlib import Path
from typing import BinaryIO, Callable, Optional, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")

# What parsing a damaged entry raises: JSON and text decoding errors are ValueErrors,
# a cut or foreign .npz raises BadZipFile, EOFError, KeyError (a missing array) or
# ValueError, and a parser checking the structure raises TypeError or KeyError.
DAMAGED = (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile)


def read_entry(path: str | Path, parse: Callable[[Path], T], what: str) -> Optional[T]:
    """`parse(path)`, or None when the entry is missing or damaged.

    Args:
      path: the entry's file.
      parse: reads the file and checks its structure; raises one of `DAMAGED` for an
        entry it cannot use.
      what: the cache's name for the warning, e.g. "impl=auto timing cache".

    Returns:
      what `parse` returns; None when `path` does not exist or `parse` raised (then after
      one warning "<what> <path> is damaged (<cause>); computing it again").
    """
    path = Path(path)
    if not path.exists():
        return None
    try:
        return parse(path)
    except DAMAGED as error:
        log.warning("%s %s is damaged (%s: %s); computing it again", what, path,
                    type(error).__name__, error)
        return None


def temporary_name(path: str | Path) -> Path:
    """`<dir>/.<name>.<pid>.tmp`: where this process writes `path` before renaming it."""
    path = Path(path)
    return path.parent / f".{path.name}.{os.getpid()}.tmp"


def write_entry(path: str | Path, write: Callable[[BinaryIO], None]) -> None:
    """Writes the entry `path` with `write(stream)` through `temporary_name(path)` and an
    atomic rename; creates the folder when missing.

    Raises:
      OSError: if the folder cannot be made or the entry written (the temporary is removed
        and the entry keeps its last complete content).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = temporary_name(path)
    try:
        with open(temporary, "wb") as stream:
            write(stream)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise

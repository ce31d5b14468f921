"""How every cache meshseg keeps on disk is read: the `impl=auto` timing cache
(`meshseg.train.loop.autotune`), the per-mesh descriptor cache
(`meshseg.data.features.descriptor_cache`) and the conversion cache's stamp
(`meshseg.data.records.prepare`). Standard library only. They are written as every output is
(`meshseg.outputs.write_atomically`: a per-process temporary name beside the entry, renamed
over it), so a reader sees the old entry or the new one.

- `read_entry`: a missing entry is None; a damaged one (cut mid-write by a crash or a full
  disk, edited by hand, written by another program) is not trusted: one warning names the
  file and what is wrong, and the entry is None, so the caller computes it again and
  writes it anew. A cache never ends a run.
"""

import logging
import zipfile
from pathlib import Path
from typing import Callable, Optional, TypeVar

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

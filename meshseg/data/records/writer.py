"""Shards written all or nothing: every record of a conversion goes through
`write_records_atomically`.
"""

import contextlib
import os

import tensorflow as tf

from meshseg.data.records.manifest import partial_path
from meshseg.outputs import writing


def write_records_atomically(paths: list[str], records, finish=None) -> None:
    """Writes serialised records to shards, all or nothing.

    Every shard is written under a temporary name in a hidden folder beside it
    (`meshseg.data.records.manifest.partial_path`, where no glob of the shards matches); only when
    `records` is exhausted without error are all of them renamed to `paths`, and
    then `finish()` is called (e.g. to write a manifest). On any error the
    temporary files are removed and the error is re-raised.

    Args:
      paths: final shard paths; their directories are created.
      records: iterable of (shard index into `paths`, serialised record bytes).
      finish: optional callable run after the renames.

    Raises:
      OutputError: if a shard cannot be written (a full disk, no permission), naming the
        first shard's folder and the cause; no shard is renamed then.
    """
    with writing(os.path.dirname(os.path.abspath(paths[0])), "the shards",
                 "no shard was replaced"):
        _write_records(paths, records, finish)


def _write_records(paths: list[str], records, finish) -> None:
    for path in paths:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    temp_paths = [str(partial_path(path)) for path in paths]
    writers = []
    try:
        writers = [tf.io.TFRecordWriter(path) for path in temp_paths]
        for shard, record in records:
            writers[shard].write(record)
        for writer in writers:
            writer.close()
    except BaseException:
        for writer in writers:
            writer.close()
        for path in temp_paths:
            if os.path.exists(path):
                os.remove(path)
        _remove_if_empty(temp_paths)
        raise
    for temp_path, path in zip(temp_paths, paths):
        os.replace(temp_path, path)
    _remove_if_empty(temp_paths)
    if finish is not None:
        finish()


def _remove_if_empty(temp_paths: list[str]) -> None:
    """Removes the hidden folders of `temp_paths` that are empty now."""
    for folder in {os.path.dirname(path) for path in temp_paths}:
        with contextlib.suppress(OSError):
            os.rmdir(folder)

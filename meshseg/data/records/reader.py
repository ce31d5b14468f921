"""A Python-side check of mesh TFRecord shards that names the shard and record index of
every bad record, before the tf.data pipeline reads them; every reader of shards goes
through it.

tf.data's own reader reports a damaged shard as a bare `DataLossError`, stops there,
and `ignore_errors` drops bad records without saying which. `check_shard` reads a
shard's frames once (`meshseg.data.records.framing` for an uncompressed shard: a record whose
checksum fails costs only itself, and reading resynchronises on the next intact frame),
decodes each record with protobuf + NumPy (`meshseg.data.records.decode`) and either raises a
`BadRecordError` "<shard>, record <i>: <reason>" or, with `skip_bad_records`, logs and
counts each bad record in a `BadRecordLog`. Its `ShardScan` lists the records that
decode, with their byte spans; the pipeline reads exactly those in graph mode (so its
iterator stays checkpointable, which a `from_generator` reader is not), and the
Python-side readers (`good_records`: the TensorBoard mesh sampler, predict) read the
same ones.

Shards may be GZIP- or ZLIB-compressed TFRecords: `shard_compression` detects it per
shard. A compressed stream cannot be resynchronised, so there a damaged record ends
the shard (counted once, as a record; a shard with no readable record at all is
counted as a skipped shard).
"""

import functools
import hashlib
import logging
import os
import re
from dataclasses import dataclass
from typing import Iterator

import tensorflow as tf

from meshseg.config import ADJACENCY_LEVELS
from meshseg.data.features.stored import STORED_FEATURES
from meshseg.data.records.decode import decode_mesh_record, record_adjacency, record_fields
from meshseg.data.records.framing import HEADER_BYTES, Frame, frames, masked_crc32c
from meshseg.errors import DataError

log = logging.getLogger(__name__)


class BadRecordError(DataError):
    """A record that is not a valid mesh; the message names shard and record index."""


class BadRecordLog:
    """Counts (and keeps the messages of) what `skip_bad_records` skipped: single records
    (`messages`, `count`) and whole shards without a readable record (`shards`), logging
    each as a warning unless `quiet`."""

    def __init__(self, quiet: bool = False):
        self.messages: list[str] = []
        self.shards: list[str] = []
        self.quiet = quiet

    @property
    def count(self) -> int:
        return len(self.messages)

    def add(self, message: str, whole_shard: bool = False) -> None:
        if whole_shard:
            self.shards.append(message)
            if not self.quiet:
                log.warning("skipping unreadable shard (%d so far): %s", len(self.shards), message)
        else:
            self.messages.append(message)
            if not self.quiet:
                log.warning("skipping bad record (%d so far): %s", self.count, message)


def per_file_version(function):
    """Caches `function(path, *args)` once per process and file version (the file's size
    and modification time), so start-up scans and every `make_dataset` call share one read
    of a shard until it changes. The cache is the wrapper's `cache`. A shard that no longer
    exists raises `DataError` naming it."""
    @functools.lru_cache(maxsize=1024)
    def cache(path: str, size: int, mtime_ns: int, *args):
        return function(path, *args)

    @functools.wraps(function)
    def cached(path, *args):
        try:
            stat = os.stat(path)
        except FileNotFoundError:
            raise DataError(f"{path}: the shard is gone (removed after the run listed it: "
                            "by another run rebuilding its cache, or by hand)") from None
        return cache(str(path), stat.st_size, stat.st_mtime_ns, *args)

    cached.cache = cache
    return cached


@per_file_version
def shard_compression(path: str) -> str:
    """The compression of a TFRecord shard: "" (none), "GZIP" or "ZLIB", judged by its
    first bytes: an intact first TFRecord header (its length checksum holds) is an
    uncompressed shard; otherwise the gzip magic number (RFC 1952) is GZIP and a zlib
    header (RFC 1950: deflate, header check a multiple of 31) is ZLIB. Anything else,
    an empty shard included, is read as uncompressed, whose reader then reports it."""
    with open(path, "rb") as stream:
        head = stream.read(HEADER_BYTES)
    if len(head) == HEADER_BYTES and masked_crc32c(head[:8]) == int.from_bytes(head[8:], "little"):
        return ""
    if head[:2] == b"\x1f\x8b":
        return "GZIP"
    if len(head) >= 2 and head[0] & 0x0F == 8 and (head[0] << 8 | head[1]) % 31 == 0:
        return "ZLIB"
    return ""


def open_shard(path: str) -> tf.data.TFRecordDataset:
    """The records of one shard, read with its detected compression."""
    return tf.data.TFRecordDataset(str(path), compression_type=shard_compression(path))


def first_example(path: str) -> tf.train.Example | None:
    """The first record of a shard that is a `tf.train.Example` (damaged frames and other
    bytes passed over; the check reports them), or None when there is none."""
    for frame in shard_frames(path):
        if frame.data is None:
            continue
        try:
            return tf.train.Example.FromString(frame.data)
        except Exception:  # protobuf's DecodeError
            continue
    return None


def stored_fields(files: list[str]) -> tuple[tuple[str, ...], int]:
    """The features and hierarchy levels every shard stores, judged by each shard's first
    Example (none for a shard without one; the check reports it)."""
    features, levels = set(STORED_FEATURES), 8
    for path in files:
        first = first_example(path)
        names, count = ((), 0) if first is None else record_fields(first)
        features, levels = features & set(names), min(levels, count)
    if not files:
        return (), 0
    return tuple(name for name in STORED_FEATURES if name in features), levels


def stored_adjacency(files: list[str]) -> str:
    """The adjacency level every shard stores, judged by each shard's first Example
    ("none" for a shard without one; the check reports it)."""
    levels = []
    for path in files:
        first = first_example(path)
        levels.append("none" if first is None else record_adjacency(first))
    return min(levels, key=ADJACENCY_LEVELS.index) if levels else "none"


def shard_frames(path: str) -> Iterator[Frame]:
    """The frames of one shard in file order: `meshseg.data.records.framing.frames` for an
    uncompressed shard; for a compressed one, tf.data's records (offset -1) up to the
    first unreadable byte, which ends it with a final damaged frame."""
    path = str(path)
    compression = shard_compression(path)
    if not compression:
        yield from frames(path)
        return
    records = iter(open_shard(path))
    index = 0
    while True:
        try:
            serialized = next(records)
        except StopIteration:
            return
        except tf.errors.DataLossError as error:
            yield Frame(index, -1, 0, problem=_data_loss_reason(error), final=True)
            return
        data = serialized.numpy()
        yield Frame(index, -1, len(data), data=data)
        index += 1


@dataclass(frozen=True)
class ShardScan:
    """What one read of a shard found.

    Attributes:
      path: the shard; size: its bytes; compression: "", "GZIP" or "ZLIB".
      good: (record index, byte offset of its frame, data length) of every record that
        decodes, in file order (offset -1 in a compressed shard).
      problems: (record index, message) of every bad record, in file order; the message
        names the shard and the record.
      digests: (record index, SHA-256 of vertices and triangles) of the good records.
      framed: records whose frame was read whole (good ones and ones that do not decode).
    """

    path: str
    size: int
    compression: str
    good: tuple[tuple[int, int, int], ...]
    problems: tuple[tuple[int, str], ...]
    digests: tuple[tuple[int, str], ...]
    framed: int


def check_shard(path: str, adjacency: str = "none", skip_bad_records: bool = False,
                bad_records: BadRecordLog | None = None, features=(), levels: int = 0
                ) -> ShardScan:
    """Reads and decodes every record of one shard once, in file order.

    Args:
      path: the shard file.
      adjacency: stored adjacency to check as well (see `decode_mesh_record`).
      skip_bad_records: log and count bad records in `bad_records` instead of raising.
      bad_records: where skipped records are counted; a fresh log when None.
      features, levels: stored features and hierarchy levels to check as well.

    Returns:
      the shard's `ShardScan` (its good records are what the readers read).

    Raises:
      BadRecordError: "<path>, record <i>: <reason>" for a record that does not
        decode, whose checksum fails, or that a truncated shard cuts short, unless
        `skip_bad_records`.
      FileNotFoundError: if the shard does not exist.
    """
    bad_records = bad_records if bad_records is not None else BadRecordLog()
    scan = _decode_shard(str(path), adjacency, tuple(features), levels)
    for index, message in scan.problems:
        if not skip_bad_records:
            raise BadRecordError(message)
        bad_records.add(message, whole_shard=scan.framed == 0 and len(scan.problems) == 1)
    return scan


def good_records(path: str, adjacency: str = "none", features=(), levels: int = 0
                 ) -> Iterator[tuple[int, bytes]]:
    """(record index, bytes) of the records of one shard that decode (`check_shard` with
    the same arguments, bad records passed over), in file order."""
    wanted = {index for index, _, _ in check_shard(
        path, adjacency, True, BadRecordLog(quiet=True), features, levels).good}
    for frame in shard_frames(path):
        if frame.index in wanted:
            yield frame.index, frame.data


def geometry_digests(path: str, adjacency: str = "none", features=(), levels: int = 0
                     ) -> dict[int, str]:
    """{record index: SHA-256 of its vertices and triangles} of the records of one shard
    that decode: equal for two records of the same mesh, whichever file holds them."""
    return dict(_decode_shard(str(path), adjacency, tuple(features), levels).digests)


@per_file_version
def _decode_shard(path: str, adjacency: str, features: tuple = (), levels: int = 0
                  ) -> ShardScan:
    """Reads and decodes every frame of a shard (once per file version, `per_file_version`);
    see `ShardScan`."""
    good, problems, digests, framed = [], [], [], 0
    for frame in shard_frames(path):
        if frame.data is None:
            rest = "; the rest of the shard is unreadable" if frame.final else ""
            problems.append((frame.index, f"{path}, record {frame.index}: truncated or corrupt "
                                          f"shard ({frame.problem}){rest}"))
            continue
        framed += 1
        try:
            mesh = decode_mesh_record(frame.data, adjacency, features, levels)
        except ValueError as error:
            problems.append((frame.index, f"{path}, record {frame.index}: {error}"))
            continue
        good.append((frame.index, frame.offset, frame.length))
        geometry = mesh["vertices"].tobytes() + mesh["triangles"].tobytes()
        digests.append((frame.index, hashlib.sha256(geometry).hexdigest()))
    return ShardScan(path, os.path.getsize(path), shard_compression(path), tuple(good),
                     tuple(problems), tuple(digests), framed)


def _data_loss_reason(error: tf.errors.DataLossError) -> str:
    """The reader's own words ("truncated record at 3791912") without TensorFlow's op and
    device names; the first line of the message if it has none."""
    found = re.search(r"(truncated|corrupted) record at \d+", error.message)
    return found.group(0) if found else error.message.splitlines()[0]

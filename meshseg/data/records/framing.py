"""The records of one TFRecord shard read frame by frame, past a damaged record (NumPy and
google-crc32c, no TensorFlow).

A TFRecord file is a sequence of frames (tensorflow/core/lib/io/record_writer.cc): the
data length as uint64 little-endian, the masked CRC-32C of those 8 bytes, the data, and
the masked CRC-32C of the data. tf.data's reader stops at the first frame whose checksum
fails. `frames` reads an uncompressed shard itself, so a damaged record costs only
itself:

- a frame whose data checksum fails (a flipped byte inside a record; its length is
  intact) is reported and skipped, and reading goes on at the next frame;
- a frame whose length checksum fails is reported, and reading resynchronises at the
  next byte offset that starts an intact frame (both checksums hold), if there is one;
- a frame cut short by the end of the file ends the shard.

Every frame is reported with its byte offset and data length, which the tf.data
pipeline then reads exactly (`meshseg.data.pipeline.dataset.read_meshes`).
"""

import os
import struct
from dataclasses import dataclass
from typing import Iterator

import google_crc32c
import numpy as np

HEADER_BYTES = 12  # uint64 data length + uint32 masked CRC-32C of the length
FOOTER_BYTES = 4  # uint32 masked CRC-32C of the data
_MASK_DELTA = 0xA282EAD8
_RESYNC_CHUNK = 1 << 23  # bytes searched at once for the next intact frame


def masked_crc32c(data: bytes) -> int:
    """TFRecord's checksum of `data`: CRC-32C rotated right by 15 bits plus 0xa282ead8
    (tensorflow/core/lib/hash/crc32c.h, `Mask`)."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


@dataclass(frozen=True)
class Frame:
    """One frame of a shard.

    Attributes:
      index: the record's position in the shard (0-based; a resynchronised shard counts
        the damaged stretch it jumped over as one record).
      offset: byte offset of the frame's header; length: its data length in bytes.
      data: the record's bytes, None when the frame is damaged.
      problem: why the frame is damaged (names the byte offset), None when intact.
      final: True when nothing after this frame can be read (the end of the file cut it).
    """

    index: int
    offset: int
    length: int
    data: bytes | None = None
    problem: str | None = None
    final: bool = False


def _intact_header(header: bytes, offset: int, size: int) -> int | None:
    """The data length of a 12-byte header at `offset` if its checksum holds and its frame
    fits in a file of `size` bytes, else None."""
    length, crc = struct.unpack("<QI", header)
    if masked_crc32c(header[:8]) != crc or offset + HEADER_BYTES + length + FOOTER_BYTES > size:
        return None
    return length


def _next_intact_frame(stream, start: int, size: int) -> int | None:
    """The first byte offset >= `start` where an intact frame begins (header and data
    checksums hold), or None. Candidates are the offsets whose 8 length bytes give a frame
    that fits in the file (found with NumPy a chunk at a time); only those are checksummed."""
    last = size - HEADER_BYTES - FOOTER_BYTES  # the last offset a frame can start at
    for chunk_start in range(start, last + 1, _RESYNC_CHUNK):
        stream.seek(chunk_start)
        chunk = np.frombuffer(stream.read(_RESYNC_CHUNK + 7), np.uint8)
        count = min(_RESYNC_CHUNK, last + 1 - chunk_start)
        length = np.zeros(count, np.uint64)
        for byte in range(8):
            length |= chunk[byte:byte + count].astype(np.uint64) << np.uint64(8 * byte)
        fits = length <= np.uint64(last)
        ends = chunk_start + np.arange(count) + length.astype(np.int64)
        for candidate in np.flatnonzero(fits & (ends <= last)):
            offset = chunk_start + int(candidate)
            stream.seek(offset)
            found = _intact_header(stream.read(HEADER_BYTES), offset, size)
            if found is None:
                continue
            data, footer = stream.read(found), stream.read(FOOTER_BYTES)
            if masked_crc32c(data) == struct.unpack("<I", footer)[0]:
                return offset
    return None


def frames(path: str) -> Iterator[Frame]:
    """The frames of an uncompressed TFRecord shard, in file order (see the module
    docstring).

    Yields:
      `Frame`s: intact ones with their data, damaged ones with the problem ("corrupted
      record at <offset>: ...", "truncated record at <offset>").

    Raises:
      OSError: if the file cannot be read.
    """
    size = os.path.getsize(path)
    with open(path, "rb") as stream:
        offset, index = 0, 0
        while offset < size:
            stream.seek(offset)
            header = stream.read(HEADER_BYTES)
            if len(header) < HEADER_BYTES:
                yield Frame(index, offset, 0, problem=f"truncated record at {offset}", final=True)
                return
            length, crc = struct.unpack("<QI", header)
            header_intact = masked_crc32c(header[:8]) == crc
            if header_intact and offset + HEADER_BYTES + length + FOOTER_BYTES > size:
                yield Frame(index, offset, length, problem=f"truncated record at {offset}",
                            final=True)
                return
            if not header_intact:
                resync = _next_intact_frame(stream, offset + 1, size)
                if resync is None:
                    yield Frame(index, offset, 0, final=True, problem=(
                        f"corrupted record at {offset}: its length checksum fails and no "
                        "intact record follows"))
                    return
                yield Frame(index, offset, 0, problem=(
                    f"corrupted record at {offset}: its length checksum fails; "
                    f"{resync - offset} bytes skipped to the next intact record"))
                offset, index = resync, index + 1
                continue
            data, footer = stream.read(length), stream.read(FOOTER_BYTES)
            if masked_crc32c(data) != struct.unpack("<I", footer)[0]:
                yield Frame(index, offset, length, problem=(
                    f"corrupted record at {offset}: its data checksum fails"))
            else:
                yield Frame(index, offset, length, data=data)
            offset, index = offset + HEADER_BYTES + length + FOOTER_BYTES, index + 1

"""Specification of the frame-by-frame TFRecord reader (meshseg.data.records.framing): the frames
of a shard TensorFlow wrote, and each kind of damage costing only what it destroys."""

import struct

import pytest
import tensorflow as tf

from meshseg.data.records.framing import FOOTER_BYTES, HEADER_BYTES, frames, masked_crc32c

RECORDS = [bytes([i]) * (40 + 7 * i) for i in range(5)]


@pytest.fixture
def shard(tmp_path):
    path = tmp_path / "s.tfrecords"
    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in RECORDS:
            writer.write(record)
    return path


def _offset(index: int) -> int:
    return sum(HEADER_BYTES + len(r) + FOOTER_BYTES for r in RECORDS[:index])


def _damage(path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0xFF
    path.write_bytes(bytes(data))


def test_the_frames_of_a_tensorflow_shard_are_its_records_at_their_offsets(shard):
    found = list(frames(str(shard)))
    assert [f.data for f in found] == RECORDS
    assert [(f.index, f.offset, f.length) for f in found] == [
        (i, _offset(i), len(r)) for i, r in enumerate(RECORDS)]
    assert not any(f.problem for f in found)


def test_the_checksum_is_tfrecords_masked_crc32c(shard):
    data = shard.read_bytes()
    length = struct.unpack("<Q", data[:8])[0]
    assert masked_crc32c(data[:8]) == struct.unpack("<I", data[8:12])[0]
    assert masked_crc32c(data[12:12 + length]) == struct.unpack(
        "<I", data[12 + length:16 + length])[0]


def test_a_flipped_data_byte_costs_only_its_record(shard):
    _damage(shard, _offset(1) + HEADER_BYTES + 20)
    found = list(frames(str(shard)))
    assert [f.index for f in found] == [0, 1, 2, 3, 4]
    assert "data checksum fails" in found[1].problem and found[1].data is None
    assert [f.data for f in found if f.data is not None] == RECORDS[:1] + RECORDS[2:]


@pytest.mark.parametrize("byte", [0, 9])  # the length itself, its checksum
def test_a_damaged_length_resynchronises_on_the_next_intact_record(shard, byte):
    _damage(shard, _offset(2) + byte)
    found = list(frames(str(shard)))
    assert "length checksum fails" in found[2].problem
    assert "bytes skipped" in found[2].problem and not found[2].final
    assert [f.data for f in found if f.data is not None] == RECORDS[:2] + RECORDS[3:]
    assert found[-1].offset == _offset(4)


def test_a_damaged_last_length_ends_the_shard(shard):
    _damage(shard, _offset(4) + 3)
    found = list(frames(str(shard)))
    assert found[-1].final and "no intact record follows" in found[-1].problem
    assert [f.data for f in found[:-1]] == RECORDS[:4]


@pytest.mark.parametrize("cut", [5, HEADER_BYTES + 10])  # inside the header, inside the data
def test_a_truncated_shard_ends_with_a_final_truncated_frame(shard, cut):
    shard.write_bytes(shard.read_bytes()[:_offset(3) + cut])
    found = list(frames(str(shard)))
    assert [f.data for f in found[:3]] == RECORDS[:3]
    assert found[3].final and found[3].problem == f"truncated record at {_offset(3)}"
    assert len(found) == 4


def test_an_empty_shard_has_no_frame(tmp_path):
    (tmp_path / "e.tfrecords").write_bytes(b"")
    assert list(frames(str(tmp_path / "e.tfrecords"))) == []

"""Specification of bad-record reporting (meshseg.data.records.reader) and stored adjacency."""

import logging

import numpy as np
import pytest
import tensorflow as tf

from meshseg.batch import table_from_edges, without_mesh_ids
from meshseg.data.mesh.adjacency import mesh_edges
from meshseg.data.pipeline.dataset import make_dataset
from meshseg.data.records.reader import BadRecordError, BadRecordLog, check_shard, stored_adjacency
from meshseg.data.records.schema import mesh_to_example


def _relabelled(mesh: dict, label: int) -> dict:
    return dict(mesh, labels=np.full_like(mesh["labels"], label))


def _write(path, records: list[bytes]) -> str:
    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in records:
            writer.write(record)
    return str(path)


def _truncated_shard(tmp_path, tetrahedron) -> str:
    """Three records of which the last is cut short."""
    path = _write(tmp_path / "cut.tfrecords",
                  [mesh_to_example(**_relabelled(tetrahedron, i)) for i in range(3)])
    data = open(path, "rb").read()
    open(path, "wb").write(data[:-20])
    return path


def test_truncated_shard_error_names_shard_and_record_index(tmp_path, tetrahedron):
    path = _truncated_shard(tmp_path, tetrahedron)
    with pytest.raises(BadRecordError, match=r"cut\.tfrecords, record 2: truncated or corrupt "
                                             r"shard \(truncated record at \d+\); the rest") as error:
        make_dataset([path], batch_size=1, training=False)
    assert "function_node" not in str(error.value)  # no TensorFlow internals in the message


def test_wrong_dtype_record_error_names_shard_and_record_index(
        tmp_path, tetrahedron, demo_style_example):
    records = [mesh_to_example(**tetrahedron),
               demo_style_example(tetrahedron["vertices"],
                                  tetrahedron["triangles"].astype(np.int64), tetrahedron["labels"])]
    path = _write(tmp_path / "mixed.tfrecords", records)
    message = r"mixed\.tfrecords, record 1: 'triangles' must be int32, got int64"
    with pytest.raises(BadRecordError, match=message):
        make_dataset([path], batch_size=1, training=False)


def test_missing_field_error_names_shard_and_record_index(tmp_path, tetrahedron):
    example = tf.train.Example.FromString(mesh_to_example(**tetrahedron))
    del example.features.feature["labels"]
    path = _write(tmp_path / "a.tfrecords",
                  [mesh_to_example(**tetrahedron)] * 2 + [example.SerializeToString()])
    with pytest.raises(BadRecordError, match=r"a\.tfrecords, record 2: missing feature 'labels'"):
        check_shard(path)


def test_skip_bad_records_skips_logs_and_counts_them(tmp_path, tetrahedron, demo_style_example,
                                                      caplog):
    wrong = demo_style_example(tetrahedron["vertices"].astype(np.float64),
                               tetrahedron["triangles"], tetrahedron["labels"])
    mixed = _write(tmp_path / "mixed.tfrecords",
                   [mesh_to_example(**_relabelled(tetrahedron, 10)), wrong,
                    mesh_to_example(**_relabelled(tetrahedron, 11))])
    cut = _truncated_shard(tmp_path, tetrahedron)
    bad_records = BadRecordLog()
    with caplog.at_level(logging.WARNING):
        dataset = make_dataset([mixed, cut], batch_size=1, training=False,
                               skip_bad_records=True, bad_records=bad_records)
    assert sorted(int(labels[0, 0]) for _, labels in dataset) == [0, 1, 10, 11]
    assert bad_records.count == 2
    assert "mixed.tfrecords, record 1: 'vertices' must be float32" in bad_records.messages[0]
    assert "cut.tfrecords, record 2: truncated" in bad_records.messages[1]
    assert "skipping bad record (2 so far)" in caplog.text


def _adjacency(mesh: dict, level: str) -> dict:
    edges, weights = mesh_edges(mesh["triangles"], len(mesh["vertices"]))
    stored = {"edges": edges, "edge_weights": weights}
    if level == "table":
        table, _ = table_from_edges(edges[:, 0], edges[:, 1], weights, len(mesh["vertices"]))
        stored |= {"neighbors": table.neighbors, "neighbor_weights": table.weights,
                   "overflow_neighbors": table.overflow_neighbors,
                   "overflow_weights": table.overflow_weights,
                   "overflow_centers": table.overflow_centers}
    return stored


@pytest.mark.parametrize("level", ["edges", "table"])
def test_stored_adjacency_gives_the_same_batches_as_computed_adjacency(
        tmp_path, tiny_dataset, level):
    meshes = [{name: value.numpy() for name, value in mesh.items()}
              for mesh in _parsed(tiny_dataset["train"])]
    plain = _write(tmp_path / "plain.tfrecords", [
        mesh_to_example(m["vertices"], m["triangles"], m["labels"]) for m in meshes])
    stored = _write(tmp_path / "stored.tfrecords", [
        mesh_to_example(m["vertices"], m["triangles"], m["labels"], _adjacency(m, level))
        for m in meshes])
    assert stored_adjacency([plain]) == "none" and stored_adjacency([stored]) == level
    batches = [list(make_dataset([path], batch_size=3, training=False)) for path in (plain, stored)]
    assert len(batches[0]) == len(batches[1]) == 2
    for (features, labels), (stored_features, stored_labels) in zip(*batches):
        np.testing.assert_array_equal(labels, stored_labels)
        assert features.keys() == stored_features.keys()
        for name in without_mesh_ids(features):  # ids name the two different files
            np.testing.assert_array_equal(features[name], stored_features[name], err_msg=name)


def _parsed(path: str):
    from meshseg.data.records.parse import parse_mesh_record

    return [parse_mesh_record(record) for record in tf.data.TFRecordDataset(path)]


def test_stored_adjacency_is_invisible_to_a_demo_schema_reader(tetrahedron):
    from meshseg.data.records.parse import parse_mesh_record

    record = mesh_to_example(**tetrahedron, adjacency=_adjacency(tetrahedron, "table"))
    mesh = parse_mesh_record(tf.constant(record))
    np.testing.assert_array_equal(mesh["triangles"], tetrahedron["triangles"])


def test_mixed_shards_fall_back_to_computed_adjacency(tmp_path, tetrahedron):
    plain = _write(tmp_path / "a.tfrecords", [mesh_to_example(**tetrahedron)])
    stored = _write(tmp_path / "b.tfrecords", [
        mesh_to_example(**tetrahedron, adjacency=_adjacency(tetrahedron, "edges"))])
    assert stored_adjacency([plain, stored]) == "none"
    assert len(list(make_dataset([plain, stored], batch_size=1, training=False))) == 2


def test_training_iterator_can_be_checkpointed_mid_pass(tmp_path, tetrahedron):
    path = _write(tmp_path / "a.tfrecords", [
        mesh_to_example(**_relabelled(tetrahedron, i), adjacency=_adjacency(tetrahedron, "edges"))
        for i in range(12)])
    dataset = make_dataset([path], batch_size=2, training=True, seed=0, repeat=True,
                           shuffle_buffer=2)
    iterator = iter(dataset)
    next(iterator)
    saved = tf.train.Checkpoint(iterator=iterator).save(str(tmp_path / "ckpt"))
    expected = [next(iterator)[1][:, 0].numpy().tolist() for _ in range(3)]
    restored = iter(dataset)
    tf.train.Checkpoint(iterator=restored).restore(saved)
    assert [next(restored)[1][:, 0].numpy().tolist() for _ in range(3)] == expected


def test_a_shard_is_decoded_once_until_it_changes(tmp_path, tetrahedron):
    from meshseg.data.records.reader import _decode_shard

    path = _write(tmp_path / "once.tfrecords",
                  [mesh_to_example(**_relabelled(tetrahedron, i)) for i in range(3)])
    make_dataset([path], batch_size=1, training=False)
    misses = _decode_shard.cache.cache_info().misses
    make_dataset([path], batch_size=1, training=False)
    assert _decode_shard.cache.cache_info().misses == misses  # the second check is a cache hit
    data = open(path, "rb").read()
    open(path, "wb").write(data[:-20])  # a changed file is checked again
    with pytest.raises(BadRecordError, match=r"once\.tfrecords, record 2: truncated"):
        make_dataset([path], batch_size=1, training=False)


def _flip_in_record(path: str, index: int) -> None:
    """Flips one byte in the middle of record `index`'s data (its length framing intact)."""
    from meshseg.data.records.framing import HEADER_BYTES, frames

    frame = next(f for f in frames(path) if f.index == index)
    data = bytearray(open(path, "rb").read())
    data[frame.offset + HEADER_BYTES + frame.length // 2] ^= 0x01
    open(path, "wb").write(bytes(data))


def _four_meshes(tmp_path, tetrahedron, name="four.tfrecords", options=None) -> str:
    path = str(tmp_path / name)
    with tf.io.TFRecordWriter(path, options) as writer:
        for label in range(4):
            writer.write(mesh_to_example(**_relabelled(tetrahedron, label)))
    return path


def test_a_flipped_byte_costs_only_its_record_in_every_reader(tmp_path, tetrahedron):
    from meshseg.data.pipeline.dataset import sample_meshes
    from meshseg.data.records.reader import geometry_digests, good_records

    path = _four_meshes(tmp_path, tetrahedron)
    _flip_in_record(path, 1)
    with pytest.raises(BadRecordError, match=r"four\.tfrecords, record 1: truncated or corrupt "
                                             r"shard \(corrupted record at \d+: its data checksum"):
        check_shard(path)
    bad_records = BadRecordLog()
    dataset = make_dataset([path], batch_size=1, training=False, skip_bad_records=True,
                           bad_records=bad_records)
    assert [int(labels[0, 0]) for _, labels in dataset] == [0, 2, 3]
    assert bad_records.count == 1 and not bad_records.shards
    assert "the rest of the shard" not in bad_records.messages[0]
    assert [index for index, _ in good_records(path)] == [0, 2, 3]
    assert sorted(geometry_digests(path)) == [0, 2, 3]
    assert [int(labels[0]) for _, labels, _ in sample_meshes([path], 4)] == [0, 2, 3]


def test_a_record_that_is_not_an_example_is_skipped_and_the_rest_read(tmp_path, tetrahedron):
    from meshseg.data.records.reader import stored_fields

    path = _write(tmp_path / "junk.tfrecords",
                  [b"this is not a tf.train.Example \xff\xfe"]
                  + [mesh_to_example(**_relabelled(tetrahedron, i)) for i in range(4)])
    assert stored_adjacency([path]) == "none" and stored_fields([path]) == ((), 0)
    with pytest.raises(BadRecordError, match=r"junk\.tfrecords, record 0: "):
        check_shard(path)
    bad_records = BadRecordLog()
    dataset = make_dataset([path], batch_size=1, training=False, skip_bad_records=True,
                           bad_records=bad_records)
    assert [int(labels[0, 0]) for _, labels in dataset] == [0, 1, 2, 3]
    assert bad_records.count == 1


def test_a_damaged_compressed_shard_keeps_the_records_before_the_damage(tmp_path, tetrahedron):
    # Incompressible vertices, so the cut falls after whole records of the gzip stream.
    noisy = dict(tetrahedron, vertices=np.random.default_rng(0).normal(
        size=(20000, 3)).astype(np.float32), labels=np.zeros(20000, np.int32))
    path = _four_meshes(tmp_path, noisy, "four.tfrecords.gz",
                        tf.io.TFRecordOptions(compression_type="GZIP"))
    data = open(path, "rb").read()
    open(path, "wb").write(data[:len(data) * 3 // 4])
    bad_records = BadRecordLog()
    dataset = make_dataset([path], batch_size=1, training=False, skip_bad_records=True,
                           bad_records=bad_records)
    read = [int(labels[0, 0]) for _, labels in dataset]
    assert read == list(range(len(read))) and 0 < len(read) < 4
    assert bad_records.count == 1
    assert "the rest of the shard is unreadable" in bad_records.messages[0]


@pytest.mark.parametrize("reader", ["check_shard", "stored_adjacency", "geometry_digests",
                                    "shard_compression"])
def test_a_shard_that_is_gone_is_named_in_one_line(tmp_path, reader):
    """A shard removed after a run listed it (another run rebuilt the conversion cache) was
    a FileNotFoundError traceback from the split scan; every per-shard reader now names it."""
    import meshseg.data.records.reader as readers
    from meshseg.errors import DataError

    gone = tmp_path / "train-00001-of-00004.tfrecords"
    with pytest.raises(DataError, match=rf"^{gone}: the shard is gone \(removed after the run "
                                        r"listed it"):
        argument = [str(gone)] if reader == "stored_adjacency" else str(gone)  # a list
        getattr(readers, reader)(argument)

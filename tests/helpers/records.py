"""Writing mesh records and reading TFRecord shards back in tests."""

from pathlib import Path

import tensorflow as tf


def count_records(files: list) -> int:
    """The number of records (meshes) in TFRecord shards."""
    return sum(1 for _ in tf.data.TFRecordDataset([str(f) for f in files]))


def derived_record(vertices, triangles, labels, features=(), levels: int = 0) -> bytes:
    """A serialized mesh record with the converter's stored `features` and `levels`
    (`meshseg.data.features.derived.derive`, `meshseg.data.records.schema.mesh_to_example`)."""
    from meshseg.data.features.derived import derive
    from meshseg.data.records.schema import mesh_to_example

    derived = derive(vertices, triangles, features, levels)
    return mesh_to_example(vertices, triangles, labels, features=derived.features,
                           levels=derived.levels)


def non_finite_tetrahedron_record() -> bytes:
    """A tetrahedron record whose vertex 3 has z = inf (its loss is NaN), as another tool
    might write it: `mesh_to_example` refuses such positions, so the record is built from a
    finite one and its 'vertices' field replaced."""
    import numpy as np

    from meshseg.data.records.schema import mesh_to_example

    vertices = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]], np.float32)
    example = tf.train.Example.FromString(mesh_to_example(
        vertices, np.array([[0, 1, 2], [0, 1, 3]], np.int32), np.array([0, 1, 2, 3], np.int32)))
    vertices[3, 2] = np.inf
    example.features.feature["vertices"].bytes_list.value[:] = [
        tf.io.serialize_tensor(vertices).numpy()]
    return example.SerializeToString()


def copy_dataset(dataset: dict, folder: Path) -> dict:
    """The shards of `dataset` copied into `folder` (so a test can change them)."""
    folder.mkdir()
    copies = {split: folder / Path(dataset[split]).name for split in ("train", "test")}
    for split, copy in copies.items():
        copy.write_bytes(Path(dataset[split]).read_bytes())
    return {**dataset, **{split: str(copy) for split, copy in copies.items()}}


def shuffled_records(path: Path) -> None:
    """Rewrites the shard at `path` with its records in reverse order (same meshes, other
    stream)."""
    records = list(tf.data.TFRecordDataset(str(path)).as_numpy_iterator())
    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in reversed(records):
            writer.write(record)

"""Writing mesh records and reading TFRecord shards back in tests."""

import tensorflow as tf


def count_records(files: list) -> int:
    """The number of records (meshes) in TFRecord shards."""
    return sum(1 for _ in tf.data.TFRecordDataset([str(f) for f in files]))


def derived_record(vertices, triangles, labels, features=(), levels: int = 0) -> bytes:
    """A serialized mesh record with the converter's stored `features` and `levels`
    (`meshseg.data.derived.derive`, `meshseg.data.records.mesh_to_example`)."""
    from meshseg.data.derived import derive
    from meshseg.data.records import mesh_to_example

    derived = derive(vertices, triangles, features, levels)
    return mesh_to_example(vertices, triangles, labels, features=derived.features,
                           levels=derived.levels)

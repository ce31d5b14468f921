"""Reading TFRecord shards back in tests."""

import tensorflow as tf


def count_records(files: list) -> int:
    """The number of records (meshes) in TFRecord shards."""
    return sum(1 for _ in tf.data.TFRecordDataset([str(f) for f in files]))

"""Mesh-segmentation data, from mesh files to batches of the batch contract (`meshseg.batch`).

- `meshfiles`, `declared_counts`, `validate`, `adjacency`: reading and checking one labelled
  mesh and its 1-ring adjacency (NumPy/trimesh, no TensorFlow, so converter workers start
  fast).
- `records`, `manifest`, `convert` (`python -m meshseg.data.convert`), `prepare`: TFRecord
  schema, conversion of mesh folders to shards + manifest, and the cached conversions.
- `reader`, `augment`, `buckets`, `pipeline`: bad-record reporting, augmentation, size
  buckets and the tf.data pipeline (`make_dataset`).
- `sources`: `build_datasets(data, seed, jit)` from the typed `data` settings
  (`meshseg.config.DataConfig`).
"""

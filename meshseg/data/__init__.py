"""Mesh-segmentation data.

- `meshfiles`, `validate`, `adjacency`: reading and checking one labelled mesh (NumPy/trimesh,
  no TensorFlow, so converter workers start fast).
- `records`, `manifest`, `convert` (`python -m meshseg.data.convert`), `prepare`: TFRecord schema,
  conversion of mesh folders to shards + manifest, and the cached conversions.
- `reader`, `augment`, `buckets`, `pipeline`: bad-record reporting, augmentation, size buckets
  and the tf.data pipeline (`make_dataset`).
- `sources`: `build_datasets(data_cfg, seed, jit)` from the `data` config group.
- `throughput` (`python -m meshseg.tools.throughput`): meshes/s and vertices/s of the pipeline.
"""

"""Mesh-segmentation data, from mesh files to batches of the batch contract (`meshseg.batch`).

Subpackages, each importing only those listed after it (import-linter, pyproject.toml):

- `datasets`: the registry of public data sets, their download, the MeshCNN converter.
- `pipeline`: tf.data (`make_dataset`, `build_datasets`), buckets, augmentation, inputs.
- `records`: the TFRecord schema, its decoders, the shard check, conversion and its cache.
- `features`: what the converter derives per vertex (descriptors, hierarchy, pose).
- `mesh`: reading and checking one labelled mesh (NumPy/trimesh, no TensorFlow).

The command lines are `convert` (`python -m meshseg.data.convert`) and `download`
(`python -m meshseg.data.download`): argument parsing and `main`, above the subpackages.
"""

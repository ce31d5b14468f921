"""Mesh-segmentation data: TFRecord schema (`records`), 1-ring adjacency (`adjacency`),
conversion of mesh folders (`convert`, also `python -m meshseg.data.convert`), the bundled
sample (`prepare`) and the tf.data input pipeline (`pipeline`)."""

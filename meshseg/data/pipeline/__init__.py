"""The tf.data pipeline from shards to batches of the batch contract (`meshseg.batch`):
`dataset` (`make_dataset`), `sources` (`build_datasets` from the typed `data` settings),
size `buckets`, training `augment`ation, the `principal_frame` and `positional` inputs
computed when a mesh is read, and the model's `inputs`. It reads stored features and
never loads the descriptor libraries (SciPy, robust_laplacian, fast_simplification)."""

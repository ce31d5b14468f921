"""TFRecord shards of meshes: the schema and its encoder (`schema`), its decoders (`parse`
in the tf.data graph, `decode` in Python), the framing of a shard (`framing`), the check of
every shard that names each bad record (`reader`), shards written all or nothing
(`writer`), manifests (`manifest`), the conversion of mesh folders (`convert`, one mesh per
worker process in `job`) and the cache of conversions (`prepare`)."""

"""One labelled mesh read and checked: the file formats (`meshfiles`, `declared_counts`,
`polygons`, `foreign`: the read path for files meshseg did not write), the checks
(`validate`) and the 1-ring adjacency (`adjacency`). NumPy and trimesh only, no
TensorFlow, so converter workers start fast."""

"""The public data sets: their `registry` (sources, licences, per-file `manifests/`),
their `download` (fetch, check, extract, convert) and `meshcnn`, MeshCNN's per-edge labels
turned into per-vertex label files."""

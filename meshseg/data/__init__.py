"""Mesh-segmentation data: TFRecord schema, 1-ring adjacency, conversion, tf.data input."""

from meshseg.data.adjacency import mesh_edges, mesh_edges_tf
from meshseg.data.convert import convert_split
from meshseg.data.pipeline import make_dataset, num_examples
from meshseg.data.prepare import prepare_rna_sample
from meshseg.data.records import mesh_to_example, parse_mesh_record

__all__ = [
    "convert_split",
    "make_dataset",
    "mesh_edges",
    "mesh_edges_tf",
    "mesh_to_example",
    "num_examples",
    "parse_mesh_record",
    "prepare_rna_sample",
]

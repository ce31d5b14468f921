"""MeshCNN's segmentation folders as a mesh folder the converter reads.

MeshCNN (Hanocka et al., SIGGRAPH 2019) distributes its segmentation sets (human body,
COSEG) as `train/*.obj` and `test/*.obj` with one label per mesh *edge* in
`seg/<stem>.eseg` (and soft labels in `sseg/`). Its edges are numbered in the order
MeshCNN's `build_gemm` (models/layers/mesh_prepare.py) meets them: faces in file order,
and in each face (f0, f1), (f1, f2), (f2, f0), each undirected edge numbered when first
met. `vertex_labels` carries the labels to the vertices (each vertex takes the most
frequent label of its edges, the smallest on a tie), and `write_vertex_labels` writes them
with the split files, in the layout of `meshseg.data.records.prepare.MeshFolder`:
`vertex_labels/<stem>.txt` and `train.txt` / `test.txt` listing `train/<stem>.obj`.

Labels are shifted so that the data set's smallest label is class 0, as MeshCNN does.
"""

from pathlib import Path

import numpy as np

from meshseg.data.mesh.meshfiles import load_label_file, load_mesh
from meshseg.data.mesh.validate import InvalidMeshError
from meshseg.errors import DataError
from meshseg.outputs import make_dirs, write_atomically, write_text

LABELS = "vertex_labels"
SPLITS = ("train", "test")


def meshcnn_edges(triangles: np.ndarray) -> np.ndarray:
    """int64 [E, 2] undirected edges (smaller vertex first) in MeshCNN's edge order.

    Args:
      triangles: int [T, 3] vertex indices.
    """
    corners = np.asarray(triangles, np.int64)
    directed = np.stack([corners, np.roll(corners, -1, axis=1)], axis=-1).reshape(-1, 2)
    edges = np.sort(directed, axis=1)
    _, first = np.unique(edges, axis=0, return_index=True)
    return edges[np.sort(first)]


def vertex_labels(num_vertices: int, triangles: np.ndarray, edge_labels: np.ndarray) -> np.ndarray:
    """int64 [V] label of each vertex: the most frequent label of its edges (the smallest
    label on a tie); -1 for a vertex on no edge.

    Args:
      num_vertices: V.
      triangles: int [T, 3] vertex indices, in the mesh file's order.
      edge_labels: int [E] one label per edge in MeshCNN's order (`meshcnn_edges`).

    Raises:
      ValueError: if the number of labels is not the number of edges.
    """
    edges = meshcnn_edges(triangles)
    edge_labels = np.asarray(edge_labels, np.int64)
    if len(edge_labels) != len(edges):
        raise ValueError(f"{len(edge_labels)} edge labels for {len(edges)} edges")
    offset = edge_labels.min() if edge_labels.size else 0
    shifted = edge_labels - offset
    votes = np.zeros([num_vertices, int(shifted.max(initial=0)) + 1], np.int64)
    for end in (0, 1):
        np.add.at(votes, (edges[:, end], shifted), 1)
    labels = votes.argmax(axis=1) + offset
    return np.where(votes.sum(axis=1) > 0, labels, -1)


def write_vertex_labels(folder: Path, num_classes: int) -> None:
    """Writes `<folder>/vertex_labels/<stem>.txt` for every mesh of `<folder>/train` and
    `<folder>/test`, and `<folder>/train.txt` / `test.txt`.

    Raises:
      DataError: naming the file, for a mesh or label file that does not load, a label
        count that is not the mesh's edge count, or labels outside the data set's
        `num_classes` classes.
    """
    folder = Path(folder)
    meshes = {split: sorted((folder / split).glob("*.obj")) for split in SPLITS}
    edge_labels = {}
    for path in meshes["train"] + meshes["test"]:
        label_path = folder / "seg" / f"{path.stem}.eseg"
        try:
            edge_labels[path] = load_label_file(label_path)
        except (InvalidMeshError, OSError) as error:
            raise DataError(f"{label_path}: {error}") from None
    lowest = min((labels.min() for labels in edge_labels.values() if labels.size), default=0)
    make_dirs(str(folder / LABELS))
    for path, labels in edge_labels.items():
        try:
            vertices, triangles = load_mesh(path)
            per_vertex = vertex_labels(len(vertices), triangles, labels - lowest)
        except (InvalidMeshError, ValueError) as error:
            raise DataError(f"{path}: {error}") from None
        if per_vertex.max(initial=0) >= num_classes:
            raise DataError(f"{folder / 'seg' / (path.stem + '.eseg')}: label "
                            f"{per_vertex.max() + lowest} is beyond the {num_classes} classes "
                            "of this data set")
        write_atomically(str(folder / LABELS / f"{path.stem}.txt"),
                         lambda out, labels=per_vertex: np.savetxt(out, labels, fmt="%d"))
    for split in SPLITS:
        write_text(str(folder / f"{split}.txt"),
                   "".join(f"{split}/{path.name}\n" for path in meshes[split]))
